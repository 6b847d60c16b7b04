"""XIR-style compiler for the DNN accelerator card (ONNX in, partitioned .xmodel out).

Flow: :func:`compiler.frontend.import_onnx` -> passes (:mod:`compiler.passes`) -> optional int8
quantization (:mod:`compiler.quantize`) -> plugins then the CPU target
(:mod:`compiler.plugin_api`) -> :mod:`compiler.xmodel`. :func:`compiler.pipeline.compile_model`
runs it all; :mod:`compiler.runtime` executes the result.
"""

__version__ = "0.1.0"

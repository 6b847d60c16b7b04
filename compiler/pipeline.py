"""The compile flow end to end: import -> passes -> (quantize) -> plugins + CPU -> .xmodel."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from compiler import xmodel
from compiler.errors import OptionsError
from compiler.frontend.onnx import import_onnx
from compiler.options import CompileOptions
from compiler.passes import run_pipeline
from compiler.plugin_api import load_plugins, partition_graph
from compiler.xir import Graph


@dataclass
class CompileResult:
    """The compiled graph and a report of what each stage did and how long it took."""

    graph: Graph
    report: dict[str, Any] = field(default_factory=dict)


def compile_model(model: str | Path | onnx.ModelProto,
                  options: CompileOptions | Mapping[str, Any] | str | None = None
                  ) -> CompileResult:
    """Compile an ONNX model to a partitioned XIR graph (not yet written to disk)."""
    opts = CompileOptions.parse(options)
    t_start = time.perf_counter()
    plugins = load_plugins(opts.plugins)
    names = {p.get_plugin_name() for p in plugins}
    stray = sorted(set(opts.plugin_options) - names)
    if stray:
        raise OptionsError(f"plugin_options given for {stray}, which are not among the listed "
                           f"plugins {sorted(names)}")
    for p in plugins:
        p.set_options(opts.plugin_options.get(p.get_plugin_name(), {}))
    report: dict[str, Any] = {"options": _options_report(opts)}

    t0 = time.perf_counter()
    graph = import_onnx(model, input_shapes=opts.input_shapes, name=opts.name)
    report["import_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    report["passes"] = [r.to_dict() for r in run_pipeline(graph, opts.passes)]
    graph.check()
    report["passes_s"] = time.perf_counter() - t0

    if opts.quantize is not None:
        from compiler.quantize import quantize_graph

        t0 = time.perf_counter()
        report["quantize"] = quantize_graph(graph, opts.quantize)
        report["quantize_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    report["plugins"] = [r.to_dict() for r in partition_graph(graph, plugins)]
    report["partition_s"] = time.perf_counter() - t0
    report["total_s"] = time.perf_counter() - t_start
    return CompileResult(graph, report)


def compile_file(model: str | Path, output: str | Path,
                 options: CompileOptions | Mapping[str, Any] | str | None = None
                 ) -> CompileResult:
    """Compile ``model`` and write the .xmodel to ``output``."""
    t_start = time.perf_counter()
    result = compile_model(model, options)
    t0 = time.perf_counter()
    xmodel.save(result.graph, output)
    result.report["write_s"] = time.perf_counter() - t0
    result.report["total_s"] = time.perf_counter() - t_start
    return result


def _options_report(opts: CompileOptions) -> dict[str, Any]:
    return {"plugins": list(opts.plugins), "passes": dict(opts.passes),
            "input_shapes": {k: list(v) for k, v in opts.input_shapes.items()},
            "quantize": opts.quantize is not None}

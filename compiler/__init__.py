"""XIR-style compiler for the DNN accelerator card (ONNX in, partitioned .xmodel out)."""

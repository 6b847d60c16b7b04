"""CNN coverage benchmark (issue 15): how much of each CNN runs on the accelerator.

``python -m bench cnn`` compiles every light/ model of the onnx package (random weights,
`compiler.zoo.light_model`) and the MobileNet-class model (`compiler.zoo.mobilenet_cnn`) with
the accelerator plugin and int8 quantization, and reports per model:

- the share of MACs on the accelerator: MACs of the layers in accelerator subgraphs (their
  ``accel_stats``) over the MACs of every Conv / Gemm / MatMul of the compiled graph (target: at
  least 95 % for every model);
- the MAC utilization of the accelerator part: its MACs / (N * N * estimated cycles), the
  cycles from `pyhost.accel.timing.estimate` (the functional model's timing rules, no memory
  latency);
- for every depthwise convolution (group = input channels = output channels): its estimated
  cycles against the lower bound set by its bytes (input, weights and output moved once, one
  bus beat of BEAT_BYTES per cycle on the load and on the store unit) and by its MACs (N * N
  per cycle on the array); against the array's own bound for the form it runs in: the DW
  instruction (depthwise mode: one iteration per output pixel, channel block and pass, a pass
  being up to N taps of whole kernel rows) or, where DW cannot take the layer, the diagonal
  implicit GEMM (N useful MACs of N * N per iteration: MACs / N); and the diagonal form's bound
  for comparison.

``--run`` also runs each model on the functional card (PcieDriver(ModelCard)) and compares
its logits (the final Softmax's input) with onnxruntime fp32 (top-1 and cosine; slow for the
large light models).
``--models a,b`` limits the models. Writes bench/results/cnn.json; exit status 1 when a model
misses the 95 % target (or, with --run, top-1 / cosine 0.999).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from compiler.pipeline import compile_model
from compiler.xir import Graph, Op
from compiler.zoo import LIGHT, MOBILENET_INPUT, light_model, mobilenet_cnn, mobilenet_input
from pyhost.spec.accel import BEAT_BYTES

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARE_TARGET = 0.95
COSINE_TARGET = 0.999
MODELS = [*LIGHT, "mobilenet"]


def op_macs(op: Op) -> int:
    """Multiply-accumulates of a Conv / Gemm / MatMul as the model defines them."""
    if op.type == "Conv":
        w = op.input_tensors()[1].shape or ()
        return math.prod(op.output.shape or ()) * math.prod(w[1:])
    if op.type in ("Gemm", "MatMul"):
        x = op.input_tensors()[0].shape or ()
        return math.prod(op.output.shape or ()) * int(x[-1] if x else 0)
    return 0


def _logits(model: Any) -> str:
    """The final Softmax's input (the model's output when it ends without a Softmax, like
    DenseNet-121)."""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    return str(softmax[-1].input[0] if softmax else model.graph.output[0].name)


def _with_logits(model: Any) -> None:
    """Expose the logits as an output: probabilities alone hide errors when saturated."""
    name = _logits(model)
    if name not in {o.name for o in model.graph.output}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, None))


def _model(name: str, run: bool) -> tuple[Any, dict[str, Any], dict[str, np.ndarray]]:
    if name == "mobilenet":
        model = mobilenet_cnn()
        if run:
            _with_logits(model)
        return (model, {"plugin": "accel", "quantize": {"samples": 4, "seed": 0}},
                {MOBILENET_INPUT: mobilenet_input()})
    model = light_model(name)
    if run:
        _with_logits(model)
    (inp,) = [i for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return model, {"plugin": "accel", "quantize": {"samples": 1}}, {inp.name: x}


def _depthwise(g: Graph, layer: dict[str, Any], n: int) -> dict[str, Any] | None:
    op = g.get_op(layer["name"])
    if op.type != "Conv":
        return None
    x = op.input_tensors()[0]
    c = int((x.shape or (0, 0))[1])
    group = int(op.attrs.get("group", 1))
    cout = int((op.output.shape or (0, 0))[1])
    if group == 1 or group != c or cout != c:
        return None
    blocks = -(-c // n)
    b, _, h, w = x.shape
    _, _, oh, ow = op.output.shape
    k = op.input_tensors()[1].shape
    taps = int(k[2] * k[3])
    in_bytes = b * blocks * h * w * n
    out_bytes = b * blocks * oh * ow * n
    wgt_bytes = blocks * taps * n * n                  # one diagonal N x N tile per block and tap
    bytes_bound = max(-(-(in_bytes + wgt_bytes) // BEAT_BYTES), -(-out_bytes // BEAT_BYTES))
    macs = layer["macs"]
    mac_bound = -(-macs // (n * n))
    diag_bound = -(-macs // n)
    dw_passes = layer["tiling"].get("dw_passes")
    array_bound = b * blocks * oh * ow * dw_passes if dw_passes else diag_bound
    cyc = layer["estimated_cycles"]
    bound = max(bytes_bound, mac_bound)
    return {"layer": layer["name"], "in": list(x.shape), "out": list(op.output.shape),
            "kernel": [int(k[2]), int(k[3])], "strides": list(op.attrs.get("strides", [1, 1])),
            "macs": macs, "cycles": cyc, "bytes_bound": bytes_bound, "mac_bound": mac_bound,
            "lower_bound": bound, "cycles_over_bound": round(cyc / bound, 2),
            "mode": "DW" if dw_passes else "diagonal GEMM", "dw_passes": dw_passes or 0,
            "array_bound": array_bound, "cycles_over_array_bound": round(cyc / array_bound, 2),
            "diagonal_bound": diag_bound,
            "cycles_over_diagonal_bound": round(cyc / diag_bound, 2),
            "mac_utilization": layer["mac_utilization"]}


def one(name: str, run: bool) -> dict[str, Any]:
    model, options, feeds = _model(name, run)
    t0 = time.perf_counter()
    result = compile_model(model, options)
    compile_s = time.perf_counter() - t0
    g = result.graph
    total = sum(op_macs(op) for op in g.ops)
    acc_macs = cycles = 0
    n = 0
    depthwise = []
    cpu_ops: dict[str, int] = {}
    for sub in g.root_subgraph.children_topological_sort():
        st = sub.attrs.get("accel_stats") if sub.device == "ACCEL" else None
        if st is None:
            for op in sub.ops:
                if op.type not in ("const", "data"):
                    cpu_ops[op.type] = cpu_ops.get(op.type, 0) + 1
            continue
        n = int(sub.attrs["accel_config"]["n"])
        acc_macs += st["macs"]
        cycles += st["estimated_cycles"]
        for layer in st["per_layer"]:
            d = _depthwise(g, layer, n)
            if d is not None:
                depthwise.append(d)
    row: dict[str, Any] = {
        "model": name, "compile_s": round(compile_s, 2), "macs": total, "accel_macs": acc_macs,
        "accel_share": round(acc_macs / total, 6) if total else 1.0,
        "accel_cycles": cycles,
        "mac_utilization": round(acc_macs / (n * n * cycles), 4) if cycles else 0.0,
        "cpu_ops": cpu_ops, "depthwise": depthwise,
        "float_ops": sorted((result.report.get("quantize") or {}).get("float_ops", {})),
    }
    if run:
        row.update(_run(model, g, feeds))
    return row


def _run(model: Any, g: Graph, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard
    from tests.goldens import float_reference

    t0 = time.perf_counter()
    with PcieDriver(ModelCard(1 << 30)) as drv:
        ex = CardExecutor(g, CardSession(drv))
        out = ex.run(feeds)
        ex.close()
    run_s = time.perf_counter() - t0
    logits = _logits(model)
    want = float_reference(model, feeds)
    a = out[logits].astype(np.float64).reshape(-1)
    b = want[logits].astype(np.float64).reshape(-1)
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return {"run_s": round(run_s, 2), "top1_agrees": bool(np.argmax(a) == np.argmax(b)),
            "cosine": round(cos, 6)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--run", action="store_true", help="also run on the functional card")
    ap.add_argument("--out", type=Path, default=RESULTS / "cnn.json")
    a = ap.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    bad = sorted(set(names) - set(MODELS))
    if bad:
        ap.error(f"unknown models {bad}; known: {', '.join(MODELS)}")
    rows = []
    for name in names:
        r = one(name, a.run)
        rows.append(r)
        extra = (f"  top-1 {'ok' if r['top1_agrees'] else 'DIFFERS'} cos {r['cosine']:.5f}"
                 if "cosine" in r else "")
        print(f"{name:14} MACs {r['macs']:>15,}  on the accelerator {100 * r['accel_share']:6.2f} %"
              f"  utilization {100 * r['mac_utilization']:5.1f} %  ({r['compile_s']:.0f} s)"
              f"{extra}", flush=True)
    dws = [(r["model"], d) for r in rows for d in r["depthwise"]]
    if dws:
        print("\ndepthwise layers: estimated cycles against the lower bound max(bytes, MACs / "
              "N^2), the array's bound in the form the layer runs in (DW: pixels x blocks x "
              "passes; diagonal GEMM: MACs / N), and the diagonal form's bound MACs / N")
        print(f"{'model':10} {'layer':22} {'in':>16} {'k/s':>5} {'mode':>4} {'cycles':>8} "
              f"{'bound':>7} {'x':>5} {'array':>7} {'x':>5} {'MACs/N':>7} {'x':>5}")
        for m, d in dws:
            print(f"{m:10} {d['layer'][:22]:22} {str(d['in']):>16} "
                  f"{d['kernel'][0]}/{d['strides'][0]:<3} "
                  f"{'DW' if d['mode'] == 'DW' else 'diag':>4} {d['cycles']:>8} "
                  f"{d['lower_bound']:>7} {d['cycles_over_bound']:>5} {d['array_bound']:>7} "
                  f"{d['cycles_over_array_bound']:>5} {d['diagonal_bound']:>7} "
                  f"{d['cycles_over_diagonal_bound']:>5}")
    missed = [r["model"] for r in rows if r["accel_share"] < SHARE_TARGET]
    missed += [r["model"] for r in rows if "cosine" in r
               and (not r["top1_agrees"] or r["cosine"] < COSINE_TARGET)]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "benchmark": "cnn", "targets": {"accel_share": SHARE_TARGET, "cosine": COSINE_TARGET},
        "machine": platform.machine(), "python": platform.python_version(),
        "models": rows, "missed": sorted(set(missed))}, indent=2) + "\n")
    print(f"\nwrote {a.out}" + (f"; MISSED: {sorted(set(missed))}" if missed else
                              f"; every model at least {100 * SHARE_TARGET:.0f} % on the "
                              "accelerator"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

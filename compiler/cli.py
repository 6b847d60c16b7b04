"""``dnncard-compile`` / ``python -m compiler``: compile, inspect, draw and run .xmodel files.

    dnncard-compile compile model.onnx --options '{"plugin": "softmax_ip"}' -o model.xmodel
    dnncard-compile inspect model.xmodel [--json]
    dnncard-compile graph model.xmodel [-o model.dot] [--consts]   (SVG too when dot exists)
    dnncard-compile run model.xmodel [--inputs in.npz] [-o out.npz] [--card-mem MiB]
                        [--trace trace.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from compiler import xmodel
from compiler.errors import CompilerError
from compiler.passes import PASSES, PIPELINE
from compiler.pipeline import compile_file
from compiler.plugin_api.loader import BUILTIN
from compiler.runtime import GraphExecutor
from compiler.runtime.card import (
    CardExecutor,
    CardSession,
    accel_image,
    is_accel_subgraph,
    write_chrome_trace,
)
from compiler.summary import format_summary, summarize, to_dot
from compiler.xir import Graph
from pyhost.driver import PcieDriver
from pyhost.model_card import ModelCard
from pyhost.spec.accel import AccelConfig


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dnncard-compile",
        description="XIR-style compiler for the DNN accelerator card: ONNX in, .xmodel out.")
    sub = ap.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile an ONNX model to an .xmodel")
    c.add_argument("model", type=Path, help="ONNX model")
    c.add_argument("-o", "--output", type=Path, help="output .xmodel (default: model.xmodel)")
    c.add_argument("--options", default=None,
                   help='JSON options or @file.json, e.g. \'{"plugin": "softmax_ip"}\'; keys: '
                        "plugin/plugins, plugin_options, passes, input_shapes, quantize, name")
    c.add_argument("--report", type=Path, help="also write the compile report as JSON")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")

    i = sub.add_parser("inspect", help="show subgraphs, devices and tensors of an .xmodel")
    i.add_argument("xmodel", type=Path)
    i.add_argument("--json", action="store_true", help="machine-readable output")

    g = sub.add_parser("graph", help="write Graphviz DOT (and SVG when dot is installed)")
    g.add_argument("xmodel", type=Path)
    g.add_argument("-o", "--output", type=Path, help="output .dot (default: next to the model)")
    g.add_argument("--consts", action="store_true", help="also draw const (weight) ops")
    g.add_argument("--no-svg", action="store_true", help="do not run dot even if installed")

    r = sub.add_parser("run", help="run an .xmodel on the host runners (accelerator "
                                   "subgraphs on the functional card)")
    r.add_argument("xmodel", type=Path)
    r.add_argument("--inputs", type=Path, help=".npz with one array per model input "
                                                "(default: seeded random normals)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("-o", "--output", type=Path, help="write the outputs to this .npz")
    r.add_argument("--card-mem", type=int, default=256, metavar="MIB",
                   help="card memory of the functional card for ACCEL subgraphs (default 256)")
    r.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace of the run")

    sub.add_parser("list", help="list the passes (in order) and the built-in plugins")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"compile": _compile, "inspect": _inspect, "graph": _graph, "run": _run,
                "list": _list}[args.command](args)
    except CompilerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _compile(args: argparse.Namespace) -> int:
    out = args.output or args.model.with_suffix(".xmodel")
    result = compile_file(args.model, out, args.options)
    rep = result.report
    if args.report:
        args.report.write_text(json.dumps(rep, indent=2, default=str) + "\n")
    if not args.quiet:
        devices = {}
        for p in rep["plugins"]:
            devices[p["device"]] = devices.get(p["device"], 0) + len(p["subgraphs"])
        print(f"compiled {args.model} -> {out} in {rep['total_s']:.2f} s: "
              + ", ".join(f"{n} {d} subgraph{'s' if n != 1 else ''}"
                          for d, n in devices.items()))
        q = rep.get("quantize") or {}
        for name, why in q.get("adjusted", {}).items():
            print(f"  quantization adjusted {name!r}: {why}")
        for name, why in q.get("float_ops", {}).items():
            print(f"  quantization left {name!r} in float (CPU): {why}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    s = summarize(xmodel.load(args.xmodel))
    print(json.dumps(s, indent=2) if args.json else format_summary(s))
    return 0


def _graph(args: argparse.Namespace) -> int:
    graph = xmodel.load(args.xmodel)
    dot_path = args.output or args.xmodel.with_suffix(".dot")
    dot_path.write_text(to_dot(graph, show_consts=args.consts))
    print(f"wrote {dot_path}")
    dot = shutil.which("dot")
    if args.no_svg:
        return 0
    if dot is None:
        print("Graphviz 'dot' is not installed: no SVG (apt-get install graphviz)")
        return 0
    svg_path = dot_path.with_suffix(".svg")
    proc = subprocess.run([dot, "-Tsvg", str(dot_path), "-o", str(svg_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        print(f"error: dot failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    print(f"wrote {svg_path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    graph = xmodel.load(args.xmodel)
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            feeds = {op.name: data[op.name] for op in graph.inputs if op.name in data.files}
    else:
        rng = np.random.default_rng(args.seed)
        feeds = {op.name: rng.standard_normal(op.output.shape).astype(op.output.dtype)
                 for op in graph.inputs}
    accel = [c for c in graph.root_subgraph.children if is_accel_subgraph(c)]
    if accel:
        outs = _run_on_card(graph, feeds, accel_image(accel[0]).config, args)
    else:
        if args.trace:
            print("note: --trace records card runs; this model has no ACCEL subgraph")
        outs = GraphExecutor(graph).run(feeds)
    for name, v in outs.items():
        flat = v.reshape(-1)
        print(f"{name} {v.dtype}{v.shape}: mean {float(flat.mean()):.6g}, "
              f"argmax {int(flat.argmax())}")
    if args.output:
        np.savez(args.output, **outs)
        print(f"wrote {args.output}")
    return 0


def _run_on_card(graph: Graph, feeds: dict[str, np.ndarray], config: AccelConfig,
                 args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The model on the functional card (ModelCard with the accelerator it was compiled for)."""
    mem = args.card_mem << 20
    card = ModelCard(mem, host_size=max(256 << 20, 2 * mem), accel=config)
    with PcieDriver(card) as drv:
        session = CardSession(drv)
        ex = CardExecutor(graph, session)
        try:
            outs = ex.run(feeds)
        finally:
            ex.close()
        print(f"ran on the functional card ({args.card_mem} MiB, N={config.n}):")
        print(ex.stats.format())
        if args.trace and session.events is not None:
            write_chrome_trace(session.events, args.trace)
            print(f"wrote {args.trace} ({len(session.events)} events)")
        session.close()
    return outs


def _list(args: argparse.Namespace) -> int:
    print("passes, in pipeline order (disable with --options '{\"passes\": {NAME: false}}'):")
    for name in PIPELINE:
        print(f"  {name:16} {PASSES[name].description}")
    print("built-in plugins (the CPU target always runs last):")
    for name, module in BUILTIN.items():
        print(f"  {name:16} {module}")
    return 0

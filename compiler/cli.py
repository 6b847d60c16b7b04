"""``dnncard-compile`` / ``python -m compiler``: compile, inspect, draw and run .xmodel files.

    dnncard-compile compile model.onnx --options '{"plugin": "softmax_ip"}' -o model.xmodel
    dnncard-compile inspect model.xmodel [--json]
    dnncard-compile graph model.xmodel [-o model.dot] [--consts]   (SVG too when dot exists)
    dnncard-compile run model.xmodel [--inputs in.npz] [-o out.npz] [--card-mem MiB]
                        [--trace trace.json] [--trust-runners]

Every value the user gives is checked before any work starts (flags, paths, the options JSON,
the input .npz against the model's inputs); a bad one is a one-line ``error:`` and exit status
2. A model that cannot be compiled or run exits with 1 and the compiler's message. No input
produces a Python traceback: anything unexpected is reported as an internal error in one line
(``DNNCARD_TRACEBACK=1`` shows the traceback). Outputs never replace an input, and an existing
file is replaced only when it is of the kind the command writes (say ``--force`` otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from compiler import xmodel
from compiler.errors import CompilerError, OptionsError, PluginLoadError, RunnerError
from compiler.options import CompileOptions
from compiler.passes import PASSES, PIPELINE
from compiler.pipeline import compile_file
from compiler.plugin_api.loader import BUILTIN
from compiler.runtime import GraphExecutor
from compiler.summary import format_summary, printable, summarize, to_dot
from compiler.xir import Graph

PROG = "dnncard-compile"
#: The functional card for ACCEL subgraphs: the accelerator addresses 4 GiB.
MAX_CARD_MIB = 4096


class UsageError(Exception):
    """A value the user gave is invalid (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``dnncard-compile: error: ...`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --- argument types: each names the value, what was expected and what to do ------------------

def _int_in(lo: int, hi: int | None, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; {what}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{v} is out of range; {what}")
        return v
    return parse


def _path(text: str) -> Path:
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a file name")
    return Path(text)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG,
                 description="XIR-style compiler for the DNN accelerator card: ONNX in, .xmodel "
                             "out.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("compile", help="compile an ONNX model to an .xmodel")
    c.add_argument("model", type=_path, help="ONNX model")
    c.add_argument("-o", "--output", type=_path, help="output .xmodel (default: model.xmodel)")
    c.add_argument("--options", default=None,
                   help='JSON options or @file.json, e.g. \'{"plugin": "softmax_ip"}\'; keys: '
                        "plugin/plugins, plugin_options, passes, input_shapes, quantize, name")
    c.add_argument("--report", type=_path, help="also write the compile report as JSON")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    c.add_argument("--force", action="store_true",
                   help="replace an existing output even if it is not a file of that kind")

    i = sub.add_parser("inspect", help="show subgraphs, devices and tensors of an .xmodel")
    i.add_argument("xmodel", type=_path)
    i.add_argument("--json", action="store_true", help="machine-readable output")

    g = sub.add_parser("graph", help="write Graphviz DOT (and SVG when dot is installed)")
    g.add_argument("xmodel", type=_path)
    g.add_argument("-o", "--output", type=_path, help="output .dot (default: next to the model)")
    g.add_argument("--consts", action="store_true", help="also draw const (weight) ops")
    g.add_argument("--no-svg", action="store_true", help="do not run dot even if installed")
    g.add_argument("--force", action="store_true",
                   help="replace existing outputs even if they are not DOT/SVG files")

    r = sub.add_parser("run", help="run an .xmodel on the host runners (accelerator "
                                   "subgraphs on the functional card)")
    r.add_argument("xmodel", type=_path)
    r.add_argument("--inputs", type=_path, help=".npz with one array per model input "
                                                "(default: seeded random normals)")
    r.add_argument("--seed", type=_int_in(0, None, "give a seed >= 0"), default=0)
    r.add_argument("-o", "--output", type=_path, help="write the outputs to this .npz")
    r.add_argument("--card-mem", type=_int_in(1, MAX_CARD_MIB, f"give the card memory in MiB, "
                                              f"1 to {MAX_CARD_MIB}"),
                   default=256, metavar="MIB",
                   help="card memory of the functional card for ACCEL subgraphs (default 256)")
    r.add_argument("--trace", type=_path, help="write a Chrome/Perfetto trace of the run")
    r.add_argument("--trust-runners", action="store_true",
                   help="import runners the model names even if they are neither built in nor "
                        "installed entry points (only for files you trust: this runs their code)")
    r.add_argument("--force", action="store_true",
                   help="replace existing outputs even if they are not files of that kind")

    sub.add_parser("list", help="list the passes (in order) and the built-in plugins")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"compile": _compile, "inspect": _inspect, "graph": _graph, "run": _run,
                "list": _list}[args.command](args)
    except (UsageError, OptionsError, PluginLoadError) as e:
        return _fail(e, 2)
    except CompilerError as e:
        return _fail(e, 1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a device-stack error, or a bug: one line, never a traceback
        if os.environ.get("DNNCARD_TRACEBACK"):
            raise
        return _fail(e, 1, _describe(e))


def _fail(e: BaseException, status: int, text: str | None = None) -> int:
    print(f"error: {text or e}", file=sys.stderr)
    return status


def _describe(e: Exception) -> str:
    from pyhost.errors import DriverError
    from pyhost.memory.errors import MemoryManagerError

    if isinstance(e, (DriverError, MemoryManagerError)):
        return f"{type(e).__name__}: {e}"
    if isinstance(e, MemoryError):
        return ("out of host memory (the model or the card needs more memory than this "
                "machine has)")
    if isinstance(e, OSError):
        name = f"{e.filename}: " if e.filename else ""
        return f"{name}{e.strerror or e}"
    return (f"internal error {type(e).__name__}: {e} (a bug: please report it with the "
            "command line; DNNCARD_TRACEBACK=1 shows the traceback)")


# --- paths --------------------------------------------------------------------------------------

def _input_file(p: Path, what: str) -> Path:
    if not p.exists():
        raise UsageError(f"{what} {str(p)!r} does not exist")
    if not p.is_file():
        raise UsageError(f"{what} {str(p)!r} is not a file")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{what} {str(p)!r} cannot be read (permission denied)")
    return p


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _is_zip_with(p: Path, entry: str | None) -> bool:
    try:
        with zipfile.ZipFile(p) as z:
            return entry is None or entry in z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _starts_with(p: Path, *magic: bytes) -> bool:
    try:
        with p.open("rb") as f:
            head = f.read(256).lstrip()
    except OSError:
        return False
    return head.startswith(magic)


#: Kind of output -> whether an existing file is one of that kind (so replacing it is fine).
_KINDS: dict[str, Callable[[Path], bool]] = {
    ".xmodel": lambda p: _is_zip_with(p, xmodel.JSON_ENTRY),
    ".npz": lambda p: _is_zip_with(p, None),
    "DOT": lambda p: _starts_with(p, b"digraph", b"//", b"strict digraph"),
    "SVG": lambda p: _starts_with(p, b"<?xml", b"<svg"),
    "JSON": lambda p: _starts_with(p, b"{", b"["),
}


def _output_file(p: Path, what: str, kind: str, inputs: Sequence[Path], force: bool) -> Path:
    """``p`` if the command may write it: its directory exists, it is no directory and none
    of the inputs, and an existing file there is of the kind written (or ``force``)."""
    if p.is_dir():
        raise UsageError(f"{what} {str(p)!r} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what} {str(p)!r}: directory {str(parent)!r} does not exist; "
                         "create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{what} {str(p)!r}: directory {str(parent)!r} is not writable")
    for src in inputs:
        if _same(p, src) or p.resolve() == src.resolve():
            raise UsageError(f"{what} {str(p)!r} is the input {str(src)!r}; writing it would "
                             "destroy the input: give another output name with -o")
    if p.exists() and not force and not _KINDS[kind](p):
        raise UsageError(f"{what} {str(p)!r} exists and is not a {kind.lstrip('.')} file; "
                         "refusing to replace it (choose another name, or pass --force)")
    return p


def _note_replaced(paths: Sequence[Path | None]) -> list[Path]:
    """The outputs that exist now (to report them as replaced once written)."""
    return [p for p in paths if p is not None and p.exists()]


# --- commands -----------------------------------------------------------------------------------

def _compile(args: argparse.Namespace) -> int:
    model = _input_file(args.model, "model")
    out = args.output or model.with_suffix(".xmodel")
    if args.output is None and _same(out, model):
        raise UsageError(f"the default output {str(out)!r} is the model itself; name the "
                         "output with -o")
    _output_file(out, "output", ".xmodel", [model], args.force)
    if args.report:
        _output_file(args.report, "--report", "JSON", [model, out], args.force)
        if _same(args.report, out) or args.report.resolve() == out.resolve():
            raise UsageError("--report and the output are the same file")
    opts = CompileOptions.parse(args.options)  # every option value checked before compiling
    existed = _note_replaced([out, args.report])
    result = compile_file(model, out, opts)
    rep = result.report
    if args.report:
        args.report.write_text(json.dumps(rep, indent=2, default=str) + "\n")
    if not args.quiet:
        devices: dict[str, int] = {}
        for p in rep["plugins"]:
            devices[p["device"]] = devices.get(p["device"], 0) + len(p["subgraphs"])
        print(f"compiled {model} -> {out} in {rep['total_s']:.2f} s: "
              + ", ".join(f"{n} {printable(d)} subgraph{'s' if n != 1 else ''}"
                          for d, n in devices.items()))
        for p in rep["plugins"]:
            for name, why in p.get("cpu_ops", {}).items():
                print(f"  on the CPU: {printable(name)!r} {printable(why)}")
        q = rep.get("quantize") or {}
        for name, why in q.get("adjusted", {}).items():
            print(f"  quantization adjusted {printable(name)!r}: {printable(why)}")
        for name, why in q.get("float_ops", {}).items():
            print(f"  quantization left {printable(name)!r} in float (CPU): {printable(why)}")
        for p in existed:
            print(f"replaced the existing {p}")
    return 0


def _load(p: Path) -> Graph:
    return xmodel.load(_input_file(p, ".xmodel"))


def _inspect(args: argparse.Namespace) -> int:
    s = summarize(_load(args.xmodel))
    print(json.dumps(s, indent=2) if args.json else format_summary(s))
    return 0


def _graph(args: argparse.Namespace) -> int:
    src = _input_file(args.xmodel, ".xmodel")
    dot_path = args.output or src.with_suffix(".dot")
    _output_file(dot_path, "DOT output", "DOT", [src], args.force)
    svg_path = dot_path.with_suffix(".svg")
    want_svg = not args.no_svg and shutil.which("dot") is not None
    if want_svg:
        if svg_path.resolve() == dot_path.resolve():
            raise UsageError(f"DOT output {str(dot_path)!r} ends in .svg, which is where the SVG "
                             "goes; name it .dot or pass --no-svg")
        _output_file(svg_path, "SVG output", "SVG", [src], args.force)
    graph = xmodel.load(src)
    existed = _note_replaced([dot_path, svg_path if want_svg else None])
    dot_path.write_text(to_dot(graph, show_consts=args.consts))
    print(f"wrote {dot_path}")
    if args.no_svg:
        return 0
    if not want_svg:
        print("Graphviz 'dot' is not installed: no SVG (apt-get install graphviz)")
        return 0
    dot = shutil.which("dot")
    assert dot is not None
    proc = subprocess.run([dot, "-Tsvg", str(dot_path), "-o", str(svg_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        print(f"error: dot failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    print(f"wrote {svg_path}")
    for p in existed:
        print(f"replaced the existing {p}")
    return 0


def _run(args: argparse.Namespace) -> int:
    src = _input_file(args.xmodel, ".xmodel")
    outs_to_check = [(args.output, "output", ".npz"), (args.trace, "--trace", "JSON")]
    ins = [src] + ([args.inputs] if args.inputs else [])
    for p, what, kind in outs_to_check:
        if p is not None:
            _output_file(p, what, kind, ins, args.force)
    if args.output and args.trace and args.output.resolve() == args.trace.resolve():
        raise UsageError("--output and --trace are the same file")
    graph = xmodel.load(src)
    feeds = _feeds(graph, args)
    from compiler.runtime.card import accel_image, is_accel_subgraph

    accel = [c for c in graph.root_subgraph.children if is_accel_subgraph(c)] \
        if not graph.root_subgraph.is_leaf else []
    existed = _note_replaced([args.output, args.trace])
    if accel:
        outs = _run_on_card(graph, feeds, accel_image(accel[0]).config, args)
    else:
        if args.trace:
            print("note: --trace records card runs; this model has no ACCEL subgraph")
        ex = GraphExecutor(graph, trust_runners=args.trust_runners)
        try:
            outs = ex.run(feeds)
        finally:
            ex.close()
    for name, v in outs.items():
        flat = v.reshape(-1)
        summary = f"mean {float(flat.mean()):.6g}, argmax {int(flat.argmax())}" if flat.size \
            else "empty"
        print(f"{printable(name)} {v.dtype}{v.shape}: {summary}")
    if args.output:
        np.savez(args.output, **outs)
        print(f"wrote {args.output}")
    for p in existed:
        print(f"replaced the existing {p}")
    return 0


def _feeds(graph: Graph, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The model inputs: from --inputs, checked against the model, or seeded random."""
    want = {op.name: op.output for op in graph.inputs}
    unshaped = [n for n, t in want.items() if t.shape is None]
    if unshaped:
        raise RunnerError(f"model inputs {unshaped} have no static shape: the .xmodel was saved "
                          "before shape inference and cannot run; recompile it")
    if not args.inputs:
        rng = np.random.default_rng(args.seed)
        return {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in want.items()}
    path = _input_file(args.inputs, "--inputs")
    expected = ", ".join(f"{n} {t.dtype}{list(t.shape or ())}" for n, t in want.items())
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"--inputs {str(path)!r} is not a readable .npz file ({e}); save one "
                         f"with numpy.savez holding {expected}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise UsageError(f"--inputs {str(path)!r} is a single .npy array, not an .npz; save "
                         f"one with numpy.savez holding {expected}")
    with data:
        names = list(data.files)
        missing = [n for n in want if n not in names]
        extra = [n for n in names if n not in want]
        if missing or extra:
            raise UsageError(f"--inputs {str(path)!r} holds {names}; the model's inputs are "
                             f"{expected} (missing {missing}, unknown {extra})")
        feeds: dict[str, np.ndarray] = {}
        for n, t in want.items():
            try:
                a = data[n]
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
                raise UsageError(f"--inputs {str(path)!r}: array {n!r} cannot be read "
                                 f"({e})") from None
            if a.shape != t.shape or a.dtype.name != t.dtype:
                raise UsageError(f"--inputs {str(path)!r}: {n!r} is {a.dtype}{list(a.shape)}; "
                                 f"the model expects {t.dtype}{list(t.shape or ())}")
            feeds[n] = a
    return feeds


def _run_on_card(graph: Graph, feeds: dict[str, np.ndarray], config: Any,
                 args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The model on the functional card (ModelCard with the accelerator it was compiled for)."""
    from compiler.runtime.card import CardExecutor, CardSession, write_chrome_trace
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    mem = args.card_mem << 20
    card = ModelCard(mem, host_size=max(256 << 20, 2 * mem), accel=config)
    with PcieDriver(card) as drv:
        session = CardSession(drv)
        ex = CardExecutor(graph, session, trust_runners=args.trust_runners)
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

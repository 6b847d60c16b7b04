"""Recorded behaviour that speed work must not change: cycle counts, counters and outputs.

The values in tests/data/golden_behaviour.json were recorded at main 7edd54e (before issue 19's
speed work; the RTL card's parts again with issue 14's memory controller, whose timing changed
the cycles but no output) and are compared by tests/test_golden_behaviour.py (the functional
card) and tests/rtl/test_golden_behaviour.py (the RTL card):

- ``model/demo``: the demo CNN on the functional card (ModelCard, 80 KiB, two images, the
  ``make sim`` flow): every output's SHA-256, and per image every accelerator step's counters
  (insns, macs, bytes, and the cycle estimate with its busy/stall split) and the memory
  manager's traffic;
- ``model/resnet50``: ResNet-50 (light, random weights, int8, the e2e benchmark's compile options
  and seeded input) on the functional card (64 MiB): outputs and counters the same way;
- ``model/layers``: the accelerator benchmark's GEMM and convolution jobs (bench/accel_bench.py)
  on AccelModel: all counters and the SHA-256 of card memory after the run;
- ``rtl/demo/<sim>``: the ``make sim`` demo on the RTL card (tb/demo.py's flow, waves off;
  two images on Verilator, one on Icarus, about 25x slower): the simulated cycles, every step's
  hardware counters (exact cycles) and the outputs;
- ``rtl/layers``: the benchmark's jobs through the real driver on the RTL card (Verilator, the
  benchmark's build): counters, the START-to-interrupt window in cycles, card memory's SHA-256.

``python -m tests.golden_behaviour --update [PART ...]`` re-records (only for a change meant to
change behaviour: say why in the commit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_behaviour.json"
#: ResNet-50 as the e2e benchmark compiles and feeds it.
RESNET_OPTIONS: dict[str, Any] = {"plugin": "accel", "quantize": {"samples": 1, "seed": 0}}
RESNET_INPUT_SEED = 7
RESNET_CARD_MEM = 64 << 20
RESNET_HOST_MEM = 192 << 20
DEMO_CARD_MEM = 80 << 10
#: Images of the RTL demo per simulator (Icarus: one, it is about 25x slower).
RTL_DEMO_IMAGES = {"verilator": 2, "icarus": 1}


def sha(a: np.ndarray | bytes) -> str:
    if isinstance(a, np.ndarray):
        h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:20]
    return hashlib.sha256(a).hexdigest()[:20]


def run_record(stats: dict[str, Any]) -> dict[str, Any]:
    """A run's exact figures: each step's counters (no wall time) and the manager's traffic."""
    return {"steps": [{"name": s["name"], "device": s["device"],
                       **({"counters": s["counters"]} if "counters" in s else {})}
                      for s in stats["steps"]],
            "memory": stats["memory"]}


def load(part: str) -> Any:
    return json.loads(GOLDEN.read_text())[part]


# --- the functional card -------------------------------------------------------------------------

def _model_runs(graph: Any, feeds: list[dict[str, np.ndarray]], card_mem: int,
                host_size: int | None = None) -> dict[str, Any]:
    from compiler.runtime.card import CardExecutor, CardSession
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    card = ModelCard(card_mem) if host_size is None else ModelCard(card_mem, host_size=host_size)
    runs, outs = [], []
    with PcieDriver(card) as drv:
        ex = CardExecutor(graph, CardSession(drv))
        for feed in feeds:
            outs.append(ex.run(feed))
            runs.append(ex.stats.to_dict())
        ex.close()
    return runs_record(outs, runs)


def demo_graph_and_feeds(images: int = 2) -> tuple[Any, list[dict[str, np.ndarray]]]:
    """The demo exactly as tb/demo.py compiles and feeds it."""
    from compiler import zoo
    from compiler.pipeline import compile_model
    from tb.demo import DemoOptions, make_inputs

    opts = DemoOptions()
    options: dict[str, Any] = {"plugin": "accel", "quantize": {"samples": 4, "seed": 0},
                               "plugin_options": {"accel": {"max_layers": opts.max_layers}}}
    graph = compile_model(zoo.demo_cnn(), options).graph
    feeds = make_inputs(graph, images, "demo")
    return graph, [{k: v[i] for k, v in feeds.items()} for i in range(images)]


def model_demo() -> dict[str, Any]:
    graph, feeds = demo_graph_and_feeds()
    return _model_runs(graph, feeds, DEMO_CARD_MEM)


def resnet_model() -> tuple[Any, str]:
    """ResNet-50 light (random weights) with the FC's logits a second output, and their name."""
    from compiler import zoo

    return zoo.with_logits(zoo.light_model("resnet50"))


def resnet_graph_and_feeds(model: Any = None) -> tuple[Any, dict[str, np.ndarray]]:
    """ResNet-50 (``resnet_model()`` unless given) as bench/e2e_bench.py compiles and feeds it."""
    from compiler.pipeline import compile_model

    model = resnet_model()[0] if model is None else model
    graph = compile_model(model, RESNET_OPTIONS).graph
    inp = graph.inputs[0]
    x = np.random.default_rng(RESNET_INPUT_SEED).standard_normal(
        tuple(inp.output.shape)).astype(np.float32)
    return graph, {inp.name: x}


def model_resnet50() -> dict[str, Any]:
    graph, feed = resnet_graph_and_feeds()
    return _model_runs(graph, [feed], RESNET_CARD_MEM, host_size=RESNET_HOST_MEM)


def runs_record(outputs: list[dict[str, np.ndarray]], stats: list[dict[str, Any]]
                ) -> dict[str, Any]:
    """What a part records of its runs: each run's output hashes and exact figures."""
    return {"outputs": [{k: sha(v) for k, v in sorted(o.items())} for o in outputs],
            "runs": [run_record(st) for st in stats]}


def model_layers(work: Path) -> dict[str, Any]:
    """The accelerator benchmark's jobs on AccelModel (bench/accel_bench.py's make_job)."""
    from bench import accel_bench

    out = {}
    for la in accel_bench.LAYERS:
        job = accel_bench.make_job(la, work=work)
        out[la.name] = {"insns": job["insn_count"], "counters": job["model_counters"],
                        "memory": sha((work / la.name / "expected.bin").read_bytes()),
                        "estimate_cycles": job["estimate_cycles"]}
    return out


# --- the RTL card --------------------------------------------------------------------------------

def rtl_demo(sim: str, out: Path) -> dict[str, Any]:
    """tb/demo.py's flow on the RTL card (waves off); what it simulated."""
    from tb.demo import DemoOptions, run_demo

    images = RTL_DEMO_IMAGES[sim]
    # the AXI card (the recorded behaviour is the card's, not the PCIe link's timing)
    opts = DemoOptions(sim=sim, waves=False, quiet=True, out=out, images=images, link="axi")
    rc = run_demo(opts)
    if rc:
        raise AssertionError(f"the demo failed on {sim} (rc {rc}): RTL and functional card "
                             "differ, or the probabilities are off")
    r = json.loads((out / "rtl_out.json").read_text())
    npz = np.load(out / "rtl_outputs.npz")
    names = sorted({k.split("/")[0] for k in npz.files})
    return {"images": images, "cycles": r["cycles"],
            "outputs": [{n: sha(npz[f"{n}/{i}"]) for n in names} for i in range(images)],
            "runs": [run_record(s) for s in r["runs"]]}


def rtl_layers(work: Path) -> dict[str, Any]:
    """The accelerator benchmark's jobs through PcieDriver on RtlCard (its lean build)."""
    from bench import accel_bench
    from tb.common import simulator

    b = accel_bench.cocotb_build("lean")
    out = {}
    for la in accel_bench.LAYERS:
        accel_bench.make_job(la, work=work)
        simulator.test(b, "bench.accel_cosim", testcase=f"bench_{la.name}",
                       run_name=f"golden_{la.name}",
                       extra_env={"ACCEL_BENCH_WORK": str(work), "ACCEL_BENCH_BUILD": "lean",
                                  "COCOTB_LOG_LEVEL": "WARNING"})
        co = json.loads((work / la.name / "cosim-lean.json").read_text())
        mem = (work / la.name / "cosim_mem-lean.bin").read_bytes()
        out[la.name] = {"counters": co["counters"], "window_cycles": co["window_cycles"],
                        "memory": sha(mem)}
    return out


PARTS = ("model/demo", "model/resnet50", "model/layers", "rtl/demo/verilator",
         "rtl/demo/icarus", "rtl/layers")


def record(part: str) -> Any:
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        t = Path(tmp)
        if part == "model/demo":
            return model_demo()
        if part == "model/resnet50":
            return model_resnet50()
        if part == "model/layers":
            return model_layers(t)
        if part.startswith("rtl/demo/"):
            return rtl_demo(part.rsplit("/", 1)[1], t)
        if part == "rtl/layers":
            return rtl_layers(t)
    raise ValueError(f"unknown part {part!r}; expected one of {PARTS}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="write what is recorded")
    ap.add_argument("parts", nargs="*", default=list(PARTS))
    args = ap.parse_args()
    doc = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    for part in args.parts:
        got = record(part)
        same = doc.get(part) == got
        print(f"{part}: {'same as recorded' if same else 'DIFFERENT from recorded'}", flush=True)
        if args.update:
            doc[part] = got
            GOLDEN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

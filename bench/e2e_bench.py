"""End-to-end benchmark: ResNet-50 on the RTL card through the real runtime, and the demo's wall
time on both simulators.

``python -m bench e2e`` (about 6 minutes once the models are built):

- ResNet-50 (``compiler.zoo.light_model("resnet50")``, random weights, the FC's logits added as
  a second graph output) compiled with the accelerator plugin (int8, 1 calibration sample), one
  seeded random input image. References: onnxruntime in fp32, and the same compiled model on
  the functional card (``ModelCard``, 64 MiB, the same runtime and memory manager).
- The RTL run: card_top (64 MiB card memory) under Verilator, a lean -O3 build
  (tb/common/simulator.py ``card_build``: the runtime touches only card_top's
  ports), host memory answering reads after
  500 ns; the cocotb test ``e2e_resnet50`` below runs ``CardExecutor`` + ``CardSession`` on
  ``PcieDriver(RtlCard(dut))`` in a ``cocotb.task.bridge`` thread, with the memory manager's
  calls recorded.
- Reported: wall time (total, and of the RTL run: the simulator process, build excluded),
  simulated cycles, accelerator cycles and MAC utilization (ACC_MACS / (N*N*ACC_CYCLES)) per step
  and total, bytes and DMA transfers each way against the memory manager's lower bound
  (pyhost/memory/bound.py on the recorded trace, as the memory benchmark computes it), and
  output agreement: bit-exact against the functional card (and the exact counters: instructions,
  MACs, bytes loaded and stored; and the manager's traffic), cosine similarity and top-1 of the
  logits against onnxruntime.
- Where the RTL run's time goes: the simulator (C++ model and cocotb's GPI), cocotb's Python
  coroutines (AXI-Lite master, host-memory model: inside GPI triggers) and the host program
  (runtime, memory manager, driver: the bridge thread outside its calls into the simulation),
  and per driver call kind (DMA, accelerator wait) wall time and simulated cycles.
- The demo (tb/demo.py's ``run_demo``, waves off) on Verilator and Icarus: wall time, and the
  RTL run's simulated cycles per wall second (from its cocotb results).

Prints a summary, writes bench/results/e2e.json; returns 1 when the ResNet-50 RTL run takes more
than TARGET_S seconds or a demo run fails. A wrong result raises E2EMismatch after the JSON is
written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cocotb
import numpy as np

from tb.common import simulator
from tb.demo import run_with_progress

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: Model, inputs, traces and the RTL run's outputs.
WORK = simulator.BUILD_ROOT / "e2e_bench"
MODEL = "resnet50"
OPTIONS: dict[str, Any] = {"plugin": "accel", "quantize": {"samples": 1, "seed": 0}}
CARD_MEM = 64 << 20
HOST_BYTES = 192 << 20
#: Host read latency seen by the card (cycles of 2.5 ns): 500 ns, a PCIe round trip.
HOST_LATENCY = 200
PARAMS = {"MEM_SIZE": f"64'd{CARD_MEM}"}
INPUT_SEED = 7
#: The ResNet-50 RTL run (the simulator process) must take at most this long.
TARGET_S = 300.0
#: A hung card fails the run after this much simulated time per interrupt wait (1 s: 400 M
#: cycles, 5x the whole model).
IRQ_TIMEOUT_NS = 1_000_000_000
#: The driver's timeout; RtlCard turns it into simulated time (bounded by IRQ_TIMEOUT_NS).
DRIVER_TIMEOUT_S = 1_000_000
#: Simulated cycles between two progress lines of the RTL run.
PROGRESS_EVERY = 5_000_000
#: HiGHS's time for the integer bound (the memory benchmark's setting).
MILP_SECONDS = 3.0
#: Exact accelerator counters (the functional model's equal the RTL's); cycles differ.
EXACT_COUNTERS = ("insns", "macs", "bytes_loaded", "bytes_stored")
#: The memory manager's traffic, identical on both cards (same calls, same decisions).
TRAFFIC_KEYS = ("bytes_h2c", "bytes_c2h", "bytes_c2c", "transfers_h2c", "transfers_c2h",
                "transfers_c2c", "driver_calls", "descriptors", "evictions", "writebacks",
                "compactions", "need_hits", "need_misses", "accel_runs")
SIMS = ("verilator", "icarus")


class E2EMismatch(AssertionError):
    """The RTL card's result differs from the functional card's (or a check failed)."""


# --- the cocotb side: profiling ------------------------------------------------------------------

class _Profile:
    """Wall time spent in Python inside GPI triggers (every entry from the simulator into
    Python: cocotb coroutines, and the bridge thread, which runs while the simulator waits), in
    the host thread's calls into the simulation, and per driver call kind."""

    def __init__(self) -> None:
        self.active = False
        self.in_python = 0.0
        self.wakeups = 0
        self.in_sim_calls = 0.0          # host thread blocked in resume() (RtlCard calls)
        self.calls: dict[str, dict[str, float]] = {}

    def add_call(self, kind: str, wall: float, cycles: int) -> None:
        c = self.calls.setdefault(kind, {"calls": 0, "wall_s": 0.0, "cycles": 0})
        c["calls"] += 1
        c["wall_s"] += wall
        c["cycles"] += cycles


_PROF = _Profile()


def _install_trigger_timer() -> None:
    """Time every GPI trigger's Python work (``GPITrigger._react`` runs the callbacks and the
    event loop; the simulator waits meanwhile)."""
    from cocotb._gpi_triggers import GPITrigger

    react = GPITrigger._react
    if getattr(react, "_e2e_timed", False):
        return

    def timed(self: Any) -> None:
        # counted when the window is open at the start or at the end: the trigger that opens it
        # starts the host thread, the one that closes it ends the thread
        was = _PROF.active
        t0 = time.perf_counter()
        try:
            react(self)
        finally:
            if was or _PROF.active:
                _PROF.in_python += time.perf_counter() - t0
                _PROF.wakeups += 1

    timed._e2e_timed = True  # type: ignore[attr-defined]
    GPITrigger._react = timed  # type: ignore[method-assign]


def _profiled_card(dut: Any, **kw: Any) -> Any:
    """An RtlCard whose blocking calls (each a ``resume`` into the simulation) are timed."""
    from tb.common.rtl_card import RtlCard

    class ProfiledCard(RtlCard):
        def _timed(self, fn: Callable[..., Any], *a: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a)
            finally:
                _PROF.in_sim_calls += time.perf_counter() - t0

        def mmio_read(self, offset: int) -> int:
            return self._timed(super().mmio_read, offset)

        def mmio_write(self, offset: int, value: int) -> None:
            self._timed(super().mmio_write, offset, value)

        def wait_irq(self, timeout_s: float) -> bool:
            return self._timed(super().wait_irq, timeout_s)

        def cycles(self) -> int:
            return self._timed(super().cycles)

    return ProfiledCard(dut, **kw)


class _TimedDriver:
    """The PcieDriver as the session sees it: the same object, with the DMA and accelerator
    calls timed (wall and simulated cycles)."""

    TIMED = ("write_batch", "read_batch", "copy_batch", "accel_bind", "accel_start",
             "accel_wait")

    def __init__(self, driver: Any, card: Any) -> None:
        self._driver = driver
        self._card = card

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._driver, name)
        if name not in self.TIMED:
            return attr
        card = self._card

        def timed(*a: Any, **k: Any) -> Any:
            c0, t0 = card.cycles(), time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                _PROF.add_call(name, time.perf_counter() - t0, card.cycles() - c0)

        return timed


# --- the cocotb side: the run --------------------------------------------------------------------

def _host_main(card: Any, env: dict[str, str]) -> dict[str, Any]:
    """Blocking host program on the RTL card: the runtime runs the model once."""
    t_start = time.perf_counter()
    from compiler import xmodel
    from compiler.runtime.card import CardExecutor, CardSession, write_chrome_trace
    from pyhost.driver import PcieDriver
    from pyhost.spec import dram

    graph = xmodel.load(env["E2E_XMODEL"])
    feeds = dict(np.load(env["E2E_INPUTS"]))
    drv = PcieDriver(card, timeout_s=DRIVER_TIMEOUT_S)
    ns = dram.CTRL_CLK_NS
    with open(env["E2E_MEMTRACE"], "w") as rec:
        session = CardSession(_TimedDriver(drv, card), record=rec,  # type: ignore[arg-type]
                              clock=lambda: card.cycles() * ns * 1e-9)
        ex = CardExecutor(graph, session)
        t_setup = time.perf_counter() - t_start
        c0 = card.cycles()
        t0 = time.perf_counter()
        out = ex.run(feeds)
        run_s = time.perf_counter() - t0
        cycles = card.cycles() - c0
        stats = ex.stats.to_dict()
        ex.close()
    assert session.events is not None
    write_chrome_trace(session.events, env["E2E_TIMELINE"], time_scale=1e6)
    np.savez(env["E2E_OUT_NPZ"], **out)
    drv.close()
    return {"stats": stats, "run_cycles": cycles, "run_wall_s": run_s,
            "setup_wall_s": t_setup, "cycles_total": card.cycles(),
            "capacity": session.capacity, "host_wall_s": time.perf_counter() - t_start}


@cocotb.test(timeout_time=2000, timeout_unit="ms")
async def e2e_resnet50(dut) -> None:
    """The compiled ResNet-50 on the RTL card through the real runtime; figures to JSON."""
    from cocotb.task import bridge
    from cocotb.triggers import Timer

    from pyhost.backend import HostMemory
    from pyhost.spec import dram
    from tb.common.clocking import reset, start_clock
    from tb.common.host_memory_axi import HostMemoryConfig

    env = dict(os.environ)
    _install_trigger_timer()
    start_clock(dut)
    card = _profiled_card(dut, host=HostMemory(HOST_BYTES),
                          memory=HostMemoryConfig(read_latency=HOST_LATENCY),
                          irq_timeout_ns=IRQ_TIMEOUT_NS, link=env.get("E2E_LINK", "axi"))
    await reset(dut)
    done = False
    progress = open(env["E2E_PROGRESS"], "a", buffering=1)  # noqa: SIM115 (closed below)

    async def ticker() -> None:
        n = 0
        while not done:
            await Timer(PROGRESS_EVERY * dram.CTRL_CLK_NS, unit="ns")
            n += PROGRESS_EVERY
            progress.write(f"cycle {n:>12,}\n")

    cocotb.start_soon(ticker())
    t0, cpu0 = time.perf_counter(), time.process_time()
    _PROF.active = True
    try:
        r = await bridge(_host_main)(card, env)
    finally:
        _PROF.active = False
        done = True
        progress.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    host_python = r["host_wall_s"] - _PROF.in_sim_calls
    r["profile"] = {
        "wall_s": wall, "cpu_s": cpu, "python_in_triggers_s": _PROF.in_python,
        "host_python_s": host_python, "cocotb_python_s": _PROF.in_python - host_python,
        "simulator_s": wall - _PROF.in_python, "wakeups": _PROF.wakeups,
        "driver_calls": _PROF.calls,
    }
    Path(env["E2E_OUT"]).write_text(json.dumps(r, indent=2))


# --- the host side -------------------------------------------------------------------------------

def _say(*a: Any) -> None:
    print(*a, flush=True)


def prepare() -> dict[str, Any]:
    """Model, compile, input, the onnxruntime and functional-card references; files in WORK."""
    import onnxruntime as ort

    from compiler import xmodel, zoo
    from compiler.pipeline import compile_model
    from compiler.runtime.card import CardExecutor, CardSession, accel_image
    from pyhost.driver import PcieDriver
    from pyhost.model_card import ModelCard

    WORK.mkdir(parents=True, exist_ok=True)
    model = zoo.light_model(MODEL)
    model, logits = zoo.with_logits(model)
    t0 = time.perf_counter()
    graph = compile_model(model, OPTIONS).graph
    compile_s = time.perf_counter() - t0
    xmodel.save(graph, WORK / "model.xmodel")
    subs = graph.root_subgraph.children_topological_sort()
    images = [accel_image(s) for s in subs if s.get_attr("device") == "ACCEL"]
    name = graph.inputs[0].name
    x = np.random.default_rng(INPUT_SEED).standard_normal(
        tuple(graph.inputs[0].output.shape)).astype(np.float32)
    feeds = {name: x}
    np.savez(WORK / "inputs.npz", **feeds)

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    ort_s = time.perf_counter() - t0

    with open(WORK / "model_memtrace.jsonl", "w") as rec, \
            PcieDriver(ModelCard(CARD_MEM, host_size=HOST_BYTES)) as drv:
        ex = CardExecutor(graph, CardSession(drv, record=rec))
        t0 = time.perf_counter()
        model_out = ex.run(feeds)
        model_s = time.perf_counter() - t0
        model_stats = ex.stats.to_dict()
        ex.close()
    return {"graph": graph, "images": images, "feeds": feeds, "ref": ref, "fc": logits,
            "model_out": model_out, "model_stats": model_stats, "compile_s": compile_s,
            "ort_s": ort_s, "model_s": model_s}


def run_rtl(work: Path = WORK, link: str = "axi") -> tuple[dict[str, Any], dict[str, np.ndarray],
                                                          float, float, Path]:
    """Build (or reuse) the lean card_top (card_top_pcie for ``link="pcie"``) and run
    e2e_resnet50 on work/model.xmodel and work/inputs.npz; (result, outputs, build wall, RTL run
    wall, run directory)."""
    t0 = time.perf_counter()
    b = simulator.card_build("verilator", PARAMS, waves=False,
                             top="card_top_pcie" if link == "pcie" else "card_top")
    build_s = time.perf_counter() - t0
    files = {k: work / f"rtl_{k}" for k in ("out.json", "outputs.npz", "memtrace.jsonl",
                                            "timeline.json", "progress.txt")}
    for f in files.values():
        f.unlink(missing_ok=True)
    files["progress.txt"].touch()
    env = {"E2E_XMODEL": str(work / "model.xmodel"), "E2E_INPUTS": str(work / "inputs.npz"),
           "E2E_OUT": str(files["out.json"]), "E2E_OUT_NPZ": str(files["outputs.npz"]),
           "E2E_MEMTRACE": str(files["memtrace.jsonl"]),
           "E2E_TIMELINE": str(files["timeline.json"]),
           "E2E_PROGRESS": str(files["progress.txt"]), "COCOTB_LOG_LEVEL": "WARNING",
           "E2E_LINK": link}
    cpu0 = _children_cpu_s()
    res, rtl_s = run_with_progress(b, "bench.e2e_bench", "e2e_resnet50", env,
                                   files["progress.txt"], _say, poll_s=2.0)
    cpu_s = _children_cpu_s() - cpu0
    if res.failed or not files["out.json"].exists():
        raise E2EMismatch(f"the RTL run failed; see {res.run_dir / 'sim.log'}")
    out = json.loads(files["out.json"].read_text())
    out["sim_cpu_s"] = round(cpu_s, 1)
    npz = np.load(files["outputs.npz"])
    return out, {k: npz[k] for k in npz.files}, build_s, rtl_s, res.run_dir


#: ResNet-50 on the PCIe card / on the AXI card, at most (the simulator process's CPU time)
LINK_TARGET = 1.25


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (the simulator runs as
    one, started and waited for by cocotb's runner)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def link_cost() -> dict[str, Any]:
    """ResNet-50 on the AXI card and on the PCIe card, one after the other in this run: the RTL
    run (simulator process, build excluded) of each, its wall time and its CPU time, and their
    ratios; both must agree bit for bit with the functional card and with each other. The
    target is on the CPU-time ratio: on a shared machine the wall time of two runs minutes
    apart depends on what else runs, the CPU time they need does not."""
    _say("link cost: ResNet-50 on card_top (AXI) and card_top_pcie (PCIe), same run")
    prep = prepare()
    row: dict[str, Any] = {}
    outs = {}
    for link in ("axi", "pcie"):
        rtl, rtl_out, build_s, rtl_s, _ = run_rtl(link=link)
        agree, errs = compare(prep, rtl, rtl_out)
        if errs:
            raise E2EMismatch(f"ResNet-50 on the {link} card: " + "; ".join(errs))
        outs[link] = rtl_out
        row[link] = {"rtl_wall_s": round(rtl_s, 1), "sim_cpu_s": rtl["sim_cpu_s"],
                     "build_s": round(build_s, 1), "cycles": rtl["cycles_total"],
                     "bytes_h2c": rtl["stats"]["memory"].get("bytes_h2c"),
                     "profile": {k: round(v, 1) for k, v in rtl["profile"].items()
                                 if isinstance(v, (int, float))}}
        _say(f"  {link}: {rtl_s:.1f} s wall, {rtl['sim_cpu_s']:.1f} s CPU (RTL run), "
             f"{rtl['cycles_total']:,} cycles; agrees with the functional card: {agree}")
    same = all(np.array_equal(outs["axi"][k], outs["pcie"][k]) for k in outs["axi"])
    if not same:
        raise E2EMismatch("ResNet-50 outputs differ between the AXI and the PCIe card")
    row["ratio"] = round(row["pcie"]["sim_cpu_s"] / row["axi"]["sim_cpu_s"], 3)
    row["wall_ratio"] = round(row["pcie"]["rtl_wall_s"] / row["axi"]["rtl_wall_s"], 3)
    row["target"] = LINK_TARGET
    _say(f"  PCIe / AXI: CPU time {row['ratio']:.2f} (target <= {LINK_TARGET}), wall time "
         f"{row['wall_ratio']:.2f}; outputs identical")
    return row


def memory_bound(path: Path, capacity: int) -> dict[str, Any]:
    """The lower bound on the bytes any whole-tensor manager moves for the recorded trace."""
    from pyhost.memory.bound import lower_bound
    from pyhost.memory.trace import Trace

    tr = Trace.load(path)
    b = lower_bound(tr, capacity, integer=True, time_limit=MILP_SECONDS)
    needs = tr.needs()
    return {"bound_bytes": round(b.bound), "compulsory_bytes": b.compulsory, "lp_bytes":
            round(b.lp), "optimal": b.optimal, "need_calls": len(needs),
            "tensors": len(tr.sizes()), "seconds": round(b.seconds, 3)}


def compare(prep: dict[str, Any], rtl: dict[str, Any], rtl_out: dict[str, np.ndarray]
            ) -> tuple[dict[str, Any], list[str]]:
    """Agreement figures and the list of differences (empty: all checks pass)."""
    errors = []
    model_out, ref = prep["model_out"], prep["ref"]
    exact = {}
    for k, v in model_out.items():
        got = rtl_out.get(k)
        exact[k] = got is not None and got.shape == v.shape and bool(np.array_equal(got, v))
        if not exact[k]:
            errors.append(f"output {k!r}: the RTL card's differs from the functional card's"
                          + ("" if got is None else
                             f" (max |diff| {float(np.max(np.abs(got - v))):.6g})"))
    ms, rs = prep["model_stats"], rtl["stats"]
    for m, r in zip(ms["steps"], rs["steps"], strict=True):
        if ("counters" in m) != ("counters" in r) or m["name"] != r["name"]:
            errors.append(f"step {r['name']} on the RTL is {m['name']} on the functional card, "
                          "or has counters on one card only")
        elif "counters" in m:
            for c in EXACT_COUNTERS:
                if m["counters"][c] != r["counters"][c]:
                    errors.append(f"step {r['name']}: counter {c} = {r['counters'][c]} on the "
                                  f"RTL, {m['counters'][c]} on the functional card")
    for k in TRAFFIC_KEYS:
        if ms["memory"].get(k) != rs["memory"].get(k):
            errors.append(f"memory manager {k}: {rs['memory'].get(k)} on the RTL, "
                          f"{ms['memory'].get(k)} on the functional card")
    fc = prep["fc"]
    a = rtl_out[fc].astype(np.float64).reshape(-1)
    b = ref[fc].astype(np.float64).reshape(-1)
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    top_rtl, top_ref = int(a.argmax()), int(b.argmax())
    probs = [k for k in ref if k != fc][0]
    pdiff = float(np.max(np.abs(rtl_out[probs].astype(np.float64) - ref[probs])))
    agree = {"bit_exact_vs_functional": exact, "logits": fc, "cosine_vs_onnxruntime": cos,
             "logits_max_abs_diff": float(np.max(np.abs(a - b))),
             "logits_max_abs": float(np.max(np.abs(b))),
             "top1_rtl": top_rtl, "top1_onnxruntime": top_ref, "top1_agrees": top_rtl == top_ref,
             "max_prob_diff_vs_onnxruntime": pdiff}
    return agree, errors


def _results_time(xml: Path) -> tuple[float, float]:
    """(sim time ns, real time s) of the one test in a cocotb results XML."""
    case = next(ET.parse(xml).iter("testcase"))
    return float(case.get("sim_time_ns", 0)), float(case.get("time", 0))


def run_demos(sims: list[str]) -> dict[str, Any]:
    """tb/demo.py's flow (waves off) on each simulator: wall time and the RTL run's speed."""
    try:
        from tb.demo import DemoOptions, demo_build, run_demo
    except Exception as e:  # a broken demo must not hide the ResNet-50 figures
        return {sim: {"rc": 1, "error": f"importing tb.demo: {type(e).__name__}: {e}",
                      "wall_s": 0.0, "build_s": 0.0} for sim in sims}

    out: dict[str, Any] = {}
    for sim in sims:
        # the AXI card, as the figures this part is compared with (--parts link: the PCIe cost)
        opts = DemoOptions(sim=sim, waves=False, quiet=True, out=WORK / f"demo-{sim}",
                           link="axi")
        if not simulator.simulator_available(sim):
            out[sim] = {"skipped": f"{sim} is not installed"}
            continue
        # the build first (cached after one run), so the timed run is the demo's own work
        t0 = time.perf_counter()
        b = demo_build(opts)
        build_s = time.perf_counter() - t0
        t0, t_wall0 = time.perf_counter(), time.time()
        try:
            rc = run_demo(opts)
            err = None
        except Exception as e:  # reported in the JSON and the summary
            rc, err = 1, f"{type(e).__name__}: {e}"
        wall = time.perf_counter() - t0
        row: dict[str, Any] = {"rc": rc, "wall_s": round(wall, 1), "build_s": round(build_s, 1),
                               "images": opts.images, "card_mem": opts.card_mem}
        if err:
            row["error"] = err
        rtl = opts.out / "rtl_out.json"
        # the demo's run directory under its build: the results written by this run
        xmls = [p for p in (b.build_dir / "runs").glob("*/results.xml")
                if p.stat().st_mtime >= t_wall0]
        xml = max(xmls, key=lambda p: p.stat().st_mtime) if xmls else None
        if rc == 0 and rtl.exists() and xml is not None:
            cycles = json.loads(rtl.read_text())["cycles"]
            _, real = _results_time(xml)
            row.update({"cycles": cycles, "rtl_test_s": round(real, 1),
                        "cycles_per_s": round(cycles / real) if real else None})
        out[sim] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(RESULTS / "e2e.json"))
    ap.add_argument("--parts", default="resnet50,demo",
                    help="comma-separated subset of: resnet50, demo, link (ResNet-50 on the "
                    "AXI and the PCIe card in the same run: the link's co-simulation cost)")
    ap.add_argument("--demo-sims", default=",".join(SIMS))
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "e2e", "target_s": TARGET_S}
    errors: list[str] = []
    missed: list[str] = []

    if "resnet50" in parts:
        _say(f"ResNet-50: compiling, onnxruntime and the functional card ({CARD_MEM >> 20} MiB)")
        prep = prepare()
        _say(f"  compiled in {prep['compile_s']:.1f} s, functional card {prep['model_s']:.1f} s; "
             "RTL run (card_top, Verilator, lean -O3 build):")
        rtl, rtl_out, build_s, rtl_s, run_dir = run_rtl()
        agree, errs = compare(prep, rtl, rtl_out)
        errors += errs
        bound = memory_bound(WORK / "rtl_memtrace.jsonl", rtl["capacity"])
        model_bound = memory_bound(WORK / "model_memtrace.jsonl", rtl["capacity"])
        if model_bound["bound_bytes"] != bound["bound_bytes"]:
            errors.append(f"the recorded traces differ: bound {bound['bound_bytes']} on the RTL, "
                          f"{model_bound['bound_bytes']} on the functional card")
        r = _resnet_result(prep, rtl, agree, bound, build_s, rtl_s, run_dir)
        result["resnet50"] = r
        if rtl_s > TARGET_S:
            missed.append("resnet50 time")

    if "link" in parts:
        result["link"] = link_cost()
        if result["link"]["ratio"] > LINK_TARGET:
            missed.append("PCIe link co-simulation cost")

    if "demo" in parts:
        _say("demo: tb/demo.py's flow on " + ", ".join(args.demo_sims.split(",")))
        result["demo"] = run_demos(args.demo_sims.split(","))
        for sim, row in result["demo"].items():
            if row.get("rc", 0):
                missed.append(f"demo on {sim}")

    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    result["errors"] = errors
    Path(args.out).write_text(json.dumps(result, indent=2, default=_jsonable))
    _summary(result)
    print(f"\nwrote {os.path.relpath(args.out)}")
    if errors:
        raise E2EMismatch("WRONG RESULTS:\n  " + "\n  ".join(errors))
    if missed:
        print("MISSED: " + ", ".join(missed))
    return 1 if missed else 0


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _resnet_result(prep: dict[str, Any], rtl: dict[str, Any], agree: dict[str, Any],
                   bound: dict[str, Any], build_s: float, rtl_s: float, run_dir: Path
                   ) -> dict[str, Any]:
    (img,) = prep["images"]
    n = img.config.n
    steps = rtl["stats"]["steps"]
    acc_cycles = sum(s["counters"]["cycles"] for s in steps if "counters" in s)
    acc_macs = sum(s["counters"]["macs"] for s in steps if "counters" in s)
    mem = rtl["stats"]["memory"]
    moved = mem["bytes_h2c"] + mem["bytes_c2h"]
    prof = rtl["profile"]
    calls = prof["driver_calls"]
    wait = calls.get("accel_wait", {"wall_s": 0.0, "cycles": 0})
    dma = {k: sum(calls.get(c, {}).get(k, 0) for c in ("write_batch", "read_batch",
                                                        "copy_batch"))
           for k in ("wall_s", "cycles", "calls")}
    return {
        "model": MODEL, "options": OPTIONS, "card_mem": CARD_MEM, "host_latency_cycles":
        HOST_LATENCY, "accel": {"n": n, "insns": img.insns, "program_bytes": len(img.program),
                                "consts_bytes": len(img.consts),
                                "scratch_bytes": img.scratch_bytes},
        "compile_s": round(prep["compile_s"], 1), "onnxruntime_s": round(prep["ort_s"], 2),
        "functional_card_s": round(prep["model_s"], 1), "build_s": round(build_s, 1),
        "rtl_run_s": round(rtl_s, 1), "target_s": TARGET_S, "target_met": rtl_s <= TARGET_S,
        "rtl_test_s": round(_results_time(run_dir / "results.xml")[1], 1),
        "run_wall_s": round(rtl["run_wall_s"], 1),
        "simulated_cycles": rtl["cycles_total"], "run_cycles": rtl["run_cycles"],
        "accel_cycles": acc_cycles, "accel_macs": acc_macs,
        "mac_utilization": round(acc_macs / (n * n * acc_cycles), 4) if acc_cycles else 0.0,
        "steps": steps, "memory": mem,
        "bound": {**bound, "bytes_moved": moved,
                  "ratio": round(moved / bound["bound_bytes"], 4) if bound["bound_bytes"]
                  else None},
        "agreement": agree,
        "profile": {**{k: round(v, 2) if isinstance(v, float) else v
                       for k, v in prof.items() if k != "driver_calls"},
                    "driver_calls": {k: {kk: round(vv, 3) if isinstance(vv, float) else vv
                                         for kk, vv in v.items()} for k, v in calls.items()},
                    "accel_wait": {"wall_s": round(wait["wall_s"], 2), "cycles": wait["cycles"],
                                   "cycles_per_s": round(wait["cycles"] / wait["wall_s"])
                                   if wait["wall_s"] else None},
                    "dma": {"wall_s": round(dma["wall_s"], 2), "cycles": dma["cycles"],
                            "calls": dma["calls"], "bytes": moved + mem["bytes_c2c"],
                            "bytes_per_s": round((moved + mem["bytes_c2c"]) / dma["wall_s"])
                            if dma["wall_s"] else None}},
        "setup_wall_s": round(rtl["setup_wall_s"], 1),
    }


def _summary(result: dict[str, Any]) -> None:
    r = result.get("resnet50")
    if r:
        a, p, m, bd = r["accel"], r["profile"], r["memory"], r["bound"]
        print(f"\nResNet-50 (light, random weights, {a['insns']} instructions, "
              f"{a['program_bytes'] / 1e6:.1f} MB program, {a['consts_bytes'] / 1e6:.1f} MB "
              f"constants) on card_top under Verilator, lean -O3 build, {r['card_mem'] >> 20} MiB "
              f"card memory, host read latency {r['host_latency_cycles'] * 2.5:.0f} ns")
        print(f"  compile {r['compile_s']} s, onnxruntime {r['onnxruntime_s']} s, functional "
              f"card {r['functional_card_s']} s, RTL build {r['build_s']} s")
        verdict = "met" if r["target_met"] else \
            f"MISSED by {r['rtl_run_s'] - r['target_s']:.0f} s"
        print(f"  RTL run {r['rtl_run_s']} s wall (target {r['target_s']:.0f} s: {verdict}); "
              f"{r['simulated_cycles']:,} cycles simulated "
              f"({r['simulated_cycles'] / r['rtl_run_s']:,.0f} cycles/s over the whole run), "
              f"the model's run {r['run_cycles']:,} cycles in {r['run_wall_s']} s")
        print(f"  {'step':28} {'device':7} {'cycles':>11} {'MACs':>14} {'MAC util':>9}")
        for s in r["steps"]:
            c = s.get("counters")
            if c:
                print(f"  {s['name'][:28]:28} {s['device']:7} {c['cycles']:>11,} "
                      f"{c['macs']:>14,} {100 * s['mac_utilization']:8.1f}%")
            else:
                print(f"  {s['name'][:28]:28} {s['device']:7} {'(host)':>11}")
        print(f"  {'total':28} {'':7} {r['accel_cycles']:>11,} {r['accel_macs']:>14,} "
              f"{100 * r['mac_utilization']:8.1f}%")
        print(f"  host -> card {m['bytes_h2c']:,} bytes in {m['transfers_h2c']} DMA transfers, "
              f"card -> host {m['bytes_c2h']:,} in {m['transfers_c2h']}, on card "
              f"{m['bytes_c2c']:,} in {m['transfers_c2c']}; {m['driver_calls']} driver calls, "
              f"{m['descriptors']} descriptors, {m['evictions']} evictions")
        print(f"  lower bound (pyhost/memory/bound.py on the recorded trace, "
              f"{bd['need_calls']} need calls, {bd['tensors']} tensors): {bd['bound_bytes']:,} "
              f"bytes (compulsory {bd['compulsory_bytes']:,}); moved {bd['bytes_moved']:,} = "
              f"{bd['ratio']:.4f}x the bound")
        ag = r["agreement"]
        exact = all(ag["bit_exact_vs_functional"].values())
        print(f"  outputs: RTL vs functional card {'bit-exact' if exact else 'DIFFERENT'} "
              f"({', '.join(ag['bit_exact_vs_functional'])}); logits vs onnxruntime fp32: "
              f"cosine {ag['cosine_vs_onnxruntime']:.5f}, max |diff| "
              f"{ag['logits_max_abs_diff']:.4g} (largest |logit| {ag['logits_max_abs']:.4g}), "
              f"top-1 {'agrees' if ag['top1_agrees'] else 'DIFFERS'} ({ag['top1_rtl']}); "
              f"probabilities max |diff| {ag['max_prob_diff_vs_onnxruntime']:.2e} (random "
              "weights: logits this large make the softmax one-hot)")
        aw, d = p["accel_wait"], p["dma"]
        print(f"  where the RTL run's time goes ({p['wall_s']:.0f} s in the simulator process, "
              f"CPU {p['cpu_s']:.0f} s): simulator {p['simulator_s']:.0f} s, cocotb Python "
              f"{p['cocotb_python_s']:.0f} s, host program {p['host_python_s']:.0f} s "
              f"({p['wakeups']:,} Python wakeups)")
        print(f"    accelerator wait {aw['cycles']:,} cycles in {aw['wall_s']:.0f} s "
              f"({aw['cycles_per_s']:,} cycles/s); DMA {d['bytes'] / 1e6:.1f} MB, "
              f"{d['cycles']:,} cycles in {d['wall_s']:.0f} s ({d['bytes_per_s'] / 1e6:.2f} "
              "MB/s simulated)")
    demo = result.get("demo")
    if demo:
        print("\nDemo (tb/demo.py, waves off; wall = run_demo: compile, references, RTL run):")
        for sim, row in demo.items():
            if "skipped" in row:
                print(f"  {sim:9}: skipped, {row['skipped']}")
                continue
            line = f"  {sim:9}: {'PASS' if row['rc'] == 0 else 'FAIL'}, {row['wall_s']} s wall"
            if "cycles" in row:
                line += (f", RTL test {row['rtl_test_s']} s for {row['cycles']:,} cycles "
                         f"({row['cycles_per_s']:,} cycles/s)")
            if "error" in row:
                line += f"; {row['error']}"
            print(line + f" (build {row['build_s']} s)")


if __name__ == "__main__":
    sys.exit(main())

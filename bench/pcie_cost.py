"""The PCIe link's co-simulation cost per megabyte: a small proxy for ResNet-50's upload.

``python -m bench.pcie_cost`` builds card_top_pcie (16 MiB card memory: the PCIe regression's
build) and runs the real driver on it through RtlCard(link="pcie") with the default host
(HostLinkConfig: 500 ns + up to 200 ns per read, out of order; MPS 256 / MRRS 512, as make sim,
the benchmarks and ResNet-50 run): one host-to-card transfer of ``--mib`` MiB (DMA reads:
read requests and 256-byte completions, the path of ResNet-50's program and constant upload),
then the same bytes back card-to-host (posted writes), compared byte for byte. For each
direction it reports the simulator process's wall and CPU seconds, the Python inside GPI
triggers (cocotb's coroutines: the link and hard IP models; the host program's own Python is
not in it), the entries into Python (by trigger in the JSON), the completions and the
simulated throughput, each per MiB. ``--profile`` adds cProfile over the simulator thread's
Python for each direction (``--sampler``: pyinstrument's sampling profiler, if installed; the
figures are then inflated by the profiler; the reports are written beside the JSON);
``--link-model dll`` runs cocotbext-pcie's SimPort pair instead of the ideal link;
``--dirs H2C`` one direction only. Copied into an older tree (``git archive``), it runs there
too, on cocotbext-pcie's link as that tree has it, so the two trees are measured alike.

Prints a summary and writes bench/results/pcie_cost.json. Not part of ``make bench`` (a
diagnostic; bench/e2e_bench.py ``--parts link`` is the figure of record).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.task import bridge, resume
from cocotb.utils import get_sim_time

from bench import record
from pyhost.backend import HostMemory
from pyhost.driver import PcieDriver
from tb.common import simulator
from tb.common.clocking import reset, start_clock
from tb.common.pcie_card import PcieOptions

try:
    from tb.common.pcie_link import LINK_MODELS
except ImportError:                 # a tree from before the link models (one SimPort link)
    LINK_MODELS = ("dll",)
from tb.common.rtl_card import RtlCard

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: The PCIe regression's card memory (tests/rtl/test_card_top_pcie.py): the same build.
CARD_MEM = 16 << 20
MIB = 1 << 20


class _Triggers:
    """Wall time in Python inside GPI triggers and their number (cocotb's GPITrigger._react)."""

    def __init__(self) -> None:
        from cocotb._gpi_triggers import GPITrigger

        self.in_python = 0.0
        self.count = 0
        self.kinds: dict[str, int] = {}
        react = GPITrigger._react
        me = self

        def timed(trigger) -> None:
            t0 = time.perf_counter()
            k = type(trigger).__name__
            if k.endswith("Edge"):
                k += f"({trigger.signal._name})"
            me.kinds[k] = me.kinds.get(k, 0) + 1
            try:
                react(trigger)
            finally:
                me.in_python += time.perf_counter() - t0
                me.count += 1
        GPITrigger._react = timed


def _snapshot(card: RtlCard, trig: _Triggers) -> dict:
    rc = card.pcie.link.rc
    return {"wall": time.perf_counter(), "cpu": time.process_time(),
            "python": trig.in_python, "wakeups": trig.count, "kinds": dict(trig.kinds),
            "sim_ns": get_sim_time("ps") / 1000, "completions": rc.completions,
            "reads": rc.reads}


def _delta(a: dict, b: dict, nbytes: int) -> dict:
    mib = nbytes / MIB
    sim_ns = b["sim_ns"] - a["sim_ns"]
    return {"bytes": nbytes,
            "wall_s": round(b["wall"] - a["wall"], 3), "cpu_s": round(b["cpu"] - a["cpu"], 3),
            "python_s": round(b["python"] - a["python"], 3),
            "wakeups": b["wakeups"] - a["wakeups"],
            "wakeups_by_trigger": {k: v - a["kinds"].get(k, 0) for k, v in b["kinds"].items()
                                   if v - a["kinds"].get(k, 0)},
            "completions": b["completions"] - a["completions"],
            "read_requests": b["reads"] - a["reads"],
            "sim_us": round(sim_ns / 1000, 3), "sim_GBps": round(nbytes / sim_ns, 3),
            "cpu_s_per_MiB": round((b["cpu"] - a["cpu"]) / mib, 3),
            "python_s_per_MiB": round((b["python"] - a["python"]) / mib, 3)}


@cocotb.test(timeout_time=10, timeout_unit="sec")
async def pcie_cost(dut) -> None:
    """One host-to-card and one card-to-host transfer of PCIE_COST_BYTES, timed and checked."""
    nbytes = int(os.environ.get("PCIE_COST_BYTES", 4 * MIB))
    prof_dir = os.environ.get("PCIE_COST_PROFILE", "")
    start_clock(dut)
    model = os.environ.get("PCIE_COST_LINK_MODEL", "ideal")
    opts = PcieOptions(link_model=model) if len(LINK_MODELS) > 1 else PcieOptions()
    card = RtlCard(dut, HostMemory(2 * nbytes + (16 << 20)), link="pcie", pcie=opts,
                   irq_timeout_ns=10**10)
    await reset(dut)
    await card.pcie.up()
    trig = _Triggers()
    prof = None
    sampler = os.environ.get("PCIE_COST_SAMPLER", "")
    if prof_dir and sampler:           # pyinstrument (not a project dependency), if installed
        from pyinstrument import Profiler
        prof = Profiler(interval=0.0002, async_mode="disabled")
    elif prof_dir:
        import cProfile
        prof = cProfile.Profile()

    async def snap() -> dict:
        return _snapshot(card, trig)

    async def profile(on: bool, name: str = "") -> None:
        # cProfile follows the thread that enables it: the simulator's, where cocotb runs
        if sampler:
            if on:
                prof.start()
            else:
                prof.stop()
                (Path(prof_dir) / f"{name}.pyinstrument.txt").write_text(
                    prof.output_text(unicode=False, color=False, show_all=False))
                prof.reset()
        elif on:
            prof.enable()
        else:
            prof.disable()
            prof.dump_stats(str(Path(prof_dir) / f"{name}.pstats"))
            prof.clear()

    def host(card: RtlCard) -> dict:
        drv = PcieDriver(card, timeout_s=1000)
        src, dst = card.host.alloc(nbytes), card.host.alloc(nbytes)
        rng = np.random.default_rng(12)
        src.view()[:] = rng.integers(0, 256, nbytes, dtype=np.uint8)
        drv.read_data(0, PAGE_WARM, dst.address)       # warm: the first descriptor fetches
        out = {}
        dirs = os.environ.get("PCIE_COST_DIRS", "H2C,C2H").split(",")
        for name, run in (("H2C", lambda: drv.write_data(src.address, nbytes, 0)),
                          ("C2H", lambda: drv.read_data(0, nbytes, dst.address))):
            if name not in dirs:
                continue
            if prof is not None:
                resume(profile)(True)
            a = resume(snap)()
            run()
            b = resume(snap)()
            if prof is not None:
                resume(profile)(False, name)
            out[name] = _delta(a, b, nbytes)
        if dirs == ["H2C", "C2H"]:
            assert dst.read(0, nbytes) == src.read(0, nbytes), "card-to-host data differs"
        drv.close()
        return out

    rows = await bridge(host)(card)
    dev = card.pcie.link.dev
    rc = card.pcie.link.rc
    record("pcie_cost", {"rows": rows, "rx_overflows": dev.rx_overflows,
                         "rx_peak": list(dev.rx_peak), "reordered": rc.reordered,
                         "interleaved": rc.interleaved, "max_in_flight": rc.max_in_flight,
                         "link_model": getattr(opts, "link_model", "dll"),
                         "profiled": bool(prof_dir)})


PAGE_WARM = 4096


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=float, default=4, help="MiB each way (default 4)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile each direction (pstats beside the JSON)")
    ap.add_argument("--sampler", action="store_true",
                    help="with --profile: pyinstrument's sampling profiler instead (if installed;"
                    " a text report per direction beside the JSON)")
    ap.add_argument("--link-model", default=LINK_MODELS[0], choices=LINK_MODELS,
                    help="PcieOptions.link_model (default ideal; dll: cocotbext-pcie's SimPorts)")
    ap.add_argument("--dirs", default="H2C,C2H", help="directions to run (default both; the "
                    "card-to-host data is checked against the host-to-card source when both run)")
    ap.add_argument("--out", default=str(RESULTS / "pcie_cost.json"))
    args = ap.parse_args(argv)
    nbytes = int(args.mib * MIB) // 4096 * 4096
    if not 0 < nbytes <= CARD_MEM - MIB:
        ap.error(f"--mib: up to {(CARD_MEM - MIB) // MIB} MiB (the card has {CARD_MEM >> 20})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".raw.json")
    raw.unlink(missing_ok=True)
    env = {"BENCH_OUT": str(raw), "COCOTB_LOG_LEVEL": "WARNING", "PCIE_COST_BYTES": str(nbytes),
           "PCIE_COST_LINK_MODEL": args.link_model, "PCIE_COST_DIRS": args.dirs}
    if args.profile:
        env["PCIE_COST_PROFILE"] = str(out.parent)
        if args.sampler:
            env["PCIE_COST_SAMPLER"] = "1"
    b = simulator.card_build("verilator", {"MEM_SIZE": f"64'd{CARD_MEM}"}, waves=False,
                             top="card_top_pcie")
    t0 = time.perf_counter()
    simulator.test(b, "bench.pcie_cost", testcase="pcie_cost", run_name="pcie_cost",
                   extra_env=env)
    total = time.perf_counter() - t0
    r = json.loads(raw.read_text())["pcie_cost"]
    r["process_wall_s"] = round(total, 1)
    out.write_text(json.dumps(r, indent=2))
    print(f"\nPCIe link cost, {nbytes / MIB:g} MiB each way (MPS 256 / MRRS 512, default host, "
          f"{args.link_model} link){', cProfile on (inflated)' if args.profile else ''}; "
          f"simulator process {total:.1f} s")
    print(f"{'dir':4} {'wall s':>7} {'CPU s':>7} {'Python s':>9} {'CPU s/MiB':>10} "
          f"{'Py s/MiB':>9} {'wakeups':>9} {'cpls':>7} {'reads':>6} {'sim GB/s':>9}")
    for d, x in r["rows"].items():
        print(f"{d:4} {x['wall_s']:>7.2f} {x['cpu_s']:>7.2f} {x['python_s']:>9.2f} "
              f"{x['cpu_s_per_MiB']:>10.3f} {x['python_s_per_MiB']:>9.3f} {x['wakeups']:>9} "
              f"{x['completions']:>7} {x['read_requests']:>6} {x['sim_GBps']:>9.3f}")
    print(f"reads overtaking an older one {r['reordered']}, completions interleaved "
          f"{r['interleaved']}, reads in flight up to {r['max_in_flight']}, RC buffer peak "
          f"{r['rx_peak'][0]} headers / {r['rx_peak'][1]} data credits")
    if r["rx_overflows"]:
        print(f"{r['rx_overflows']} completions dropped (buffer overflow)")
        return 1
    print(f"wrote {os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

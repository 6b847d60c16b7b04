"""DRAM controller benchmark: bandwidth, latency and row-hit rate of the product configuration.

``python -m bench.dram_bench`` (``make bench``) builds dram_ctrl with its defaults (1 GiB,
DDR4-3200 timings) under Verilator, drives sequential and random 64-byte reads and writes with
:mod:`tb.dram_ctrl.traffic`, prints a summary and writes bench/results/dram.json. Bandwidth is a
fraction of the data bus peak (one 64-byte beat per controller cycle = 25.6 GB/s at 400 MHz).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cocotb

from pyhost.spec import dram
from tb.common import simulator
from tb.common.clocking import reset, start_clock
from tb.dram_ctrl.traffic import AxiTraffic, Pattern

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: Steady state needs the refresh debt (REF_POSTPONE_MAX + 1 intervals) to have built up.
WARMUP = (dram.REF_POSTPONE_MAX + 1) * dram.DEFAULT_TIMING.REFI + 2000

PATTERNS = [
    Pattern("seq_read_64B", 1.0, True, warmup=WARMUP),
    Pattern("seq_write_64B", 0.0, True, warmup=WARMUP),
    Pattern("rand_read_64B", 1.0, False, warmup=WARMUP),
    Pattern("rand_write_64B", 0.0, False, warmup=WARMUP),
    Pattern("seq_read_4KiB_bursts", 1.0, True, beats=64, warmup=WARMUP, max_outstanding=8),
]

#: Targets (fraction of peak) from the issue: what DDR4-3200 controllers reach.
TARGETS = {"seq_read_64B": 0.85, "rand_read_64B": 0.35}


@cocotb.test()
async def bench_dram(dut) -> None:
    """Run every pattern on a freshly reset controller and write the figures as JSON."""
    start_clock(dut)
    gen = AxiTraffic(dut)
    names = os.environ.get("BENCH_PATTERNS", "")
    out = []
    for p in PATTERNS:
        if names and p.name not in names.split(","):
            continue
        await reset(dut, hold=4, settle=2)
        st = await gen.run(p)
        s = st.summary(gen.line, dram.CTRL_CLK_NS)
        dut._log.info("%s: %s", p.name, s)
        out.append(s)
    Path(os.environ["BENCH_OUT"]).write_text(json.dumps(out, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--patterns", default="", help="comma-separated subset of patterns")
    ap.add_argument("--out", default=str(RESULTS / "dram.json"))
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / "dram.raw.json"
    raw.unlink(missing_ok=True)
    b = simulator.build("verilator", "dram_ctrl", simulator.rtl_sources("dram_ctrl"))
    simulator.test(b, "bench.dram_bench", run_name="bench",
                extra_env={"BENCH_OUT": str(raw), "BENCH_PATTERNS": args.patterns,
                           "COCOTB_LOG_LEVEL": "WARNING"})
    rows = json.loads(raw.read_text())
    missed = []
    print(f"\nDRAM controller, DDR4-3200 timings, 512-bit AXI at {1000 / dram.CTRL_CLK_NS:.0f} MHz"
          f" (peak {64 / dram.CTRL_CLK_NS:.1f} GB/s), 1 GiB, Verilator")
    print(f"{'pattern':24} {'bandwidth':>10} {'GB/s':>7} {'lat mean':>9} {'lat p99':>8} "
          f"{'row hits':>9} {'REFs':>5}  target")
    for r in rows:
        tgt = TARGETS.get(r["pattern"])
        verdict = ""
        if tgt is not None:
            ok = r["bandwidth_fraction"] >= tgt
            verdict = f">= {tgt:.0%} {'met' if ok else 'MISSED'}"
            r["target_fraction"] = tgt
            r["target_met"] = ok
            if not ok:
                missed.append(r["pattern"])
        print(f"{r['pattern']:24} {r['bandwidth_fraction']:>9.1%} {r['bandwidth_GBps']:>7.2f} "
              f"{r['latency_mean_ns']:>7.1f}ns {r['latency_p99_ns']:>6.1f}ns "
              f"{r['row_hit_rate']:>8.1%} {r['refreshes']:>5}  {verdict}")
    Path(args.out).write_text(json.dumps({"benchmark": "dram_ctrl", "results": rows}, indent=2))
    print(f"\nwrote {os.path.relpath(args.out)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""DRAM controller benchmark: bandwidth, latency and row-hit rate of the product configuration.

``python -m bench.dram_bench`` (``make bench``) builds dram_ctrl with its defaults (1 GiB,
DDR4-3200 timings) under Verilator, drives it with :mod:`tb.dram_ctrl.traffic`, prints a summary
and writes bench/results/dram.json. Bandwidth is a fraction of the data bus peak (one 64-byte
beat per controller cycle = 25.6 GB/s at 400 MHz). Patterns:

- sequential and random 64-byte reads and writes, sequential 4 KiB read bursts;
- random 64-byte reads and writes mixed 2:1;
- a 1 MiB copy in 4 KiB chunks, 8 or 32 chunks in flight, as the DMA engine's card-to-card
  channel does it (a read burst per chunk on its own ID, then a write burst, all writes on one
  ID), with four destinations: the same banks as the source under the controller's address
  mapping (every destination chunk in the banks of its source chunk: the hardest case), the
  region right after the source (the same banks under a plain bank-row-column mapping, which is
  what a compaction that slides tensors down by a multiple of 128 KiB looks like), a
  destination in other banks than its source, and one 32 KiB further than the region right
  after the source (one bank over under the plain mapping: other banks for a controller without
  the XOR map, partly the same banks with it).

Each pattern runs on a freshly reset controller and is measured after refresh has reached steady
state; the command trace gives activates and read/write turnarounds per 1000 bursts.

Then (unless ``--no-demo``) the end-to-end demo of ``make sim`` (tb/demo.py, waves off) runs on the
RTL card, and its timeline gives the memory manager's compaction time: the card time of every
card-to-card copy the manager issued.
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

MIB = 1 << 20
#: The copies' source region, their size and chunk.
COPY_SRC = 64 * MIB
COPY_BYTES = MIB
CHUNK = 4096
LINE = 64


def chunk_banks(geom: dram.DramGeometry, addr: int) -> set[tuple[int, int]]:
    """The (bank group, bank) pairs the lines of the chunk at ``addr`` map to."""
    return {geom.decode(a)[:2] for a in range(addr, addr + CHUNK, LINE)}


def copy_destinations(geom: dram.DramGeometry) -> dict[str, int]:
    """Destinations of the copy variants under the controller's address mapping."""
    chunks = range(0, COPY_BYTES, CHUNK)
    src = [chunk_banks(geom, COPY_SRC + c) for c in chunks]

    def search(start: int, step: int, ok) -> int:
        dst = start
        while not all(ok(src[i], chunk_banks(geom, dst + c)) for i, c in enumerate(chunks)):
            dst += step
            if dst + COPY_BYTES > geom.mem_size:
                raise RuntimeError("no copy destination of that kind in the memory")
        return dst

    return {
        "same_banks": search(COPY_SRC + COPY_BYTES, CHUNK, lambda a, b: a == b),
        "adjacent": COPY_SRC + COPY_BYTES,
        "other_banks": search(COPY_SRC + COPY_BYTES + 32 * 1024, CHUNK,
                              lambda a, b: not (a & b)),
        "one_bank_over": COPY_SRC + COPY_BYTES + 32 * 1024,
    }


def patterns() -> list[Pattern]:
    geom = dram.DramGeometry(1 << 30)
    out = [
        Pattern("seq_read_64B", 1.0, True, warmup=WARMUP),
        Pattern("seq_write_64B", 0.0, True, warmup=WARMUP),
        Pattern("rand_read_64B", 1.0, False, warmup=WARMUP),
        Pattern("rand_write_64B", 0.0, False, warmup=WARMUP),
        Pattern("seq_read_4KiB_bursts", 1.0, True, beats=64, warmup=WARMUP, max_outstanding=8),
        Pattern("rand_2to1_64B", 2 / 3, False, warmup=WARMUP),
    ]
    for kind, dst in copy_destinations(geom).items():
        for n in (8, 32):
            out.append(Pattern(f"copy_1MiB_x{n}_{kind}", 0.5, True, warmup=WARMUP,
                               span=COPY_BYTES, copy_dst=dst, chunk=CHUNK, in_flight=n))
    return out


PATTERNS = patterns()

#: Targets (fraction of peak): what DDR4-3200 controllers reach (issues 1 and 14), and for
#: sequential and random reads no worse than before issue 14's scheduler.
TARGETS = {"seq_read_64B": 0.85, "rand_read_64B": 0.35, "rand_2to1_64B": 0.40,
           **{p.name: 0.75 for p in PATTERNS if p.copy_dst is not None}}


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
        st = await gen.run(p, base=COPY_SRC if p.copy_dst is not None else 0)
        s = st.summary(gen.line, dram.CTRL_CLK_NS)
        if p.copy_dst is not None:
            s["copy_src"], s["copy_dst"] = COPY_SRC, p.copy_dst
        dut._log.info("%s: %s", p.name, s)
        out.append(s)
    Path(os.environ["BENCH_OUT"]).write_text(json.dumps(out, indent=2))


def demo_compaction() -> dict[str, float | int]:
    """Run the demo on the RTL card and sum its card-to-card copies from the timeline."""
    from tb.demo import DemoOptions, run_demo

    out = simulator.BUILD_ROOT / "dram_bench_demo"
    rc = run_demo(DemoOptions(waves=False, out=out, quiet=True))
    trace = json.loads((out / "rtl_trace.json").read_text())["traceEvents"]
    c2c = [e for e in trace if e.get("cat") == "dma" and e.get("name") == "C2C"]
    total_us = max((e["ts"] + e["dur"] for e in trace if "dur" in e), default=0.0)
    return {"demo_passed": rc == 0, "compaction_copies": len(c2c),
            "compaction_bytes": sum(int(e["args"].get("bytes", 0)) for e in c2c),
            "compaction_us": round(sum(e["dur"] for e in c2c), 3),
            "demo_card_us": round(total_us, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--patterns", default="", help="comma-separated subset of patterns")
    ap.add_argument("--out", default=str(RESULTS / "dram.json"))
    ap.add_argument("--no-demo", action="store_true",
                    help="skip the demo's compaction time")
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
    print(f"{'pattern':26} {'bandwidth':>10} {'GB/s':>7} {'lat mean':>9} {'lat p99':>8} "
          f"{'row hits':>9} {'ACT/1k':>7} {'R/W/1k':>7} {'REFs':>5}  target")
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
        print(f"{r['pattern']:26} {r['bandwidth_fraction']:>9.1%} {r['bandwidth_GBps']:>7.2f} "
              f"{r['latency_mean_ns']:>7.1f}ns {r['latency_p99_ns']:>6.1f}ns "
              f"{r['row_hit_rate']:>8.1%} {r.get('activates_per_1000_bursts', 0):>7.1f} "
              f"{r.get('rw_switches_per_1000_bursts', 0):>7.1f} {r['refreshes']:>5}  {verdict}")
    out: dict = {"benchmark": "dram_ctrl", "results": rows}
    if not args.no_demo:
        d = demo_compaction()
        out["demo"] = d
        print(f"\ndemo (make sim) on the RTL card: {d['compaction_copies']} compaction copies, "
              f"{d['compaction_bytes']:,} bytes in {d['compaction_us']:.2f} us of card time "
              f"(demo {d['demo_card_us']:.0f} us){'' if d['demo_passed'] else '; demo FAILED'}")
        if not d["demo_passed"]:
            missed.append("demo")
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"\nwrote {os.path.relpath(args.out)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``make sim``: the project's main run. Today: the card-memory demo.

Builds dram_ctrl (product size under Verilator; a smaller card under Icarus, whose 4-state storage
would need ~10 GiB for 1 GiB), drives a mixed pattern of sequential bursts and random 64-byte
reads and writes through it, prints bandwidth and latency, and writes an FST waveform with a
GTKWave save file showing the AXI channels and the DRAM command trace (``make waves`` opens it).

Options (environment or flags): SIM=verilator|icarus, CARD_MEM=<bytes, K/M/G suffix allowed>,
CYCLES=<measured cycles>.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from pyhost.spec import dram
from tb.common import runner, waves
from tb.dram_ctrl.traffic import AxiTraffic, Pattern

ROOT = Path(__file__).resolve().parents[1]


def parse_size(text: str) -> int:
    """'1G', '64M', '1048576' -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        n = int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise SystemExit(
            f"CARD_MEM={text!r}: expected a byte count such as 1G, 64M or 1048576") from None
    if n <= 0 or n & (n - 1):
        raise SystemExit(f"CARD_MEM={text!r}: the card memory size must be a power of two")
    return n


@cocotb.test()
async def card_memory_demo(dut) -> None:
    """Mixed traffic through the DRAM controller; figures written as JSON."""
    cocotb.start_soon(Clock(dut.clk, dram.CTRL_CLK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    gen = AxiTraffic(dut)
    mem = int(os.environ["DEMO_MEM_SIZE"])
    p = Pattern("mixed", read_fraction=0.67, sequential=True, beats=4, mix_random=0.3,
                cycles=int(os.environ.get("DEMO_CYCLES", "20000")), warmup=200,
                span=min(mem, 1 << 26))
    st = await gen.run(p)
    Path(os.environ["DEMO_OUT"]).write_text(
        json.dumps(st.summary(gen.line, dram.CTRL_CLK_NS) | {"mem_size": mem}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", default=os.environ.get("SIM") or "verilator",
                    choices=runner.SIMULATORS)
    ap.add_argument("--card-mem", default=os.environ.get("CARD_MEM") or "")
    ap.add_argument("--cycles", type=int, default=int(os.environ.get("CYCLES") or 40000))
    args = ap.parse_args(argv)
    default_mem = (1 << 30) if args.sim == "verilator" else (16 << 20)
    mem = parse_size(args.card_mem) if args.card_mem else default_mem
    params = {} if mem == 1 << 30 else {"MEM_SIZE": f"64'd{mem}"}
    print(f"make sim: card memory demo on {args.sim}, {mem >> 20} MiB card memory, "
          f"{args.cycles} measured cycles")
    try:
        b = runner.build(args.sim, "dram_ctrl", runner.rtl_sources("dram_ctrl"), params,
                         waves=True)
    except runner.SimulatorMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = b.build_dir / "demo.json"
    out.unlink(missing_ok=True)
    res = runner.test(b, "tb.sim", run_name="sim",
                      extra_env={"DEMO_OUT": str(out), "DEMO_MEM_SIZE": str(mem),
                                 "DEMO_CYCLES": str(args.cycles), "COCOTB_LOG_LEVEL": "WARNING"})
    r = json.loads(out.read_text())
    clk = dram.CTRL_CLK_NS
    print(f"\nmixed reads and writes (4-beat sequential bursts, 30% random 64-byte requests), "
          f"{r['cycles']} cycles at {1000 / clk:.0f} MHz")
    print(f"  bandwidth       {r['bandwidth_fraction']:.1%} of peak, {r['bandwidth_GBps']:.2f} GB/s"
          f" ({r['read_beats']} read + {r['write_beats']} write beats of 64 B)")
    print(f"  read latency    mean {r['read_latency_mean_ns']:.1f} ns, "
          f"p99 {r['read_latency_p99_ns']:.1f} ns")
    print(f"  write latency   mean {r['write_latency_mean_ns']:.1f} ns, "
          f"p99 {r['write_latency_p99_ns']:.1f} ns")
    print(f"  row hit rate    {r['row_hit_rate']:.1%}, {r['refreshes']} refreshes, "
          f"{r['refresh_stall_cycles']} cycles waiting on refresh")
    if res.waves is None:
        print("error: the simulator wrote no waveform", file=sys.stderr)
        return 1
    gtkw = waves.save_file_for(res.waves)
    print(f"\nwaveform      {os.path.relpath(res.waves)}")
    print(f"GTKWave save  {os.path.relpath(gtkw)}   (open both with `make waves`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make sim``: the project's main run: the end-to-end demo (tb/demo.py).

An ONNX CNN built by compiler.zoo with fixed seeds (convolutions, ReLU, a residual add, pooling,
a fully connected layer and a Softmax the accelerator does not run) is compiled with the
accelerator plugin and run on the RTL card under Verilator with a card memory small enough that
the memory manager must evict; the summary compares it with onnxruntime and with the functional
card, and the run leaves an FST with its GTKWave save file and a Perfetto timeline.

``MODEL=minilm`` runs the real all-MiniLM-L6-v2 sentence encoder (from its pinned PyPI package)
on a fixed sentence of SEQ tokens (default 128) instead, calibrated on 32 other sentences,
and prints the sentence embedding's cosine against onnxruntime fp32; ``MODEL=bert`` the small
encoder compiler.zoo builds.

Options (environment or flags): MODEL=demo|minilm|bert|<light model>|<file.onnx>,
SIM=verilator|icarus,
CARD_MEM=<bytes, K/M/G suffix>, BACKEND=rtl|model, IMAGES=<n>, LINK=pcie|axi (the RTL card's
host link: the PCIe endpoint behind the hard IP model and a root complex, or the AXI fast mode),
WAVES=1|all|0 (1: an FST of the signals the GTKWave save file shows, nearly free under
Verilator; all: every signal of the design, about half the speed; 0: no FST), WAVE_SCOPES=
"<scope> ..." (with WAVES=1: more scopes recorded, each with everything below it, e.g.
card_top_pcie.core.accel; Icarus records the whole design either way). Every value, whether
a flag or a variable (``make sim SIM=...`` or the environment), is checked before anything is
built (`check_options`): an unknown or out-of-range value is a one-line error and exit status 2,
never run as something else.

``DEMO=card`` runs the earlier hardware demos instead:
1. Builds dram_ctrl (product size under Verilator; a smaller card under Icarus, whose 4-state
   storage would need ~10 GiB for 1 GiB), drives a mixed pattern of sequential bursts and random
   64-byte reads and writes through it, prints bandwidth and latency, and writes an FST waveform
   with a GTKWave save file showing the AXI channels and the DRAM command trace.
2. Builds the card (card_top: registers, DMA engine, interconnect, DRAM) and runs the real PCIe
   driver on it: 1 MiB host-to-card, then card-to-host, data checked, throughput printed, with
   the DMA traffic in a second FST. ``make waves`` opens the newest FST with its save file.

   Options: SIM, CARD_MEM, CYCLES=<measured cycles>.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cocotb
import numpy as np

from pyhost.spec import dram
from tb.common import simulator, waves
from tb.common.clocking import reset, start_clock
from tb.common.host_memory_axi import HostMemoryConfig
from tb.dram_ctrl.traffic import AxiTraffic, Pattern

ROOT = Path(__file__).resolve().parents[1]


#: The card's memory: the product card has 1 GiB (the RTL's storage and ModelCard's array are
#: that large at most), in whole 4 KiB pages.
MAX_CARD_MEM = 1 << 30
#: Icarus keeps four-state storage (about 10 bytes per card byte): a larger card would not fit
#: the machine.
MAX_ICARUS_MEM = 256 << 20
MAX_IMAGES = 1000
MAX_CYCLES = 1 << 30


class UsageError(Exception):
    """A make sim value that is not valid (exit status 2)."""


def parse_size(text: str, what: str = "CARD_MEM") -> int:
    """'1G', '64M', '80K', '1048576' -> bytes; a positive multiple of 4 KiB up to 1 GiB."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    if not digits.isdigit():
        raise UsageError(f"{what}={text!r}: expected a byte count such as 80K, 64M, 1G or "
                         "1048576")
    n = int(digits) * mult
    if n <= 0 or n % 4096:
        raise UsageError(f"{what}={text!r}: the card memory size must be a positive multiple "
                         "of 4 KiB")
    if n > MAX_CARD_MEM:
        raise UsageError(f"{what}={text!r}: the card has at most 1 GiB of memory (CARD_MEM=1G)")
    return n


def _count(text: str, what: str, hi: int) -> int:
    t = text.strip()
    if not t.isdigit() or not 1 <= int(t) <= hi:
        raise UsageError(f"{what}={text!r}: expected a whole number from 1 to {hi}")
    return int(t)


def _choice(text: str, what: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise UsageError(f"{what}={text!r} is not one of {', '.join(choices)}; set {what}="
                         f"{choices[0]} (the default) or another of them")
    return text


def check_options(args: argparse.Namespace) -> argparse.Namespace:
    """Every make sim value checked and converted in one place (flags and variables alike):
    DEMO, SIM, BACKEND, LINK, WAVES (1, all or 0, default 1) from their lists, WAVE_SCOPES
    scope names under the top, IMAGES and CYCLES whole
    numbers in range, CARD_MEM a size (`parse_size`), MODEL a non-empty name. UsageError names
    the first bad one."""
    args.demo = _choice(args.demo, "DEMO", ("e2e", "card"))
    args.sim = _choice(args.sim, "SIM", tuple(simulator.SIMULATORS))
    args.backend = _choice(args.backend, "BACKEND", ("rtl", "model"))
    args.link = _choice(args.link, "LINK", ("pcie", "axi"))
    waves = str(getattr(args, "waves", "1") or ("0" if args.model == "minilm" else "1"))
    waves = _choice(waves, "WAVES", ("1", "all", "0"))
    args.waves = waves != "0"
    extra = tuple(str(getattr(args, "wave_scopes", "") or "").replace(",", " ").split())
    if extra and waves != "1":
        raise UsageError(f"WAVE_SCOPES={' '.join(extra)!r} needs WAVES=1 (WAVES={waves} records "
                         + ("every signal already)" if waves == "all" else "no waveform)"))
    from tb.demo import demo_top
    try:
        simulator.wave_control(demo_top(args.link), [(n, None) for n in extra])
    except ValueError as e:
        raise UsageError(f"WAVE_SCOPES: {e}") from None
    args.wave_scopes = None if waves == "all" else extra
    args.seq = _count(str(getattr(args, "seq", "128")), "SEQ", 512)
    if args.seq % 8:
        raise UsageError(f"SEQ={args.seq}: a multiple of 8 tokens (the accelerator's blocks)")
    args.images = _count(str(args.images), "IMAGES", MAX_IMAGES)
    args.cycles = _count(str(args.cycles), "CYCLES", MAX_CYCLES)
    args.card_mem = parse_size(args.card_mem) if args.card_mem else None
    if args.sim == "icarus" and (args.card_mem or 0) > MAX_ICARUS_MEM:
        raise UsageError(f"CARD_MEM={args.card_mem >> 20}M with SIM=icarus: Icarus stores about "
                         "10 bytes per card byte; give at most CARD_MEM=256M, or use "
                         "SIM=verilator")
    if not args.model.strip() or "\x00" in args.model:
        raise UsageError(f"MODEL={args.model!r}: give demo, a light model name or an .onnx file")
    return args


@cocotb.test()
async def card_memory_demo(dut) -> None:
    """Mixed traffic through the DRAM controller; figures written as JSON."""
    start_clock(dut)
    await reset(dut, hold=4, settle=2)
    gen = AxiTraffic(dut)
    mem = int(os.environ["DEMO_MEM_SIZE"])
    p = Pattern("mixed", read_fraction=0.67, sequential=True, beats=4, mix_random=0.3,
                cycles=int(os.environ.get("DEMO_CYCLES", "20000")), warmup=200,
                span=min(mem, 1 << 26))
    st = await gen.run(p)
    Path(os.environ["DEMO_OUT"]).write_text(
        json.dumps(st.summary(gen.line, dram.CTRL_CLK_NS) | {"mem_size": mem}))


ROUND_TRIP = 1 << 20


def _round_trip(card) -> dict[str, float | int]:
    """Blocking host program: 1 MiB to the card and back through the driver."""
    from pyhost.driver import PcieDriver

    drv = PcieDriver(card, timeout_s=1000)
    src = card.host.alloc(ROUND_TRIP)
    dst = card.host.alloc(ROUND_TRIP)
    src.view()[:] = np.random.default_rng(1).integers(0, 256, ROUND_TRIP, dtype=np.uint8)
    c0 = card.cycles()
    drv.write_data(src.address, ROUND_TRIP, 0x1000)
    c1 = card.cycles()
    drv.read_data(0x1000, ROUND_TRIP, dst.address)
    c2 = card.cycles()
    ok = dst.read() == src.read()
    return {"ok": ok, "h2c_cycles": c1 - c0, "c2h_cycles": c2 - c1,
            "descriptors": drv.stats.descriptors, "interrupts": drv.stats.interrupts}


@cocotb.test()
async def card_round_trip(dut) -> None:
    """The driver moves 1 MiB host -> card -> host on the RTL card; figures written as JSON."""
    from cocotb.task import bridge

    from pyhost.backend import HostMemory
    from tb.common.rtl_card import RtlCard

    start_clock(dut)
    card = RtlCard(dut, HostMemory(4 << 20), HostMemoryConfig(read_latency=200))
    await reset(dut)
    r = await bridge(_round_trip)(card)
    Path(os.environ["DEMO_OUT"]).write_text(json.dumps(r))
    assert r["ok"], "data read back from the card differs from what was written"


def card_demo(sim: str, mem: int) -> int:
    params = {"MEM_SIZE": f"64'd{mem}"}
    sources = simulator.card_sources()
    b = simulator.build(sim, "card_top", sources, params, waves=True)
    out = b.build_dir / "demo.json"
    out.unlink(missing_ok=True)
    res = simulator.test(b, "tb.sim", testcase="card_round_trip", run_name="sim",
                      extra_env={"DEMO_OUT": str(out), "COCOTB_LOG_LEVEL": "WARNING"})
    r = json.loads(out.read_text())
    peak = 64 / dram.CTRL_CLK_NS
    for d in ("h2c", "c2h"):
        frac = ROUND_TRIP / (r[f"{d}_cycles"] * 64)
        print(f"  {d.upper()} 1 MiB      {r[f'{d}_cycles']} cycles, {frac:.1%} of the host port "
              f"peak ({frac * peak:.2f} GB/s), host read latency 500 ns")
    print(f"  data            {'identical' if r['ok'] else 'DIFFERENT'} after the round trip; "
          f"{r['descriptors']} descriptors, {r['interrupts']} interrupts")
    if not _report_waves(res, "(`make waves` opens the newest FST)"):
        return 1
    return 0 if r["ok"] else 1


def _report_waves(res: simulator.RunResult, note: str = "") -> bool:
    """Print the run's FST and its GTKWave save file; False when the simulator wrote none."""
    if res.waves is None:
        print("error: the simulator wrote no waveform", file=sys.stderr)
        return False
    gtkw = waves.save_file_for(res.waves)
    print(f"\nwaveform      {os.path.relpath(res.waves)}")
    print(f"GTKWave save  {os.path.relpath(gtkw)}   {note}".rstrip())
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", default=os.environ.get("DEMO") or "e2e")
    ap.add_argument("--model", default=os.environ.get("MODEL") or "demo")
    ap.add_argument("--sim", default=os.environ.get("SIM") or "verilator")
    ap.add_argument("--card-mem", default=os.environ.get("CARD_MEM") or "")
    ap.add_argument("--backend", default=os.environ.get("BACKEND") or "rtl")
    ap.add_argument("--link", default=os.environ.get("LINK") or "pcie")
    ap.add_argument("--images", default=os.environ.get("IMAGES") or "2")
    ap.add_argument("--cycles", default=os.environ.get("CYCLES") or "40000")
    ap.add_argument("--waves", default=os.environ.get("WAVES") or "",
                    help="write the FST: 1 (default; for MODEL=minilm 0: its 30 M cycles would "
                         "make a file of many GB) the signals the GTKWave save file shows, all "
                         "every signal (about half the speed), 0 none")
    ap.add_argument("--wave-scopes", default=os.environ.get("WAVE_SCOPES") or "",
                    help="with WAVES=1, more scopes the FST records (space- or comma-separated "
                         "hierarchical names, each with everything below it)")
    ap.add_argument("--seq", default=os.environ.get("SEQ") or "128",
                    help="tokens of the sentence MODEL=minilm runs (8 to 512, a multiple of 8)")
    try:
        args = check_options(ap.parse_args(argv))
    except UsageError as e:
        print(f"make sim: error: {e}", file=sys.stderr)
        return 2
    if args.demo == "e2e":
        return e2e(args)
    return card_demos(args)


def e2e(args: argparse.Namespace) -> int:
    from tb.demo import ENCODERS, DemoError, DemoOptions, run_demo

    # an encoder runs one sentence
    images = 1 if args.model in ENCODERS else args.images
    opts = DemoOptions(model=args.model, sim=args.sim, backend=args.backend,
                       images=images, link=args.link, waves=args.waves, seq=args.seq,
                       wave_scopes=args.wave_scopes)
    if args.card_mem:
        opts.card_mem = args.card_mem
    elif args.model != "demo":
        opts.card_mem = 64 << 20
    if args.model != "demo":
        opts.max_layers = None
    print(f"make sim: {args.model} end to end on the {args.backend.upper()} card"
          + (f" ({args.sim})" if args.backend == "rtl" else "")
          + f", {opts.card_mem >> 10} KiB card memory, "
          + (f"one sentence of {opts.seq} tokens" if args.model == "minilm"
             else f"{opts.images} image(s)"))
    try:
        return run_demo(opts)
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except simulator.SimulatorMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def card_demos(args: argparse.Namespace) -> int:
    default_mem = (1 << 30) if args.sim == "verilator" else (16 << 20)
    mem = args.card_mem or default_mem
    params = {} if mem == 1 << 30 else {"MEM_SIZE": f"64'd{mem}"}
    print(f"make sim: card memory demo on {args.sim}, {mem >> 20} MiB card memory, "
          f"{args.cycles} measured cycles")
    try:
        b = simulator.build(args.sim, "dram_ctrl", simulator.rtl_sources("dram_ctrl"), params,
                         waves=True)
    except simulator.SimulatorMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = b.build_dir / "demo.json"
    out.unlink(missing_ok=True)
    res = simulator.test(b, "tb.sim", testcase="card_memory_demo", run_name="sim",
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
    if not _report_waves(res):
        return 1
    card_mem = mem if args.card_mem else 64 << 20
    print(f"\nmake sim: PCIe driver round trip on the RTL card ({args.sim}, "
          f"{card_mem >> 20} MiB card memory)")
    return card_demo(args.sim, card_mem)


if __name__ == "__main__":
    sys.exit(main())

"""PCIe DMA benchmark: host-to-card and card-to-host throughput over the PCIe link, against the
link's TLP bound.

``python -m bench pcie`` builds card_top_pcie (64 MiB card memory, lean -O3 Verilator build) and
runs the real driver on it through RtlCard(link="pcie"): cocotbext-pcie's UltraScale+ hard IP
model, Gen3 x16, and the root complex's default host (tb/common/pcie_link.py HostLinkConfig, as
make sim has it): reads answered after 500 ns plus up to 200 ns of spread per read, many in
flight, completions out of order across tags and interleaved, split at the RCB (64 bytes) into
pieces of at most the max payload size. The run counts the reads whose first completion
overtook an older read's and the completions sent between two of another read; a run in which
no completion was reordered fails.
For each link setting (MPS / MRRS in Device Control) and 4 KiB .. 4 MiB transfers:

- one transfer alone (doorbell to MSI-X, so the descriptor fetch and the first-data latency are
  in it) and streaming (transfers of that size back to back in one chain);
- as a fraction of the TLP bound of that direction:
      bound = R x P / (P + H + 8),  R = 8 GT/s x 128/130 x 16 lanes / 8 = 15.75 GB/s,
  P the payload per TLP (host-to-card: the completion size, min(MPS, the split); card-to-host:
  MPS), H the TLP header (12 bytes for a completion, 16 for a 64-bit memory write), 8 bytes of
  sequence number, LCRC and framing per TLP (what cocotbext-pcie's link charges);
- targets: at least 90 % of the bound for 64 KiB and up (streaming), and above XDMA's published
  Gen3 x16 figures (about 9.6 GB/s host-to-card and 12.2 GB/s card-to-host, Alveo U200).

``--straddle off`` runs card_top_pcie built without requester straddling (STRADDLE 0, the hard
IP configured alike: one TLP per run of beats on the 512-bit interface); the default is
pcie.STRADDLE (RQ two TLPs a beat, RC up to four).

``--sizes 64K,256K --settings 0`` runs a subset (the smallest form that gives one figure; the
streams stay ``STREAM_BYTES`` long unless ``--stream-bytes`` says otherwise).

Prints a summary and writes bench/results/pcie.json. The machine may be shared: the figures are
simulated time, not wall time, and do not depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.task import bridge
from cocotb.utils import get_sim_time

from bench import record
from pyhost.backend import HostMemory
from pyhost.driver import PcieDriver
from pyhost.spec import pcie
from tb.common import simulator
from tb.common.clocking import reset, start_clock
from tb.common.pcie_card import PcieOptions
from tb.common.pcie_link import HostLinkConfig
from tb.common.rtl_card import RtlCard

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CARD_MEM = 64 << 20
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
#: Streaming: transfers of one size back to back in one chain, this many bytes (at least two
#: transfers)
STREAM_BYTES = 2 << 20
TARGET = 0.90
XDMA_GBPS = {"H2C": 9.6, "C2H": 12.2}
#: (MPS, MRRS) the root complex sets in Device Control
SETTINGS = [(256, 512), (512, 4096)]
LINK_RATE = 8e9 * 128 / 130 * 16 / 8         # bytes/s, Gen3 x16, one direction
TLP_OVERHEAD = 8                             # sequence number, LCRC, framing


def bound(direction: str, mps: int, split: int = 0) -> float:
    """The direction's TLP bound in bytes/s (see the module doc)."""
    if direction == "H2C":
        p = min(mps, split) if split else mps
        return LINK_RATE * p / (p + 12 + TLP_OVERHEAD)
    return LINK_RATE * mps / (mps + 16 + TLP_OVERHEAD)


def _size(text: str) -> int:
    """A size with an optional K or M suffix (binary)."""
    t = text.strip().upper().rstrip("IB")
    mult = {"K": 1 << 10, "M": 1 << 20}.get(t[-1:], 1)
    return int(t.rstrip("KM")) * mult


def _ns() -> float:
    return get_sim_time("ps") / 1000


def _sizes() -> list[int]:
    return json.loads(os.environ.get("BENCH_SIZES", "null")) or SIZES


def _straddle() -> bool:
    return bool(int(os.environ.get("BENCH_STRADDLE", int(pcie.STRADDLE))))


def _stream_bytes() -> int:
    return int(os.environ.get("BENCH_STREAM_BYTES", STREAM_BYTES))


def _throughput(card: RtlCard) -> list[dict]:
    drv = PcieDriver(card, timeout_s=1000)
    host = card.host
    sizes = _sizes()
    span = 2 * max(max(sizes), _stream_bytes())
    src = host.alloc(span)
    dst = host.alloc(span)
    src.view()[:] = np.resize(np.arange(251, dtype=np.uint8), span)
    clock = bridge_time(card)
    rows = []
    for size in sizes:
        for direction in ("H2C", "C2H"):
            def one(n: int = size, d: str = direction) -> float:
                t0 = clock()
                if d == "H2C":
                    drv.write_data(src.address, n, 0)
                else:
                    drv.read_data(0, n, dst.address)
                return clock() - t0
            single = one()
            count = max(2, _stream_bytes() // size)
            t0 = clock()
            if direction == "H2C":
                drv.write_batch([(src.address + i * size, size, i * size) for i in range(count)])
            else:
                drv.read_batch([(i * size, size, dst.address + i * size) for i in range(count)])
            stream = clock() - t0
            if direction == "C2H":
                assert dst.read(0, count * size) == src.read(0, count * size), "C2H data differs"
            rows.append({"direction": direction, "size": size, "single_ns": round(single, 1),
                         "single_GBps": round(size / single, 3), "stream_transfers": count,
                         "stream_ns": round(stream, 1),
                         "stream_GBps": round(count * size / stream, 3)})
    drv.close()
    return rows


def bridge_time(card: RtlCard):
    """Simulated nanoseconds now, callable from the host thread."""
    from cocotb.task import resume

    async def now() -> float:
        return _ns()
    return lambda: resume(now)()


@cocotb.test()
@cocotb.parametrize(setting=list(range(len(SETTINGS))))
async def bench_throughput(dut, setting: int) -> None:
    """H2C and C2H throughput on the PCIe link at one MPS / MRRS setting."""
    mps, mrrs = SETTINGS[setting]
    start_clock(dut)
    opts = PcieOptions(mps=mps, mrrs=mrrs, host=HostLinkConfig(), straddle=_straddle())
    span = max(max(_sizes()), _stream_bytes())
    card = RtlCard(dut, HostMemory(4 * span + (16 << 20)), link="pcie", pcie=opts,
                   irq_timeout_ns=10**10)
    await reset(dut)
    info = await card.pcie.up()
    rows = await bridge(_throughput)(card)
    rc = card.pcie.link.rc
    dev = card.pcie.link.dev
    record(f"{mps}/{mrrs}", {"mps": mps, "mrrs": mrrs, "straddle": _straddle(),
                             "lspci": info, "rows": rows,
                             "host_reads": rc.reads, "completions": rc.completions,
                             "reordered": rc.reordered, "interleaved": rc.interleaved,
                             "max_reads_in_flight": rc.max_in_flight,
                             "rc_buffer_peak": list(dev.rx_peak),
                             "rc_buffer_overflows": dev.rx_overflows})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(RESULTS / "pcie.json"))
    ap.add_argument("--sizes", default="",
                    help="comma-separated transfer sizes (K/M suffix); default 4K..4M")
    ap.add_argument("--settings", default="",
                    help="comma-separated indices into SETTINGS " + str(SETTINGS))
    ap.add_argument("--stream-bytes", default="", help="bytes per streaming run (K/M suffix)")
    ap.add_argument("--straddle", choices=("on", "off"), default="on" if pcie.STRADDLE else "off",
                    help="requester straddling of card_top_pcie and the hard IP (default: "
                         "pcie.STRADDLE)")
    args = ap.parse_args(argv)
    straddle = args.straddle == "on"
    sizes = [_size(s) for s in args.sizes.split(",") if s] or SIZES
    settings = [int(s) for s in args.settings.split(",") if s] or list(range(len(SETTINGS)))
    if any(not 0 <= i < len(SETTINGS) for i in settings):
        ap.error(f"--settings: indices 0..{len(SETTINGS) - 1}")
    env = {"BENCH_SIZES": json.dumps(sizes), "BENCH_STRADDLE": str(int(straddle))}
    if args.stream_bytes:
        env["BENCH_STREAM_BYTES"] = str(_size(args.stream_bytes))
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / "pcie.raw.json"
    raw.unlink(missing_ok=True)
    b = simulator.card_build("verilator", {"MEM_SIZE": f"64'd{CARD_MEM}",
                                           **({} if straddle == pcie.STRADDLE
                                              else {"STRADDLE": int(straddle)})},
                             waves=False, top="card_top_pcie")
    # one simulator process per setting, side by side (the figures are simulated time)
    from concurrent.futures import ThreadPoolExecutor

    def run(i: int) -> dict:
        part = RESULTS / f"pcie.raw{i}.json"
        part.unlink(missing_ok=True)
        simulator.test(b, "bench.pcie_bench", testcase=f"bench_throughput/setting={i}",
                       run_name=f"bench{i}",
                       extra_env={"BENCH_OUT": str(part), "COCOTB_LOG_LEVEL": "WARNING", **env})
        return json.loads(part.read_text())
    with ThreadPoolExecutor(len(settings)) as pool:
        parts = list(pool.map(run, settings))
    raw.write_text(json.dumps({k: v for p in parts for k, v in p.items()}))
    r = json.loads(raw.read_text())
    missed = []
    host = HostLinkConfig()
    print(f"\nPCIe DMA, Gen3 x16 (link {LINK_RATE / 1e9:.2f} GB/s per direction), host read "
          f"latency {host.read_latency_ns} ns + up to {host.jitter_ns} ns, completions out of "
          f"order, RCB {host.rcb}, requester straddling {args.straddle}, Verilator")
    print("TLP bound = R x P / (P + H + 8): P payload per TLP (H2C: completion, at most MPS; "
          "C2H: MPS), H 12 (completion) / 16 (64-bit write)")
    out = {"benchmark": "pcie", "link_GBps": round(LINK_RATE / 1e9, 3), "target": TARGET,
           "straddle": straddle,
           "xdma_GBps": XDMA_GBPS, "settings": {}}
    for key, s in r.items():
        mps = s["mps"]
        print(f"\nMPS {s['mps']} / MRRS {s['mrrs']}: bound H2C {bound('H2C', mps) / 1e9:.2f} "
              f"GB/s, C2H {bound('C2H', mps) / 1e9:.2f} GB/s; {s['host_reads']} reads, "
              f"{s['reordered']} completed out of order, {s['interleaved']} of "
              f"{s['completions']} completions interleaved, up to {s['max_reads_in_flight']} "
              "reads in flight")
        if not s["reordered"]:
            missed.append(f"{key}: no completion out of order")
        print(f"{'dir':4} {'size':>7} {'alone':>12} {'streaming':>16}  target")
        for row in s["rows"]:
            bd = bound(row["direction"], mps)
            row["bound_GBps"] = round(bd / 1e9, 3)
            row["single_fraction"] = round(row["single_GBps"] * 1e9 / bd, 4)
            row["stream_fraction"] = round(row["stream_GBps"] * 1e9 / bd, 4)
            verdict = ""
            if row["size"] >= 64 << 10:
                ok = row["stream_fraction"] >= TARGET
                beat = row["stream_GBps"] > XDMA_GBPS[row["direction"]]
                row["target_met"] = ok
                row["above_xdma"] = beat
                verdict = (f">= {TARGET:.0%} {'met' if ok else 'MISSED'}, XDMA "
                           f"{XDMA_GBPS[row['direction']]} GB/s "
                           f"{'beaten' if beat else 'NOT beaten'}")
                if not ok or not beat:
                    missed.append(f"{key} {row['direction']} {row['size']}")
            print(f"{row['direction']:4} {row['size'] >> 10:>5}Ki {row['single_GBps']:>5.2f} "
                  f"({row['single_fraction']:>4.0%}) {row['stream_GBps']:>6.2f} GB/s "
                  f"({row['stream_fraction']:>5.1%})  {verdict}")
        out["settings"][key] = s
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"\nwrote {os.path.relpath(args.out)}")
    if missed:
        print("missed: " + ", ".join(missed))
    return 1 if missed else 0

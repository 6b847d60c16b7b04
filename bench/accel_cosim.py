"""cocotb side of the accelerator benchmark (bench/accel_bench.py): one job on card_top through
the real host software (PcieDriver on RtlCard), timed from the START write to the interrupt.

Each test reads a job directory written by bench/accel_bench.py (``$ACCEL_BENCH_WORK/<layer>``),
uploads the program (``accel_load_program``), constants, input and the output's fill pattern by
DMA, binds the slots and runs the program, then downloads card memory [0, span) and writes
cosim-<build>.json (counters, wall time and simulated cycles of the compute window, Python
wakeups in it) and cosim_mem-<build>.bin, <build> from ``$ACCEL_BENCH_BUILD`` (lean or full: the
model the runner built). The comparisons are made by bench/accel_bench.py.

Python wakeups are counted by wrapping ``GPITrigger._react``, the one entry from the simulator
into Python for every trigger (edges, timers, read-only phases); cocotb's clock is driven by the
GPI in C++ and does not enter Python.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cocotb
from cocotb._gpi_triggers import GPITrigger
from cocotb.task import bridge
from cocotb.triggers import Event, RisingEdge
from cocotb.utils import get_sim_time

from pyhost.backend import HostMemory
from pyhost.driver import PcieDriver
from pyhost.spec import dram, regs
from tb.common.clocking import reset, start_clock
from tb.common.rtl_card import RtlCard

CLK_PS = round(dram.CTRL_CLK_NS * 1000)
#: Simulated-time bound on the interrupt wait (a hung accelerator fails the test, not hangs it).
IRQ_TIMEOUT_NS = 50_000_000
#: The driver's timeout; RtlCard turns it into simulated time (bounded by IRQ_TIMEOUT_NS).
DRIVER_TIMEOUT_S = 1_000_000


class _Wakeups:
    """Counts the GPI triggers that enter Python while `active`, by trigger and signal."""

    def __init__(self) -> None:
        self.active = False
        self.total = 0
        self.kinds: Counter[str] = Counter()


_WAKE = _Wakeups()
_react = GPITrigger._react


def _counting_react(self: GPITrigger) -> None:
    if _WAKE.active:
        _WAKE.total += 1
        sig = getattr(self, "signal", None)
        _WAKE.kinds[type(self).__name__ + (f"({sig._name})" if sig is not None else "")] += 1
    _react(self)


GPITrigger._react = _counting_react  # type: ignore[method-assign]


class _Window:
    """The compute window: from the end of the START write to the interrupt's rising edge."""

    def __init__(self) -> None:
        self.wall = [0.0, 0.0]
        self.cpu = [0.0, 0.0]
        self.sim_ps = [0, 0]
        self.opened = False
        self.closed = Event()

    def open(self, dut) -> None:
        self.opened = True
        _WAKE.total = 0
        _WAKE.kinds.clear()
        self.sim_ps[0] = get_sim_time("ps")
        self.wall[0] = time.perf_counter()
        self.cpu[0] = time.process_time()
        _WAKE.active = True
        cocotb.start_soon(self._close(dut))

    async def _close(self, dut) -> None:
        await RisingEdge(dut.irq)
        self.wall[1] = time.perf_counter()
        self.cpu[1] = time.process_time()
        _WAKE.active = False
        self.sim_ps[1] = get_sim_time("ps")
        self.closed.set()

    def result(self) -> dict[str, Any]:
        wall = self.wall[1] - self.wall[0]
        cycles = round((self.sim_ps[1] - self.sim_ps[0]) / CLK_PS)
        cpu = self.cpu[1] - self.cpu[0]
        return {"window_cycles": cycles, "wall_s": round(wall, 4),
                "cycles_per_s": round(cycles / wall, 1), "cpu_s": round(cpu, 4),
                "cycles_per_cpu_s": round(cycles / cpu, 1), "wakeups": _WAKE.total,
                "wakeups_per_cycle": round(_WAKE.total / cycles, 4),
                "wakeup_kinds": dict(_WAKE.kinds.most_common())}


def _timed_start(card: RtlCard, window: _Window) -> None:
    """Open `window` when the write that sets ACC_CTRL.START has completed (B received)."""
    write = card._write
    ctrl = regs.offset("ACC_CTRL")
    start = next(f.mask for f in regs.BY_NAME["ACC_CTRL"].fields if f.name == "START")

    async def timed(offset: int, value: int) -> None:
        await write(offset, value)
        if offset == ctrl and value & start and not window.opened:
            window.open(card.dut)

    card._write = timed  # type: ignore[method-assign]


def _host(card: RtlCard, job: dict[str, Any], image: bytes) -> dict[str, Any]:
    """The host program: the same calls a runtime makes, blocking, in the bridge thread."""
    drv = PcieDriver(card, timeout_s=DRIVER_TIMEOUT_S)
    cfg = drv.accel_config()
    t0 = time.perf_counter()
    pa, pn = job["regions"]["program"]
    prog = drv.accel_load_program(image[pa:pa + pn], job["insn_base"])
    assert prog.count == job["insn_count"], (prog.count, job["insn_count"])
    uploads = []
    for name in ("consts", "input", "output"):          # output: the fill pattern
        a, n = job["regions"][name]
        buf = card.host.alloc(n)
        buf.write(image[a:a + n])
        uploads.append((buf, n, a))
    drv.write_batch(uploads)
    t_up = time.perf_counter() - t0
    drv.accel_bind({int(s): a for s, a in job["slots"].items()})
    res = drv.accel_run(prog)
    t1 = time.perf_counter()
    span = job["span"]
    back = card.host.alloc(span)
    drv.read_data(0, span, back)
    t_down = time.perf_counter() - t1
    return {"counters": res.counters, "mem": back.read(), "upload_wall_s": round(t_up, 3),
            "run_and_download_wall_s": round(t_down, 3), "cfg_n": cfg.n,
            "driver_mmio": drv.stats.mmio_reads + drv.stats.mmio_writes}


async def _bench(dut, name: str) -> None:
    d = Path(os.environ["ACCEL_BENCH_WORK"]) / name
    job = json.loads((d / "job.json").read_text())
    image = (d / "image.bin").read_bytes()
    clock = start_clock(dut)
    card = RtlCard(dut, HostMemory(4 * job["span"] + (16 << 20)), irq_timeout_ns=IRQ_TIMEOUT_NS)
    await reset(dut)
    window = _Window()
    _timed_start(card, window)
    out = await bridge(_host)(card, job, image)
    assert window.opened and window.closed.is_set(), "the compute window was not observed"
    assert out["cfg_n"] ** 2 == job["n2"], f"ACC_CFG_N {out['cfg_n']}, job built for " \
        f"N*N = {job['n2']}"
    tag = os.environ["ACCEL_BENCH_BUILD"]
    (d / f"cosim_mem-{tag}.bin").write_bytes(out.pop("mem"))
    (d / f"cosim-{tag}.json").write_text(json.dumps({**out, **window.result(), "clock": clock},
                                                    indent=2))


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def bench_gemm(dut) -> None:
    """The 256 x 256 x 256 GEMM job through the driver; timed from START to the interrupt."""
    await _bench(dut, "gemm")


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def bench_conv(dut) -> None:
    """The 3 x 3, 64 -> 64 convolution on 56 x 56 through the driver; timed like the GEMM."""
    await _bench(dut, "conv")

"""The memory manager on the RTL card: eviction, write-back and compaction, data checked end to end.

The card is built with a small memory (tests/rtl/test_card_memory_manager.py: make sim's 80 KiB)
so that tensors worth 1.6x the card oversubscribe it. The host
program `manager_program` is plain blocking Python that uses only the PcieDriver; here it runs in
a thread started with ``cocotb.task.bridge`` (through TB.host of the card_top bench), and
tests/memory runs the same function on the functional card.
"""

from __future__ import annotations

import cocotb
import numpy as np

from pyhost.backend import HostBuffer
from pyhost.driver import PcieDriver
from pyhost.memory import MemoryManager
from tb.card_top.test_card_top import TB


def _check_on_card(drv: PcieDriver, scratch: HostBuffer, addr: int, want: np.ndarray,
                   what: str) -> None:
    """Read card memory with the driver itself (not through the manager) and compare."""
    drv.read_data(addr, want.size, scratch)
    got = scratch.view(0, want.size)
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise AssertionError(f"{what}: card byte {addr + bad:#x} reads {got[bad]:#04x}, "
                             f"expected {want[bad]:#04x}")


def manager_program(drv: PcieDriver, policy: str = "gds", seed: int = 1) -> dict[str, int]:
    """Tensors worth ~1.6x the card: uploads, kernel updates (written with the driver, like an
    accelerator would), evictions with write-backs, a fragmented card that must be compacted,
    and every byte read back. Returns the manager's counters."""
    rng = np.random.default_rng(seed)
    mgr = MemoryManager(drv, policy=policy)
    cap = mgr.capacity
    scratch = drv.host.alloc(cap)
    expected: dict[int, np.ndarray] = {}

    def kernel(t, addr: int) -> None:
        """Stand-in for the accelerator: new contents at the tensor's card address."""
        new = rng.integers(0, 256, t.size, dtype=np.uint8)
        scratch.write(new)
        drv.write_data(scratch, t.size, addr)
        mgr.tensor_updated(t)
        expected[t.id] = new

    try:
        # six odd-sized tensors of ~cap/4 each (1.6x the card), and a few small ones
        big = [mgr.allocate_tensor(cap // 4 - 1000 + 333 * i) for i in range(6)]
        small = [mgr.allocate_tensor(64 + 40 * i) for i in range(6)]
        for t in big + small:
            x = rng.integers(0, 256, t.size, dtype=np.uint8)
            mgr.write_tensor(t, t.size, x)
            expected[t.id] = x
        # a sliding window of operations: (input, weight-like small, output updated)
        for i in range(6):
            a, out, w = big[i], big[(i + 1) % 6], small[i]
            addrs = mgr.need_in_device(a, w, out)
            if i in (0, 5):   # step 5: an input the kernel computed at step 4
                _check_on_card(drv, scratch, addrs[0], expected[a.id], f"step {i}: input")
            _check_on_card(drv, scratch, addrs[1], expected[w.id], f"step {i}: weight")
            kernel(out, addrs[2])
        assert mgr.stats.evictions > 0 and mgr.stats.writebacks > 0, mgr.stats
        # every tensor reads back what was last written or computed; then all are freed
        for t in big + small:
            out = np.empty(t.size, np.uint8)
            mgr.read_tensor(t, t.size, out)
            if not np.array_equal(out, expected[t.id]):
                bad = int(np.flatnonzero(out != expected[t.id])[0])
                raise AssertionError(f"{t!r}: byte {bad} reads {out[bad]:#04x}, expected "
                                     f"{expected[t.id][bad]:#04x}")
            mgr.free_tensor(t)
        # fragmentation: four quarters fill the card; freeing the 2nd and 4th leaves half the
        # card free in two holes, too small for a half-card tensor: the manager must compact
        # (a card-to-card move of the 3rd quarter, dirty at that point) rather than fail
        q = [mgr.allocate_tensor(cap // 4 - 64) for _ in range(4)]
        for t in q:
            x = rng.integers(0, 256, t.size, dtype=np.uint8)
            mgr.write_tensor(t, t.size, x)
            expected[t.id] = x
        addrs = mgr.need_in_device(*q)
        kernel(q[2], addrs[2])
        mgr.free_tensor(q[1])
        mgr.free_tensor(q[3])
        large = mgr.allocate_tensor(cap // 2 + 64)
        x = rng.integers(0, 256, large.size, dtype=np.uint8)
        mgr.write_tensor(large, large.size, x)
        expected[large.id] = x
        compactions, evictions = mgr.stats.compactions, mgr.stats.evictions
        (addr,) = mgr.need_in_device(large)
        assert mgr.stats.compactions == compactions + 1, "the fragmented card was not compacted"
        assert mgr.stats.evictions == evictions, "compaction should have made room, not eviction"
        _check_on_card(drv, scratch, addr, x, "after compaction: the new tensor")
        for t in (q[0], q[2]):
            a = mgr.address(t)
            assert a is not None, f"{t!r} left the card"
            _check_on_card(drv, scratch, a, expected[t.id], f"after compaction: {t!r}")
        mgr.check()
        for t in (q[0], q[2], large):
            out = np.empty(t.size, np.uint8)
            mgr.read_tensor(t, t.size, out)
            assert np.array_equal(out, expected[t.id]), f"{t!r} read back wrong bytes"
        s = mgr.transport.stats
        return {"h2c": s.bytes_h2c, "c2h": s.bytes_c2h, "c2c": s.bytes_c2c,
                "driver_calls": s.driver_calls, "evictions": mgr.stats.evictions,
                "writebacks": mgr.stats.writebacks, "compactions": mgr.stats.compactions}
    finally:
        mgr.close()
        drv.host.free(scratch)


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_memory_manager_on_rtl(dut) -> None:
    """Eviction, write-back and compaction on the RTL card; every byte checked."""
    tb = TB(dut)
    await tb.reset()
    stats = await tb.host(manager_program)
    dut._log.info("memory manager on the RTL card: %s", stats)
    assert stats["c2c"] > 0 and stats["writebacks"] > 0, stats
    tb.monitor.check()

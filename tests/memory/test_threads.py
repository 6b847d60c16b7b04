"""The manager is not thread-safe; it detects overlapping calls from two threads and refuses the
second one (changing nothing) instead of corrupting its allocator."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from pyhost.driver import PcieDriver
from pyhost.memory import ConcurrentUseError, MemoryManager
from pyhost.model_card import ModelCard

KiB = 1 << 10


class BlockingDriver:
    """A PcieDriver whose next upload waits for `release` (a call stuck in the driver)."""

    def __init__(self, drv: PcieDriver) -> None:
        self.drv = drv
        self.inside = threading.Event()
        self.release = threading.Event()
        self.block = False

    def __getattr__(self, name: str):
        return getattr(self.drv, name)

    def write_batch(self, transfers) -> None:
        if self.block:
            self.inside.set()
            assert self.release.wait(10)
        self.drv.write_batch(transfers)


def test_a_call_overlapping_another_threads_call_raises_and_changes_nothing() -> None:
    card = ModelCard(256 * KiB, host_size=8 << 20)
    drv = BlockingDriver(PcieDriver(card))
    mgr = MemoryManager(drv)     # type: ignore[arg-type]
    a, b = mgr.allocate_tensor(1000), mgr.allocate_tensor(2000)
    mgr.write_tensor(a, 1000, np.full(1000, 1, np.uint8))
    mgr.write_tensor(b, 2000, np.full(2000, 2, np.uint8))
    drv.block = True
    worker = threading.Thread(target=mgr.need_in_device, args=(a,), name="worker")
    worker.start()
    assert drv.inside.wait(10)
    for call in (lambda: mgr.need_in_device(b), lambda: mgr.allocate_tensor(10),
                 lambda: mgr.write_tensor(b, 2000, np.zeros(2000, np.uint8)),
                 lambda: mgr.read_tensor(b, 2000, np.empty(2000, np.uint8)),
                 lambda: mgr.free_tensor(b), lambda: mgr.check()):
        with pytest.raises(ConcurrentUseError, match="not thread-safe"):
            call()
    with pytest.raises(ConcurrentUseError, match="thread 'worker' is inside need_in_device"):
        mgr.tensor_updated(a)
    drv.release.set()
    worker.join(10)
    drv.block = False
    mgr.check()
    out = np.empty(2000, np.uint8)
    mgr.read_tensor(b, 2000, out)
    assert (out == 2).all(), "the refused write changed the tensor"
    (addr,) = mgr.need_in_device(a)
    assert (card.card_memory[addr:addr + 1000] == 1).all()


def test_four_threads_never_break_the_invariants() -> None:
    """Four threads hammer one manager (each with its own tensors, retrying refused calls):
    every call either completes or raises ConcurrentUseError; the allocator's invariants hold
    and every tensor reads back what its thread wrote."""
    card = ModelCard(128 * KiB, host_size=32 << 20)
    mgr = MemoryManager(PcieDriver(card))
    errors: list[BaseException] = []
    refused = [0]
    expected: dict[int, np.ndarray] = {}
    handles: dict[int, list] = {}

    def retry(fn, *args):
        while True:
            try:
                return fn(*args)
            except ConcurrentUseError:
                refused[0] += 1

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        try:
            mine = handles[k] = []
            for _ in range(8):
                n = int(rng.integers(1, 24)) * KiB + int(rng.integers(0, 64))
                t = retry(mgr.allocate_tensor, n)
                x = rng.integers(0, 256, n, dtype=np.uint8)
                retry(mgr.write_tensor, t, n, x)
                expected[t.id] = x
                mine.append(t)
            for step in range(150):
                t = mine[int(rng.integers(0, len(mine)))]
                if step % 3 == 0:
                    out = np.empty(t.size, np.uint8)
                    retry(mgr.read_tensor, t, t.size, out)
                    if not np.array_equal(out, expected[t.id]):
                        raise AssertionError(f"thread {k}: {t!r} read back wrong bytes")
                else:
                    retry(mgr.need_in_device, t)
        except BaseException as e:   # reported by the main thread
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)      # switch threads as often as possible
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    mgr.check()
    for ts in handles.values():
        for t in ts:
            out = np.empty(t.size, np.uint8)
            mgr.read_tensor(t, t.size, out)
            assert np.array_equal(out, expected[t.id])
    print(f"{refused[0]} overlapping calls refused")

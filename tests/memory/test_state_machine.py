"""Random API sequences against a reference model of what every tensor must contain.

The machine drives a MemoryManager on a small ModelCard (so eviction and compaction happen all
the time) and a host memory small enough to run out. After every step: data read back or found
on the card is bit-exact, out-of-memory happens only in the two allowed cases, resident tensors
never overlap and fit the card, and the tensors of one need call are all resident at the
addresses it returned.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from pyhost.driver import PcieDriver
from pyhost.memory import (
    POLICIES,
    CardCapacityError,
    DoubleFreeError,
    FreedTensorError,
    HostAllocationError,
    MemoryManager,
    NeverWrittenError,
    NotOnCardError,
    TensorHandle,
    allocator,
)
from pyhost.model_card import ModelCard
from tests.memory.test_hoststore import free_ranges, justified

CARD = 64 << 10
HOST = 4 << 20
sizes = st.one_of(st.integers(0, 64), st.integers(1, 24_000), st.integers(1, 24_000),
                  st.integers(60_000, 200_000))


class ManagerMachine(RuleBasedStateMachine):
    tensors = Bundle("tensors")
    freed = Bundle("freed")

    @initialize(target=tensors, policy=st.sampled_from(sorted(POLICIES)),
                batching=st.booleans(),
                start=st.lists(st.integers(2_000, 24_000), min_size=4, max_size=8),
                hint=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=3), max_size=30))
    def setup(self, policy: str, batching: bool, start: list[int], hint: list[list[int]]):
        self.card = ModelCard(CARD, host_size=HOST)
        self.mgr = MemoryManager(PcieDriver(self.card), policy=policy, batching=batching)
        self.expected: dict[int, np.ndarray | None] = {}   # None: never written
        self.last_need: dict[int, int] = {}     # tensor id -> address, until the next call
        self.rng = np.random.default_rng(len(start))
        handles = []
        for n in start:                          # a working set larger than the card
            t = self.mgr.allocate_tensor(n)
            x = self._data(n)
            self.mgr.write_tensor(t, n, x)
            self.expected[t.id] = x
            handles.append(t)
        if hint:   # a schedule hint the random calls follow only by chance: prefetch, fallback
            self.mgr.set_schedule([[handles[i % len(handles)] for i in call] for call in hint])
        return multiple(*handles)

    def _data(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 256, n, dtype=np.uint8)

    @rule(target=tensors, size=sizes)
    def allocate(self, size: int):
        self.last_need = {}
        ranges = free_ranges(self.card.host)
        try:
            t = self.mgr.allocate_tensor(size)
        except HostAllocationError:
            # the only out-of-memory allowed outside need calls: the host is really full (no
            # free range of the host memory or of the manager's slabs holds the tensor)
            assert justified(self.mgr.arena, ranges, size), f"{size} bytes refused, but fit"
            return multiple()
        self.expected[t.id] = None
        return t

    @rule(t=tensors, frac=st.sampled_from([1.0, 1.0, 0.5, 0.0]))
    def write(self, t: TensorHandle, frac: float) -> None:
        self.last_need = {}
        n = int(t.size * frac)
        x = self._data(n)
        self.mgr.write_tensor(t, n, x)
        if n == 0 and t.size:
            return                              # a zero-byte write changes nothing
        old = self.expected[t.id]
        if old is None:                         # bytes past a first partial write: undefined
            self.expected[t.id] = x.copy()
        else:
            self.expected[t.id] = np.concatenate([x, old[n:]])

    @rule(t=tensors)
    def read(self, t: TensorHandle) -> None:
        self.last_need = {}
        out = np.empty(t.size, np.uint8)
        want = self.expected[t.id]
        if want is None:
            try:
                self.mgr.read_tensor(t, t.size, out)
            except NeverWrittenError:
                return
            raise AssertionError(f"read of never-written {t!r} did not raise")
        self.mgr.read_tensor(t, t.size, out)
        assert np.array_equal(out[:want.size], want), f"{t!r} read back wrong bytes"

    @rule(ts=st.lists(tensors, min_size=1, max_size=3))
    def need2(self, ts: list[TensorHandle]) -> None:
        self.need(ts)

    @rule(ts=st.lists(tensors, min_size=1, max_size=3))
    def need(self, ts: list[TensorHandle]) -> None:
        distinct = {t.id: t for t in ts}
        total = sum(t.size for t in distinct.values())
        self.last_need = {}
        try:
            addrs = self.mgr.need_in_device(*ts)
        except CardCapacityError:
            assert total > CARD, f"out of memory for {total} bytes on a {CARD}-byte card"
            return
        assert total <= CARD, f"{total} bytes on a {CARD}-byte card did not raise"
        for t, a in zip(ts, addrs, strict=True):
            assert self.mgr.address(t) == a, "a tensor of the call was evicted by the call"
            self.last_need[t.id] = a
            want = self.expected[t.id]
            if want is not None:
                got = self.card.card_memory[a:a + want.size]
                assert np.array_equal(got, want), f"{t!r} on the card differs"
        self.steps_with_need = getattr(self, "steps_with_need", 0) + 1

    @precondition(lambda self: bool(self.last_need))
    @rule(data=st.data())
    def kernel_updates(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.last_need)))
        addr = self.last_need[tid]
        t = self.mgr._entries[tid].handle
        new = self._data(t.size)
        self.card.card_memory[addr:addr + t.size] = new
        self.mgr.tensor_updated(t)
        self.expected[tid] = new
        self.last_need = {}

    @rule(t=tensors)
    def updated_off_card(self, t: TensorHandle) -> None:
        if t.id in self.last_need:
            return
        self.last_need = {}
        if self.mgr.address(t) is None:
            try:
                self.mgr.tensor_updated(t)
            except NotOnCardError:
                return
            raise AssertionError("tensor_updated off the card did not raise")

    @rule(target=freed, t=consumes(tensors))
    def free(self, t: TensorHandle):
        self.last_need = {}
        self.mgr.free_tensor(t)
        del self.expected[t.id]
        return t

    @rule(t=freed)
    def use_after_free(self, t: TensorHandle) -> None:
        self.last_need = {}
        try:
            self.mgr.free_tensor(t)
        except DoubleFreeError:
            pass
        else:
            raise AssertionError("double free did not raise")
        try:
            self.mgr.need_in_device(t)
        except FreedTensorError:
            return
        raise AssertionError("need of a freed tensor did not raise")

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "mgr"):
            self.mgr.check()
            res = sorted((a, n) for _, a, n in self.mgr.resident())
            for (a1, n1), (a2, _) in zip(res, res[1:], strict=False):
                assert a1 + n1 <= a2, "resident tensors overlap"
            assert sum(n for _, n in res) <= CARD


ManagerMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TestManagerMachine = ManagerMachine.TestCase


class LargeMapMachine(ManagerMachine):
    """The same with every card map "large" (allocator.LARGE lowered to 2 blocks): placement by
    eviction in the policy's order (MemoryManager._place_in_victims), the local window and
    compaction searches of a large map, all under the same checks."""

    def __init__(self) -> None:
        super().__init__()
        self._large = allocator.LARGE
        allocator.LARGE = 2

    def teardown(self) -> None:
        allocator.LARGE = self._large
        super().teardown()


LargeMapMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TestLargeMapMachine = LargeMapMachine.TestCase

"""Eviction policies: which resident tensors leave the card when a need-in-device call needs room.

A policy sees residency events (`insert`, `touch`, `recost`, `remove`) and answers `pick`: the
unpinned resident tensors to evict, in order, until enough bytes are free. Policies are data:
registered by name in `POLICIES`, chosen with `MemoryManager(policy="lru")` or an instance.

- `naive`: nothing stays on the card between calls (every use transfers): the reference point.
- `lru`: least recently used first.
- `gds`: GreedyDual-Size with byte costs: reload plus write-back, so clean before dirty.
- `belady`: schedule-aware; with the upcoming need sequence as a hint, evicts the tensor whose
  next use is farthest (weighted by its cost: a dirty tensor costs a write-back too). Without a
  hint it behaves like LRU.
"""

from __future__ import annotations

import abc
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar, Protocol

INF = float("inf")


class Resident(Protocol):
    """What a policy may read of a resident tensor."""

    id: int
    key: str
    card_size: int
    dirty: bool
    pin: int


class EvictionPolicy(abc.ABC):
    """Base class; see the module docstring for the protocol."""

    name: ClassVar[str]
    #: False: everything unpinned is evicted at the start of every need call (naive).
    keeps_resident: ClassVar[bool] = True
    #: True: the manager passes the schedule's next-use positions (see `next_use`).
    uses_schedule: ClassVar[bool] = False
    #: Instead of a pathological compaction the manager may evict, out of order, candidates
    #: among `pick`'s first (this many times the bytes to place) with a `window_cost`. Off for
    #: recency policies: evicting out of their order was measured to cost more PCIe bytes than
    #: the card copies it saves.
    window_candidates: ClassVar[int] = 0

    #: Set by the manager: position of the next need of a tensor after the current call (INF
    #: when the schedule has none, or there is no schedule).
    next_use: Callable[[Resident], float] = staticmethod(lambda e: INF)

    @abc.abstractmethod
    def insert(self, e: Resident, now: int) -> None:
        """`e` became resident (it is also touched in the same call)."""

    @abc.abstractmethod
    def touch(self, e: Resident, now: int) -> None:
        """`e` is used by need call number `now`."""

    def recost(self, e: Resident, now: int) -> None:
        """`e` became dirty (updated on the card) or clean (written back): its cost changed."""
        return None   # recency policies do not look at cost

    @abc.abstractmethod
    def remove(self, e: Resident) -> None:
        """`e` left the card (evicted, freed, or overwritten from the host)."""

    @abc.abstractmethod
    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        """Resident tensors with `pin != epoch` to evict, in order, freeing >= `nbytes`."""

    def rekey(self, residents: list[Resident], now: int) -> None:
        """The schedule changed (set, or dropped after a mismatch): re-rank the residents."""
        return None   # only schedule-aware policies rank by the schedule

    def evicted(self, e: Resident) -> None:
        """`e` was evicted (one of `pick`'s candidates, or another the manager chose)."""
        self.remove(e)

    def window_cost(self, e: Resident) -> float | None:
        """Cost of evicting candidate `e` out of `pick`'s order, to avoid a costly compaction
        or to make room for prefetches (None: not allowed)."""
        return float(e.card_size * (2 if e.dirty else 1))


class LruPolicy(EvictionPolicy):
    """Least recently used first."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[int, Resident] = OrderedDict()

    def insert(self, e: Resident, now: int) -> None:
        self._order[e.id] = e

    def touch(self, e: Resident, now: int) -> None:
        self._order.move_to_end(e.id)

    def remove(self, e: Resident) -> None:
        del self._order[e.id]

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        out, got = [], 0
        for e in self._order.values():
            if got >= nbytes:
                break
            if e.pin != epoch:
                out.append(e)
                got += e.card_size
        return out


class NaivePolicy(LruPolicy):
    """Transfer on every use: nothing stays on the card from one need call to the next."""

    name = "naive"
    keeps_resident = False


class _LazyHeap:
    """Min-heap of (key, seq, id) with lazy deletion: an entry counts while its seq is current."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int]] = []
        self.current: dict[int, tuple[int, Resident, float]] = {}   # id -> (seq, entry, key)
        self._seq = itertools.count()

    def put(self, e: Resident, key: float) -> None:
        s = next(self._seq)
        self.current[e.id] = (s, e, key)
        heapq.heappush(self.heap, (key, s, e.id))

    def drop(self, e: Resident) -> None:
        self.current.pop(e.id, None)

    def pop_valid(self) -> tuple[float, Resident] | None:
        while self.heap:
            key, s, i = heapq.heappop(self.heap)
            cur = self.current.get(i)
            if cur is not None and cur[0] == s:
                del self.current[i]
                return key, cur[1]
        return None

    def compact(self) -> None:
        """Drop stale entries once they dominate (keeps the heap O(resident))."""
        if len(self.heap) > 4 * len(self.current) + 64:
            self.heap = [x for x in self.heap
                         if (c := self.current.get(x[2])) is not None and c[0] == x[1]]
            heapq.heapify(self.heap)


class GreedyDualSizePolicy(EvictionPolicy):
    """GreedyDual-Size (Cao & Irani) with byte costs: H = L + cost / size.

    The cost of evicting a tensor is the bytes it will take to bring it back: its size, plus its
    size again if it is dirty (the write-back). So H = L + 1 for a clean tensor and L + 2 for a
    dirty one: among tensors of similar age the clean ones go first; L rises to the H of each
    victim, so a dirty tensor that is not used again ages out too.
    """

    name = "gds"

    def __init__(self) -> None:
        self._heap = _LazyHeap()
        self._L = 0.0

    def _h(self, e: Resident) -> float:
        return self._L + (2.0 if e.dirty else 1.0)

    def insert(self, e: Resident, now: int) -> None:
        self._heap.put(e, self._h(e))

    def touch(self, e: Resident, now: int) -> None:
        self._heap.put(e, self._h(e))

    def recost(self, e: Resident, now: int) -> None:
        if e.id in self._heap.current:
            self._heap.put(e, self._h(e))

    def evicted(self, e: Resident) -> None:
        cur = self._heap.current.get(e.id)
        if cur is not None:
            self._L = max(self._L, cur[2])     # L rises to the H of each victim
        self.remove(e)

    def remove(self, e: Resident) -> None:
        self._heap.drop(e)
        self._heap.compact()

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        out, skipped, got = [], [], 0
        while got < nbytes:
            top = self._heap.pop_valid()
            if top is None:
                break
            h, e = top
            skipped.append((h, e))
            if e.pin != epoch:
                out.append(e)
                got += e.card_size
        # The manager evicts (a subset of) them, in `evicted`; until then all keep their H.
        for h, e in skipped:
            self._heap.put(e, h)
        return out


class BeladyPolicy(EvictionPolicy):
    """Schedule-aware: farthest next use first, a dirty tensor's distance counted half.

    Evicting a tensor costs its reload (plus a write-back if dirty) and frees its bytes until its
    next use; the policy evicts the lowest cost per byte-step, i.e. the largest
    distance / (1 + dirty). Tensors with no next use in the schedule go first (clean ones, then
    dirty ones), least recently used among them. Two heaps (clean, dirty) keyed by next use find
    the best of each class; the better of the two tops is taken.
    """

    name = "belady"
    uses_schedule = True
    window_candidates = 64    # window_cost admits only tensors without a next use

    def __init__(self) -> None:
        self._clean = _LazyHeap()
        self._dirty = _LazyHeap()
        self._last: dict[int, int] = {}

    def _put(self, e: Resident, now: int) -> None:
        nu = self.next_use(e)
        # max-heap on next use; among equal next uses (INF) the least recently used first
        key = -nu if nu != INF else -1e18 + now
        (self._dirty if e.dirty else self._clean).put(e, key)
        (self._clean if e.dirty else self._dirty).drop(e)

    def insert(self, e: Resident, now: int) -> None:
        self._put(e, now)

    def touch(self, e: Resident, now: int) -> None:
        self._put(e, now)

    def rekey(self, residents: list[Resident], now: int) -> None:
        for e in residents:
            self._put(e, now)

    def recost(self, e: Resident, now: int) -> None:
        self._put(e, now)

    def remove(self, e: Resident) -> None:
        self._clean.drop(e)
        self._dirty.drop(e)
        self._clean.compact()
        self._dirty.compact()

    def window_cost(self, e: Resident) -> float | None:
        # Out of order only tensors with no next use: any other choice may cost bytes the
        # next-use order avoids.
        if self.next_use(e) != INF:
            return None
        return float(e.card_size * (2 if e.dirty else 1))

    @staticmethod
    def _score(key: float, now: int, dirty: bool) -> float:
        if key < -1e17:                       # no next use: evict first, clean before dirty
            return 2e18 - (1e17 if dirty else 0.0) - (key + 1e18)
        return (-key - now) / (2.0 if dirty else 1.0)

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        out: list[tuple[float, Resident]] = []
        skipped: list[tuple[_LazyHeap, float, Resident]] = []
        tops: dict[bool, tuple[float, Resident] | None] = {}
        heaps = {False: self._clean, True: self._dirty}

        def refill(d: bool) -> None:
            while True:
                t = heaps[d].pop_valid()
                if t is None or t[1].pin != epoch:
                    tops[d] = t
                    return
                skipped.append((heaps[d], *t))
        refill(False)
        refill(True)
        got = 0
        while got < nbytes:
            c, d = tops[False], tops[True]
            if c is None and d is None:
                break
            take_dirty = c is None or (d is not None and self._score(d[0], now, True)
                                       > self._score(c[0], now, False))
            t = d if take_dirty else c
            assert t is not None
            out.append(t)
            got += t[1].card_size
            refill(take_dirty)
        for d in (False, True):
            t = tops[d]
            if t is not None:
                skipped.append((heaps[d], *t))
        for heap, key, e in skipped + [(self._dirty if e.dirty else self._clean, k, e)
                                       for k, e in out]:
            heap.put(e, key)
        return [e for _, e in out]


class PlannedPolicy(BeladyPolicy):
    """Schedule-aware with a plan: Belady's order, but reuse intervals that the optimal
    solution of the interval program (bound.py) drops are evicted first.

    The plan needs the whole upcoming trace with sizes (`MemoryManager.set_schedule_trace`);
    with only a need sequence it is exactly `belady`. Planning solves the MILP once, with a time
    limit, when the schedule is set; without an integer solution in time there is no plan and
    the policy is Belady's.
    """

    name = "planned"
    plan_seconds: float = 5.0

    def __init__(self) -> None:
        super().__init__()
        self.drops: set[tuple[str, int]] = set()
        self._since: dict[int, int] = {}      # tensor id -> position of its last need

    def set_plan(self, drops: set[tuple[str, int]]) -> None:
        self.drops = drops

    def _put(self, e: Resident, now: int) -> None:
        nu = self.next_use(e)
        since = self._since.get(e.id, now)
        if nu == INF:
            key = -1e18 + now
        elif (e.key, since) in self.drops:      # type: ignore[attr-defined]
            key = -1e16 - nu                    # planned drop: before every kept tensor
        else:
            key = -nu
        (self._dirty if e.dirty else self._clean).put(e, key)
        (self._clean if e.dirty else self._dirty).drop(e)

    def touch(self, e: Resident, now: int) -> None:
        self._since[e.id] = now
        self._put(e, now)

    def insert(self, e: Resident, now: int) -> None:
        self._since[e.id] = now
        self._put(e, now)

    def remove(self, e: Resident) -> None:
        super().remove(e)
        self._since.pop(e.id, None)

    def window_cost(self, e: Resident) -> float | None:
        # Out of order only tensors the plan drops anyway or that have no next use.
        if self.next_use(e) != INF and (e.key, self._since.get(e.id)) not in self.drops:
            return None
        return float(e.card_size * (2 if e.dirty else 1))

    @staticmethod
    def _score(key: float, now: int, dirty: bool) -> float:
        if -1e17 <= key <= -1e16:               # planned drops, farthest next use first
            return 1e15 + (-key - 1e16 - now) / (2.0 if dirty else 1.0)
        return BeladyPolicy._score(key, now, dirty)


POLICIES: dict[str, type[EvictionPolicy]] = {
    p.name: p for p in (NaivePolicy, LruPolicy, GreedyDualSizePolicy, BeladyPolicy,
                        PlannedPolicy)}


def make_policy(policy: str | EvictionPolicy) -> EvictionPolicy:
    """A policy instance from a name in POLICIES (or the instance itself)."""
    if isinstance(policy, EvictionPolicy):
        return policy
    try:
        return POLICIES[policy]()
    except KeyError:
        raise ValueError(f"unknown eviction policy {policy!r}; choose one of "
                         f"{', '.join(POLICIES)}") from None

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
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, ClassVar, Protocol

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
    #: plain LRU and GDS (they stay the textbook baselines); on for the size- and dirt-aware
    #: recency experts of the default (SizedLruPolicy, LirsPolicy), where it was measured to
    #: save more card copies than the PCIe bytes it adds (counted 1 : C2C_PER_PCIE).
    window_candidates: ClassVar[int] = 0
    #: ... considered when the compaction would copy more than this many times the bytes it
    #: places (16 for the schedule-aware ones: only pathological compactions, free space in
    #: many small holes; 4 for the recency experts, see SizedLruPolicy).
    window_gate: ClassVar[float] = 16.0

    #: True: the manager runs its repeat detector and hands the policy its predictions
    #: (`learn`); see AutoPolicy.
    learns: ClassVar[bool] = False
    _cap: int = 0

    @property
    def capacity(self) -> int:
        """Set by the manager: the card's capacity in bytes."""
        return self._cap

    @capacity.setter
    def capacity(self, n: int) -> None:
        self._cap = n
        self._capacity_set(n)

    def _capacity_set(self, n: int) -> None:
        """The capacity became n (for what a policy derives from it)."""
        return None

    #: Set by the manager: position of the next need of a tensor after the current call (INF
    #: when the schedule has none, or there is no schedule).
    next_use: Callable[[Resident], float] = staticmethod(lambda e: INF)

    @abc.abstractmethod
    def insert(self, e: Resident, now: int) -> None:
        """`e` became resident: uploaded with need call `now` without being one of its tensors
        (a deferred write, a prefetch), or, through `admit`, one of them."""

    def admit(self, e: Resident, now: int) -> None:
        """`e`, a tensor of need call `now`, became resident; `touch_all` of the call's tensors
        follows in the same call."""
        self.insert(e, now)

    @abc.abstractmethod
    def touch(self, e: Resident, now: int) -> None:
        """`e` is used by need call number `now`."""

    def touch_all(self, ents: Iterable[Resident], now: int) -> None:
        """`touch` for each tensor of a need call that has card bytes (the manager's call)."""
        touch = self.touch
        for e in ents:
            if e.card_size:
                touch(e, now)

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

    def candidates(self, epoch: int) -> Iterable[Resident] | None:
        """The unpinned residents in the order `pick` considers them (before its corrections),
        lazily, for the manager's window search on a large card map; None when the policy
        cannot give them without ranking every resident (then `pick` is asked instead)."""
        return None

    def evicted(self, e: Resident) -> None:
        """`e` was evicted (one of `pick`'s candidates, or another the manager chose)."""
        self.remove(e)

    def forget(self, e: Resident) -> None:
        """`e` was freed while not resident: drop any history of it (ghost entries)."""
        return None

    def observe(self, kind: str, ents: list[Resident], epoch: int) -> None:
        """The API call stream, whatever the card holds: "need" (the distinct tensors of need
        call `epoch`), "updated", "write", "read", "free" (one tensor). For policies that
        simulate others (AutoPolicy); called only when `observes` is set."""
        return None

    def observe_one(self, kind: str, e: Resident, epoch: int) -> None:
        """`observe` of a call on one tensor (every kind but "need")."""
        self.observe(kind, [e], epoch)

    #: True: the manager reports every call to `observe`.
    observes: ClassVar[bool] = False

    def state_size(self) -> int:
        """Entries held in the policy's structures (bounded by the live tensors; tested)."""
        return 0

    def window_cost(self, e: Resident) -> float | None:
        """Cost of evicting candidate `e` out of `pick`'s order, to avoid a costly compaction
        or to make room for prefetches (None: not allowed)."""
        return float(e.card_size * (2 if e.dirty else 1))

    @property
    def plain_window_cost(self) -> bool:
        """`window_cost` is the one above (the manager may compute it inline)."""
        return type(self).window_cost is EvictionPolicy.window_cost


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

    def state_size(self) -> int:
        return len(self._order)

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        return take_in_order(self.candidates(epoch), nbytes)

    def candidates(self, epoch: int) -> Iterable[Resident]:
        return (e for e in self._order.values() if e.pin != epoch)


class NaivePolicy(LruPolicy):
    """Transfer on every use: nothing stays on the card from one need call to the next."""

    name = "naive"
    keeps_resident = False


def take_in_order(cands: Iterable[Resident], nbytes: int, most: int | None = None
                  ) -> list[Resident]:
    """The first candidates, in their order, until they add up to `nbytes` (or `most` of
    them)."""
    out: list[Resident] = []
    got = 0
    for e in cands:
        if got >= nbytes or (most is not None and len(out) >= most):
            break
        out.append(e)
        got += e.card_size
    return out


def pick_in_order(cands: Iterable[Resident], nbytes: int, epoch: int, look: int = 8
                  ) -> list[Resident]:
    """Victims in the given order until `nbytes` are free, skipping pinned ones, with two
    corrections within the next `look` candidates that keep the order's intent and save bytes:
    a candidate much larger than what is still needed (over twice) gives way to the smallest
    later one that covers it (evicting a 144 MB weight to free 10 MB costs a 144 MB reload),
    and a dirty one to a clean one (its eviction would cost a write-back too)."""
    out: list[Resident] = []
    got = 0
    taken: set[int] = set()
    buf: list[Resident] = []
    it = iter(cands)
    while got < nbytes:
        buf = [c for c in buf if c.id not in taken]
        while len(buf) < look + 1:
            x = next(it, None)
            if x is None:
                break
            if x.pin != epoch and x.id not in taken:
                buf.append(x)
        if not buf:
            break
        e = buf[0]
        rest = nbytes - got
        choice = e
        if e.card_size > 2 * rest:
            fit = [c for c in buf[1:] if rest <= c.card_size < e.card_size]
            if fit:
                choice = min(fit, key=lambda c: c.card_size)
        elif e.dirty:
            choice = next((c for c in buf[1:] if not c.dirty), e)
        out.append(choice)
        taken.add(choice.id)
        got += choice.card_size
    return out


class SizedLruPolicy(LruPolicy):
    """LRU whose victims follow `pick_in_order` (size- and dirt-aware near the LRU end): the
    recency expert of AutoPolicy."""

    name = "lru-sized"
    #: Compaction against eviction: when compacting would copy more than 4x the bytes it
    #: places, the next victims anyway (up to 64x the bytes to place, in LRU order) that sit
    #: together may be evicted instead, if that costs 4x fewer bytes (C2C_PER_PCIE: one PCIe
    #: byte ~ four card-copy bytes). The card copies are bounded and their cost counted against
    #: transfers. (A gate of 1 was measured to trade too many PCIe bytes for card copies:
    #: Inception v2 inference 1.26x the bound instead of 1.00x.)
    window_candidates = 64
    window_gate = 4.0

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        return pick_in_order(self._order.values(), nbytes, epoch)


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
        if len(self.heap) > 4 * len(self.current) + 64:
            self.compact()

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
        """Drop stale entries once they dominate: the heap stays O(entries), whatever the
        number of calls (put and remove both check)."""
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

    def state_size(self) -> int:
        return len(self._heap.heap) + len(self._heap.current)

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

    def state_size(self) -> int:
        return sum(len(h.heap) + len(h.current) for h in (self._clean, self._dirty))

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
        self.drops: set[tuple[Hashable, int]] = set()
        self._since: dict[int, int] = {}      # tensor id -> position of its last need
        self._res: dict[int, Resident] = {}   # resident tensors (for a rekey of its own)
        self._own_res = True                  # False: the owner keeps _res (share_residents)
        #: how a reuse interval is named in `drops`: (tensor key, position of the need that
        #: starts it); the manager's repeat detector names them by role and phase instead
        self.plan_key: Callable[[Resident, int], tuple[Hashable, int]] = \
            lambda e, since: (e.key, since)
        self._lazy = False
        self._stale = False
        self._lazy_from = 0                   # the first need call (pin) of the lazy period
        #: the plan was made for a manager that writes back every dirty tensor it evicts
        #: (bound.interval_model's hold_dead: a learned plan, or an incomplete hint): a dirty
        #: tensor with no next use then costs its write-back, and the plan says whether to
        #: hold it (its dead tail kept) or write it back (dropped)
        self.hold = False

    @property
    def lazy(self) -> bool:
        """While lazy (AutoPolicy's planning half when it does not plan), the policy keeps only
        the residents, not its heaps: nothing picks from them, and the manager re-ranks every
        resident (`rekey`) when planning starts, which overwrote any order kept meanwhile
        anyway. A pick before such a rekey ranks the residents itself. Lazy, the touches are
        not recorded either (`touch`): while lazy there is no schedule, so a need's position
        is its call number, the resident's `pin`, which gives `_since` back when planning
        starts. Nor are the lazy period's inserts at a need of the tensor (a miss: its pin is
        the insert's position, which the pin gives back too); only the others' (a deferred
        write uploaded with another tensor's need)."""
        return self._lazy

    @lazy.setter
    def lazy(self, on: bool) -> None:
        if on and not self._lazy:
            self._clean, self._dirty = _LazyHeap(), _LazyHeap()
            self._stale = True
            self._lazy_from = max((e.pin for e in self._res.values()), default=-1) + 1
        elif not on and self._lazy:
            since, start = self._since, self._lazy_from
            for i, e in self._res.items():
                if e.pin >= start:                  # needed while lazy: at call e.pin
                    s = since.get(i, -1)
                    if e.pin > s:
                        since[i] = e.pin
        self._lazy = on

    def share_residents(self, res: dict[int, Resident]) -> None:
        """The residents (id -> tensor) are `res`, kept by the owner, which inserts into and
        removes from it exactly as this policy's own map would be (AutoPolicy: its LRU
        expert's order): one map for both instead of two updated at every miss and eviction."""
        self._res = res
        self._own_res = False

    def set_plan(self, drops: set[tuple[Hashable, int]]) -> None:
        self.drops = drops

    def rekey(self, residents: list[Resident], now: int) -> None:
        if self._lazy:
            return
        self._stale = False
        super().rekey(residents, now)

    def recost(self, e: Resident, now: int) -> None:
        if not self._lazy:
            self._put(e, now)

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        if self._stale:
            self.rekey(list(self._res.values()), now)
        return super().pick(nbytes, epoch, now)

    def _put(self, e: Resident, now: int) -> None:
        nu = self.next_use(e)
        since = self._since.get(e.id, now)
        if nu == INF:
            if self.hold and e.dirty and self.plan_key(e, since) not in self.drops:
                key = _KEPT_TAIL + since        # a dead tail the plan keeps: after the drops
            else:
                key = -1e18 + now
        elif self.plan_key(e, since) in self.drops:
            key = -1e16 - nu                    # planned drop: before every kept tensor
        else:
            key = -nu
        (self._dirty if e.dirty else self._clean).put(e, key)
        (self._clean if e.dirty else self._dirty).drop(e)

    def touch(self, e: Resident, now: int) -> None:
        if not self._lazy:                      # lazy: the pins stand in (see lazy)
            self._since[e.id] = now
            self._put(e, now)

    def insert(self, e: Resident, now: int) -> None:
        if self._own_res:
            self._res[e.id] = e
        if not self._lazy:
            self._since[e.id] = now
            self._put(e, now)
        elif e.pin != now:                      # lazy: a miss's pin stands in (see lazy)
            self._since[e.id] = now

    def remove(self, e: Resident) -> None:
        if not self._lazy:
            super().remove(e)
        self._since.pop(e.id, None)
        if self._own_res:
            self._res.pop(e.id, None)

    def state_size(self) -> int:
        return (super().state_size() + len(self._since) + len(self.drops)
                + (len(self._res) if self._own_res else 0))

    def window_cost(self, e: Resident) -> float | None:
        # Out of order only tensors the plan drops anyway or that have no next use (and, for
        # a plan that holds dead tails, are not such a kept tail).
        kept = self.plan_key(e, self._since.get(e.id, -1)) not in self.drops
        if kept and (self.next_use(e) != INF or (self.hold and e.dirty)):
            return None
        return float(e.card_size * (2 if e.dirty else 1))

    @staticmethod
    def _score(key: float, now: int, dirty: bool) -> float:
        if -1e17 <= key <= -1e16:               # planned drops, farthest next use first
            return 1e15 + (-key - 1e16 - now) / (2.0 if dirty else 1.0)
        if _KEPT_TAIL <= key < _KEPT_TAIL + 1e13:   # kept dead tails: oldest first
            return 1e14 - (key - _KEPT_TAIL)
        return BeladyPolicy._score(key, now, dirty)


#: Heap keys of dead tails a hold plan keeps (PlannedPolicy._put: this plus the need that
#: started the tail): ranked after the planned drops, before every tensor with a next use.
_KEPT_TAIL = -1e15


_LIR, _HIR, _GHOST = 0, 1, 2
#: LirsPolicy's record of a tensor: [status, bytes, resident, insert pin]
_ST, _SZ, _RES, _INS = 0, 1, 2, 3


class LirsPolicy(EvictionPolicy):
    """LIRS (Jiang & Zhang, SIGMETRICS 2002) adapted to variable sizes: scan- and cycle-resistant.

    A tensor's *reuse distance* (bytes of other tensors used between two uses) decides, not its
    recency: tensors whose last reuse distance was short are LIR and stay, up to
    `1 - hir_fraction` of the card (in bytes); the others are HIR and cycle through the rest of
    the card in FIFO order. A recency stack S holds the LIR tensors, resident HIR tensors and
    ghosts (evicted HIR tensors, their history only) no older than its oldest LIR tensor; a HIR
    tensor used again while still in S has a reuse distance shorter than that LIR tensor's and
    takes its place. So a scan (tensors used once) only ever displaces HIR tensors, and a loop
    over a working set larger than the card keeps most of it resident (LRU keeps nothing).

    Victims are the resident HIR tensors, oldest first; only when they do not free enough, the
    LIR tensors from the bottom of S, with `pick_in_order`'s corrections (a clean or a smaller
    sufficient tensor among the next few is taken first).
    Ghosts are bounded: at most the card's capacity in bytes and never a freed tensor
    (`forget`), so the policy holds O(live tensors) entries whatever the number of calls.
    """

    name = "lirs"
    window_candidates = 64     # as SizedLruPolicy
    window_gate = 4.0
    #: Share of the card (bytes) for resident HIR tensors (the paper uses ~1 %; DNN tensors are
    #: a large part of a card, so more).
    hir_fraction = 0.1
    #: How far past a victim the policy looks for a clean one, or a smaller one that covers
    #: what is still needed (pick_in_order).
    lookahead = 8
    #: Ghost bytes kept, relative to the capacity.
    ghost_factor = 1.0

    def __init__(self) -> None:
        self._lir_limit = INF                                # LIR bytes allowed (capacity)
        self._ghost_limit = INF                              # ghost bytes kept (capacity)
        self._s: OrderedDict[int, None] = OrderedDict()      # recency stack, bottom first
        self._q: OrderedDict[int, Resident] = OrderedDict()  # resident HIR, next victim first
        self._ghosts: OrderedDict[int, int] = OrderedDict()  # ghost id -> bytes, oldest first
        #: id -> [status, bytes, the resident (None for a ghost), the pin of the call that
        #: inserted it until its first touch (None)]: one record per tensor, one lookup (four
        #: maps were four cache misses per tensor and operation with 100k tensors)
        self._rec: dict[int, list[Any]] = {}
        self._lir_bytes = 0
        self._ghost_bytes = 0

    def _capacity_set(self, n: int) -> None:
        self._lir_limit = (1.0 - self.hir_fraction) * n if n else INF
        self._ghost_limit = self.ghost_factor * n if n else INF

    def _prune(self) -> None:
        s, rec = self._s, self._rec
        while s:
            i = next(iter(s))
            st = rec[i][_ST]
            if st == _LIR:
                return
            del s[i]
            if st == _GHOST:
                self._drop_ghost(i)

    def _drop_ghost(self, i: int) -> None:
        self._ghost_bytes -= self._ghosts.pop(i)
        del self._rec[i]
        self._s.pop(i, None)

    def _make_lir(self, i: int, r: list[Any]) -> None:
        r[_ST] = _LIR
        self._lir_bytes += r[_SZ]
        s, rec = self._s, self._rec
        s[i] = None
        s.move_to_end(i)
        limit = self._lir_limit
        while self._lir_bytes > limit:                       # demote the bottom LIR tensors
            b = next(iter(s))
            if b == i:
                break
            del s[b]
            rb = rec[b]
            rb[_ST] = _HIR
            self._lir_bytes -= rb[_SZ]
            self._q[b] = rb[_RES]
            self._prune()

    def insert(self, e: Resident, now: int) -> None:
        i, n = e.id, e.card_size
        r = self._rec.get(i)
        if r is not None and r[_ST] == _GHOST:               # reused while still in S
            self._ghost_bytes -= self._ghosts.pop(i)
            r[_SZ], r[_RES], r[_INS] = n, e, e.pin
            self._make_lir(i, r)
            self._prune()
            return
        if self._lir_bytes + n <= self._lir_limit:           # warming up: room for LIR
            self._rec[i] = [_LIR, n, e, e.pin]
            self._lir_bytes += n
            self._s[i] = None
            return
        self._rec[i] = [_HIR, n, e, e.pin]
        self._s[i] = None
        self._q[i] = e

    def touch(self, e: Resident, now: int) -> None:
        i = e.id
        r = self._rec[i]
        ins = r[_INS]
        if ins is not None:
            r[_INS] = None
            if ins == e.pin:
                return                                       # the miss of this very call
        s = self._s
        if r[_ST] == _LIR:
            bottom = next(iter(s)) == i
            s.move_to_end(i)
            if bottom:                                       # the bottom moved: prune S
                self._prune()
        elif i in s:                                         # resident HIR reused: now LIR
            del self._q[i]
            self._make_lir(i, r)
            self._prune()
        else:
            s[i] = None
            self._q.move_to_end(i)

    def touch_all(self, ents: Iterable[Resident], now: int) -> None:
        # touch's common cases inline: the miss of this very call (nothing), a LIR tensor (to
        # the top; S is pruned once, before any other touch and at the end: a prune stops at
        # the first LIR tensor, so moving LIR tensors first and pruning then leaves S as
        # pruning after each)
        rec, s = self._rec, self._s
        moved = False
        for e in ents:
            if e.card_size:
                i = e.id
                r = rec[i]
                ins = r[_INS]
                if ins is not None:
                    r[_INS] = None
                    if ins == e.pin:
                        continue
                if r[_ST] == _LIR:
                    s.move_to_end(i)
                    moved = True
                else:
                    if moved:
                        self._prune()
                        moved = False
                    self.touch(e, now)            # (its insert pin is gone now)
        if moved:
            self._prune()

    def _lir_residents(self) -> Iterator[Resident]:
        """The resident LIR tensors, bottom of S first."""
        rec = self._rec
        for i in self._s:
            r = rec[i]
            if r[_ST] == _LIR:
                yield r[_RES]

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        return pick_in_order(itertools.chain(self._q.values(), self._lir_residents()), nbytes,
                             epoch, self.lookahead)

    def candidates(self, epoch: int) -> Iterable[Resident]:
        return (e for e in itertools.chain(self._q.values(), self._lir_residents())
                if e.pin != epoch)

    def evicted(self, e: Resident) -> None:
        i = e.id
        rec = self._rec
        r = rec.get(i)
        if r is None:
            return
        self._leave_card(i, r)
        s = self._s
        if i not in s:
            del rec[i]
            return
        # History stays, as the newest ghost, within the ghost bytes kept. At the bottom of S
        # its ghost would be pruned at once: it leaves S as the prune would take it, and only
        # the older ghosts it would have pushed over the limit go.
        n, ghosts = r[_SZ], self._ghosts
        bottom = next(iter(s)) == i
        if not bottom:
            r[_ST] = _GHOST
            ghosts[i] = n
            self._ghost_bytes += n
        pending = n if bottom else 0
        while self._ghost_bytes + pending > self._ghost_limit and ghosts:
            self._drop_ghost(next(iter(ghosts)))
        if bottom:
            del s[i]
            del rec[i]
        self._prune()

    def _leave_card(self, i: int, r: list[Any]) -> None:
        """Tensor ``i`` (record ``r``) is no longer resident: no resident in its record, its
        LIR bytes or its place in the HIR queue given back (a ghost holds neither)."""
        r[_RES] = r[_INS] = None
        st = r[_ST]
        if st == _LIR:
            self._lir_bytes -= r[_SZ]
        elif st == _HIR:
            self._q.pop(i, None)

    def remove(self, e: Resident) -> None:
        i = e.id
        r = self._rec.get(i)
        if r is None:
            return
        self._leave_card(i, r)
        if r[_ST] == _GHOST:
            self._ghost_bytes -= self._ghosts.pop(i)
        self._s.pop(i, None)
        del self._rec[i]
        self._prune()

    def forget(self, e: Resident) -> None:
        r = self._rec.get(e.id)
        if r is not None and r[_ST] == _GHOST:
            self._drop_ghost(e.id)
            self._prune()

    def state_size(self) -> int:
        return len(self._s) + len(self._q) + len(self._ghosts) + len(self._rec)


class _Stub:
    """A tensor as a shadow cache sees it."""

    __slots__ = ("id", "key", "card_size", "dirty", "pin")

    def __init__(self, i: int, size: int) -> None:
        self.id, self.key, self.card_size, self.dirty, self.pin = i, "", size, False, -1


#: Knuth's multiplicative hash constant: a shadow simulates the ids it maps below its cut
_HASH = 2654435761


class ShadowCache:
    """A policy run on simulated residency of a card of the same capacity: the bytes it would
    move (reloads and write-backs, ignoring fragmentation), exponentially forgotten over
    `memory` need calls. AutoPolicy compares two of them to choose its online expert.

    With `rate` below 1 it simulates only a sample of the tensors (spatial sampling, as SHARDS
    does for miss-ratio curves: a tensor is in the sample when a hash of its id falls below
    `rate`, so it stays in or out for its whole life) on a card of `rate` times the capacity,
    and counts each byte 1/rate times: the same estimates, for a 1/rate share of the work."""

    def __init__(self, policy: EvictionPolicy, capacity: int, memory: int = 512,
                 rate: float = 1.0) -> None:
        self.policy = policy
        self.rate = rate
        self._sampling = rate < 1
        self._cut = int(rate * (1 << 32))          # ids whose hash is below are simulated
        self._scale = 1.0 / rate if self._sampling else 1
        capacity = int(capacity * rate)
        policy.capacity = capacity
        self.capacity = capacity
        self.res: dict[int, _Stub] = {}
        self.used = 0
        self.cost = 0.0
        #: the bytes the card would move, not forgotten (per repetition: differences): as
        #: `cost`, but a tensor's first load counts only if it has bytes (the manager uploads
        #: nothing for a tensor neither written nor updated)
        self.moved = 0
        self._content: set[int] = set()      # live tensors written or updated
        self.decay = 1.0 - 1.0 / memory
        # recost is a no-op for the recency policies (LRU, LIRS): not called for them
        self._recosts = type(policy).recost is not EvictionPolicy.recost

    def sampled(self, i: int) -> bool:
        """Whether tensor `i` is simulated (always, at rate 1)."""
        return (i * _HASH) & 0xFFFFFFFF < self._cut     # Knuth's multiplicative hash

    def sample(self, ents: list[Resident]) -> list[Resident]:
        """The simulated ones of `ents` (all, at rate 1)."""
        if not self._sampling:
            return ents
        cut = self._cut
        out = []                              # (a loop: a comprehension is a call)
        for e in ents:
            if (e.id * _HASH) & 0xFFFFFFFF < cut:                          # as sampled
                out.append(e)
        return out

    def need(self, ents: list[Resident], epoch: int, sampled: bool = False) -> None:
        """A need call with these tensors; `sampled`: `ents` is `sample(ents)` already."""
        p, res = self.policy, self.res
        self.cost *= self.decay
        if not sampled:
            ents = self.sample(ents)
        if not ents:
            return
        scale = self._scale
        stubs, missing, need = [], [], 0
        for e in ents:
            s = res.get(e.id)
            if s is None:
                s = _Stub(e.id, e.card_size)
                missing.append(s)
                need += e.card_size
            s.pin = epoch
            stubs.append(s)
        if not missing:                      # all resident: only the policy's touches
            touch = p.touch
            for s in stubs:
                touch(s, epoch)
            return
        short = self.used + need - self.capacity
        if short > 0:
            for v in p.pick(short, epoch, epoch):
                p.evicted(v)
                del res[v.id]
                self.used -= v.card_size
                if v.dirty:
                    self.cost += v.card_size * scale
                    self.moved += v.card_size * scale
        content = self._content
        for s in missing:
            res[s.id] = s
            self.used += s.card_size
            self.cost += s.card_size * scale
            if s.id in content:
                self.moved += s.card_size * scale
            p.insert(s, epoch)
        for s in stubs:
            p.touch(s, epoch)

    def event(self, kind: str, e: Resident, sampled: bool = False) -> None:
        """Tensor e was written, read, updated or freed (`sampled`: it is in the sample)."""
        if not sampled and not self.sampled(e.id):
            return
        s = self.res.get(e.id)
        if kind in ("updated", "write"):
            self._content.add(e.id)
        elif kind == "free":
            self._content.discard(e.id)
        if kind == "updated":
            if s is not None:
                s.dirty = True
                if self._recosts:
                    self.policy.recost(s, 0)
        elif kind == "read":
            if s is not None and s.dirty:
                s.dirty = False
                self.cost += s.card_size * self._scale
                self.moved += s.card_size * self._scale
                self.policy.recost(s, 0)
        elif s is not None:                  # "write" (the card copy is stale) or "free"
            self.policy.remove(s)
            del self.res[e.id]
            self.used -= s.card_size
        if kind == "free" and s is None:
            self.policy.forget(e)

    def state_size(self) -> int:
        return len(self.res) + len(self._content) + self.policy.state_size()


#: AutoPolicy feeds its shadow caches in batches of at most this many events (see observe).
SHADOW_LOG = 256
#: Once a shadow cache holds more than this many tensors, or so many live tensors with data
#: that a SHADOW_RATE sample of them holds more (the cache will fill with them), AutoPolicy's
#: shadows simulate a sample of the tensors instead (ShadowCache's rate): SHADOW_RATE, or
#: half of it, a quarter, ... until the sample's live tensors with data are at most
#: SHADOW_SAMPLE_SIZE (a fixed-size sample, as SHARDS's s_max variant; halved again when the
#: live tensors grow past twice that). 100k small tensors cost the shadows 1/32 of the work.
#: None of the benchmark's traces comes near.
SHADOW_SAMPLE_ABOVE = 8192
SHADOW_RATE = 1 / 8
SHADOW_SAMPLE_SIZE = 4096
#: Need calls a shadow's cost remembers (its exponential decay) at rate SHADOW_RATE and above;
#: below, 1/rate times more in proportion, so that as many sampled tensors' bytes count in it
#: (a 1/32 sample forgetting over 512 calls was off by up to 20 %, over 2048 calls by 3 %).
SHADOW_MEMORY = 512


class AutoPolicy(EvictionPolicy):
    """The online default: the better of LIRS and LRU, and the plan of a repetition when the
    need sequence repeats.

    Online, victims come from one of two experts that both track the card's residents: LIRS
    (scan- and cycle-resistant) or LRU (recency, which suits the produce-then-consume order of
    DNN activations). Which one is decided by shadow caches: each expert also runs on simulated
    residency of a card of the same size, fed the same calls, and the one whose shadow would
    have moved fewer bytes recently (by SWITCH_MARGIN) is followed. Without a hint the
    manager's repeat detector (repeat.py) watches the need calls; while it follows a
    repetition of an earlier window, it predicts next uses, may supply a plan (the interval
    MILP solved on the recorded window) and `planning` is on: victims come from the
    schedule-aware `PlannedPolicy` fed with those predictions. When the pattern breaks the
    detector drops back to the online experts. Every part sees every residency event all the
    time, so any can take over at any call. With a hint (`set_schedule` /
    `set_schedule_trace`) it is `planned`.
    """

    name = "auto"
    uses_schedule = True
    learns = True
    observes = True
    #: the LIRS expert is followed when its shadow moved this much less than LRU's, and left
    #: when it moved this much more (hysteresis)
    switch_margin = 0.03

    def __init__(self) -> None:
        self.lirs = LirsPolicy()
        self.lru = SizedLruPolicy()
        self._online: EvictionPolicy = self.lru
        self._log: list[tuple[str, list[Resident], int]] = []   # shadow events not yet fed
        self._decays = 0                 # need calls before the log that only decay (observe)
        self._owed = False               # a cost changed after the last choice (observe)
        self.planner = PlannedPolicy()
        self.planner.share_residents(self.lru._order)    # the same residents, one map
        self.planning = False            # set by the manager (a hint, or a learned repetition)
        self._shadows: dict[str, ShadowCache] = {}

    @property
    def online(self) -> EvictionPolicy:
        """The expert followed when not planning (the shadows' events fed first)."""
        if self._log:
            self._flush()
        return self._online

    @online.setter
    def online(self, p: EvictionPolicy) -> None:
        self._online = p

    @property
    def planning(self) -> bool:
        """Victims come from the planning half (set by the manager: a hint, or a learned
        repetition). While off, the planning half only tracks the residents (`lazy`)."""
        return self._planning

    @planning.setter
    def planning(self, on: bool) -> None:
        self._planning = on
        self.planner.lazy = not on

    def _capacity_set(self, n: int) -> None:
        self.lirs.capacity = self.lru.capacity = self.planner.capacity = n
        if n:
            self._make_shadows(1.0)
        self._log = []

    def _make_shadows(self, rate: float) -> None:
        memory = round(SHADOW_MEMORY * max(1.0, SHADOW_RATE / rate))
        self._shadows = {"lirs": ShadowCache(LirsPolicy(), self._cap, memory, rate),
                         "lru": ShadowCache(SizedLruPolicy(), self._cap, memory, rate)}
        self._pair = (self._shadows["lirs"], self._shadows["lru"])
        self._decays = 0                 # (costs from zero)
        self._owed = False

    @property                            # type: ignore[override]
    def next_use(self) -> Callable[[Resident], float]:   # type: ignore[override]
        return self.planner.next_use

    @next_use.setter
    def next_use(self, fn: Callable[[Resident], float]) -> None:
        self.planner.next_use = fn       # type: ignore[method-assign]

    @property                            # type: ignore[override]
    def window_candidates(self) -> int:  # type: ignore[override]
        return self.planner.window_candidates if self.planning else \
            self.online.window_candidates

    @property                            # type: ignore[override]
    def window_gate(self) -> float:      # type: ignore[override]
        return self.planner.window_gate if self.planning else self.online.window_gate

    @property
    def plan_seconds(self) -> float:
        return self.planner.plan_seconds

    @property
    def expert(self) -> str:
        return "lirs" if self.online is self.lirs else "lru"

    def set_plan(self, drops: set[tuple[Hashable, int]]) -> None:
        self.planner.set_plan(drops)

    def shadow_moved(self) -> tuple[str, dict[str, int]]:
        """The expert now followed, and the PCIe bytes each expert's shadow would have moved so
        far (ignoring fragmentation; empty without shadows): the manager compares a learned
        plan with the followed one's bytes per repetition."""
        if self._log:
            self._flush()
        return self.expert, {k: sh.moved for k, sh in self._shadows.items()}

    def _parts(self) -> tuple[EvictionPolicy, ...]:
        return (self.lirs, self.lru, self.planner)

    def observe(self, kind: str, ents: list[Resident], epoch: int) -> None:
        """The shadows' events wait in a log, replayed in order when the online expert is
        asked for (pick, candidates, window costs; `online`) or the log holds SHADOW_LOG
        events: the shadows see only the call stream (ids and sizes, which never change), so
        the choice is the same as if each were fed at once, and a call that evicts nothing
        does not pay for the simulation. (The caller does not change `ents` afterwards.)"""
        if not self._shadows:
            return
        # the tensors the shadows simulate, chosen once for both (they share the rate); a
        # need call counts even without any (its decay), the other events do not
        ents = self._pair[0].sample(ents)
        log = self._log
        if not ents:
            if kind != "need":
                return
            if not log:
                # Nothing waits: the call decays both shadows' costs, alike, and chooses. That
                # choice is the last one unless a cost changed since (a replayed read after the
                # last replayed need): then now, else only counted, the decays applied by
                # _flush before the events that come after them.
                a_sh, b_sh = self._pair
                if self._owed:
                    a_sh.cost *= a_sh.decay
                    b_sh.cost *= b_sh.decay
                    self._choose(a_sh.cost, b_sh.cost)
                    self._owed = False
                else:
                    self._decays += 1
                return
        log.append((kind, ents, epoch))
        if len(log) >= SHADOW_LOG:
            self._flush()

    def observe_one(self, kind: str, e: Resident, epoch: int) -> None:
        # observe without a list for a tensor outside the shadows' sample
        if self._shadows and self._pair[0].sampled(e.id):
            self.observe(kind, [e], epoch)

    def _choose(self, a: float, b: float) -> None:
        """Follow the expert whose shadow moved less (a: LIRS's, b: LRU's), with hysteresis."""
        m = self.switch_margin
        if self._online is self.lru and a < (1 - m) * b:
            self._online = self.lirs
        elif self._online is self.lirs and a > (1 + m) * b:
            self._online = self.lru

    def _flush(self) -> None:
        log, self._log = self._log, []
        a_sh, b_sh = self._pair
        for _ in range(self._decays):    # the need calls before the log without a sampled one
            a_sh.cost *= a_sh.decay      # (one multiplication per call, as they would have)
            b_sh.cost *= b_sh.decay
        self._decays = 0
        owed = self._owed
        for kind, ents, epoch in log:
            if kind == "need":
                a_sh.need(ents, epoch, True)
                b_sh.need(ents, epoch, True)
                self._choose(a_sh.cost, b_sh.cost)
                owed = False
            else:
                for e in ents:
                    a_sh.event(kind, e, True)
                    b_sh.event(kind, e, True)
                if kind == "read":       # (the only event but a need that adds a cost)
                    owed = True
        self._owed = owed
        content = len(a_sh._content)
        if a_sh.rate == 1:
            if (max(len(a_sh.res), len(b_sh.res)) > SHADOW_SAMPLE_ABOVE
                    or content * SHADOW_RATE > SHADOW_SAMPLE_ABOVE):
                rate = SHADOW_RATE
                while content * rate > SHADOW_SAMPLE_SIZE:
                    rate /= 2
                self._sample(rate)
        elif content > 2 * SHADOW_SAMPLE_SIZE:
            self._sample(a_sh.rate / 2)

    def _sample(self, rate: float) -> None:
        """Start simulating a `rate` sample (see SHADOW_SAMPLE_ABOVE): new shadows, cold, their
        cost (which chooses the expert) from zero, the expert kept; `moved` carries on from
        the old ones' totals (the manager takes differences of it), and the live written
        tensors of the sample stay known (a reload of one counts: the new sample is within
        the old one)."""
        old = self._shadows
        self._make_shadows(rate)
        for name, new in self._shadows.items():
            new.moved = old[name].moved
            new._content = {i for i in old[name]._content if new.sampled(i)}

    def insert(self, e: Resident, now: int) -> None:
        self.lirs.insert(e, now)
        self.lru._order[e.id] = e                 # LruPolicy.insert (the planner's residents)
        pl = self.planner
        if not pl._lazy or e.pin != now:          # (lazy, a miss records nothing: see lazy)
            pl.insert(e, now)

    def admit(self, e: Resident, now: int) -> None:
        # The planning half is not told: the call's touch_all, right after, records the need
        # and ranks the tensor in its heaps (its insert would rank it once more, a next-use
        # prediction and a heap push, overwritten there; the pops' order is the same, by
        # rank, then by the order of the last rankings) and, lazy, records nothing for it.
        self.lirs.insert(e, now)
        self.lru._order[e.id] = e                 # LruPolicy.insert (the planner's residents)

    def touch(self, e: Resident, now: int) -> None:
        self.touch_all((e,), now)

    def touch_all(self, ents: Iterable[Resident], now: int) -> None:
        # LruPolicy.touch inlined; the planning half's touch is a no-op while lazy (not called)
        if not isinstance(ents, (list, tuple)):
            ents = list(ents)                     # (gone through twice)
        self.lirs.touch_all(ents, now)
        order = self.lru._order
        planner_touch = None if self.planner.lazy else self.planner.touch
        for e in ents:
            if e.card_size:
                order.move_to_end(e.id)
                if planner_touch is not None:
                    planner_touch(e, now)

    def recost(self, e: Resident, now: int) -> None:
        # the recency experts do not look at cost (EvictionPolicy.recost); the planning half
        # does not while lazy
        pl = self.planner
        if not pl._lazy:
            pl.recost(e, now)

    def remove(self, e: Resident) -> None:
        for p in self._parts():
            p.remove(e)

    def evicted(self, e: Resident) -> None:
        # LIRS keeps a ghost; for the LRU expert and the planning half an eviction is a
        # removal (EvictionPolicy.evicted)
        self.lirs.evicted(e)
        del self.lru._order[e.id]                 # LruPolicy.remove (the planner's residents)
        pl = self.planner
        if not pl._lazy or pl._since:             # (lazy, only a recorded need time goes)
            pl.remove(e)

    def forget(self, e: Resident) -> None:
        for p in self._parts():
            p.forget(e)

    def rekey(self, residents: list[Resident], now: int) -> None:
        self.planner.rekey(residents, now)

    def pick(self, nbytes: int, epoch: int, now: int) -> list[Resident]:
        return (self.planner if self.planning else self.online).pick(nbytes, epoch, now)

    def candidates(self, epoch: int) -> Iterable[Resident] | None:
        return (self.planner if self.planning else self.online).candidates(epoch)

    def window_cost(self, e: Resident) -> float | None:
        return (self.planner if self.planning else self.online).window_cost(e)

    @property
    def plain_window_cost(self) -> bool:
        return (self.planner if self.planning else self.online).plain_window_cost

    def state_size(self) -> int:
        if self._log:
            self._flush()
        return sum(p.state_size() for p in self._parts()) + sum(
            s.state_size() for s in self._shadows.values())


POLICIES: dict[str, type[EvictionPolicy]] = {
    p.name: p for p in (NaivePolicy, LruPolicy, GreedyDualSizePolicy, LirsPolicy, BeladyPolicy,
                        PlannedPolicy, AutoPolicy)}


def make_policy(policy: str | EvictionPolicy) -> EvictionPolicy:
    """A policy instance from a name in POLICIES (or the instance itself)."""
    if isinstance(policy, EvictionPolicy):
        return policy
    try:
        return POLICIES[policy]()
    except KeyError:
        raise ValueError(f"unknown eviction policy {policy!r}; choose one of "
                         f"{', '.join(POLICIES)}") from None

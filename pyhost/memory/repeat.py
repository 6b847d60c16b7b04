"""The repeat detector: learns that the need sequence repeats, and predicts the next repetition.

Deep-learning workloads repeat: every inference makes the same calls, every training step the
same forward and backward pass, but with new tensors each time (activations and gradients are
reallocated). The detector records the last `window` need calls and looks for an earlier window
that the current calls repeat *up to renaming*: a tensor that existed when the earlier call was
made must be the same tensor (a weight), a tensor created since must correspond one-to-one to
the tensor at the same place in the earlier call, with the same size (an activation of this
iteration for one of the last). `confirm` consecutive matching calls at the same lag, with at
least `evidence` tensors the very same as one lag ago among them, lock it in;
from then on:

- `next_use(id)` predicts a tensor's next need: the uses of its counterpart (or its own) one
  lag ago, shifted by the lag;
- `plan_trace()` gives the recorded repetition (two copies back to back, the second with fresh
  tensors, so intervals across the boundary exist) for the interval MILP, and `role` / `phase`
  name a tensor and a call position the same way in every repetition, so the plan made once
  applies to every later repetition.

A call that does not match is tolerated `tolerance` times in a row (a repetition with one
changed call keeps the lock); after that the lock is dropped and the search starts again. All
state is bounded by the window and the live tensors, whatever the number of calls.

While searches find nothing (calls that repeat no earlier one), the search backs off: it runs
every 2nd, 4th, ... up to every `backoff`-th call, and again at every call once a candidate
lives. Every call of a repetition repeats the call one lag before it, so a skipped call only
delays the lock by at most `backoff - 1` calls, and on a stream that does not repeat the search
(the larger part of a call's cost) runs on one call in `backoff`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyhost.memory.policies import INF
from pyhost.memory.trace import Trace

#: Calls (need or not) recorded for planning, per need call of the window.
OPS_PER_CALL = 8


@dataclass
class _Candidate:
    lag: int
    matches: int = 0
    exact: int = 0        # tensors found at the same place as one lag ago (weights, loops)
    fwd: dict[int, int] = field(default_factory=dict)   # current id -> id one lag ago
    inv: dict[int, int] = field(default_factory=dict)   # id one lag ago -> current id


class RepeatDetector:
    """See the module docstring. Times are need-call numbers (the manager's epoch)."""

    def __init__(self, window: int = 1 << 15, confirm: int = 4, tolerance: int = 2,
                 candidates: int = 4, evidence: int = 2, backoff: int = 4) -> None:
        #: a lock needs `confirm` matching calls in a row, with `evidence` tensors among them
        #: that are the very same as one lag ago (not only renamed ones of the same size)
        self.evidence = evidence
        self.window, self.confirm, self.tolerance = window, confirm, tolerance
        self.max_candidates = candidates
        #: the longest interval between searches that find nothing (see the module docstring)
        self.backoff = backoff
        self._interval = 0                                # calls between searches now
        self._skip = 0                                    # calls left until the next search
        self._skipped = 0                                 # calls not searched since the last
        # recorded calls in a ring: time t at t % window, for _first <= t < _end
        self._calls: list[tuple[int, ...]] = [()] * window
        self._keys: list[tuple[int, ...]] = [()] * window
        self._first = 0
        self._end = 0
        # A tensor's need times in the window, and the times of the calls of one key (sizes),
        # as chains through the ring, newest first: the last time in a dict, each recorded
        # call the time before (per tensor, and for its key; -1: none). Nothing but ints per
        # call, no list or deque per tensor or key to create, grow and drop (with 100k live
        # tensors each was a cache miss). A time before _first has left the window.
        self._prevs: list[tuple[int, ...]] = [()] * window    # per tensor of the call
        self._kprev: list[int] = [-1] * window
        self._last: dict[int, int] = {}                   # id -> its last need time
        self._klast: dict[tuple[int, ...], int] = {}      # call key -> its last time
        self._size: dict[int, int] = {}                   # id -> card bytes (recorded, live)
        self._born: dict[int, int] = {}                   # live id -> time it was allocated
        # ids with uses in the window that are not live (freed, or never reported by
        # `allocated`): their size and role go when their last use leaves the window (a small
        # set, where a lookup in _born was a cache miss per forgotten tensor)
        self._dead: set[int] = set()
        # the last OPS_PER_CALL * window calls: (kind, tensor(s), size, need count)
        self._ops: deque[tuple[str, int | tuple[int, ...], int | None, int]] = deque(
            maxlen=OPS_PER_CALL * window)
        self._cands: list[_Candidate] = []
        self.lock: _Candidate | None = None
        self._misses = 0
        #: the lock's reference: the first call of the recorded repetition `plan_trace` covers
        self.anchor = 0
        self.role: dict[int, int] = {}                    # id -> its tensor in the anchor window
        self.locks = 0                                    # statistics: locks taken
        self.breaks = 0                                   #             and dropped
        self.mismatches = 0                               # calls tolerated while locked

    # --- what the manager reports -------------------------------------------------------------

    def allocated(self, tid: int, size: int, now: int) -> None:
        self._born[tid] = now
        self._dead.discard(tid)
        self._size[tid] = size
        self.op("alloc", tid, size, now)

    def freed(self, tid: int, now: int) -> None:
        self._born.pop(tid, None)
        self.op("free", tid, None, now)
        t = self._last.get(tid)
        if t is None or t < self._first:         # no use in the window (see _forget_oldest)
            self._last.pop(tid, None)
            self._size.pop(tid, None)
            self.role.pop(tid, None)
        else:
            self._dead.add(tid)
        if self.lock is not None:
            x = self.lock.fwd.pop(tid, None)
            if x is not None:
                self.lock.inv.pop(x, None)

    def op(self, kind: str, tid: int, size: int | None, now: int) -> None:
        """A write, read or update (for the plan's trace; allocations and frees too)."""
        self._ops.append((kind, tid, size, now))

    def observe(self, now: int, ids: Sequence[int], sizes: Sequence[int],
                sized: bool = False) -> None:
        """Need call number `now` with these distinct tensors (argument order). `sized`: every
        one was reported by `allocated` with this size (the manager's case), so the sizes
        are known already."""
        ids = tuple(ids)
        key = tuple(sizes)
        if not sized:
            self._size.update(zip(ids, key, strict=True))
            born = self._born
            self._dead.update(i for i in ids if i not in born)
        self._ops.append(("need", ids, None, now))
        if self.lock is not None:
            if self._match(self.lock, ids, now):
                self.lock.matches += 1
                self._misses = 0
                self._set_roles(self.lock, ids, now)
            else:
                self._misses += 1
                self.mismatches += 1
                if self._misses > self.tolerance:
                    self.lock = None
                    self.breaks += 1
                    self._cands = []
                    self._interval = self._skip = self._skipped = 0   # search from this call
        # the tensors' last uses and the last call of the same sizes, looked up once for the
        # search and the record (big dicts: each lookup is a cache miss)
        last = self._last
        ul = []                                  # (a loop: a comprehension is a call)
        for i in ids:
            ul.append(last.get(i, -1))
        kl = self._klast.get(key, -1)
        if self.lock is None:
            if self._cands or self._skip <= 0:
                self._search(ids, key, now, ul, kl)
                self._skipped = 0
                if self._cands or self.lock is not None:
                    self._interval = 0
                else:                                    # nothing found: back off
                    self._interval = min(2 * self._interval or 1, self.backoff)
                    self._skip = self._interval - 1
            else:
                self._skip -= 1
                self._skipped += 1
        # the record (inlined: once per need call)
        if self._end == self._first or now != self._end:   # first call, or a gap: restart
            self._reset_ring(now)
            ul = [last.get(i, -1) for i in ids]              # the lookups were stale
            kl = self._klast.get(key, -1)
        for i in ids:
            last[i] = now
        self._klast[key] = now
        w = self.window
        if self._end - self._first == w:                     # full: forget the oldest call
            self._forget_oldest()
        j = now % w
        self._calls[j] = ids
        self._keys[j] = key
        self._prevs[j] = tuple(ul)
        self._kprev[j] = kl
        self._end = now + 1

    # --- matching -----------------------------------------------------------------------------

    def _recorded(self, t: int) -> tuple[int, ...] | None:
        return self._calls[t % self.window] if self._first <= t < self._end else None

    def _match(self, c: _Candidate, ids: tuple[int, ...], now: int) -> bool:
        """Whether call `ids` at `now` repeats the call one lag ago (extending c's renaming)."""
        got = self._probe(c.lag, ids, now, c.fwd, c.inv)
        if got is None:
            return False
        new, same = got
        for x, h in new:
            c.fwd[x] = h
            c.inv[h] = x
        c.exact += same
        return True

    def _probe(self, lag: int, ids: tuple[int, ...], now: int, fwd: dict[int, int],
               inv: dict[int, int], births: list[int] | None = None
               ) -> tuple[list[tuple[int, int]], int] | None:
        """_match without changing anything: the new pairs of the renaming and the count of
        tensors the very same, or None if the call does not repeat the one `lag` ago.
        `births`: when each of `ids` was allocated (-1: before the detector knew), if known."""
        ref = now - lag
        if not self._first <= ref < self._end:
            return None
        rec = self._calls[ref % self.window]
        if len(rec) != len(ids):
            return None
        # (loops, not comprehensions: a locked detector probes every need call)
        new: list[tuple[int, int]] = []
        same = 0
        size, born = self._size, self._born
        k = -1
        for x, h in zip(ids, rec, strict=True):  # lengths checked
            k += 1
            if x == h:
                same += 1
                continue
            b = births[k] if births is not None else born.get(x, -1)
            if b < ref:                           # existed then, but was not used there
                return None
            m = fwd.get(x)
            if m is not None:
                if m != h:
                    return None
                continue
            if h in inv or size.get(h) != size.get(x):
                return None
            for xx, hh in new:
                if h == hh or x == xx:
                    return None
            new.append((x, h))
        return new, same

    def _uses_of(self, tid: int, t: int, most: int) -> list[int]:
        """The need times of `tid` in the window from `t` (one of them, or -1) back, newest
        first, at most `most`."""
        out: list[int] = []
        calls, prevs, w, first = self._calls, self._prevs, self.window, self._first
        while t >= first and len(out) < most:
            out.append(t)
            j = t % w
            t = prevs[j][calls[j].index(tid)]
        return out

    def _times_of_key(self, t: int, most: int) -> list[int]:
        """The times of the calls with the key of call `t` (or -1), newest first."""
        out: list[int] = []
        kprev, w, first = self._kprev, self.window, self._first
        while t >= first and len(out) < most:
            out.append(t)
            t = kprev[t % w]
        return out

    def _search(self, ids: tuple[int, ...], key: tuple[int, ...], now: int, ul: list[int],
                kl: int) -> None:
        """Probe the lags this call may repeat at; `ul` the last use of each of its tensors,
        `kl` the last call with its key (-1: none)."""
        # (loops, not comprehensions: a search runs on every call it does not back off from)
        alive = []
        lags = set()
        for c in self._cands:
            if self._match(c, ids, now):
                c.matches += 1
                alive.append(c)
                lags.add(c.lag)
        # earlier calls this one may repeat: the last uses of its tensors (a weight's last use
        # is one repetition ago), and the last calls with the same sizes
        # (each with the place in this call of the tensor whose use it is, -1 for a size match)
        tries: list[tuple[int, int]] = []
        k = 0
        for t in ul:
            if t >= 0:
                for u in self._uses_of(ids[k], t, 3):
                    tries.append((u, k))
            k += 1
        if kl >= 0:
            for t in self._times_of_key(kl, self.max_candidates):
                tries.append((t, -1))
        empty: dict[int, int] = {}
        births = None
        calls, w, first, end, n = self._calls, self.window, self._first, self._end, len(ids)
        for t, k in tries[:4 * self.max_candidates]:
            if len(alive) >= self.max_candidates:
                break
            lag = now - t
            if lag in lags:
                continue
            lags.add(lag)
            if k >= 0:
                # t is a use of ids[k], which existed before that call: _probe fails unless the
                # call then has the same length and ids[k] at the same place (skipped unprobed:
                # the same answer without a call)
                if not first <= t < end:
                    continue
                rec = calls[t % w]
                if len(rec) != n or rec[k] != ids[k]:
                    continue
            if births is None:                   # looked up once for all the probes
                born = self._born
                births = [born.get(x, -1) for x in ids]
            got = self._probe(lag, ids, now, empty, empty, births)  # new: no renaming yet
            if got is not None:
                new, same = got
                c = self._grown(lag, ids, now) if self._skipped else None
                if c is None:
                    c = _Candidate(lag, matches=1, exact=same, fwd=dict(new),
                                   inv={h: x for x, h in new})
                alive.append(c)
        if len(alive) > 1:
            alive.sort(key=lambda c: -c.matches)
        self._cands = alive[:self.max_candidates]
        if self._cands and self._cands[0].matches >= self.confirm \
                and self._cands[0].exact >= self.evidence:
            self.lock = self._cands[0]
            self._cands = []
            self._misses = 0
            self.locks += 1
            self.anchor = now - self.lock.lag + 1
            # The anchor window is the recorded repetition: the tensors allocated in it are
            # their own roles (also where they live on into the next repetition); every later
            # tensor takes the role of its counterpart one lag earlier.
            self.role = {x: x for x, b in self._born.items() if b >= self.anchor - 1}

    def _grown(self, lag: int, ids: tuple[int, ...], now: int) -> _Candidate | None:
        """A candidate at `lag` found after calls the search skipped (backoff), grown over
        them as a search at every call would have grown it: the run of consecutive calls up
        to this one that repeat the call one lag before, so its renaming (and so the
        predictions and the plan's trace) covers them too. None if this call does not extend
        that run (then the candidate starts here, as without skipped calls)."""
        c = _Candidate(lag)
        for t in range(now - self._skipped, now):
            rec = self._recorded(t)
            if rec is not None and self._match(c, rec, t):
                c.matches += 1
            elif c.matches:
                c = _Candidate(lag)
        if not self._match(c, ids, now):
            return None
        c.matches += 1
        return c

    def _set_roles(self, c: _Candidate, ids: tuple[int, ...], now: int) -> None:
        for x in ids:
            h = c.fwd.get(x)
            if h is not None and x not in self.role:
                self.role[x] = self.role.get(h, h)

    def _reset_ring(self, now: int) -> None:
        while self._first < self._end:
            self._forget_oldest()
        # No call is recorded now: the last uses kept for live tensors (_forget_oldest) go
        # too, or one at or after `now` (need numbers that went back: another counter) would
        # pass for a use in the new window and lead next_use's walk into overwritten slots.
        self._last.clear()
        self._first = self._end = now

    def _forget_oldest(self) -> None:
        t = self._first
        j = t % self.window
        old, okey = self._calls[j], self._keys[j]
        self._first = t + 1
        klast = self._klast
        if klast.get(okey) == t:                 # its key's last call: the key leaves
            del klast[okey]
        # A live tensor whose last use leaves the window keeps that time in _last (every
        # reader takes a time before _first as none: no lookup of each tensor of the oldest
        # call, which with 100k live tensors were cache misses); _last stays within the live
        # tensors and the dead ones used in the window. A dead one leaves with its last use.
        dead = self._dead
        if dead:
            last = self._last
            for i in old:
                if i in dead and last.get(i) == t:
                    dead.discard(i)
                    del last[i]
                    self._size.pop(i, None)
                    self.role.pop(i, None)

    # --- predictions --------------------------------------------------------------------------

    @property
    def lag(self) -> int | None:
        return self.lock.lag if self.lock is not None else None

    def next_use(self, tid: int, now: int) -> float:
        """Predicted time of the tensor's next need after `now` (INF: none predicted, or no
        lock)."""
        c = self.lock
        if c is None:
            return INF
        lag = c.lag
        # a tensor renamed one lag ago is used as its counterpart was (and, past that, not at
        # all: the next repetition has its own); a tensor that was not, like a weight, as
        # it was itself one lag ago
        r = c.fwd.get(tid, tid)
        t = self._last.get(r, -1)
        lo = now - lag
        if t <= lo or t < self._first:           # (a time before the window: none)
            return INF
        # the first use after lo: back along the chain (the uses of one repetition; each step
        # an earlier call of the window, so at most as many as it holds)
        calls, prevs, w, first = self._calls, self._prevs, self.window, self._first
        steps = self._end - first
        while steps > 0:
            j = t % w
            p = prevs[j][calls[j].index(r)]
            if p <= lo or p < first:
                return t + lag
            t = p
            steps -= 1
        raise AssertionError(f"repeat detector: the uses of tensor {r} do not end within the "
                             "window (a broken chain; please report)")

    def role_of(self, tid: int) -> int:
        return self.role.get(tid, tid)

    def phase(self, t: int) -> int:
        """Position of call `t` in the repetition (0 = the anchor's first call)."""
        assert self.lock is not None
        return (t - self.anchor) % self.lock.lag

    def plan_trace(self, copies: int = 3) -> Trace | None:
        """The recorded repetition (the calls after need `anchor - 1` up to the last need),
        `copies` times back to back; each copy renames the tensors the repetition allocates.
        Tensors it uses without allocating (weights) are allocated and written at the start.
        `meta["step_phase"][k]` is the phase of step k of the second copy, whose intervals
        (with a repetition before and after it, as in the steady state) the plan uses;
        `meta["middle"]` its first step, `meta["copy_starts"]` the first step of each copy;
        `meta["phases"]` the phase of every step; a tensor
        id modulo `meta["offset"]` is its role (the id in the first copy). None if the window
        no longer holds the repetition."""
        if self.lock is None:
            return None
        start = self.anchor - 1          # ops after this need call (boundary ops included)
        if not self._ops or self._ops[0][3] > start:
            return None
        ops = [(k, t, n) for k, t, n, when in self._ops
               if when > start or (when == start and k != "need")]
        if not any(k == "need" for k, _, _ in ops):
            return None
        last = max(i for i, (k, _, _) in enumerate(ops) if k == "need")
        ops = ops[:last + 1]
        allocated = {t for k, t, _ in ops if k == "alloc"}
        offset = 1 + max([*self._size, *allocated], default=0)
        mid = 1 if copies > 1 else 0
        tr = Trace(meta={"name": "repetition", "step_phase": [], "middle": 0, "phases": [],
                         "copies": copies, "copy_starts": []})
        live: set[int] = set()
        freed: set[int] = set()
        steps = 0
        last_need: set[int] = set()

        def ensure(t: int) -> bool:
            if t in freed:
                return False
            if t not in live:
                n = self._size.get(t % offset)
                if n is None:
                    return False
                tr.alloc(t, n)
                tr.write(t, n)
                live.add(t)
            return True
        # A tensor the repetition uses but was allocated before it (an activation of the
        # previous iteration kept for its backward pass) is, in the next copy, its counterpart
        # one lag later, which the repetition allocated (the lock's renaming knows it).
        inv = self.lock.inv
        for copy in range(copies):
            def ren(t: int, copy: int = copy) -> int:
                if not copy:
                    return t
                if t in allocated:
                    return t + copy * offset
                x = inv.get(t)
                if x is not None and x in allocated:
                    return x + (copy - 1) * offset
                return t
            tr.meta["copy_starts"].append(steps)
            if copy == mid:
                tr.meta["middle"] = steps
            phase = 0
            for k, t, n in ops:
                if k == "need":
                    ids = [x for x in (ren(y) for y in t) if ensure(x)]  # type: ignore[union-attr]
                    last_need = set(ids)
                    if ids:
                        tr.need(*ids)
                        steps += 1
                        tr.meta["phases"].append(phase)
                        if copy == mid:
                            tr.meta["step_phase"].append(phase)
                    phase += 1
                    continue
                x = ren(t)                               # type: ignore[arg-type]
                if k == "alloc":
                    if x in live or x in freed:
                        continue
                    tr.alloc(x, n)                       # type: ignore[arg-type]
                    live.add(x)
                elif not ensure(x):
                    continue
                elif k == "free":
                    tr.free(x)
                    live.discard(x)
                    freed.add(x)
                    last_need.discard(x)
                elif k == "write":
                    tr.write(x, n)                       # type: ignore[arg-type]
                elif k == "read":
                    tr.read(x, n)                        # type: ignore[arg-type]
                elif k == "updated" and x in last_need:
                    tr.updated(x)
        tr.meta["offset"] = offset
        return tr

    def state_size(self) -> int:
        """Entries held (bounded by the window and the live tensors; tested)."""
        c = self.lock
        return (2 * (self._end - self._first) + len(self._klast)
                + len(self._last) + len(self._size) + len(self._born) + len(self._dead)
                + len(self._ops) + len(self.role)
                + (len(c.fwd) + len(c.inv) if c else 0)
                + sum(len(x.fwd) + len(x.inv) for x in self._cands))

"""Card-memory allocator: best-fit placement with aligned starts, and compaction by moving down.

The allocator only plans: it keeps the map of blocks (resident tensors) and holes in card memory
and returns the moves a compaction needs; the manager turns them into card-to-card copies. Every
move goes to a lower address (a block slides down into the hole below it), so a move never needs
the driver's piecewise split for an overlapping move up, and the moves of one compaction, issued
in ascending order, never read bytes an earlier move of the same compaction wrote.

Alignment is a preference, never a reason to fail: a block starts at a multiple of `align` when
the hole has room for that, otherwise at the hole's first byte, and compaction packs without
padding when padding would leave the hole too small.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Move:
    """Block `key` relocated from `src` to `dst` (< src); `copy` is False for an empty block."""

    key: Hashable
    src: int
    size: int
    dst: int
    copy: bool


#: A map of more blocks than this is "large": compaction then looks at windows around its
#: LOCAL_HOLES largest holes only (see CardAllocator._slide), and cheapest_window likewise.
LARGE = 4096
#: ... and so is a map of more than MANY_SMALL blocks of SMALL_BLOCK bytes or less on average:
#: many small tensors. The whole-map searches cost some 4 us per block and miss-heavy call
#: (1-7 ms a call with 1k-20k live tensors of 64 B-4 KiB, whose compactions also copied
#: megabytes), while an 8 KiB tensor crosses PCIe in under 1 us: on such a map no search
#: saves the time it costs. (The benchmark's DNN traces never come near: their maps of more
#: than 128 blocks average 14 KiB and more.)
MANY_SMALL = 128
SMALL_BLOCK = 8 << 10
LOCAL_HOLES = 8
#: ... and follows windows over at most this many blocks in all; cheapest_window tries runs
#: at the first LOCAL_NEAR of the blocks it is given.
LOCAL_WALK = 256
LOCAL_NEAR = 32


#: The size index holds each hole as one int, length << _SHIFT | start: the order of (length,
#: start) pairs, but a bisect compares ints (a tuple per probe was two more objects to reach,
#: cache misses with thousands of holes). Capacities stay below 2 ** _SHIFT bytes.
_SHIFT = 48
_MASK = (1 << _SHIFT) - 1


class AllocatorInvariantError(AssertionError):
    """The block / hole map is inconsistent (a bug in the allocator; see `check`)."""


class CardAllocator:
    """Blocks and holes of card memory [0, capacity)."""

    def __init__(self, capacity: int, align: int = 64) -> None:
        if capacity <= 0:
            raise ValueError(f"card capacity must be positive, got {capacity}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align}")
        if capacity > _MASK:
            raise ValueError(f"card capacity {capacity} is above the allocator's 2**{_SHIFT} "
                             "bytes")
        self.capacity = capacity
        self.align = align
        self.used = 0
        # start -> (size, key); not kept sorted: on a large map a sorted list of the starts
        # cost a memmove of the whole list per placement and per eviction (~4 us each with
        # 20,000 blocks). Address order comes from the holes (see _blocks_in) or a sort.
        self._blocks: dict[int, tuple[int, Hashable]] = {}
        self._hstarts: list[int] = [0]                   # hole starts, sorted
        self._holes: dict[int, int] = {0: capacity}      # start -> length
        self._bysize: list[int] = [capacity << _SHIFT]   # length << _SHIFT | start, sorted

    # --- queries ------------------------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def largest_hole(self) -> int:
        return self._bysize[-1] >> _SHIFT if self._bysize else 0

    def blocks(self) -> list[tuple[int, int, Hashable]]:
        """(start, size, key) of every block, in address order."""
        return [(s, *self._blocks[s]) for s in sorted(self._blocks)]

    def holes(self) -> list[tuple[int, int]]:
        return [(s, self._holes[s]) for s in self._hstarts]

    # --- holes --------------------------------------------------------------------------------

    def _add_hole(self, start: int, length: int) -> None:
        if length <= 0:
            return
        bisect.insort(self._hstarts, start)
        self._holes[start] = length
        bisect.insort(self._bysize, length << _SHIFT | start)

    def _del_hole(self, start: int) -> int:
        length = self._holes.pop(start)
        del self._hstarts[bisect.bisect_left(self._hstarts, start)]
        del self._bysize[bisect.bisect_left(self._bysize, length << _SHIFT | start)]
        return length

    def _fit(self, start: int, length: int, size: int) -> int | None:
        """Where a block of `size` goes in the hole: aligned if there is room, else its start."""
        a = -(-start // self.align) * self.align
        if a + size <= start + length:
            return a
        return start if size <= length else None

    def _take(self, hole: int, at: int, size: int, key: Hashable, index: int | None = None
              ) -> None:
        """Block `key` of `size` bytes at `at` in the hole starting at `hole` (`index`: the
        hole's place in _bysize, if the caller knows it)."""
        length = self._holes[hole]
        rest = hole + length - at - size
        if at == hole and rest > 0:
            # the common case, the block at the hole's start: the rest of the hole keeps the
            # hole's place in the address order (no delete and insert in _hstarts)
            hs = self._hstarts
            hs[bisect.bisect_left(hs, hole)] = at + size
            del self._holes[hole]
            self._holes[at + size] = rest
            bs = self._bysize
            del bs[index if index is not None else bisect.bisect_left(bs, length << _SHIFT | hole)]
            bisect.insort(bs, rest << _SHIFT | (at + size))
        else:
            self._del_hole(hole)
            self._add_hole(hole, at - hole)
            self._add_hole(at + size, rest)
        self._blocks[at] = (size, key)
        self.used += size

    # --- allocation ---------------------------------------------------------------------------

    def alloc(self, size: int, key: Hashable) -> int | None:
        """Best fit: the smallest hole that holds `size` (aligned if any such hole allows)."""
        if size <= 0:
            raise ValueError(f"block size must be positive, got {size}")
        bs = self._bysize
        i = bisect.bisect_left(bs, size << _SHIFT)
        if i == len(bs):
            return None
        k = bs[i]
        length, start = k >> _SHIFT, k & _MASK
        at = -(-start // self.align) * self.align      # the first candidate (_fit), inlined
        if at + size <= start + length:
            self._take(start, at, size, key, i)          # (the hole's place in _bysize: i)
            return at
        fallback = None
        for k in bs[i:i + 8]:                         # a few candidates for an aligned fit
            length, start = k >> _SHIFT, k & _MASK
            at = self._fit(start, length, size)
            if at is not None and at % self.align == 0:
                self._take(start, at, size, key)
                return at
            if fallback is None:
                fallback = start
        if fallback is None:
            return None
        self._take(fallback, fallback, size, key)
        return fallback

    def alloc_run(self, sizes: Sequence[int], keys: Sequence[Hashable]) -> list[int] | None:
        """Place blocks back to back in one hole (so one transfer can move them all), or None."""
        total = sum(sizes)
        i = bisect.bisect_left(self._bysize, total << _SHIFT)
        if i == len(self._bysize):
            return None
        k = self._bysize[i]
        length, start = k >> _SHIFT, k & _MASK
        at = self._fit(start, length, total)
        assert at is not None
        out = []
        for size, key in zip(sizes, keys, strict=True):
            self._take(self._hole_at(at), at, size, key)
            out.append(at)
            at += size
        return out

    def _hole_at(self, addr: int) -> int:
        """Start of the hole containing `addr`."""
        i = bisect.bisect_right(self._hstarts, addr) - 1
        start = self._hstarts[i]
        assert start <= addr < start + self._holes[start]
        return start

    def free_block(self, start: int) -> None:
        """Return a block to the holes, merging with its neighbours. (_del_hole and _add_hole
        inlined: the merged hole takes a neighbour's place in _hstarts, whose index is known.)"""
        size, _ = self._blocks.pop(start)
        self.used -= size
        end = start + size
        hs, holes, bs = self._hstarts, self._holes, self._bysize
        i = bisect.bisect_left(hs, start)
        after = i < len(hs) and hs[i] == end              # a hole right after the block
        if after:
            n = holes.pop(end)
            del bs[bisect.bisect_left(bs, n << _SHIFT | end)]
            end += n
        prev = hs[i - 1] if i > 0 else -1
        if prev >= 0 and prev + holes[prev] == start:    # ... and one right before
            del bs[bisect.bisect_left(bs, holes[prev] << _SHIFT | prev)]
            if after:
                del hs[i]
            start = prev
        elif after:
            hs[i] = start
        else:
            hs.insert(i, start)
        holes[start] = end - start
        bisect.insort(bs, (end - start) << _SHIFT | start)

    # --- compaction ---------------------------------------------------------------------------

    def compact_for(self, size: int, loaded: Callable[[Hashable], bool]) -> list[Move]:
        """Move blocks so a hole of at least `size` bytes exists; the moves, in order.

        Two ways, the one that copies fewer bytes (of blocks that hold data: `loaded(key)`) wins:
        - relocate: the `size`-byte window at a hole whose few blocks fit in holes elsewhere;
          each moves once, to a place that does not overlap the window (up or down);
        - slide: the address range, starting at a hole, whose holes add up to `size`; every
          block inside slides down to its start, so the holes become one at its top.
        """
        if size > self.free:
            raise ValueError(f"compaction cannot make a {size}-byte hole with {self.free} bytes "
                             "free; evict first")
        slide_cost, slide = self._slide(size, loaded)
        reloc = self._best_relocation(size, loaded, slide_cost)
        if reloc is not None:
            moves = []
            lo, hi, inside = reloc
            # Place every block first (as _fits_elsewhere did: largest first), then free the
            # old places, so no freed block merges a hole into the window meanwhile.
            for s, ln, key in sorted(inside, key=lambda b: -b[1]):
                at = self._alloc_avoiding(ln, key, lo, hi)
                moves.append(Move(key, s, ln, at, loaded(key)))
            for m in moves:
                self.free_block(m.src)
            assert self.largest_hole() >= size, "relocation left no hole large enough"
            return moves
        assert slide is not None
        lo, hi, inside = slide
        moves = self._pack(lo, hi, inside, size, loaded)
        assert self.largest_hole() >= size, "compaction left no hole large enough"
        return moves

    @property
    def large(self) -> bool:
        """More than LARGE blocks, or more than MANY_SMALL small ones (SMALL_BLOCK bytes on
        average): the searches below stay local (O(window), not O(map))."""
        n = len(self._blocks)
        return n > LARGE or (n > MANY_SMALL and self.used <= SMALL_BLOCK * n)

    def compaction_cost(self, size: int, loaded: Callable[[Hashable], bool],
                        limit: int | None = None) -> int:
        """Bytes `compact_for(size, loaded)` would copy (nothing is changed). For a large map
        whose local windows (see _slide) make no room, an estimate: the capacity (so costly
        that evicting neighbours is worth considering), not an O(map) search. With `limit`,
        only whether it copies less: windows are followed only while they copy less than
        `limit` bytes, and the answer is `limit` (or more) when none does."""
        slide_cost, slide = self._slide(size, loaded, exact=False, limit=limit)
        if slide is None:
            if limit is None:
                return self.capacity
            reloc = self._best_relocation(size, loaded, limit)
            if reloc is None:
                return max(limit, 0)
            return sum(ln for _, ln, key in reloc[2] if loaded(key))
        reloc = self._best_relocation(size, loaded, slide_cost)
        if reloc is None:
            return slide_cost
        return sum(ln for _, ln, key in reloc[2] if loaded(key))

    def key_at(self, start: int) -> Hashable:
        """The key of the block starting at `start`."""
        return self._blocks[start][1]

    def cheapest_window(self, size: int, cost: Callable[[Hashable], float | None],
                        near: list[int] | None = None) -> tuple[float, list[int]] | None:
        """The run of adjacent holes and blocks, at least `size` bytes long, whose blocks all
        have a cost (None: the block must stay) and add up to the least: (cost, block starts).
        Freeing those blocks leaves one hole of at least `size` bytes. For a large map with
        `near` (the starts of the blocks that have a cost, best first), only runs starting at
        one of the first LOCAL_NEAR of them or at the hole just below it are tried (O(run)
        each, not O(map))."""
        if near is not None and self.large:
            return self._window_near(size, cost, near)
        segs = sorted([(s, self._holes[s], None) for s in self._hstarts]
                      + [(s, ln, key) for s, (ln, key) in self._blocks.items()],
                      key=lambda x: x[0])
        costs = [0.0 if key is None else cost(key) for _, _, key in segs]
        best: tuple[float, int, int] | None = None
        j, length, total = 0, 0, 0.0
        for k, (_, ln, _) in enumerate(segs):
            ck = costs[k]
            if ck is None:                      # a block that stays: no window spans it
                j, length, total = k + 1, 0, 0.0
                continue
            length += ln
            total += ck
            while j < k and length - segs[j][1] >= size:
                length -= segs[j][1]
                total -= costs[j]               # type: ignore[operator]
                j += 1
            if length >= size and (best is None or total < best[0]):
                best = (total, j, k)
        if best is None:
            return None
        c, j, k = best
        return c, [s for s, _, key in segs[j:k + 1] if key is not None]

    def window_near(self, size: int, cost: Callable[[Hashable], float | None],
                    near: list[int]) -> tuple[float, list[int]] | None:
        """cheapest_window's local search on a large map: runs that start at one of the first
        LOCAL_NEAR blocks of `near` or at the hole just below it."""
        return self._window_near(size, cost, near)

    def _window_near(self, size: int, cost: Callable[[Hashable], float | None],
                     near: list[int]) -> tuple[float, list[int]] | None:
        holes, blocks, hstarts = self._holes, self._blocks, self._hstarts
        cap = self.capacity
        best: tuple[float, list[int]] | None = None
        bisect_right = bisect.bisect_right
        for b in near[:LOCAL_NEAR]:
            # The run from the hole just below b, if there is one, holds the run from b with
            # more room: it reaches `size` no later, over a prefix of the same blocks, so it
            # is never the costlier of the two and the run from b need not be tried.
            i = bisect_right(hstarts, b - 1) - 1
            at = b
            if i >= 0:
                h = hstarts[i]
                if h + holes[h] == b:
                    at = h
            length, total, inside = 0, 0.0, []
            while length < size and at < cap and len(inside) < LOCAL_WALK:
                ln = holes.get(at)
                if ln is None:
                    ln, key = blocks[at]
                    c = cost(key)
                    if c is None:
                        break
                    total += c
                    inside.append(at)
                    if best is not None and total >= best[0]:
                        break
                length += ln
                at += ln
            if length >= size and (best is None or total < best[0]):
                best = (total, inside)
        return best

    def _alloc_avoiding(self, size: int, key: Hashable, lo: int, hi: int) -> int:
        """Best fit for `size` in a hole wholly outside [lo, hi) (the rule _fits_elsewhere
        simulates)."""
        i = bisect.bisect_left(self._bysize, size << _SHIFT)
        for k in self._bysize[i:]:
            length, start = k >> _SHIFT, k & _MASK
            if start < hi and lo < start + length:
                continue
            at = self._fit(start, length, size)
            assert at is not None
            self._take(start, at, size, key)
            return at
        raise AssertionError("relocation target vanished")   # checked by _best_relocation

    def _blocks_in(self, lo: int, hi: int) -> Iterator[tuple[int, int, Hashable]]:
        """(start, size, key) of the blocks overlapping [lo, hi), in address order: a walk over
        the segments from the last hole starting at or below lo (address 0 if none), so it
        costs the blocks between two holes, not a sorted index of every block."""
        i = bisect.bisect_right(self._hstarts, lo) - 1
        at = self._hstarts[i] if i >= 0 else 0
        holes, blocks = self._holes, self._blocks
        while at < hi:
            ln = holes.get(at)
            if ln is None:
                ln, key = blocks[at]
                if at + ln > lo:
                    yield at, ln, key
            at += ln

    def _best_relocation(self, size: int, loaded: Callable[[Hashable], bool], limit: int
                         ) -> tuple[int, int, list[tuple[int, int, Hashable]]] | None:
        """(lo, hi, blocks) of the cheapest window of `size` bytes at a hole whose blocks fit
        elsewhere, if it copies fewer than `limit` bytes."""
        best: tuple[int, int, list[tuple[int, int, Hashable]]] | None = None
        best_cost = limit
        large = self.large
        starts = self._hstarts if not large else [k & _MASK for k in self._bysize[-LOCAL_HOLES:]]
        for hstart in starts:
            hend = hstart + self._holes[hstart]
            for lo in (hstart, hend - size):          # window from the hole's start or to its end
                hi = lo + size
                if lo < 0 or hi > self.capacity:
                    continue
                # blocks overlapping [lo, hi): they all have to leave
                inside, cost = [], 0
                for b in self._blocks_in(lo, hi):
                    inside.append(b)
                    cost += b[1] if loaded(b[2]) else 0
                    if cost >= best_cost:
                        break
                if cost >= best_cost or not inside:
                    continue
                span_lo = min(lo, inside[0][0])
                span_hi = max(hi, inside[-1][0] + inside[-1][1])
                sizes = [ln for _, ln, _ in inside]
                if (self._fits_elsewhere_fast(sizes, span_lo, span_hi) if large
                        else self._fits_elsewhere(sizes, span_lo, span_hi)):
                    best, best_cost = (span_lo, span_hi, inside), cost
        return best

    def _fits_elsewhere(self, sizes: list[int], lo: int, hi: int) -> bool:
        """Whether the blocks, largest first, fit holes wholly outside [lo, hi) by the rule of
        _alloc_avoiding (simulated on a copy of the holes)."""
        avail = []                                # (length, start), sorted
        for k in self._bysize:
            ln, s = k >> _SHIFT, k & _MASK
            if s + ln <= lo or s >= hi:
                avail.append((ln, s))
        for n in sorted(sizes, reverse=True):
            j = bisect.bisect_left(avail, (n, -1))
            if j == len(avail):
                return False
            ln, s = avail.pop(j)
            at = self._fit(s, ln, n)
            assert at is not None
            for piece in ((at - s, s), (s + ln - at - n, at + n)):
                if piece[0] > 0:
                    bisect.insort(avail, piece)
        return True

    def _fits_elsewhere_fast(self, sizes: list[int], lo: int, hi: int) -> bool:
        """Like _fits_elsewhere, for a large map: each block gets a hole of its own (not
        reusing a hole's rest, so it may say no where _fits_elsewhere says yes, never the
        reverse), found by bisect instead of copying the hole index."""
        used: set[int] = set()
        for n in sorted(sizes, reverse=True):
            i = bisect.bisect_left(self._bysize, n << _SHIFT)
            for k in self._bysize[i:i + 64]:
                ln, st = k >> _SHIFT, k & _MASK
                if st in used or (st < hi and lo < st + ln) or self._fit(st, ln, n) is None:
                    continue
                used.add(st)
                break
            else:
                return False
        return True

    def _slide(self, size: int, loaded: Callable[[Hashable], bool], exact: bool = True,
               limit: int | None = None
               ) -> tuple[int, tuple[int, int, list[tuple[int, int, Hashable]]] | None]:
        """(cost, (lo, hi, blocks)) of the cheapest slide: over every window of the map, or,
        for a large map, over the windows starting at its LOCAL_HOLES largest holes, LOCAL_WALK
        blocks in all (so a compaction costs O(window), not O(map), with 100k tensors on the
        card). When those make no room: the whole map if `exact`, else (0, None). With `limit`
        (large map, not `exact`), windows that copy `limit` bytes or more are not followed."""
        if not self.large:
            cost, (j, k, segs) = self._best_slide(size, loaded)
            return cost, (segs[j][0], segs[k][0] + segs[k][1],
                          [(s, ln, key) for s, ln, key in segs[j:k + 1] if key is not None])
        best: tuple[int, tuple[int, int, list[tuple[int, int, Hashable]]]] | None = None
        holes, blocks = self._holes, self._blocks
        budget = LOCAL_WALK
        for k in reversed(self._bysize[-LOCAL_HOLES:]):
            h = k & _MASK
            at, free, cost = h, 0, 0
            inside: list[tuple[int, int, Hashable]] = []
            while free < size and at < self.capacity and len(inside) < budget:
                ln = holes.get(at)
                if ln is not None:
                    free += ln
                else:
                    ln, key = blocks[at]
                    inside.append((at, ln, key))
                    if loaded(key):
                        cost += ln
                        if (best is not None and cost >= best[0]) or (
                                limit is not None and cost >= limit):
                            break
                at += ln
            if free >= size and (best is None or cost < best[0]) and (
                    limit is None or cost < limit):
                best = (cost, (h, at, inside))
            budget -= len(inside)
            if budget <= 0:
                break
        if best is None:                  # the free bytes lie spread out, or below the holes
            if not exact:
                return 0, None
            cost, (j, k, segs) = self._best_slide(size, loaded)
            return cost, (segs[j][0], segs[k][0] + segs[k][1],
                          [(s, ln, key) for s, ln, key in segs[j:k + 1] if key is not None])
        return best

    def _best_slide(self, size: int, loaded: Callable[[Hashable], bool]):
        """(cost, (first hole index, last segment index, segments)) of the cheapest slide."""
        # Address-ordered segments: holes and blocks.
        segs = sorted([(s, self._holes[s], None) for s in self._hstarts]
                      + [(s, ln, key) for s, (ln, key) in self._blocks.items()],
                      key=lambda x: x[0])
        n = len(segs)
        free = np.zeros(n + 1, dtype=np.int64)
        cost = np.zeros(n + 1, dtype=np.int64)
        free[1:] = np.cumsum([ln if k is None else 0 for _, ln, k in segs])
        cost[1:] = np.cumsum([ln if k is not None and loaded(k) else 0 for _, ln, k in segs])
        hole_idx = np.array([i for i, (_, _, k) in enumerate(segs) if k is None], dtype=np.int64)
        # For the window starting at hole j: the first segment k where holes j..k add up.
        ends = np.searchsorted(free, free[hole_idx] + size, side="left") - 1
        ok = ends < n
        hole_idx, ends = hole_idx[ok], ends[ok]
        costs = cost[ends + 1] - cost[hole_idx + 1]
        best = int(np.argmin(costs))          # ties: the lowest window
        return int(costs[best]), (int(hole_idx[best]), int(ends[best]), segs)

    def _pack(self, lo: int, hi: int, inside: list[tuple[int, int, Hashable]], size: int,
              loaded: Callable[[Hashable], bool]) -> list[Move]:
        def layout(align: int) -> list[int]:
            cur, out = lo, []
            for s, ln, _ in inside:
                a = -(-cur // align) * align
                at = a if a <= s else s          # never move up; padding only if it fits
                out.append(at)
                cur = at + ln
            return out
        new = layout(self.align)
        top = new[-1] + inside[-1][1] if inside else lo
        if hi - top < size:
            new = layout(1)
        # Rebuild the window: drop its holes and blocks, then add them back packed.
        for s in self._hstarts[bisect.bisect_left(self._hstarts, lo):
                               bisect.bisect_left(self._hstarts, hi)]:
            self._del_hole(s)
        moves = []
        for (s, ln, key), at in zip(inside, new, strict=True):
            del self._blocks[s]
            if at != s:
                moves.append(Move(key, s, ln, at, loaded(key)))
        cur = lo
        for (_, ln, key), at in zip(inside, new, strict=True):
            self._add_hole(cur, at - cur)
            self._blocks[at] = (ln, key)
            cur = at + ln
        self._add_hole(cur, hi - cur)
        return moves

    # --- checking -----------------------------------------------------------------------------

    def check(self) -> None:
        """Raise AllocatorInvariantError unless blocks and holes tile [0, capacity) exactly."""
        segs = sorted([(s, self._holes[s], True) for s in self._hstarts]
                      + [(s, ln, False) for s, (ln, _) in self._blocks.items()])
        cur, prev_hole = 0, False
        for s, ln, is_hole in segs:
            if s != cur or ln <= 0:
                raise AllocatorInvariantError(f"segment at {s:#x} (+{ln}) does not start at "
                                              f"{cur:#x}: overlap or gap")
            if is_hole and prev_hole:
                raise AllocatorInvariantError(f"adjacent holes at {s:#x} were not merged")
            cur, prev_hole = s + ln, is_hole
        if cur != self.capacity:
            raise AllocatorInvariantError(f"segments end at {cur:#x}, capacity {self.capacity:#x}")
        if self._bysize != sorted(ln << _SHIFT | s for s, ln in self._holes.items()):
            raise AllocatorInvariantError("size index out of step with the holes")
        if self.used != sum(ln for ln, _ in self._blocks.values()):
            raise AllocatorInvariantError("used bytes out of step with the blocks")

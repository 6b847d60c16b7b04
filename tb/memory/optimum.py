"""The fewest bytes any whole-tensor manager moves on a trace, by exhaustive search: the
independent check of `pyhost.memory.bound.lower_bound` on small traces."""

from __future__ import annotations

from functools import cache

from pyhost.memory.bound import BoundError
from pyhost.memory.trace import Trace


def exact_optimum(trace: Trace, capacity: int) -> int:
    """The fewest bytes any whole-tensor manager moves, by exhaustive search (small traces only).

    Independent of the interval model: it simulates residency and dirtiness call by call, lets
    the manager evict any subset of resident tensors before each need, and knows the future (a
    dirty tensor whose bytes are never needed again is dropped without a write-back).
    """
    recs = trace.records
    sizes = trace.sizes()
    n = len(recs)

    def bytes_needed_later(t: int, i: int) -> bool:
        for op, x, size, _ in recs[i + 1:]:
            ids = x if op == "need" else (x,)
            if t not in ids:
                continue
            if op in ("need", "read"):
                return True
            if op == "write":
                return size < sizes[t]
            if op == "free":
                return False
        return False

    inf = float("inf")

    @cache
    def best(i: int, res: frozenset[int], dirty: frozenset[int], content: frozenset[int]
             ) -> float:
        if i == n:
            return 0
        op, t, size, _ = recs[i]
        if op == "alloc":
            return best(i + 1, res, dirty, content)
        if op == "updated":
            return best(i + 1, res, dirty | {t} if sizes[t] else dirty, content | {t})
        if op == "read":
            cost = sizes[t] if t in dirty else 0
            return cost + best(i + 1, res, dirty - {t}, content)
        if op == "write":
            cost = sizes[t] if t in dirty and size < sizes[t] else 0
            return cost + best(i + 1, res - {t}, dirty - {t}, content | {t})
        if op == "free":
            return best(i + 1, res - {t}, dirty - {t}, content - {t})
        need = {x for x in t if sizes[x]}
        load = sum(sizes[x] for x in need - res if x in content)
        others = sorted(res - need)
        out = inf
        for mask in range(1 << len(others)):
            evict = {others[j] for j in range(len(others)) if mask >> j & 1}
            keep = res - evict
            if sum(sizes[x] for x in keep | need) > capacity:
                continue
            wb = sum(sizes[x] for x in evict & dirty if bytes_needed_later(x, i))
            out = min(out, load + wb + best(i + 1, frozenset(keep | need), dirty - evict,
                                            content))
        return out

    r = best(0, frozenset(), frozenset(), frozenset())
    if r == inf:
        raise BoundError("the trace cannot run at this capacity")
    return int(r)

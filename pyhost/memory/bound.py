"""A lower bound on the bytes any memory manager must move for a trace: the interval LP.

Model (docs/memory-manager.md has the derivation). Steps are the trace's need calls. Between two
consecutive needs a and b of a tensor (with no host write in between) lies a *reuse interval*;
a manager either keeps the tensor on the card for the whole interval or drops it at some point,
and then pays the reload (its size) at b, plus one write-back per dirty version that is dropped
while its bytes are still needed. Every other transfer is compulsory: the first upload of each
host-written version, and the write-back of every card-updated version the host reads.

    minimise   sum_i s_i d_i + sum_v s_v y_v                       (+ compulsory bytes)
    subject to sum_{i spans k} s_i (1 - d_i) + need_k <= C         for every step k
               y_v >= d_i                                          for i in version v
               0 <= d_i, y_v <= 1

where `i spans k` means a < k < b, need_k is the bytes of the distinct tensors of step k and v
ranges over dirty versions that the host never reads. With d, y integer this is the exact
optimum over managers that move whole tensors (`interval_milp`); the LP relaxation
(`lower_bound`, HiGHS through scipy) is a lower bound on it. The tests check both against an
exhaustive search on small traces (tb.memory.optimum.exact_optimum).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from pyhost.memory.trace import Trace

#: A plan from an integer solution no further than this (relative) from optimal is used.
PLAN_GAP = 0.01


class BoundError(ValueError):
    """The trace cannot run at this capacity (one need call is larger), or the solver failed."""


@dataclass
class IntervalModel:
    """The trace reduced to reuse intervals; sizes are card bytes."""

    steps: int
    need_bytes: np.ndarray                 # per step
    compulsory: int                        # bytes every manager moves
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # interval a
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))     # interval b
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    version: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: clean
    tensor: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # trace id
    version_size: dict[int, int] = field(default_factory=dict)   # unread dirty versions
    #: per interval: its reload counts in the objective (count_from, below); all by default
    counted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: unread dirty versions whose write-back counts (created at or after count_from)
    version_counted: set[int] = field(default_factory=set)
    #: per interval: False for a dead tail (hold_dead): dropping it costs no reload
    reload: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


def interval_model(trace: Trace, card_sizes: dict[int, int] | None = None,
                   count_from: int = 0, hold_dead: bool = False) -> IntervalModel:
    """Reuse intervals, versions and compulsory bytes of `trace` (card_sizes: encoded sizes).

    `count_from` (a record index) counts only the bytes a manager must move after that record:
    reloads at needs after it, write-backs of versions created after it, and compulsory
    transfers of versions written or created after it. Every step still has its capacity row,
    so this bounds the bytes any manager moves from that record on, provided it moves a tensor
    back to the card only in the need call that uses it (no manager here reloads
    speculatively); the benchmark uses it to judge a manager from a trace's second iteration on.

    `hold_dead` models what a manager that does not know the future must do with a dirty
    tensor after its last need: keep it on the card until it is freed (or overwritten), or
    write it back. Each such *dead tail* is an interval from the last need to the free (or to
    the end of the trace, for a tensor still alive and dirty there) whose drop costs the
    version's write-back and no reload. The bound leaves them out (a manager that knows the
    future drops dead bytes for free); the repeat detector's plans use them.
    """
    host_sizes = trace.sizes()
    sizes = dict(host_sizes)
    if card_sizes:
        sizes.update(card_sizes)
    prev: dict[int, int] = {}            # tensor -> step of its previous need (chain intact)
    content: set[int] = set()            # tensors whose bytes matter (written or updated)
    dirty: dict[int, int] = {}           # tensor -> its current unread card version
    read_versions: set[int] = set()
    vsize: dict[int, int] = {}
    starts, ends, isz, iver, itensor, need_bytes = [], [], [], [], [], []
    compulsory = 0
    nver = 0
    step = -1
    written_at: dict[int, int] = {}      # tensor -> record index of its last host write
    born: dict[int, int] = {}            # version -> record index of its update
    icount: list[bool] = []
    ireload: list[bool] = []

    def tail(t: int, rec_i: int) -> None:
        """The dirty tensor t leaves the card without a write-back: a dead tail."""
        p = prev.get(t)
        if hold_dead and p is not None and t in dirty and sizes[t]:
            starts.append(p)
            ends.append(step + 1)
            isz.append(sizes[t])
            iver.append(dirty[t])
            itensor.append(t)
            icount.append(born[dirty[t]] >= count_from)
            ireload.append(False)
    for rec_i, (op, t, size, _) in enumerate(trace.records):
        late = rec_i >= count_from
        if op == "need":
            step += 1
            ids = dict.fromkeys(t)
            need_bytes.append(sum(sizes[x] for x in ids))
            for x in ids:
                if not sizes[x]:
                    continue
                p = prev.get(x)
                if x not in content:
                    pass                          # no bytes to keep yet: dropping is free
                elif p is None:
                    if written_at.get(x, -1) >= count_from:
                        compulsory += sizes[x]
                else:
                    starts.append(p)
                    ends.append(step)
                    isz.append(sizes[x])
                    iver.append(dirty.get(x, -1))
                    itensor.append(x)
                    icount.append(late)
                    ireload.append(True)
                prev[x] = step
        elif op == "updated":
            content.add(t)
            if sizes[t]:
                dirty[t] = nver
                vsize[nver] = sizes[t]
                born[nver] = rec_i
                nver += 1
        elif op == "write":
            if size < host_sizes[t] and t in dirty:
                read_versions.add(dirty[t])
                if born[dirty[t]] >= count_from:
                    compulsory += sizes[t]
            else:
                tail(t, rec_i)
            content.add(t)
            written_at[t] = rec_i
            dirty.pop(t, None)
            prev.pop(t, None)
        elif op == "read":
            if t in dirty:
                v = dirty.pop(t)
                read_versions.add(v)
                if born[v] >= count_from:
                    compulsory += sizes[t]
        elif op == "free":
            tail(t, rec_i)
            prev.pop(t, None)
            dirty.pop(t, None)
            content.discard(t)
        # "alloc" changes nothing on the card
    if hold_dead:
        # a dirty tensor still alive at the end: its bytes are on the card until the end, or
        # were written back (the trace may go on; a manager that keeps data cannot lose them)
        for t in list(dirty):
            tail(t, len(trace.records))
    ver = np.array(iver, dtype=np.int64)
    if ver.size:
        ver[np.isin(ver, list(read_versions))] = -1
    used = set(ver[ver >= 0].tolist())
    return IntervalModel(step + 1, np.array(need_bytes, dtype=np.int64), compulsory,
                         np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64),
                         np.array(isz, dtype=np.int64), ver,
                         tensor=np.array(itensor, dtype=np.int64),
                         version_size={v: vsize[v] for v in used},
                         counted=np.array(icount, dtype=bool),
                         version_counted={v for v in used if born[v] >= count_from},
                         reload=np.array(ireload, dtype=bool))


@dataclass(frozen=True)
class BoundResult:
    """A lower bound in bytes. With integer=True, `bound` is the MILP's proven dual bound (its
    optimum when `optimal`), never below the LP relaxation `lp`; `schedule` is the cost of the
    best integer solution HiGHS found (an achievable cost in the model, ignoring fragmentation)."""

    bound: float            # bytes: compulsory + proven lower bound on the objective
    compulsory: int
    variables: int
    constraints: int
    seconds: float
    integer: bool
    lp: float = 0.0
    optimal: bool = True
    schedule: float | None = None


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS's MIP solver prints a few diagnostics from C++ to file descriptor 1; hide them."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _program(m: IntervalModel, capacity: int):
    """(c, A, lb, ub-rows, bounds, n_d) of the program in units of `capacity` bytes."""
    if m.steps and int(m.need_bytes.max()) > capacity:
        k = int(np.argmax(m.need_bytes))
        raise BoundError(f"need call {k} needs {int(m.need_bytes[k])} bytes, more than the "
                         f"capacity {capacity}: the trace cannot run")
    long = np.flatnonzero(m.end - m.start >= 2)       # intervals that span at least one step
    a, b = m.start[long], m.end[long]
    s = m.size[long].astype(np.float64) / capacity
    cost = s.copy()
    if m.counted.size:
        cost[~m.counted[long]] = 0.0
    if m.reload.size:
        cost[~m.reload[long]] = 0.0
    ver = m.version[long]
    n_d = long.size
    # occupancy of kept intervals per step: difference array over (a, b)
    occ = np.zeros(m.steps + 1)
    np.add.at(occ, a + 1, s)
    np.add.at(occ, b, -s)
    spanned = np.cumsum(occ)[:m.steps]
    rhs = m.need_bytes / capacity + spanned - 1.0      # bytes that must be dropped at step k
    steps = np.flatnonzero(rhs > 1e-12)
    vers = sorted(set(ver[ver >= 0].tolist()))
    vidx = {v: n_d + j for j, v in enumerate(vers)}
    n = n_d + len(vers)
    c = np.concatenate([cost, np.array([m.version_size[v] / capacity
                                        if v in m.version_counted else 0.0 for v in vers])])
    # capacity rows: sum_{i spans k} s_i d_i >= rhs_k
    rows, cols, vals = [], [], []
    row_of = {int(k): r for r, k in enumerate(steps)}
    lengths = b - a - 1
    if n_d and steps.size:
        rep = np.repeat(np.arange(n_d), lengths)
        offs = np.arange(rep.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        ks = a[rep] + 1 + offs
        keep = np.isin(ks, steps)
        rows = [row_of[int(k)] for k in ks[keep]]
        cols = rep[keep].tolist()
        vals = s[rep[keep]].tolist()
    ncap = steps.size
    A_cap = sparse.csr_matrix((vals, (rows, cols)), shape=(ncap, n))
    # version rows: y_v - d_i >= 0
    dv = np.flatnonzero(ver >= 0)
    A_ver = sparse.csr_matrix(
        (np.concatenate([np.ones(dv.size), -np.ones(dv.size)]),
         (np.concatenate([np.arange(dv.size)] * 2),
          np.concatenate([[vidx[int(v)] for v in ver[dv]], dv]).astype(np.int64))),
        shape=(dv.size, n))
    A = sparse.vstack([A_cap, A_ver]).tocsr()
    lb = np.concatenate([rhs[steps], np.zeros(dv.size)])
    return c, A, lb, n_d, n


def lower_bound(trace: Trace, capacity: int, *, integer: bool = False,
                card_sizes: dict[int, int] | None = None,
                time_limit: float | None = None, count_from: int = 0,
                hold_dead: bool = False) -> BoundResult:
    """The interval LP bound in bytes; with integer=True the MILP's proven bound (>= the LP).

    A MILP stopped by `time_limit` still gives a valid lower bound (HiGHS's dual bound).
    `count_from`: bound the bytes moved after that record only; `hold_dead`: for managers that
    cannot drop dead dirty bytes (see `interval_model`).
    """
    t0 = time.perf_counter()
    m = interval_model(trace, card_sizes, count_from, hold_dead)
    c, A, lb, n_d, n = _program(m, capacity)
    comp = m.compulsory
    if n == 0 or A.shape[0] == 0:
        return BoundResult(float(comp), comp, n, 0, time.perf_counter() - t0, integer,
                           float(comp), True, float(comp))
    res = linprog(c, A_ub=-A, b_ub=-lb, bounds=(0, 1), method="highs")
    if res.status != 0:
        raise BoundError(f"LP failed: {res.message}")
    lp = comp + float(res.fun) * capacity
    if not integer:
        return BoundResult(lp, comp, n, A.shape[0], time.perf_counter() - t0, False, lp)
    opts = {"time_limit": time_limit} if time_limit else {}
    with _quiet_stdout():
        r = milp(c, constraints=LinearConstraint(A, lb, np.inf), integrality=np.ones(n),
                 bounds=Bounds(0, 1), options=opts)
    dual = getattr(r, "mip_dual_bound", None)
    optimal = r.status == 0 and r.x is not None
    obj = float(r.fun) if optimal else float(dual) if dual is not None and np.isfinite(dual) \
        else 0.0
    # A MILP stopped early may not even have solved its root LP: keep the LP bound then.
    bound = max(lp, comp + obj * capacity)
    sched = comp + float(r.fun) * capacity if r.x is not None else None
    return BoundResult(bound, comp, n, A.shape[0], time.perf_counter() - t0, True, lp,
                       optimal, sched)


def plan_drops(trace: Trace, capacity: int, *, time_limit: float = 5.0,
               tie: Callable[[int, int], Hashable] | None = None,
               hold_dead: bool = False) -> set[tuple[int, int]]:
    """(tensor id, start step) of the reuse intervals an optimal schedule drops.

    From the MILP's best integer solution within `time_limit` if it is optimal or within
    PLAN_GAP of the dual bound; otherwise empty (see `solve_plan`). With `tie`, intervals for
    which it returns the same key (not None) are all dropped or all kept: the repeat detector
    ties the intervals of the same role and phase in every copy of a recorded repetition, so
    that the solution is a periodic schedule (optimal among those), which can be applied to
    every repetition. `hold_dead`: plan for a manager that cannot drop dead dirty bytes
    (interval_model).
    """
    drops, proven = solve_plan(trace, capacity, time_limit=time_limit, tie=tie,
                               hold_dead=hold_dead)
    return drops if proven else set()


def solve_plan(trace: Trace, capacity: int, *, time_limit: float = 5.0,
               tie: Callable[[int, int], Hashable] | None = None,
               hold_dead: bool = False) -> tuple[set[tuple[int, int]], bool]:
    """`plan_drops`, and whether its drops are proven good (an optimal integer solution, or
    one within PLAN_GAP of the dual bound). An unproven one (the best integer solution found
    in `time_limit`) is returned too, for a caller that measures it against no plan: such
    incumbents were measured to do worse than Belady's order on some traces, better on
    others. No integer solution: empty, and not proven."""
    m = interval_model(trace, hold_dead=hold_dead)
    c, A, lb, n_d, n = _program(m, capacity)
    long = np.flatnonzero(m.end - m.start >= 2)
    if n == 0 or A.shape[0] == 0:
        return set(), True
    constraints = [LinearConstraint(A, lb, np.inf)]
    if tie is not None:
        groups: dict[Hashable, list[int]] = {}
        for j, i in enumerate(long):
            k = tie(int(m.tensor[i]), int(m.start[i]))
            if k is not None:
                groups.setdefault(k, []).append(j)
        rows, cols, vals = [], [], []
        for g in groups.values():
            for a, b in zip(g, g[1:], strict=False):
                r = len(rows) // 2
                rows += [r, r]
                cols += [a, b]
                vals += [1.0, -1.0]
        if rows:
            neq = len(rows) // 2
            A_eq = sparse.csr_matrix((vals, (rows, cols)), shape=(neq, n))
            constraints.append(LinearConstraint(A_eq, np.zeros(neq), np.zeros(neq)))
    with _quiet_stdout():
        r = milp(c, constraints=constraints, integrality=np.ones(n),
                 bounds=Bounds(0, 1), options={"time_limit": time_limit})
    gap = getattr(r, "mip_gap", None)
    if r.x is None:
        return set(), False
    proven = r.status == 0 or (gap is not None and gap <= PLAN_GAP)
    drop = long[np.flatnonzero(r.x[:n_d] > 0.5)]
    return {(int(m.tensor[i]), int(m.start[i])) for i in drop}, proven

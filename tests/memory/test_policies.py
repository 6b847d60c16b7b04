"""Eviction policies in isolation, and the schedule features (prefetch, discarding dead tensors)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.memory_traces import many_small_trace
from pyhost.memory import MemoryManager, ScheduleError
from pyhost.memory.allocator import CardAllocator
from pyhost.memory.policies import (
    _GHOST,
    _HIR,
    _LIR,
    INF,
    SHADOW_MEMORY,
    SHADOW_RATE,
    SHADOW_SAMPLE_ABOVE,
    AutoPolicy,
    BeladyPolicy,
    GreedyDualSizePolicy,
    LirsPolicy,
    LruPolicy,
    PlannedPolicy,
    ShadowCache,
    SizedLruPolicy,
    make_policy,
)
from pyhost.memory.trace import Trace
from tb.memory.replay import replay


class R:
    """A resident tensor as a policy sees it."""

    def __init__(self, i: int, size: int = 10, dirty: bool = False, key: str | None = None
                 ) -> None:
        self.id, self.card_size, self.dirty, self.pin = i, size, dirty, -1
        self.key = key or f"t{i}"


def _lirs_invariants(p: LirsPolicy, resident: dict[int, R]) -> None:
    """LIRS's structures agree with what is on the card."""
    status = {i: r[0] for i, r in p._rec.items()}
    size = {i: r[1] for i, r in p._rec.items()}
    stack = list(p._s)
    lir = {i for i, st_ in status.items() if st_ == _LIR}
    hir = {i for i, st_ in status.items() if st_ == _HIR}
    ghosts = {i for i, st_ in status.items() if st_ == _GHOST}
    assert lir | hir == set(resident) and not (lir | hir) & ghosts
    assert set(p._q) == hir
    assert all((r[2] is resident.get(i)) for i, r in p._rec.items()), "resident in the record"
    assert all(p._rec[i][3] is None for i in ghosts), "a ghost was inserted by no call"
    assert set(p._ghosts) == ghosts and ghosts <= set(stack)
    assert set(stack) <= lir | hir | ghosts
    assert p._lir_bytes == sum(size[i] for i in lir)
    assert p._ghost_bytes == sum(p._ghosts.values()) == sum(size[i] for i in ghosts)
    assert p._ghost_bytes <= p.ghost_factor * p.capacity
    if len(lir) > 1:        # one tensor larger than the LIR share may stand alone
        assert p._lir_bytes <= (1 - p.hir_fraction) * p.capacity


def _need(p: LirsPolicy | LruPolicy, resident: dict[int, R], e: R, step: int) -> bool:
    """A need of e on a card simulated for policy p (`resident`, in p's capacity): a miss
    evicts what p picks. Whether it was a hit."""
    e.pin = step
    if e.id in resident:
        p.touch_all([e], step)
        return True
    used = sum(x.card_size for x in resident.values())
    if used + e.card_size > p.capacity:
        for v in p.pick(used + e.card_size - p.capacity, step, step):
            assert v.pin != step and v.id in resident
            p.evicted(v)
            del resident[v.id]
    resident[e.id] = e
    p.insert(e, step)
    p.touch_all([e], step)
    return False


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 12).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.tuples(st.integers(0, 3 * k), st.integers(0, 9)), max_size=160))))
def test_lirs_keeps_its_structures_consistent(case: tuple[int, list[tuple[int, int]]]) -> None:
    """Random needs (a miss evicts what pick chooses), frees of residents and of evicted
    tensors, on a card of k units: after every operation LIRS's stack, HIR queue, ghosts and
    byte counts agree with the card (its bottom-of-stack shortcut on eviction, its one-loop
    touches, its cached limits)."""
    k, ops = case
    p = LirsPolicy()
    p.capacity = k * 100
    objs: dict[int, R] = {}
    resident: dict[int, R] = {}
    for step, (i, action) in enumerate(ops):
        n = 100 * (1 + i % 3) if i % 3 < k else 100
        if action == 0:                               # freed
            e = objs.pop(i, None)
            if e is not None:
                if i in resident:
                    p.remove(resident.pop(i))
                else:
                    p.forget(e)
        else:
            _need(p, resident, objs.setdefault(i, R(i, n)), step)
        assert sum(x.card_size for x in resident.values()) <= p.capacity
        _lirs_invariants(p, resident)


def test_lirs_keeps_a_loop_a_scan_cannot_displace() -> None:
    """A loop over more than the card: LIRS keeps most of it resident (LRU keeps none), and a
    scan of tensors used once displaces only HIR ones."""
    p, lru = LirsPolicy(), LruPolicy()
    for q in (p, lru):
        q.capacity = 1000
    loop = [R(i, 100) for i in range(12)]
    res: dict[LirsPolicy | LruPolicy, dict[int, R]] = {p: {}, lru: {}}
    hits = {p: 0, lru: 0}
    step = 0
    for _ in range(10):
        for e in loop:
            step += 1
            for q in (p, lru):
                hits[q] += _need(q, res[q], e, step)
    assert hits[lru] == 0 and hits[p] > 60
    lir = {i for i, r in p._rec.items() if r[0] == _LIR}
    for j in range(100, 130):                         # a scan: each tensor once
        step += 1
        _need(p, res[p], R(j, 100), step)
        _lirs_invariants(p, res[p])
    assert lir <= set(res[p]), "the scan displaced a LIR tensor"


def test_lru_order_and_pins() -> None:
    p = LruPolicy()
    rs = [R(i) for i in range(4)]
    for t, r in enumerate(rs):
        p.insert(r, t)
        p.touch(r, t)
    p.touch(rs[0], 5)
    rs[1].pin = 7
    assert [r.id for r in p.pick(25, 7, 8)] == [2, 3, 0]


def test_gds_evicts_clean_before_dirty_and_ages_dirty_out() -> None:
    p = GreedyDualSizePolicy()
    clean, dirty = R(0), R(1, dirty=True)
    p.insert(dirty, 0)
    p.insert(clean, 1)                 # more recent, but clean
    (v,) = p.pick(10, 9, 2)
    assert v is clean
    p.evicted(v)
    assert p._L == 1.0                  # L rose to the victim's H
    for i in range(2, 5):               # newer clean tensors, inserted at L = 1: H = 2
        p.insert(R(i), i)
    assert p.pick(10, 9, 5)[0] is dirty or p.pick(10, 9, 5)[0].id != 1


def test_belady_farthest_next_use_dirty_counted_half() -> None:
    p = BeladyPolicy()
    nxt = {0: 10, 1: 30, 2: 50, 3: INF}
    p.next_use = lambda e: nxt[e.id]   # type: ignore[method-assign]
    rs = [R(0), R(1), R(2, dirty=True), R(3, dirty=True)]
    for r in rs:
        p.insert(r, 0)
    order = [r.id for r in p.pick(40, 9, 0)]
    # no next use first; then 1 (distance 30) before dirty 2 (distance 50 / 2 = 25)
    assert order == [3, 1, 2, 0]


def test_planned_evicts_plan_drops_first() -> None:
    p = PlannedPolicy()
    nxt = {0: 10, 1: 30}
    p.next_use = lambda e: nxt[e.id]   # type: ignore[method-assign]
    p.set_plan({("t0", 4)})             # the interval of t0 starting at position 4 is dropped
    a, b = R(0), R(1)
    p.touch(a, 4)
    p.touch(b, 4)
    assert [r.id for r in p.pick(10, 9, 5)] == [0]     # although Belady would take t1
    assert p.window_cost(a) is not None and p.window_cost(b) is None


@pytest.mark.parametrize("hold", [False, True])
def test_planned_holds_the_dead_tails_its_plan_keeps(hold: bool) -> None:
    """A dirty tensor with no next use costs a write-back to a manager that keeps data: under a
    plan made for one (`hold`), it goes after the planned drops when the plan keeps its dead
    tail, first when the plan drops it; without `hold` (a complete hint: dead bytes are free)
    every such tensor goes first."""
    p = PlannedPolicy()
    p.hold = hold
    nxt = {0: INF, 1: 30, 2: INF, 3: INF}
    p.next_use = lambda e: nxt[e.id]   # type: ignore[method-assign]
    p.set_plan({("t1", 4), ("t2", 4)})  # t1's interval and t2's dead tail are dropped
    kept_tail, drop, dropped_tail, clean = R(0, dirty=True), R(1), R(2, dirty=True), R(3)
    for r in (kept_tail, drop, dropped_tail, clean):
        p.touch(r, 4)
    order = [r.id for r in p.pick(40, 9, 5)]
    if hold:
        # free first (clean, no next use), then the plan's drops, then the kept tail
        assert order == [3, 2, 1, 0], order
        assert p.window_cost(kept_tail) is None and p.window_cost(dropped_tail) is not None
    else:
        assert order[0] == 3 and set(order[1:3]) == {0, 2} and order[3] == 1, order
        assert p.window_cost(kept_tail) is not None


def test_incomplete_hint_plans_for_a_manager_that_keeps_data() -> None:
    """set_schedule_trace(complete=False) solves the MILP with hold_dead and sets hold."""
    m = MemoryManager.dry_run(1 << 20, policy="planned")
    tr = Trace()
    tr.alloc(0, 4096)
    tr.write(0, 4096)
    tr.need(0)
    m.set_schedule_trace(tr, complete=False)
    assert m.policy.hold                               # type: ignore[attr-defined]
    m.set_schedule_trace(tr)
    assert not m.policy.hold                           # type: ignore[attr-defined]


def test_unknown_policy_name() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_policy("fifo")


def test_cheapest_window_spans_only_allowed_blocks() -> None:
    a = CardAllocator(1000, align=1)
    starts = [a.alloc(100, i) for i in range(10)]
    a.free_block(starts[2])
    a.free_block(starts[6])
    cost = {1: 5.0, 3: 1.0, 5: 1.0, 7: 1.0}.get       # others must stay
    c, blocks = a.cheapest_window(300, cost)
    assert (c, blocks) == (2.0, [500, 700])           # [500, 800): blocks 5, 7 and a hole
    assert a.cheapest_window(500, cost) is None


@pytest.mark.parametrize("policy", ["belady", "planned"])
def test_prefetch_batches_uploads_without_moving_more_bytes(policy: str) -> None:
    tr = many_small_trace(300)
    cap = tr.peak_live() // 2      # weights do not all fit; 32 calls of lookahead do
    on = MemoryManager.dry_run(cap, policy=policy)
    off = MemoryManager.dry_run(cap, policy=policy, prefetch_calls=0)
    replay(tr, on, schedule=True)
    replay(tr, off, schedule=True)
    s_on, s_off = on.transport.stats, off.transport.stats
    assert on.stats.prefetched > 200
    assert (s_on.bytes_h2c, s_on.bytes_c2h) == (s_off.bytes_h2c, s_off.bytes_c2h)
    assert s_on.calls_by_channel["H2C"] * 10 < s_off.calls_by_channel["H2C"]


def test_dead_dirty_tensors_are_discarded_and_contradictions_caught() -> None:
    """With the complete future, an updated tensor nobody reads or needs again is dropped
    without a write-back; using it anyway raises ScheduleError instead of returning garbage."""
    tr = Trace()
    for t in range(3):
        tr.alloc(t, 600)
    tr.need(0)
    tr.updated(0)      # t0 is never read or needed again
    tr.need(1)
    tr.need(2)         # the card holds 1000 bytes: t0 must go
    mgr = MemoryManager.dry_run(1000, policy="planned")
    handles = [mgr.allocate_tensor(600, name=f"t{t}") for t in range(3)]
    mgr.set_schedule_trace(tr)
    mgr.need_in_device(handles[0])
    mgr.tensor_updated(handles[0])
    mgr.need_in_device(handles[1])
    assert mgr.transport.stats.bytes_c2h == 0 and mgr.address(handles[0]) is None
    with pytest.raises(ScheduleError, match="never"):
        mgr.read_tensor(handles[0], 600, None)
    mgr.write_tensor(handles[0], 600, None)   # new bytes: usable again
    mgr.check()
    # without the complete future (set_schedule), nothing is ever discarded
    mgr2 = MemoryManager.dry_run(1000, policy="planned")
    h2 = [mgr2.allocate_tensor(600, name=f"t{t}") for t in range(3)]
    mgr2.set_schedule([["t0"], ["t1"], ["t2"]])
    mgr2.need_in_device(h2[0])
    mgr2.tensor_updated(h2[0])
    mgr2.need_in_device(h2[1])
    assert mgr2.transport.stats.bytes_c2h == 600
    mgr2.read_tensor(h2[0], 600, np.empty(600, np.uint8) if mgr2.payload else None)


def test_need_sequence_schedule_is_followed_to_the_end() -> None:
    """set_schedule with the names replay gives tensors: every call matches, none is dropped."""
    from bench.memory_traces import onnx_trace
    from pyhost.memory.trace import schedule_of

    tr = onnx_trace("squeezenet", batch=1, training=True)
    mgr = MemoryManager.dry_run(int(tr.max_need() * 1.5), policy="belady")
    mgr.set_schedule(schedule_of(tr))
    replay(tr, mgr)
    assert mgr._sched is not None and mgr._sched_pos == len(tr.needs())


def _shadow_session(shadow: ShadowCache, seed: int, tensors: int, calls: int) -> None:
    """Random need calls (one output updated per call, some reads) over `tensors` tensors of
    64 B - 4 KiB, fed to `shadow` as AutoPolicy feeds its shadows."""
    rng = np.random.default_rng(seed)
    rs = [R(i, int(n)) for i, n in enumerate(rng.integers(1, 65, tensors) * 64)]
    for r in rs:
        shadow.event("write", r)
    for epoch, (a, b, c) in enumerate(rng.integers(0, tensors, (calls, 3)).tolist(), 1):
        ents = list({x: rs[x] for x in (a, b, c)}.values())
        shadow.need(ents, epoch)
        shadow.event("updated", rs[c])
        if epoch % 7 == 0:
            shadow.event("read", rs[b])


@pytest.mark.parametrize("policy", [LirsPolicy, SizedLruPolicy])
@pytest.mark.parametrize("rate", [1 / 8, 1 / 32])
def test_a_sampled_shadow_estimates_the_bytes_of_the_whole_one(policy: type, rate: float
                                                              ) -> None:
    """A shadow that simulates an eighth (a 32nd) of the tensors on an eighth (a 32nd) of the
    card, each byte counted 8 (32) times, moves about what the whole simulation moves (the
    expert choice and the online arm's estimate read these bytes), for that share of the
    residents; its recent cost (AutoPolicy's memory for the rate, per call remembered) too."""
    tensors, cap = 40_000, 8 << 20           # the card holds about 10 % of the bytes
    memory = round(SHADOW_MEMORY * max(1.0, SHADOW_RATE / rate))
    whole = ShadowCache(policy(), cap, SHADOW_MEMORY)
    sample = ShadowCache(policy(), cap, memory, rate)
    for sh in (whole, sample):
        _shadow_session(sh, 3, tensors, 30_000)
    assert whole.moved > 50 << 20
    assert abs(sample.moved / whole.moved - 1) < 0.1, (sample.moved, whole.moved)
    per_call = (sample.cost / memory) / (whole.cost / SHADOW_MEMORY)
    assert abs(per_call - 1) < 0.15, (sample.cost, whole.cost)
    assert len(sample.res) < len(whole.res) * rate * 1.5


def test_the_default_samples_fewer_tensors_the_more_are_live(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shadows' sample stays near SHADOW_SAMPLE_SIZE live tensors with data: the rate
    halves from SHADOW_RATE until the sample is that small, and halves again once the live
    tensors grow past twice that; the cost remembers proportionally more calls, the byte
    totals carry on, and each new sample is within the old one."""
    from pyhost.memory import policies
    monkeypatch.setattr(policies, "SHADOW_SAMPLE_ABOVE", 256)
    monkeypatch.setattr(policies, "SHADOW_SAMPLE_SIZE", 256)
    m = MemoryManager.dry_run(16 << 20)
    pol = m.policy
    assert isinstance(pol, AutoPolicy)

    def grow(n: int) -> None:
        ts = [m.allocate_tensor(64) for _ in range(n)]
        for t in ts:
            m.write_tensor(t, t.size, None)
        for a, b in zip(ts[::2], ts[1::2], strict=False):
            m.need_in_device(a, b)
        pol.shadow_moved()                            # (feeds the shadows what they have not seen)

    grow(int(256 * 8) + 100)                          # 2148 with data: 268 in an 1/8 sample
    assert {sh.rate for sh in pol._shadows.values()} == {1 / 16}
    assert {round(1 / (1 - sh.decay)) for sh in pol._shadows.values()} == {2 * SHADOW_MEMORY}
    _, before = pol.shadow_moved()
    first = set(pol._shadows["lru"]._content)
    grow(8000)                                        # 10148: > 512 in the 1/16 sample
    assert {sh.rate for sh in pol._shadows.values()} == {1 / 32}
    assert {round(1 / (1 - sh.decay)) for sh in pol._shadows.values()} == {4 * SHADOW_MEMORY}
    _, after = pol.shadow_moved()
    assert all(after[k] >= before[k] > 0 for k in before), (before, after)
    sh = pol._shadows["lru"]
    assert first and {i for i in first if sh.sampled(i)} <= sh._content
    assert 100 < len(sh._content) <= 2 * 256
    m.check()


class _EagerDecayAuto(AutoPolicy):
    """AutoPolicy deciding as it did before it counted the decays of need calls with no
    sampled tensor: such a call, when nothing waits in the log, decays both shadows' costs and
    chooses at once."""

    def observe(self, kind: str, ents: list, epoch: int) -> None:
        if kind == "need" and not self._log and not self._pair[0].sample(ents):
            a_sh, b_sh = self._pair
            a_sh.cost *= a_sh.decay
            b_sh.cost *= b_sh.decay
            self._choose(a_sh.cost, b_sh.cost)
            return
        super().observe(kind, ents, epoch)


@pytest.mark.parametrize("capacity", [3000, 16000, 30000])
def test_counted_decays_choose_the_expert_as_decaying_at_once(capacity: int) -> None:
    """The default counts the decay of a need call with no sampled tensor (nothing waiting)
    instead of applying it and choosing: the choice stands unless a cost changed since the
    last one, which a replayed read does. Random streams of needs (sampled tensors or not),
    updates, reads and asks for the expert: the same expert after every step as deciding at
    once, on 300 streams each. (Counting every such decay, as first written, chose otherwise
    on 3-5 streams in 1,000 at 16,000 and 30,000 bytes.)"""
    class R:
        def __init__(self, i: int, n: int) -> None:
            self.id, self.card_size, self.pin, self.dirty, self.key = i, n, -1, False, f"#{i}"
    for seed in range(300):
        rng = random.Random(seed)
        pols = [AutoPolicy(), _EagerDecayAuto()]
        for p in pols:
            p.capacity = capacity
            p._sample(1 / 8)
        sh = pols[0]._pair[0]
        sampled = [i for i in range(4000) if sh.sampled(i)][:60]
        other = [i for i in range(4000) if not sh.sampled(i)][:20]
        ents = {i: R(i, rng.choice([100, 200, 400])) for i in sampled + other}
        epoch = 0
        for step in range(1500):
            r = rng.random()
            if r < 0.35:
                epoch += 1
                es = [ents[i] for i in rng.sample(sampled if rng.random() < 0.6 else other,
                                                   rng.randint(1, 3))]
                for e in es:
                    e.pin = epoch
                for p in pols:
                    p.observe("need", es, epoch)
            elif r < 0.85:
                kind = "updated" if r < 0.55 else "read"
                e = ents[rng.choice(sampled)]
                for p in pols:
                    p.observe_one(kind, e, epoch)
            got = [p.online is p.lirs for p in pols]   # (asking flushes, as a pick does)
            assert got[0] == got[1], f"seed {seed}, step {step}: expert {got}"


def test_the_default_samples_its_shadows_when_they_hold_many_tensors() -> None:
    """AutoPolicy's shadows switch to a SHADOW_RATE sample once one holds more than
    SHADOW_SAMPLE_ABOVE tensors; the expert followed and the shadows' byte totals (which the
    manager takes differences of) carry on."""
    m = MemoryManager.dry_run(64 << 20)
    ts = [m.allocate_tensor(4096) for _ in range(SHADOW_SAMPLE_ABOVE + 2000)]
    for t in ts:
        m.write_tensor(t, t.size, None)
    pol = m.policy
    assert isinstance(pol, AutoPolicy)
    before = None
    for i, t in enumerate(ts):
        m.need_in_device(t)
        if i == SHADOW_SAMPLE_ABOVE - 1000:
            expert, before = pol.shadow_moved()
            assert all(sh.rate == 1 for sh in pol._shadows.values())
    expert2, after = pol.shadow_moved()
    assert all(sh.rate == SHADOW_RATE for sh in pol._shadows.values())
    assert expert2 == expert and before is not None
    assert all(after[k] >= before[k] > 0 for k in before), (before, after)
    assert max(len(sh.res) for sh in pol._shadows.values()) < SHADOW_SAMPLE_ABOVE / 4
    m.check()


def test_the_default_samples_its_shadows_from_the_start_with_many_live_tensors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With so many live tensors holding data that a SHADOW_RATE sample of them is more than
    SHADOW_SAMPLE_ABOVE, the shadows sample from the first flush on, before they fill: a
    miss-heavy run over 100k small tensors paid the whole simulation (11 us of a 71 us call)
    for the 3,400 calls its shadows took to reach 8,192 residents."""
    from pyhost.memory import policies
    monkeypatch.setattr(policies, "SHADOW_SAMPLE_ABOVE", 256)
    m = MemoryManager.dry_run(16 << 20)
    ts = [m.allocate_tensor(64) for _ in range(int(256 / SHADOW_RATE) + 100)]
    for t in ts:
        m.write_tensor(t, t.size, None)
    m.need_in_device(ts[0], ts[1])
    pol = m.policy
    assert isinstance(pol, AutoPolicy)
    pol.shadow_moved()                               # (feeds the shadows what they have not seen)
    assert all(sh.rate == SHADOW_RATE for sh in pol._shadows.values())
    assert max(len(sh.res) for sh in pol._shadows.values()) < 256


def _hinted_bytes(tr: Trace, cap: int, plan: set[tuple[int, int]] | None = None
                  ) -> tuple[int, MemoryManager]:
    m = MemoryManager.dry_run(cap, policy="planned")
    if plan is None:
        replay(tr, m, schedule=True)
    else:
        m.set_schedule_trace(tr, plan=plan)
        replay(tr, m)
    s = m.transport.stats
    return s.bytes_h2c + s.bytes_c2h, m


def test_an_unproven_plan_is_used_when_its_replay_moves_less(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan HiGHS has not proven (here the optimal one of a small loop, passed off as
    unproven, so that the test does not hang on the solver's speed) is kept when a dry-run
    replay of the hint moves less with it than Belady's order; before, every unproven plan
    was dropped for Belady's order. (The benchmark's cyclic-mixed-1.05x, which HiGHS does not
    prove in 60 s, went from 1.085x to 1.028x the bound this way.)"""
    from bench.memory_traces import cyclic_trace
    from pyhost.memory import bound

    tr = cyclic_trace(1 << 16, 1.2, mixed=True, tensors=8, cycles=5)
    cap = tr.meta["capacity"]
    drops, proven = bound.solve_plan(tr, cap, time_limit=30.0)
    assert drops and proven
    monkeypatch.setattr(bound, "solve_plan", lambda *a, **k: (set(drops), False))
    planned, m = _hinted_bytes(tr, cap)
    belady, _ = _hinted_bytes(tr, cap, plan=set())
    assert m.policy.drops                                    # type: ignore[attr-defined]
    assert planned < 0.9 * belady, (planned, belady)


def test_an_unproven_plan_that_moves_more_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule the other way: an unproven plan whose replay moves more than no plan is not
    used; a proven one is used without a replay."""
    from bench.memory_traces import cyclic_trace
    from pyhost.memory import bound

    tr = cyclic_trace(1 << 16, 1.2, mixed=True, tensors=8, cycles=5)
    cap = tr.meta["capacity"]
    drops, _ = bound.solve_plan(tr, cap, time_limit=30.0)    # proven in ~0.01 s
    assert drops
    replays: list[bool] = []

    def bytes_(self: MemoryManager, trace: Trace, key_of: object, plan: set, complete: bool
               ) -> int:
        replays.append(bool(plan))
        return 2000 if plan else 1000                  # the plan's replay moves more
    monkeypatch.setattr(MemoryManager, "_hint_bytes", bytes_)
    for proven in (False, True):
        monkeypatch.setattr(bound, "solve_plan", lambda *a, p=proven, **k: (set(drops), p))
        m = MemoryManager.dry_run(cap, policy="planned")
        m.set_schedule_trace(tr)
        assert bool(m.policy.drops) == proven           # type: ignore[attr-defined]
    assert replays == [True, False]                     # measured once, when unproven


def test_a_hint_the_replay_refuses_gives_no_plan_and_no_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay that measures an unproven plan runs the caller's hint through the API: a
    hint it refuses (here a read of a tensor never written) means no plan, not an error."""
    from pyhost.memory import bound

    tr = Trace()
    tr.alloc(0, 4096)
    tr.alloc(1, 4096)
    tr.write(0, 4096)
    tr.need(0)
    tr.read(1, 4096)                                   # never written
    tr.need(0)
    monkeypatch.setattr(bound, "solve_plan", lambda *a, **k: ({(0, 0)}, False))
    m = MemoryManager.dry_run(64 << 10, policy="planned")
    m.set_schedule_trace(tr)
    assert not m.policy.drops                          # type: ignore[attr-defined]

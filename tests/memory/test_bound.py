"""The interval LP bound: never above the exact optimum; its MILP equals the optimum; every
policy moves at least the optimum."""

from __future__ import annotations

import random

import pytest

from pyhost.memory import POLICIES, MemoryManager
from pyhost.memory.bound import BoundError, interval_model, lower_bound
from pyhost.memory.trace import Trace
from tb.memory.optimum import exact_optimum
from tb.memory.replay import replay


def random_trace(rng: random.Random, k: int = 5, steps: int = 10) -> Trace:
    """Small traces with every kind of call: writes (partial too), reads, updates, frees."""
    tr = Trace()
    sizes = [rng.choice([1, 2, 3, 4]) for _ in range(k)]
    content = set()
    for t in range(k):
        tr.alloc(t, sizes[t])
        if rng.random() < 0.7:
            tr.write(t, sizes[t])
            content.add(t)
    live = set(range(k))
    for _ in range(steps):
        if not live:
            break
        ts = rng.sample(sorted(live), min(len(live), rng.randint(1, 3)))
        tr.need(*ts)
        if rng.random() < 0.5:
            tr.updated(ts[-1])
            content.add(ts[-1])
        r = rng.random()
        if r < 0.15 and content & live:
            x = rng.choice(sorted(content & live))
            tr.read(x, sizes[x])
        elif r < 0.25:
            x = rng.choice(sorted(live))
            tr.write(x, rng.choice([sizes[x], 1]))
            content.add(x)
        elif r < 0.3:
            x = rng.choice(sorted(live))
            tr.free(x)
            live.discard(x)
            content.discard(x)
    return tr


@pytest.mark.parametrize("seed", range(120))
def test_lp_below_optimum_and_milp_equal_to_it(seed: int) -> None:
    rng = random.Random(seed)
    tr = random_trace(rng)
    tr.validate()
    cap = max(tr.max_need(), rng.randint(3, 10))
    opt = exact_optimum(tr, cap)
    lp = lower_bound(tr, cap)
    ip = lower_bound(tr, cap, integer=True)
    assert lp.bound <= opt + 1e-6, f"LP bound {lp.bound} above the optimum {opt}"
    assert ip.optimal and abs(ip.bound - opt) < 1e-6, f"MILP {ip.bound} != optimum {opt}"
    assert ip.bound >= lp.bound - 1e-6


@pytest.mark.parametrize("seed", range(40))
def test_every_policy_moves_at_least_the_optimum(seed: int) -> None:
    """Scaled to real byte sizes, each policy's bytes are >= the exact optimum (and so >= the
    bound): a policy below it would mean the manager lost a transfer."""
    rng = random.Random(1000 + seed)
    tr = random_trace(rng, k=5, steps=12)
    scale = 4096
    big = Trace(meta=tr.meta)
    for op, t, size, extra in tr.records:
        big.records.append((op, t, None if size is None else size * scale, extra))
    cap = max(big.max_need(), rng.randint(3, 10) * scale)
    opt = exact_optimum(big, cap)
    for pol in POLICIES:
        m = MemoryManager.dry_run(cap, policy=pol, align=1)
        replay(big, m, schedule=pol == "belady")
        moved = m.transport.stats.bytes_h2c + m.transport.stats.bytes_c2h
        assert moved >= opt, f"{pol} moved {moved} < optimum {opt}"


def test_interval_model_of_a_small_trace() -> None:
    tr = Trace()
    for t, n in enumerate((4, 2, 2)):
        tr.alloc(t, n)
    tr.write(0, 4)
    tr.write(1, 2)
    tr.need(0, 2)      # step 0: 0 uploaded (compulsory), 2 has no content yet
    tr.updated(2)
    tr.need(1)         # step 1
    tr.need(0, 2)      # step 2: intervals (0, 2) for tensors 0 and 2 (2 is a dirty version)
    tr.read(2, 2)      # compulsory write-back of 2's version
    m = interval_model(tr)
    assert m.compulsory == 4 + 2 + 2
    assert sorted(zip(m.start.tolist(), m.end.tolist(), m.size.tolist(),
                      m.version.tolist(), strict=True)) == [(0, 2, 2, -1), (0, 2, 4, -1)]
    # capacity 6: tensor 1 at step 1 forces dropping 2 bytes; tensor 2 (2 bytes) is cheapest
    assert lower_bound(tr, 6).bound == pytest.approx(10)
    assert exact_optimum(tr, 6) == 10
    with pytest.raises(BoundError, match="cannot run"):
        lower_bound(tr, 5)

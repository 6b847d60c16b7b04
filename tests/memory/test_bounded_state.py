"""Bounded state: whatever the number of calls, the policies' structures, the repeat detector and
the statistics stay proportional to the live tensors (or a fixed window).

- A million calls (need, update, write, read, free, allocate) through GDS (its lazy heap) and
  LIRS (its stack and ghosts), 100,000 through the default's shadow experts, on
  simulated residency (ShadowCache: the policy's own structures fed as the manager feeds
  them; a few microseconds a call, so the million stays cheap).
- The whole manager (default policy, repeat detector with a small window so it wraps hundreds
  of times, statistics) over 20,000 calls of a workload that repeats, changes and frees: the
  state after 10,000 and after 20,000 calls is the same size up to the live tensors.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from pyhost.memory import MemoryManager
from pyhost.memory.policies import ShadowCache, make_policy
from pyhost.memory.repeat import RepeatDetector

LIVE = 200


@dataclass
class T:
    id: int
    key: str
    card_size: int
    dirty: bool = False
    pin: int = -1


@pytest.mark.parametrize("policy", ["gds", "lirs", "auto"])
def test_a_million_calls_keep_the_policy_state_bounded(policy: str) -> None:
    rng = random.Random(1)
    p = make_policy(policy)
    cap = 64 * 4096
    if policy == "auto":
        p.capacity = cap                  # its own shadows: one more layer, same bound
        calls = 100_000                   # its shadows run LIRS and LRU again: fewer calls
    else:
        calls = 1_000_000
    shadow = ShadowCache(p, cap) if policy != "auto" else None
    live = [T(i, f"#{i}", 1024 * rng.randint(1, 8)) for i in range(LIVE)]
    nxt = LIVE
    sizes = []
    for call in range(calls):
        r = rng.random()
        if r < 0.02:                      # free one, allocate another
            j = rng.randrange(LIVE)
            old = live[j]
            if shadow is not None:
                shadow.event("free", old)
            else:
                p.observe("free", [old], call)
            live[j] = T(nxt, f"#{nxt}", 1024 * rng.randint(1, 8))
            nxt += 1
            continue
        ents = rng.sample(live[:rng.choice((20, LIVE))], rng.randint(1, 3))  # hot and cold
        if shadow is not None:
            shadow.need(ents, call)
            if r < 0.5:
                shadow.event("updated", ents[-1])
            elif r < 0.55:
                shadow.event("read", ents[0])
            elif r < 0.6:
                shadow.event("write", ents[0])
        else:
            p.observe("need", ents, call)
            if r < 0.5:
                p.observe("updated", [ents[-1]], call)
        if call % (calls // 10) == 0:
            sizes.append(p.state_size())
    sizes.append(p.state_size())
    bound = (24 if policy == "auto" else 8) * LIVE
    assert max(sizes) <= bound, f"{policy}: state {sizes} over {bound} for {LIVE} live tensors"
    assert nxt > 10_000 or policy == "auto"     # thousands of tensors came and went


def _workload(m: MemoryManager, calls: int, rng: random.Random) -> None:
    """Training-like steps (weights, fresh activations), now and then a step with a changed
    call or a burst of random calls; frees everything it allocates."""
    ws = getattr(m, "_test_weights", None)
    if ws is None:
        ws = [m.allocate_tensor(2048 * (1 + j % 4)) for j in range(12)]
        for w in ws:
            m.write_tensor(w, w.size, None)
        m._test_weights = ws          # type: ignore[attr-defined]
    done = 0
    while done < calls:
        acts = []
        noisy = rng.random() < 0.2
        for j, w in enumerate(ws):
            a = m.allocate_tensor(4096 + 512 * (j % 3))
            prev = acts[-1] if acts else w
            if noisy and rng.random() < 0.3:
                prev = rng.choice(ws)
            m.need_in_device(w, prev, a)
            m.tensor_updated(a)
            acts.append(a)
            done += 3
        m.read_tensor(acts[-1], acts[-1].size, None)
        for a in acts:
            m.free_tensor(a)
        done += 1 + len(acts)


def _state(m: MemoryManager) -> dict[str, int]:
    assert m.detector is not None
    return {"policy": m.policy.state_size(), "detector": m.detector.state_size(),
            "entries": len(m._entries) + len(m._by_key), "updates": len(m._upd_log),
            "pending": len(m._pending), "reads": len(m._will_read),
            "stats": len(m.stats.calls) + len(m.stats.time_s) + len(m.stats.need_hist.counts),
            "learned": len(m._learned_drops)}


def test_the_manager_state_does_not_grow_with_calls() -> None:
    m = MemoryManager.dry_run(48 << 10)
    m.detector = RepeatDetector(window=256)      # wraps every ~250 need calls
    rng = random.Random(0)
    # each structure's largest size over each half (sampled every 1,000 calls): the planning
    # half's heaps are empty while it does not plan and up to their bound while it does, so a
    # single sample depends on the mode the manager is in at that call
    halves = []
    for _ in range(2):
        seen: dict[str, int] = {}
        for _ in range(10):
            _workload(m, 1_000, rng)
            for k, v in _state(m).items():
                seen[k] = max(seen.get(k, 0), v)
        halves.append(seen)
    mid, end = halves
    live = len(m._entries)
    assert m.detector.locks >= 2 and m.stats.evictions > 1000
    for k, v in end.items():
        assert v <= mid[k] + 4 * live + 64, f"{k} grew from {mid[k]} to {v} ({live} live)"
    assert end["detector"] <= 256 * 16 + 8 * live
    m.check()

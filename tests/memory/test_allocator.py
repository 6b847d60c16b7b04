"""CardAllocator: blocks and holes tile card memory, compaction only moves down and makes room."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.memory import allocator
from pyhost.memory.allocator import CardAllocator


def test_best_fit_and_merge() -> None:
    a = CardAllocator(1000, align=1)
    x = a.alloc(100, "x")
    y = a.alloc(300, "y")
    z = a.alloc(100, "z")
    assert (x, y, z) == (0, 100, 400)
    a.free_block(y)
    a.free_block(x)
    a.check()
    assert a.holes() == [(0, 400), (500, 500)]
    assert a.alloc(450, "w") == 500          # best fit: the 500-byte hole, not the 400
    a.check()


def test_aligned_when_possible_unaligned_when_not() -> None:
    a = CardAllocator(256, align=64)
    assert a.alloc(10, "a") == 0
    assert a.alloc(10, "b") == 64            # aligned start preferred
    # 3 x 61 odd-sized blocks fill 183 bytes exactly: alignment leaves a gap that compaction,
    # packing without padding when it must, gives back
    c = CardAllocator(183, align=64)
    assert [c.alloc(61, k) for k in "abc"] == [0, 64, None]
    moves = c.compact_for(61, loaded=lambda k: True)
    assert [(m.src, m.dst) for m in moves] == [(64, 61)]
    assert c.alloc(61, "c") == 122
    c.check()
    assert c.free == 0


def down_or_disjoint(m) -> bool:
    return m.dst < m.src or m.dst >= m.src + m.size or m.dst + m.size <= m.src


def test_compaction_slides_down_and_makes_a_hole() -> None:
    """Holes too small to take any block elsewhere: the blocks between them slide down."""
    a = CardAllocator(1000, align=1)
    starts = [a.alloc(n, i) for i, n in enumerate((150, 100, 150, 100, 150, 100, 250))]
    for i in (1, 3, 5):
        a.free_block(starts[i])                 # holes of 100 at 150, 400, 650
    moves = a.compact_for(300, loaded=lambda k: True)
    a.check()
    assert a.largest_hole() >= 300
    assert [(m.key, m.src, m.dst) for m in moves] == [(2, 250, 150), (4, 500, 300)]
    # moves issued in order never read what an earlier one wrote
    for i, m in enumerate(moves):
        for prev in moves[:i]:
            assert not (m.src < prev.dst + prev.size and prev.dst < m.src + m.size)


def test_compaction_relocates_a_block_out_of_the_way() -> None:
    """Two holes separated by one small block: moving that block into a third hole elsewhere
    copies less than sliding everything between them."""
    a = CardAllocator(1000, align=1)
    starts = [a.alloc(100, i) for i in range(9)]     # 100 bytes free at the top
    a.free_block(starts[1])
    a.free_block(starts[3])                           # holes at 100, 300, 900; block 2 between
    moves = a.compact_for(300, loaded=lambda k: True)
    a.check()
    assert [(m.key, m.src) for m in moves] == [(2, 200)] and moves[0].dst == 900
    assert a.largest_hole() >= 300 and all(down_or_disjoint(m) for m in moves)


def test_compaction_skips_empty_blocks() -> None:
    a = CardAllocator(400, align=1)
    b = [a.alloc(100, i) for i in range(4)]
    a.free_block(b[0])
    a.free_block(b[2])
    moves = a.compact_for(200, loaded=lambda k: k != 1)
    assert [m.copy for m in moves if m.key == 1] == [False]
    a.check()


def test_compaction_without_room_is_refused() -> None:
    a = CardAllocator(100, align=1)
    a.alloc(60, "x")
    with pytest.raises(ValueError, match="evict first"):
        a.compact_for(50, loaded=lambda k: True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 300)), min_size=1, max_size=80),
       st.sampled_from([1, 8, 64]), st.integers(0, 2**32), st.booleans())
def test_random_operations_keep_the_map_exact(ops: list[tuple[bool, int]], align: int,
                                              seed: int, large: bool) -> None:
    """Any mix of alloc / free / compaction keeps blocks and holes an exact tiling; also with
    the local search of a large map (allocator.LARGE lowered so that 4 blocks are "large")."""
    with pytest.MonkeyPatch.context() as mp:
        if large:
            mp.setattr(allocator, "LARGE", 4)
            mp.setattr(allocator, "LOCAL_HOLES", 2)
            mp.setattr(allocator, "LOCAL_WALK", 6)
        _random_operations(ops, align, seed)


def _random_operations(ops: list[tuple[bool, int]], align: int, seed: int) -> None:
    rng = random.Random(seed)
    a = CardAllocator(4000, align=align)
    live: dict[int, tuple[int, int]] = {}     # key -> (start, size)
    for key, (do_alloc, size) in enumerate(ops):
        if do_alloc or not live:
            at = a.alloc(size, key)
            if at is None and size <= a.free:
                moves = a.compact_for(size, loaded=lambda k: True)
                for m in moves:
                    assert down_or_disjoint(m) and live[m.key] == (m.src, m.size)
                    live[m.key] = (m.dst, m.size)
                at = a.alloc(size, key)
                assert at is not None, "compaction made room but alloc failed"
            if at is not None:
                live[key] = (at, size)
        else:
            k = rng.choice(sorted(live))
            a.free_block(live.pop(k)[0])
        a.check()
        assert {s: (n, k) for s, n, k in a.blocks()} == {s: (n, k) for k, (s, n) in
                                                          live.items()}


def test_large_map_window_near_the_candidates() -> None:
    """On a large map cheapest_window looks only at runs from the given blocks (or the hole
    below them), and compaction_cost only at windows from the largest holes: the run returned
    frees a hole of the size, of allowed blocks only; with the free bytes spread out the cost
    is the capacity (so evicting neighbours is considered), and compact_for still makes the
    hole (the whole map)."""
    n = 2 * allocator.LARGE          # two thirds stay: a large map
    a = CardAllocator(n * 128, align=64)
    starts = [a.alloc(128, i) for i in range(n)]
    for s in starts[10::3]:
        a.free_block(s)                          # 128-byte holes everywhere
    assert len(a.blocks()) > allocator.LARGE
    allowed = {k: 1.0 for k in range(301, 340) if k % 3 != 1}
    near = [s for s, _, k in a.blocks() if k in allowed]
    win = a.cheapest_window(1000, allowed.get, near)
    assert win is not None
    cost, blocks = win
    assert cost == len(blocks) and all(a.key_at(s) in allowed for s in blocks)
    assert a.compaction_cost(a.free, lambda k: True) == a.capacity
    before = a.largest_hole()
    moves = a.compact_for(a.free, lambda k: True)
    assert moves and before < a.free == a.largest_hole()
    a.check()


def test_a_map_is_large_with_many_blocks_or_many_small_ones() -> None:
    """`large` (local searches, placement in the policy's order): more than LARGE blocks, or
    more than MANY_SMALL blocks of SMALL_BLOCK bytes or less on average; a few hundred
    activations of a DNN stay on the whole-map searches."""
    small = CardAllocator(1 << 20)
    for k in range(allocator.MANY_SMALL + 1):
        assert not small.large
        assert small.alloc(1024, k) is not None
    assert small.large                                   # 129 blocks of 1 KiB
    big = CardAllocator(1 << 30)
    for k in range(allocator.MANY_SMALL + 1):
        assert big.alloc(allocator.SMALL_BLOCK + 64, k) is not None
    assert not big.large                                 # 129 blocks over SMALL_BLOCK
    for k in range(allocator.MANY_SMALL + 1, 2 * allocator.MANY_SMALL):
        assert big.alloc(64, k) is not None
    assert big.large                                     # now small on average

"""The memory manager on the functional card: semantics, edge cases, errors, accounting."""

from __future__ import annotations

import io

import numpy as np
import pytest

from pyhost.driver import PcieDriver
from pyhost.memory import (
    CardCapacityError,
    DoubleFreeError,
    FreedTensorError,
    HostAllocationError,
    MemoryManager,
    NeverWrittenError,
    NotOnCardError,
    OutOfMemoryError,
    TensorSizeError,
    UnknownTensorError,
)
from pyhost.memory.trace import Trace
from pyhost.model_card import ModelCard
from tb.memory.replay import replay

KiB = 1 << 10


def data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def on_card(card: ModelCard, addr: int, n: int) -> np.ndarray:
    return card.card_memory[addr:addr + n]


def card_update(card: ModelCard, mgr: MemoryManager, t, new: np.ndarray) -> None:
    """Stand-in for an accelerator kernel: new bytes at the tensor's card address, then
    tensor_updated."""
    (addr,) = mgr.need_in_device(t)
    card.card_memory[addr:addr + new.size] = new
    mgr.tensor_updated(t)


def bytes_moved(mgr: MemoryManager) -> tuple[int, int, int]:
    s = mgr.transport.stats
    return s.bytes_h2c, s.bytes_c2h, s.bytes_c2c


# --- semantics ----------------------------------------------------------------------------------

def test_capacity_comes_from_the_card() -> None:
    card = ModelCard(768 * KiB + 64, host_size=4 << 20)
    assert MemoryManager(PcieDriver(card)).capacity == 768 * KiB + 64


def test_round_trip_and_lazy_transfers(card: ModelCard, driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    t = mgr.allocate_tensor(10_000)
    x = data(10_000)
    mgr.write_tensor(t, t.size, x)
    assert bytes_moved(mgr) == (0, 0, 0), "a write must reach the card only when needed"
    out = np.empty(10_000, np.uint8)
    mgr.read_tensor(t, t.size, out)
    assert bytes_moved(mgr) == (0, 0, 0), "reading a current host copy moves nothing"
    assert np.array_equal(out, x)
    (addr,) = mgr.need_in_device(t)
    assert np.array_equal(on_card(card, addr, 10_000), x)
    assert bytes_moved(mgr) == (10_000, 0, 0)
    mgr.need_in_device(t)
    assert bytes_moved(mgr) == (10_000, 0, 0), "a resident tensor is not uploaded again"
    mgr.read_tensor(t, t.size, out)
    assert bytes_moved(mgr) == (10_000, 0, 0), "a clean tensor is not read back"
    y = data(10_000, 1)
    card_update(card, mgr, t, y)
    mgr.read_tensor(t, 5000, out)
    assert bytes_moved(mgr) == (10_000, 10_000, 0)
    assert np.array_equal(out[:5000], y[:5000])
    mgr.read_tensor(t, t.size, out)
    assert bytes_moved(mgr) == (10_000, 10_000, 0), "written back once, then clean"
    assert np.array_equal(out, y)
    mgr.check()


def test_dirty_versus_clean_eviction(card: ModelCard, driver: PcieDriver) -> None:
    """Evicting a clean tensor moves nothing; a dirty one is written back exactly once."""
    mgr = MemoryManager(driver, policy="lru")
    n = 400 * KiB
    a, b, c = (mgr.allocate_tensor(n) for _ in range(3))
    for i, t in enumerate((a, b, c)):
        mgr.write_tensor(t, n, data(n, i))
    mgr.need_in_device(a)
    mgr.need_in_device(b)
    new_b = data(n, 9)
    card_update(card, mgr, b, new_b)
    h2c, c2h, _ = bytes_moved(mgr)
    mgr.need_in_device(c)                      # evicts a (least recent, clean): no write-back
    assert mgr.address(a) is None and bytes_moved(mgr)[1] == c2h
    mgr.need_in_device(a)                      # evicts b (dirty): one write-back
    assert mgr.address(b) is None
    assert bytes_moved(mgr)[:2] == (h2c + 2 * n, c2h + n)
    out = np.empty(n, np.uint8)
    mgr.read_tensor(b, n, out)
    assert np.array_equal(out, new_b)
    assert bytes_moved(mgr)[1] == c2h + n, "the written-back copy is current: no second read"
    mgr.check()


def test_partial_write_of_a_dirty_tensor_keeps_the_rest(card: ModelCard,
                                                        driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    t = mgr.allocate_tensor(8192)
    mgr.write_tensor(t, 8192, data(8192))
    new = data(8192, 5)
    card_update(card, mgr, t, new)
    mgr.write_tensor(t, 100, np.zeros(100, np.uint8))
    out = np.empty(8192, np.uint8)
    mgr.read_tensor(t, 8192, out)
    assert np.array_equal(out[:100], np.zeros(100, np.uint8))
    assert np.array_equal(out[100:], new[100:])
    (addr,) = mgr.need_in_device(t)
    assert np.array_equal(on_card(card, addr, 8192), out)


def test_duplicates_in_one_call(card: ModelCard, driver: PcieDriver) -> None:
    """The same tensor three times is one tensor: one upload, counted once against capacity."""
    mgr = MemoryManager(driver)
    t = mgr.allocate_tensor(mgr.capacity // 2 + 1)
    mgr.write_tensor(t, t.size, data(t.size))
    a1, a2, a3 = mgr.need_in_device(t, t, t)
    assert a1 == a2 == a3
    assert bytes_moved(mgr)[0] == t.size
    assert np.array_equal(on_card(card, a1, t.size), data(t.size))


def test_tensors_summing_to_exactly_the_capacity(card: ModelCard, driver: PcieDriver) -> None:
    """Odd sizes that add up to the capacity fit: alignment never causes an out-of-memory."""
    mgr = MemoryManager(driver)
    cap = mgr.capacity
    sizes = [cap // 3 + 1, cap // 3 - 7, cap - (cap // 3 + 1) - (cap // 3 - 7)]
    small = mgr.allocate_tensor(1000)
    mgr.write_tensor(small, 1000, data(1000, 7))
    mgr.need_in_device(small)                  # something resident, in the way
    ts = [mgr.allocate_tensor(n) for n in sizes]
    for i, t in enumerate(ts):
        mgr.write_tensor(t, t.size, data(t.size, i))
    addrs = mgr.need_in_device(*ts)
    mgr.check()
    assert sorted(addrs) == sorted(set(addrs)) and mgr.resident_bytes == cap
    for i, (t, a) in enumerate(zip(ts, addrs, strict=True)):
        assert np.array_equal(on_card(card, a, t.size), data(t.size, i))
    with pytest.raises(CardCapacityError):
        mgr.need_in_device(ts[0], ts[1], mgr.allocate_tensor(ts[2].size + 1))


def test_zero_size_tensors(driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    z = mgr.allocate_tensor(0)
    with pytest.raises(NeverWrittenError):
        mgr.read_tensor(z, 0, np.empty(0, np.uint8))
    mgr.write_tensor(z, 0, None)
    mgr.read_tensor(z, 0, np.empty(0, np.uint8))
    big = mgr.allocate_tensor(mgr.capacity)
    assert mgr.need_in_device(big, z) == (0, 0)     # a zero-size tensor takes no room
    mgr.tensor_updated(z)
    mgr.free_tensor(z)
    assert bytes_moved(mgr) == (0, 0, 0)
    mgr.check()


def test_tensor_larger_than_the_card_exists_until_needed(driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    huge = mgr.allocate_tensor(mgr.capacity + 1)
    mgr.write_tensor(huge, huge.size, data(huge.size))
    out = np.empty(huge.size, np.uint8)
    mgr.read_tensor(huge, huge.size, out)
    assert np.array_equal(out, data(huge.size))
    with pytest.raises(CardCapacityError, match="capacity"):
        mgr.need_in_device(huge)
    assert isinstance(CardCapacityError("x"), OutOfMemoryError)


def test_fragmentation_forces_compaction_not_failure(card: ModelCard,
                                                     driver: PcieDriver) -> None:
    """Free space scattered in holes is gathered by card-to-card moves (no PCIe bytes)."""
    mgr = MemoryManager(driver, policy="lru")
    n = mgr.capacity // 8
    ts = [mgr.allocate_tensor(n) for _ in range(8)]
    for i, t in enumerate(ts):
        mgr.write_tensor(t, n, data(n, i))
        mgr.need_in_device(t)
    for t in ts[1::2]:
        mgr.free_tensor(t)                      # four holes of n bytes, none adjacent
    big = mgr.allocate_tensor(4 * n)
    mgr.write_tensor(big, big.size, data(big.size, 99))
    h2c0 = bytes_moved(mgr)[0]
    (addr,) = mgr.need_in_device(big)
    assert mgr.stats.compactions == 1 and mgr.stats.evictions == 0
    h2c, c2h, c2c = bytes_moved(mgr)
    assert (h2c - h2c0, c2h) == (4 * n, 0), "compaction moved no PCIe bytes besides the upload"
    # cheapest: move two quarters-of-the-hole blocks into the two holes above the window
    # (sliding down everything between the holes would copy 3n)
    assert c2c == 2 * n
    assert np.array_equal(on_card(card, addr, big.size), data(big.size, 99))
    for i, t in enumerate(ts[0::2]):
        a = mgr.address(t)
        assert np.array_equal(on_card(card, a, n), data(n, 2 * i)), "a moved tensor lost data"
    mgr.check()


def test_tensors_of_one_call_never_evict_each_other(card: ModelCard,
                                                    driver: PcieDriver) -> None:
    mgr = MemoryManager(driver, policy="lru")
    n = mgr.capacity // 3
    ts = [mgr.allocate_tensor(n) for _ in range(3)]
    for i, t in enumerate(ts):
        mgr.write_tensor(t, n, data(n, i))
    for _ in range(3):
        addrs = mgr.need_in_device(*ts)
        for i, (t, a) in enumerate(zip(ts, addrs, strict=True)):
            assert mgr.address(t) == a
            assert np.array_equal(on_card(card, a, n), data(n, i))


def test_user_host_buffer_is_the_host_copy(card: ModelCard, driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    buf = card.host.alloc(4096)
    buf.write(data(4096))
    t = mgr.allocate_tensor(buf)
    mgr.write_tensor(t, 4096, buf)              # the host copy itself: no CPU copy needed
    new = data(4096, 3)
    card_update(card, mgr, t, new)
    mgr.read_tensor(t, 4096, buf)
    assert np.array_equal(buf.view(), new)
    mgr.free_tensor(t)
    assert card.host.is_allocated(buf.address, 4096), "the user's buffer is the user's to free"


def test_seed_aliases(card: ModelCard, driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    t = mgr.allocateTensorOnDevice(None, 256)
    assert mgr.allocateTensorOnDevice(128).size == 128
    mgr.writeTensorToDevice(t, 256, data(256))
    (addr,) = mgr.needInDevice(t)
    card.card_memory[addr:addr + 256] = 7
    mgr.tensorUpdated(t)
    out = np.empty(256, np.uint8)
    mgr.readTensorFromDevice(t, 256, out)
    assert (out == 7).all()
    mgr.freeTensor(t)


# --- bad calls --------------------------------------------------------------------------------

def test_bad_calls_raise_specific_errors(driver: PcieDriver) -> None:
    mgr = MemoryManager(driver)
    other = MemoryManager(driver)
    t = mgr.allocate_tensor(100)
    with pytest.raises(UnknownTensorError, match="not a tensor handle of this"):
        mgr.write_tensor(other.allocate_tensor(100), 100, data(100))
    with pytest.raises(UnknownTensorError):
        mgr.need_in_device("t0")               # type: ignore[arg-type]
    with pytest.raises(TensorSizeError, match="larger than"):
        mgr.write_tensor(t, 101, data(101))
    with pytest.raises(TensorSizeError):
        mgr.read_tensor(t, -1, np.empty(1, np.uint8))
    with pytest.raises(TensorSizeError):
        mgr.write_tensor(t, 100, data(50))      # the source is too short
    with pytest.raises(NeverWrittenError, match="never written"):
        mgr.read_tensor(t, 100, np.empty(100, np.uint8))
    with pytest.raises(NotOnCardError, match="need_in_device"):
        mgr.tensor_updated(t)
    mgr.write_tensor(t, 100, data(100))
    mgr.need_in_device(t)
    mgr.write_tensor(t, 100, data(100, 1))      # the card copy is stale now
    with pytest.raises(NotOnCardError):
        mgr.tensor_updated(t)
    mgr.free_tensor(t)
    with pytest.raises(DoubleFreeError, match="already freed"):
        mgr.free_tensor(t)
    for call in (lambda: mgr.need_in_device(t), lambda: mgr.read_tensor(t, 1, bytearray(1)),
                 lambda: mgr.tensor_updated(t), lambda: mgr.write_tensor(t, 1, b"x")):
        with pytest.raises(FreedTensorError):
            call()
    with pytest.raises(TensorSizeError):
        mgr.allocate_tensor(-1)


def test_host_allocation_failure_is_out_of_memory() -> None:
    card = ModelCard(1 << 20, host_size=1 << 20)
    mgr = MemoryManager(PcieDriver(card))
    mgr.allocate_tensor(512 * KiB)
    with pytest.raises(HostAllocationError) as e:
        mgr.allocate_tensor(512 * KiB)
    assert isinstance(e.value, OutOfMemoryError)


# --- accounting, batching, dry run, record / replay ---------------------------------------------

def small_tensor_trace() -> Trace:
    tr = Trace()
    for i in range(40):
        tr.alloc(i, 256 + 64 * (i % 5))
        tr.write(i, 256 + 64 * (i % 5))
    tr.alloc(40, 300_000)
    tr.write(40, 300_000)
    for i in range(0, 40, 2):
        tr.need(i, i + 1, 40)
        tr.updated(i + 1)
    for i in range(1, 40, 2):
        tr.read(i, 256 + 64 * (i % 5))
    return tr


@pytest.mark.parametrize("policy,schedule", [("naive", False), ("lru", False), ("gds", False),
                                             ("belady", True)])
def test_dry_run_accounts_exactly_like_the_card(policy: str, schedule: bool) -> None:
    """Same trace, real card vs dry run: identical manager and driver counters."""
    tr = small_tensor_trace()
    card = ModelCard(512 * KiB, host_size=16 << 20)
    drv = PcieDriver(card)
    base = drv.stats.copy()                   # the driver's own start-up MMIO
    real = MemoryManager(drv, policy=policy)
    kernel_calls = []

    def kernel(addr: int, new: np.ndarray) -> None:
        kernel_calls.append(addr)
        card.card_memory[addr:addr + new.size] = new
    res = replay(tr, real, schedule=schedule, kernel=kernel)
    assert res.reads_checked == 20 and kernel_calls
    dry = MemoryManager.dry_run(512 * KiB, policy=policy)
    replay(tr, dry, schedule=schedule)
    rs, ds = real.transport.stats, dry.transport.stats
    for f in ("bytes_h2c", "bytes_c2h", "bytes_c2c", "transfers_h2c", "transfers_c2h",
              "driver_calls", "descriptors_saved"):
        assert getattr(rs, f) == getattr(ds, f), f
    for f in ("calls", "descriptors", "doorbells", "interrupts", "bytes_h2c", "bytes_c2h",
              "bytes_c2c", "mmio_reads", "mmio_writes"):
        assert getattr(drv.stats, f) - getattr(base, f) == getattr(dry.driver.stats, f), f
    assert [(e.handle.id, e.addr) for e in real._entries.values()] == \
        [(e.handle.id, e.addr) for e in dry._entries.values()], "placement differs"


def test_batching_and_coalescing_cut_driver_calls() -> None:
    tr = small_tensor_trace()
    on = MemoryManager.dry_run(512 * KiB, policy="belady")
    off = MemoryManager.dry_run(512 * KiB, policy="belady", batching=False)
    replay(tr, on, schedule=True)
    replay(tr, off, schedule=True)
    assert on.transport.stats.bytes_h2c == off.transport.stats.bytes_h2c
    assert off.transport.stats.driver_calls >= 5 * on.transport.stats.driver_calls
    assert on.stats.prefetched > 0 and on.transport.stats.descriptors_saved > 0


def test_record_and_replay_reproduce_a_session(card: ModelCard, driver: PcieDriver) -> None:
    f = io.StringIO()
    mgr = MemoryManager(driver, record=f, policy="lru")
    ts = [mgr.allocate_tensor(100_000 + i, name=f"w{i}") for i in range(12)]
    for t in ts:
        mgr.write_tensor(t, t.size, data(t.size))
    for i in range(30):
        a, b = ts[i % 12], ts[(i * 5 + 1) % 12]
        mgr.need_in_device(a, b)
        mgr.tensor_updated(b)
    mgr.read_tensor(ts[0], 10, bytearray(10))
    mgr.free_tensor(ts[3])
    tr = Trace.parse(io.StringIO(f.getvalue()))
    tr.validate()
    assert [r[0] for r in tr.records].count("need") == 30
    again = MemoryManager.dry_run(card.mem_size, policy="lru")
    replay(tr, again)
    assert again.transport.stats.bytes_h2c == mgr.transport.stats.bytes_h2c
    assert again.transport.stats.bytes_c2h == mgr.transport.stats.bytes_c2h
    out = io.StringIO()
    tr.dump(out)
    assert Trace.parse(io.StringIO(out.getvalue())).records == tr.records


def test_schedule_mismatch_falls_back_to_recency() -> None:
    mgr = MemoryManager.dry_run(1 << 20, policy="belady")
    a, b = mgr.allocate_tensor(10), mgr.allocate_tensor(10)
    mgr.set_schedule([[a], [b], [a]])
    mgr.need_in_device(a)
    assert mgr._sched is not None
    mgr.need_in_device(a, b)                    # not in the schedule: dropped
    assert mgr._sched is None
    mgr.need_in_device(b)


def test_rtl_bench_program_on_the_functional_card() -> None:
    """The host program of the RTL bench, on the model of the same 80 KiB card (and of a
    256 KiB one: the program scales with the card)."""
    from tb.card_top.test_card_memory_manager import manager_program

    for size, policy in ((80, "gds"), (80, "lru"), (80, "belady"), (256, "gds")):
        card = ModelCard(size * KiB, host_size=8 << 20)
        stats = manager_program(PcieDriver(card), policy=policy)
        assert stats["evictions"] > 0 and stats["writebacks"] > 0 and stats["c2c"] > 0, stats


@pytest.mark.parametrize("policy", ["lru", "lirs", "auto"])
def test_large_map_evicts_in_policy_order_without_compaction(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many small tensors on a full card (a "large" map: allocator.LARGE lowered to 32 blocks):
    a tensor that fits no hole makes the policy evict on in its order until one does
    (MemoryManager._place_in_victims), so the card neither compacts nor evicts windows of
    neighbours out of order, and every byte survives. (Before, these 1,200 calls made 665
    compactions with lru, 16 with lirs and auto.)"""
    from pyhost.memory import allocator
    monkeypatch.setattr(allocator, "LARGE", 32)
    card = ModelCard(64 * KiB, host_size=8 << 20)
    rng = np.random.default_rng(1)
    with PcieDriver(card) as drv:
        mgr = MemoryManager(drv, policy=policy)
        sizes = (rng.integers(1, 17, 400) * 64).tolist()       # 64 B - 1 KiB, 3.3x the card
        ts = [mgr.allocate_tensor(n) for n in sizes]
        want = {}
        for t in ts:
            want[t.id] = data(t.size, seed=t.id)
            mgr.write_tensor(t, t.size, want[t.id])
        last: dict[int, float] = {}
        for k, (a, b, c) in enumerate(rng.integers(0, len(ts), (1200, 3)).tolist()):
            call = [ts[a], ts[b], ts[c]]
            before = {t.id for t, _, _ in mgr.resident()}
            addrs = mgr.need_in_device(*call)
            for t, addr in zip(call, addrs, strict=True):
                assert np.array_equal(on_card(card, addr, t.size), want[t.id])
            new = data(ts[c].size, seed=10_000 + k)
            card.card_memory[addrs[2]:addrs[2] + new.size] = new
            mgr.tensor_updated(ts[c])
            want[ts[c].id] = new
            after = {t.id for t, _, _ in mgr.resident()}
            for i in after - before:
                last[i] = k - 0.5                # uploaded with the call's (deferred writes)
            if policy == "lru":
                # evicted: among the least recently used (pick's corrections look 8 ahead)
                gone = before - after
                order = sorted(before - {t.id for t in call}, key=lambda i: last.get(i, -1))
                rank = {i: r for r, i in enumerate(order)}
                assert all(rank[i] < len(gone) + 8 for i in gone), "evicted out of LRU order"
            for t in call:
                last[t.id] = k
            assert mgr.alloc.large or k < 10                    # the map is "large"
        mgr.check()
        assert mgr.stats.compactions == 0 and mgr.stats.window_evictions == 0
        assert mgr.transport.stats.bytes_c2c == 0
        assert mgr.stats.slot_evictions > 0
        out = np.empty(1024, np.uint8)
        for t in ts:
            mgr.read_tensor(t, t.size, out[:t.size])
            assert np.array_equal(out[:t.size], want[t.id]), f"{t!r} lost its bytes"


@pytest.mark.parametrize("policy", ["lru", "auto"])
def test_many_small_tensors_are_placed_without_whole_map_searches(policy: str) -> None:
    """1,000 tensors of 64 B - 4 KiB, a card for a fifth of them, random calls: the card map
    (some 200 blocks of ~2 KiB) counts as large (allocator.MANY_SMALL), so misses are placed by
    evicting in the policy's order, without compaction or windows. (Before, with the large-map
    rule only above 4,096 blocks, these calls compacted with card copies of megabytes and
    cost about 1 ms each with auto.)"""
    rng = np.random.default_rng(0)
    sizes = (rng.integers(1, 65, 1000) * 64).tolist()
    cap = int(sum(sizes) * 0.2) // (64 << 10) * (64 << 10) + (64 << 10)
    mgr = MemoryManager.dry_run(cap, policy=policy)
    ts = [mgr.allocate_tensor(n) for n in sizes]
    for t in ts:
        mgr.write_tensor(t, t.size, None)
    for k, (a, b, c) in enumerate(rng.integers(0, len(ts), (600, 3)).tolist()):
        mgr.need_in_device(ts[a], ts[b], ts[c])
        mgr.tensor_updated(ts[c])
        assert mgr.alloc.large or k < 10
    mgr.check()
    assert mgr.stats.compactions == 0 and mgr.stats.window_evictions == 0
    assert mgr.transport.stats.bytes_c2c == 0 and mgr.stats.slot_evictions > 0


def test_a_full_card_takes_no_guesses_that_went_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deferred writes ride along with a need only into free card space; once the card has had
    to evict and fewer than DEFER_FULL_USED of such guesses were used (random needs), the holes
    the evictions leave are not refilled with guesses at every call: each would be evicted for
    by the next calls, and the wrong ones moved their bytes for nothing. (A large map, as with
    100k small tensors: there placement evicts on in the policy's order, leaving holes.)"""
    from pyhost.memory import allocator
    monkeypatch.setattr(allocator, "LARGE", 32)
    rng = np.random.default_rng(3)
    mgr = MemoryManager.dry_run(64 * KiB, policy="auto")
    ts = [mgr.allocate_tensor(int(n)) for n in rng.integers(1, 17, 2000) * 64]
    for t in ts:
        mgr.write_tensor(t, t.size, None)
    picks = rng.integers(0, len(ts), (1500, 3)).tolist()
    for a, b, c in picks[:500]:
        mgr.need_in_device(ts[a], ts[b], ts[c])
    assert mgr.stats.deferred_unused > 0
    before = mgr.stats.deferred_uploads
    for a, b, c in picks[500:]:
        mgr.need_in_device(ts[a], ts[b], ts[c])
    assert mgr.stats.deferred_uploads == before      # (12 more without the rule)

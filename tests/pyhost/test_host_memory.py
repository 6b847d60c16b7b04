"""HostMemory and HostBuffer: bounds, data access, and the aligned first-fit allocator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyhost.backend import (
    DEFAULT_HOST_BASE,
    DEFAULT_HOST_SIZE,
    CardBackend,
    ErrorInjectionUnsupported,
    HostBuffer,
    HostFreeError,
    HostMemory,
    HostOutOfMemory,
    HostRangeError,
    MmioError,
    check_mmio,
)

MiB = 1 << 20


def test_defaults() -> None:
    """256 MiB at 4 GiB by default, so host addresses never look like card addresses."""
    m = HostMemory()
    assert (m.size, m.base) == (DEFAULT_HOST_SIZE, DEFAULT_HOST_BASE) == (256 * MiB, 1 << 32)
    assert m.array.dtype == np.uint8 and m.array.size == m.size
    assert m.free_bytes == m.size and m.allocated == []


def test_parameters_and_bad_parameters() -> None:
    """Size and base are parameters; a non-positive size or an unaligned base is refused."""
    m = HostMemory(64 * 1024, base=0x2000)
    assert (m.base, m.end) == (0x2000, 0x2000 + 64 * 1024)
    for size, base in ((0, 0), (-1, 0), (4096, 123), (4096, -4096)):
        with pytest.raises(ValueError):
            HostMemory(size, base)


def test_read_write_view_round_trip() -> None:
    """write/read/view address the same bytes; a view is writable and aliases the array."""
    m = HostMemory(1 * MiB, base=0x10_0000)
    m.write(m.base + 5, b"hello")
    assert m.read(m.base + 5, 5) == b"hello"
    v = m.view(m.base + 5, 5)
    v[0] = ord("j")
    assert m.read(m.base + 5, 5) == b"jello"
    assert m.array[5] == ord("j")
    m.write(m.base, np.arange(4, dtype=np.uint32))   # any dtype is written as its bytes
    assert m.read(m.base, 16) == np.arange(4, dtype="<u4").tobytes()
    assert m.read(m.end - 1, 1) == b"\0" and m.read(m.base, 0) == b""


@pytest.mark.parametrize("addr,n", [(-1, 1), (0x10_0000 - 1, 1), (0x10_0000 + MiB, 1),
                                    (0x10_0000 + MiB - 3, 4), (0x10_0000, -1),
                                    (0x10_0000, MiB + 1)])
def test_out_of_bounds(addr: int, n: int) -> None:
    """Every access outside [base, base+size) raises HostRangeError naming the range."""
    m = HostMemory(1 * MiB, base=0x10_0000)
    calls = [lambda: m.read(addr, n), lambda: m.view(addr, n), lambda: m.offset(addr, n)]
    if n >= 0:
        calls.append(lambda: m.write(addr, bytes(n)))
    for fn in calls:
        with pytest.raises(HostRangeError, match="outside host memory"):
            fn()
    assert not m.contains(addr, n)


def test_alloc_alignment_and_first_fit() -> None:
    """Blocks are aligned bus addresses; first fit reuses the lowest hole that fits."""
    m = HostMemory(1 * MiB, base=0x1_0000_0000)
    a = m.alloc(100)
    assert a.address == m.base and a.size == 100
    b = m.alloc(10, align=64)
    assert b.address == m.base + 128        # first 64-aligned address after a
    c = m.alloc(5000)
    assert c.address == m.base + 4096 and c.address % 4096 == 0
    d = m.alloc(1, align=1 << 16)
    assert d.address % (1 << 16) == 0
    m.free(a)
    e = m.alloc(64, align=64)
    assert e.address == m.base               # the freed hole is first
    with pytest.raises(ValueError):
        m.alloc(0)
    with pytest.raises(ValueError):
        m.alloc(16, align=48)


def test_coalescing_and_out_of_memory() -> None:
    """Freeing in any order merges holes so the whole memory can be allocated again."""
    m = HostMemory(64 * 1024)
    bufs = [m.alloc(4096) for _ in range(16)]
    with pytest.raises(HostOutOfMemory, match="no free block of 1 bytes"):
        m.alloc(1)
    for i in (3, 1, 2, 0, 15, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 14):
        m.free(bufs[i])
    assert m.free_bytes == m.size
    whole = m.alloc(m.size)
    assert whole.address == m.base


def test_free_errors() -> None:
    """Double free, a sub-buffer and a foreign buffer are refused."""
    m, other = HostMemory(1 * MiB), HostMemory(1 * MiB)
    a = m.alloc(8192)
    with pytest.raises(HostFreeError):
        m.free(a.sub(0, 4096))
    with pytest.raises(HostFreeError):
        other.free(a)
    m.free(a)
    with pytest.raises(HostFreeError, match="double free"):
        m.free(a)


def test_is_allocated() -> None:
    m = HostMemory(1 * MiB)
    a = m.alloc(100)
    assert m.is_allocated(a.address, 100) and m.is_allocated(a.address + 99, 1)
    assert not m.is_allocated(a.address + 50, 51)
    assert not m.is_allocated(m.base - 1, 1)
    m.free(a)
    assert not m.is_allocated(a.address, 1)


def test_host_buffer_handle() -> None:
    """HostBuffer reads, writes and views its own bytes only; sub-buffers nest."""
    m = HostMemory(1 * MiB)
    buf = m.alloc(16)
    buf.write(b"0123456789abcdef")
    assert buf.read() == b"0123456789abcdef"
    assert buf.read(4, 3) == b"456"
    buf.view(10)[:] = ord("x")
    assert buf.read(8) == b"89xxxxxx"
    sub = buf.sub(2, 4)
    assert (sub.address, sub.size, sub.end) == (buf.address + 2, 4, buf.address + 6)
    assert sub.read() == b"2345"
    sub.write(b"AB", offset=2)
    assert buf.read(0, 6) == b"0123AB"
    for fn in (lambda: buf.read(15, 2), lambda: buf.view(-1), lambda: buf.write(bytes(17)),
               lambda: sub.sub(3, 2), lambda: buf.write(b"x", offset=16)):
        with pytest.raises(HostRangeError, match="outside the"):
            fn()
    assert isinstance(buf, HostBuffer) and "0x" in repr(buf)


def test_check_mmio() -> None:
    """BAR0 offsets are 4-byte aligned and inside BAR0; values are 32-bit."""
    check_mmio(0x0)
    check_mmio(0xFFC, 0xFFFF_FFFF)
    for off in (-4, 2, 0x1000):
        with pytest.raises(MmioError):
            check_mmio(off)
    for v in (-1, 1 << 32):
        with pytest.raises(MmioError):
            check_mmio(0, v)


def test_backend_injection_is_optional() -> None:
    """A backend without error injection says so with a specific exception."""
    class Minimal(CardBackend):
        def __init__(self) -> None:
            self.host = HostMemory(4096)

        def mmio_read(self, offset: int) -> int:
            return 0

        def mmio_write(self, offset: int, value: int) -> None:
            pass

        def wait_irq(self, timeout_s: float) -> bool:
            return False

    b = Minimal()
    with pytest.raises(ErrorInjectionUnsupported):
        b.inject_host_error(0, 1)
    with pytest.raises(ErrorInjectionUnsupported):
        b.clear_host_errors()
    with pytest.raises(TypeError):
        CardBackend()  # type: ignore[abstract]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 20_000), st.sampled_from([1, 8, 64, 4096,
                                                                                  16384]),
                          st.integers(0, 1000)), max_size=60))
def test_allocator_invariants(ops: list[tuple[bool, int, int, int]]) -> None:
    """Random alloc/free: blocks never overlap, stay aligned and inside memory, data in one block
    survives operations on others, and freeing everything restores one whole free block."""
    m = HostMemory(256 * 1024, base=0x4_0000_0000)
    live: dict[int, tuple[HostBuffer, int, int]] = {}
    for do_alloc, size, align, pick in ops:
        if do_alloc or not live:
            try:
                b = m.alloc(size, align)
            except HostOutOfMemory:
                continue
            assert b.address % align == 0 and m.contains(b.address, b.size)
            tag = (b.address // align + size) & 0xFF
            b.view()[:] = tag
            live[b.address] = (b, align, tag)
        else:
            addr = sorted(live)[pick % len(live)]
            m.free(live.pop(addr)[0])
        spans = sorted((b.address, b.end) for b, _, _ in live.values())
        for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
            assert e0 <= s1, f"blocks overlap: {spans}"
        assert m.free_bytes == m.size - sum(b.size for b, _, _ in live.values())
    for b, _, tag in live.values():
        assert (b.view() == tag).all(), f"{b!r} lost its contents"
        m.free(b)
    assert m.free_bytes == m.size and m.alloc(m.size).address == m.base

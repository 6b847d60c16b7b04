"""The PCIe host model's completion splitting, the spec's payload encoding and the TLP bound,
without a simulator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.pcie_bench import LINK_RATE, bound
from pyhost.spec import pcie
from tb.common.pcie_link import HostLinkConfig, HostRootComplex, _Read


def _pieces(addr: int, n: int, mps: int, rcb: int, split: int) -> list[tuple[int, int]]:
    rc = object.__new__(HostRootComplex)
    rc.cfg = HostLinkConfig(rcb=rcb, cpl_split=split)
    rc._max_payload_size = pcie.payload_code(mps)     # RootComplex keeps it here
    r = _Read(None, addr, addr + n, 0, 0)
    out = []
    while r.addr < r.end:
        k = rc._piece(r)
        out.append((r.addr, k))
        r.addr += k
    return out


@given(addr=st.integers(0, 8191), n=st.integers(1, 4096), mps=st.sampled_from([128, 256, 512]),
       rcb=st.sampled_from([64, 128]), split=st.sampled_from([0, 64, 128, 256]))
def test_completions_split_at_the_rcb(addr: int, n: int, mps: int, rcb: int, split: int) -> None:
    """Completions cover the request in order, each at most MPS, each ending on an RCB boundary
    except the last, so no 64-byte line is split between two completions."""
    if split and split < rcb:
        split = rcb
    pieces = _pieces(addr, n, mps, rcb, split)
    assert pieces[0][0] == addr and sum(k for _, k in pieces) == n
    for a, k in pieces:
        assert 0 < k <= mps, (a, k)
    for a, k in pieces[:-1]:
        assert (a + k) % rcb == 0, f"completion at {a:#x} of {k} ends off the RCB"
        if split:
            assert k <= split


@given(addr=st.integers(0, 8191), n=st.integers(1, 4096), mps=st.sampled_from([128, 256, 512]),
       rcb=st.sampled_from([64, 128]), split=st.sampled_from([0, 64, 128, 256]))
def test_completion_budget_covers_every_split(addr: int, n: int, mps: int, rcb: int,
                                              split: int) -> None:
    """However the root splits a read, its completions take no more of the hard IP's buffer
    (one header each; payload credits of 16 bytes + 1, as cocotbext-pcie's model counts) than
    the requester reserved for it; and a 4 KiB read fits the empty buffer."""
    if split and split < rcb:
        split = rcb
    headers, data = pcie.cpl_reservation(addr, n)
    pieces = _pieces(addr, n, mps, rcb, split)
    used = sum(((a + k + 3) // 4 - a // 4 + 3) // 4 + 1 for a, k in pieces)
    assert len(pieces) <= headers and used <= data, (pieces, headers, data)
    worst_h, worst_d = pcie.cpl_reservation(63, 4096)
    assert worst_h <= pcie.RC_BUFFER_CPLH and worst_d <= pcie.RC_BUFFER_CPLD
    assert pcie.cpl_reservation(0, 4096) == (64, 320) and pcie.cpl_reservation(0, 512) == (8, 40)


def test_payload_codes() -> None:
    assert [pcie.payload_code(s) for s in (128, 256, 512, 1024, 2048, 4096)] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        pcie.payload_code(384)


def test_tlp_bound() -> None:
    """Gen3 x16 carries 15.75 GB/s a direction; 256-byte completions 93 % of it."""
    assert LINK_RATE == pytest.approx(15.754e9, rel=1e-3)
    assert bound("H2C", 256) / LINK_RATE == pytest.approx(256 / 276)
    assert bound("C2H", 512) / LINK_RATE == pytest.approx(512 / 536)

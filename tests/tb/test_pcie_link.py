"""The PCIe host model's completion splitting, the spec's payload encoding, the TLP bound and
the hard IP model's completion fast path against the package's, without a simulator."""

from __future__ import annotations

import copy
import logging
import random
from types import SimpleNamespace

import pytest
from cocotb.queue import Queue
from cocotb.triggers import Event
from cocotbext.pcie.core.tlp import CplStatus, Tlp, TlpAttr, TlpTc, TlpType
from cocotbext.pcie.core.utils import PcieId
from cocotbext.pcie.xilinx.us import UltraScalePlusPcieDevice
from cocotbext.pcie.xilinx.us.tlp import Tlp_us
from hypothesis import given
from hypothesis import strategies as st

from bench.pcie_bench import LINK_RATE, bound
from pyhost.spec import pcie
from tb.common.pcie_link import CardPcieDevice, HostLinkConfig, HostRootComplex, _Read


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


# -- the hard IP model's usual completion: CardPcieDevice._take_completion against the package --

def _stub_device(rng: random.Random) -> CardPcieDevice:
    """The state UltraScalePlusPcieDevice.upstream_recv touches for a completion, no simulator."""
    d = object.__new__(CardPcieDevice)
    d.functions = [SimpleNamespace(pcie_id=PcieId(1, 0, 0),
                                   pcie_cap=SimpleNamespace(extended_tag_field_enable=True))]
    d.log = logging.getLogger("test_pcie_link")
    d.active_request = [None] * 256
    d.cpld_credit_count = rng.randrange(0, 3000)
    d.cpld_credit_released = Event()
    d.rx_buf_cplh_fc_limit, d.rx_buf_cpld_fc_limit = pcie.RC_BUFFER_CPLH, pcie.RC_BUFFER_CPLD
    d.rx_buf_cplh_fc_count = rng.choice([0, 7, pcie.RC_BUFFER_CPLH - 1, pcie.RC_BUFFER_CPLH])
    d.rx_buf_cpld_fc_count = rng.choice([0, 100, pcie.RC_BUFFER_CPLD - 20,
                                         pcie.RC_BUFFER_CPLD - 1])
    d.rc_queue, d.local_error = Queue(), Queue()
    d.tag_available_count = -1
    return d


def _state(d) -> tuple:
    q = [tuple(sorted((k, v) for k, v in vars(t).items() if k != "release_fc_cb"))
         for t in d.rc_queue._queue]
    return ([id(r) if r is not None else None for r in d.active_request], d.cpld_credit_count,
            d.rx_buf_cplh_fc_count, d.rx_buf_cpld_fc_count, d.tag_available_count, q,
            list(d.local_error._queue))


@pytest.mark.parametrize("seed", range(10))
def test_usual_completion_is_the_packages(seed: int) -> None:
    """CardPcieDevice takes the usual completion itself (the same steps as the package's
    upstream_recv without its enum sets); anything else it leaves to the package untouched."""
    rng = random.Random(seed)
    taken = 0
    for _ in range(300):
        req = Tlp_us()
        wide = rng.random() < 0.5
        req.fmt_type = TlpType.MEM_READ_64 if wide else TlpType.MEM_READ
        addr = rng.randrange(1 << 40) if wide else rng.randrange(1 << 32)
        n = rng.choice([1, 3, 64, 200, 512, 4096 - (addr & 0xFFF) or 4096])
        req.set_addr_be(addr, min(n, 4096 - (addr & 0xFFF)))
        req.requester_id = PcieId(1, 0, 0)
        req.tag = rng.randrange(256)
        req.attr, req.tc = TlpAttr(rng.randrange(8)), TlpTc(rng.randrange(8))
        start = addr
        total = req.get_be_byte_count()
        done = rng.randrange(0, total, 4) if total > 4 else 0
        # (HostRootComplex makes its completions as Tlp_us, which the fast path takes as is)
        cls = rng.choice([Tlp, Tlp_us])
        cpl = cls.create_completion_data_for_tlp(req, PcieId(0, 0, 0))
        cpl.byte_count = total - done
        cpl.lower_address = (start + done) & 0x7F
        piece = min(total - done, rng.choice([4, 64, 256, 4096]))
        a0 = (start + done) & ~3
        cpl.set_data(rng.randbytes(((start + done + piece + 3) & ~3) - a0))
        # what may be off
        fault = rng.choice(["none"] * 6 + ["lower", "status", "ep", "attr", "tc", "requester",
                                          "inactive", "nodata", "locked", "wrong_req"])
        if fault == "lower":
            cpl.lower_address ^= 4
        elif fault == "status":
            cpl.status = rng.choice([CplStatus.UR, CplStatus.CA, CplStatus.CRS])
        elif fault == "ep":
            cpl.ep = True
        elif fault == "attr":
            cpl.attr = TlpAttr((int(cpl.attr) + 1) & 7)
        elif fault == "tc":
            cpl.tc = TlpTc((int(cpl.tc) + 1) & 7)
        elif fault == "requester":
            cpl.requester_id = PcieId(2, 0, 0)
        elif fault == "nodata":
            cpl.fmt_type = TlpType.CPL
            cpl.set_data(b"")
        elif fault == "locked":
            cpl.fmt_type = TlpType.CPL_LOCKED_DATA
        elif fault == "wrong_req":
            req.fmt_type = TlpType.MEM_WRITE_64 if wide else TlpType.MEM_WRITE
        dseed = rng.random()
        a, b = _stub_device(random.Random(dseed)), _stub_device(random.Random(dseed))
        if fault != "inactive":
            a.active_request[req.tag] = b.active_request[req.tag] = req
        released = {"a": 0, "b": 0}
        ca, cb = copy.deepcopy(cpl), copy.deepcopy(cpl)
        ca.release_fc_cb = lambda r=released: r.__setitem__("a", r["a"] + 1)
        cb.release_fc_cb = lambda r=released: r.__setitem__("b", r["b"] + 1)
        before = _state(b)
        if CardPcieDevice._take_completion(b, cb):
            taken += 1
            assert fault == "none", fault
            coro = UltraScalePlusPcieDevice.upstream_recv(a, ca)
            with pytest.raises(StopIteration):
                coro.send(None)
            after_a, after_b = _state(a), _state(b)
            after_a[0][req.tag] = after_b[0][req.tag] = "x"      # (the same request object)
            assert after_b == after_a
            assert released == {"a": 1, "b": 1}
        else:
            assert fault != "none" or not a.active_request[req.tag], fault
            assert _state(b) == before and released["b"] == 0
    assert taken > 50

"""tb/common/pcie_streams.py against cocotbext-pcie, without a simulator: the RC beats of
``rc_beats`` are those of the package's ``pack_us_rc`` + ``RcSource._run``, and ``RqStream``
assembles the frames the package's ``RqSink._run`` assembles from the same beats (the package's
per-beat coroutines are driven by hand with stand-ins for their awaits)."""

from __future__ import annotations

import logging
import random

import pytest
from cocotbext.pcie.core.tlp import CplStatus, TlpAttr, TlpTc, TlpType
from cocotbext.pcie.core.utils import PcieId
from cocotbext.pcie.xilinx.us.interface import (
    RcSource,
    RqSink,
    RqSource,
    UsPcieFrame,
    UsPcieTransaction,
)
from cocotbext.pcie.xilinx.us.tlp import ErrorCode, Tlp_us

from tb.common.pcie_streams import RcPacker, RqStream, rc_encode, rc_stream_beats

LOG = logging.getLogger("test_pcie_streams")


class _Done(Exception):
    pass


def _source_beats(cls, frames: list, segments: int = 1,
                  **fields) -> list[tuple[int, int, int, int]]:
    """What the package's source coroutine ``cls._run`` drives for ``frames`` (512 bits, all
    queued from the start)."""
    src = object.__new__(cls)
    src.width, src.seg_count, src.seg_byte_lanes = 512, segments, 16 // segments
    src.log = LOG
    for k, v in fields.items():
        setattr(src, k, v)
    pending = list(frames)
    out = []

    async def get_frame():
        if not pending:
            raise _Done
        return pending.pop(0)

    async def drive(t):
        out.append((t.tdata, t.tkeep, t.tuser, t.tlast))
    src._get_frame, src._drive = get_frame, drive
    src.empty = lambda: not pending
    src._get_frame_nowait = lambda: pending.pop(0)
    coro = cls._run(src)
    with pytest.raises(_Done):
        coro.send(None)
    return out


def _random_completion(rng: random.Random) -> Tlp_us:
    t = Tlp_us()
    t.fmt_type = rng.choice([TlpType.CPL, TlpType.CPL_DATA, TlpType.CPL_LOCKED,
                             TlpType.CPL_LOCKED_DATA])
    if t.fmt_type in (TlpType.CPL_DATA, TlpType.CPL_LOCKED_DATA):
        n = rng.choice([1, 2, 3, 13, 16, 17, 29, 32, 64, 125, 128, 200])
        t.set_data(rng.randbytes(4 * n))
    t.lower_address = rng.randrange(0x1000)
    t.byte_count = rng.choice([rng.randrange(0x2000), 4 * t.length, 4 * t.length - 3, 1, 5])
    t.error_code = rng.choice(list(ErrorCode))
    t.request_completed = rng.random() < 0.5
    t.status = rng.choice(list(CplStatus))
    t.ep = rng.random() < 0.2
    t.requester_id = PcieId(rng.randrange(256), rng.randrange(32), rng.randrange(8))
    t.completer_id = PcieId(rng.randrange(256), rng.randrange(32), rng.randrange(8))
    t.tag = rng.randrange(256)
    t.tc = TlpTc(rng.randrange(8))
    t.attr = TlpAttr(rng.randrange(8))
    t.discontinue = rng.random() < 0.1
    return t


@pytest.mark.parametrize("segments", [1, 2, 4])
@pytest.mark.parametrize("seed", range(6))
def test_rc_beats_are_the_packages(seed: int, segments: int) -> None:
    """Completions queued together: the beats the package drives for them, straddled in two or
    four segments or not (completions of any length, from the descriptor alone up)."""
    rng = random.Random(seed * 7 + segments)
    tlps = [_random_completion(rng) for _ in range(60)]
    want = _source_beats(RcSource, [t.pack_us_rc() for t in tlps], segments,
                         discontinue_offset=96, parity_offset=97)
    got = rc_stream_beats(tlps, segments)
    assert got == want
    for t in tlps:
        assert len(rc_encode(t)) == len(t.pack_us_rc())
    if segments > 1:
        starts = sum(bin((tuser >> 64) & 0xF).count("1") for _, _, tuser, _ in got)
        assert len(got) < sum(-(-len(t.pack_us_rc()) // 16) for t in tlps), "nothing straddled"
        assert starts == len(tlps)


def test_rc_packer_waits_for_what_is_queued() -> None:
    """With straddling, a completion joins the beat where the previous one ends only if it is
    queued when that beat is built; otherwise it starts the next beat at DWORD 0."""
    rng = random.Random(5)
    a, b = (rc_encode(_random_completion(rng)) for _ in range(2))
    while a.dwords % 16 in (0, 13, 14, 15) or a.dwords > 40:
        a = rc_encode(_random_completion(rng))
    packer = RcPacker(4)
    queue = [a]
    beats = []
    while (beat := packer.build(lambda: queue.pop() if queue else None)) is not None:
        beats.append(beat)
    queue.append(b)
    while (beat := packer.build(lambda: queue.pop() if queue else None)) is not None:
        beats.append(beat)
    assert len(beats) == -(-a.dwords // 16) + -(-b.dwords // 16)
    first_b = beats[-(-a.dwords // 16)]
    assert (first_b[2] >> 64) & 1 and (first_b[2] >> 68) & 3 == 0   # b starts at DWORD 0


def _random_request(rng: random.Random) -> Tlp_us:
    t = Tlp_us()
    kind = rng.choice([TlpType.MEM_READ, TlpType.MEM_READ_64, TlpType.MEM_WRITE,
                       TlpType.MEM_WRITE_64])
    t.fmt_type = kind
    addr = rng.randrange(1 << (64 if kind in (TlpType.MEM_READ_64, TlpType.MEM_WRITE_64)
                               else 32))
    n = rng.choice([1, 2, 3, 4, 60, 63, 64, 100, 512])
    if kind in (TlpType.MEM_WRITE, TlpType.MEM_WRITE_64):
        t.set_addr_be_data(addr, rng.randbytes(n))
    else:
        t.set_addr_be(addr, n)
    t.requester_id = PcieId(rng.randrange(256), rng.randrange(32), rng.randrange(8))
    t.tag = rng.randrange(256)
    t.seq_num = rng.randrange(64)
    t.discontinue = rng.random() < 0.1
    t.attr = TlpAttr(rng.randrange(8))
    return t


class _Yield:
    def __await__(self):
        yield


class _Sync:
    def clear(self) -> None:
        pass

    def wait(self):
        return _Yield()


def _frame_fields(f: UsPcieFrame) -> tuple:
    return (list(f.data), list(f.parity), f.first_be, f.last_be, f.discontinue, f.seq_num)


@pytest.mark.parametrize("segments", [1, 2])
@pytest.mark.parametrize("seed", range(6))
def test_rq_frames_are_the_packages(seed: int, segments: int) -> None:
    """The frames RqStream assembles from the package's RQ beats, straddled (two segments) or
    not, are those the package's sink assembles."""
    rng = random.Random(seed)
    tlps = [_random_request(rng) for _ in range(40)]
    beats = _source_beats(RqSource, [t.pack_us_rq() for t in tlps], segments,
                          discontinue_offset=36, parity_offset=73)
    extra = 0
    if segments == 1:
        # a few beats with lanes missing in the middle (the sink keeps only the lanes in TKEEP)
        extra = 5
        for _ in range(extra):
            beats.append((rng.getrandbits(512), rng.randrange(1, 1 << 16),
                          rng.getrandbits(137), 1))
    else:
        shared = sum(bin((tuser >> 20) & 3).count("1") == 2 for _, _, tuser, _ in beats)
        assert shared > 0, "no beat carried two requests"

    want: list[UsPcieFrame] = []
    sink = object.__new__(RqSink)
    sink.width, sink.seg_count, sink.byte_lanes = 512, segments, 16
    sink.seg_byte_lanes = 16 // segments
    sink.discontinue_offset, sink.parity_offset = 36, 73
    sink.log, sink.sample_sync, sink.sample_obj = LOG, _Sync(), None
    sink._sink_frame = want.append
    coro = RqSink._run(sink)
    got: list[UsPcieFrame] = []
    mine = object.__new__(RqStream)
    mine._frame, mine.log, mine._sink_frame = None, LOG, got.append
    mine.seg_count = segments
    for tdata, tkeep, tuser, tlast in beats:
        sink.sample_obj = UsPcieTransaction(tdata=tdata, tkeep=tkeep, tuser=tuser, tlast=tlast)
        coro.send(None)
        mine._assemble(tdata, tkeep, tuser, tlast)
    assert len(got) == len(want) == len(tlps) + extra
    assert [_frame_fields(f) for f in got] == [_frame_fields(f) for f in want]
    # and the requests come out as they went in
    for t, f in zip(tlps, got, strict=False):
        assert Tlp_us.unpack_us_rq(f, True) == Tlp_us.unpack_us_rq(t.pack_us_rq(), True)

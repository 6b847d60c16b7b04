"""The hard IP model's requester streams (RC: completions to the card, RQ: requests from the
card) with one coroutine per stream and whole-TLP encoding, for tb/common/pcie_link.py's
CardPcieDevice.

cocotbext-pcie's RcSource runs two coroutines that meet once per beat (one builds the next beat
lane by lane, the other drives it at a clock edge), and its RqSink likewise (one samples at the
edge, the other assembles the frame); the RC frame itself is built dword by dword with a parity
call per dword. Here (subclasses, the package's per-beat methods replaced):

- :func:`rc_encode` encodes a completion (Tlp_us) straight into the DWORDs, byte enables and
  parity of the package's ``pack_us_rc``, and :class:`RcPacker` builds the 512-bit RC stream's
  beats from them as ``RcSource._run`` does (the same tdata, tkeep, tuser with byte enables,
  is_sop/is_eop and their pointers, discontinue, parity; tlast), without straddling or with the
  hard IP's two- and four-TLP RC straddle (tests/tb/test_pcie_streams.py compares them on
  random completions).
- :class:`RcStream` drives those beats from one coroutine: at each rising edge of the user
  clock, when the card took the beat on the bus (or none is up), the next one goes up, as the
  package's source does; it hands beats over and takes frames from its queue at the same
  moments as the package's (the queue's occupancy is what the hard IP's receive buffer
  accounting waits on). It writes only the signals that change, reads TREADY only while a beat
  is up, and sleeps while it has nothing to send.
  In the lean Verilator builds the beats are played by tb/common/cosim_main.cpp's C++ stream
  source instead (the same rules, no Python per beat; ``COSIM_NATIVE_STREAMS=0`` keeps the
  Python one).
- :class:`RqStream` samples and assembles request frames in the edge coroutine itself (the
  package's frame assembly, the same frames: tested likewise) and hands each whole frame to the
  hard IP's request logic.
- RqStream and :class:`CcStream` (the package's CC sink) have no TREADY monitor: the package's
  sinks wake themselves when TREADY rises, which only they drive, and a value-change callback
  costs every time step of the model.

Only the 512-bit streams card_top_pcie has are implemented: RC with one, two or four segments
(:class:`RcPacker`), RQ with one or two (straddled or not); anything else raises.
"""

from __future__ import annotations

import ctypes
import os
import struct

import cocotb
from cocotb.queue import QueueFull
from cocotb.triggers import Event, RisingEdge
from cocotbext.pcie.core.tlp import TlpType
from cocotbext.pcie.xilinx.us.interface import CcSink, RcSource, RqSink, UsPcieFrame

#: Odd parity of each byte value as the character '0' or '1' (the package's dword_parity(d)
#: ^ 0xf per byte of a dword)
_PARITY_CHARS = bytes(0x30 + ((bin(b).count("1") & 1) ^ 1) for b in range(256))
_HEX = "0123456789abcdef"
_LOCKED_TYPE = TlpType.CPL_LOCKED.value[1]     # the type field of both locked completions
assert TlpType.CPL_LOCKED_DATA.value[1] == _LOCKED_TYPE
_HDR = struct.Struct("<3L")
BEAT_BYTES = 64
LANES = 16
# RcSource's tuser fields on a 512-bit interface (byte enables at lane*4 from bit 0)
_RC_SOP = 1 << 64
_RC_EOP = 1 << 76
_RC_EOP_PTR = 80
_RC_SOP_PTR = 68
_RC_DISCONTINUE = 1 << 96
_RC_PARITY = 97
#: Set to 0 to drive the RC stream from Python even where the model has the C++ player.
NATIVE_ENV = "COSIM_NATIVE_STREAMS"
# RqSink's tuser fields on a 512-bit interface
_RQ_DISCONTINUE = 1 << 36
_RQ_SOP, _RQ_SOP_PTR, _RQ_EOP, _RQ_EOP_PTR = 20, 22, 26, 28    # straddled: is_sop/eop, pointers
_RQ_PARITY = 73


def _check_width(stream, segments: tuple[int, ...]) -> None:
    if stream.width != 512 or stream.seg_count not in segments:
        raise NotImplementedError(
            f"{type(stream).__name__}: a {stream.width}-bit stream of {stream.seg_count} "
            f"segments (only 512 bits, {segments} segments, as card_top_pcie has, is "
            "implemented)")


class RcTlp:
    """A completion encoded for the RC stream: its DWORDs (descriptor and payload) as bytes,
    their byte enables and byte parity; len() is its DWORD count (what the package's queue
    accounting counts of a UsPcieFrame)."""

    __slots__ = ("data", "be", "par", "disc", "dwords")

    def __init__(self, data: bytes, be: str, par: str, disc: bool) -> None:
        self.data = data        #: the DWORDs, little-endian
        self.be = be            #: byte enables: one hex digit per DWORD, the last DWORD first
        self.par = par          #: odd parity per byte as '0'/'1', the last byte first
        self.disc = disc        #: discontinue
        self.dwords = len(data) >> 2

    def __len__(self) -> int:
        return self.dwords


def rc_encode(tlp) -> RcTlp:
    """Completion ``tlp`` (a Tlp_us) as the package's ``pack_us_rc`` makes it (the descriptor's
    three DWORDs, the payload, first and last byte enables, parity)."""
    la = tlp.lower_address
    bc = tlp.byte_count
    length = tlp.length
    dw0 = (la & 0xFFF) | (tlp.error_code & 0xF) << 12 | (bc & 0x1FFF) << 16 \
        | bool(tlp.request_completed) << 30
    if tlp.type == _LOCKED_TYPE:                # CPL_LOCKED, CPL_LOCKED_DATA
        dw0 |= 1 << 29
    dw1 = (length & 0x7FF) | (tlp.status & 0x7) << 11 | bool(tlp.ep) << 14 \
        | int(tlp.requester_id) << 16
    dw2 = (tlp.tag & 0xFF) | int(tlp.completer_id) << 8 | (tlp.tc & 0x7) << 25 \
        | (tlp.attr & 0x7) << 28
    data = tlp.data
    n = len(data) >> 2                          # payload dwords
    frame = _HDR.pack(dw0, dw1, dw2) + (data if len(data) == 4 * n else data[:4 * n])
    # byte enables, one hex digit per dword, last dword first (pack_us_rc's first / last BE)
    if n:
        first_be = (0xF << (la & 3)) & 0xF
        last_be = 0xF if bc + (la & 3) > length * 4 else 0xF >> ((4 - bc - la) & 3)
        if n == 1:
            be = _HEX[first_be & last_be] + "000"
        else:
            be = _HEX[last_be] + "f" * (n - 2) + _HEX[first_be] + "000"
    else:
        be = "000"
    return RcTlp(frame, be, frame.translate(_PARITY_CHARS)[::-1].decode(), bool(tlp.discontinue))


class RcPacker:
    """Builds the RC stream's beats from completions as the package's ``RcSource._run`` does,
    with ``segments`` of 16 / segments DWORDs (1: no straddling; 2 or 4: the hard IP's RC
    straddle, a completion starting in any segment after the one where the previous one ended,
    if the next is already queued when the beat is built). :meth:`build` makes one beat."""

    def __init__(self, segments: int) -> None:
        if segments not in (1, 2, 4):
            raise ValueError(f"RC stream of {segments} segments (1, 2 or 4)")
        self.segments = segments
        self.lanes = LANES // segments
        self.cur: RcTlp | None = None   # the completion the last beat ended inside
        self.off = 0                    # its DWORDs already in beats

    def build(self, take):
        """The next beat (tdata, tkeep, tuser, tlast), or None when there is nothing to send:
        the rest of the current completion, then completions from ``take()`` (the next one, or
        None when nothing is queued) while segments remain."""
        cur, off = self.cur, self.off
        if cur is None:
            cur = take()
            if cur is None:
                return None
            off = 0
        lanes = self.lanes
        parts = []
        keep = tuser = last = sop = eop = 0
        for seg in range(self.segments):
            if cur is None:
                cur = take()
                if cur is None:
                    break
                off = 0
            lo = seg * lanes
            d = cur.dwords
            n = min(lanes, d - off)
            parts.append(cur.data[4 * off:4 * (off + n)])
            keep |= ((1 << n) - 1) << lo
            tuser |= int(cur.be[d - off - n:d - off], 16) << 4 * lo \
                | int(cur.par[4 * (d - off - n):4 * (d - off)], 2) << (_RC_PARITY + 4 * lo)
            if n < lanes:                   # the segment's empty lanes: parity 0xf
                parts.append(bytes(4 * (lanes - n)))
                tuser |= ((1 << 4 * (lanes - n)) - 1) << (_RC_PARITY + 4 * (lo + n))
            if off == 0:                    # is_sop, is_sop_ptr
                tuser |= _RC_SOP << sop | (lo >> 2) << (_RC_SOP_PTR + 2 * sop)
                sop += 1
            if cur.disc:
                tuser |= _RC_DISCONTINUE
            off += n
            if off >= d:                    # is_eop, is_eop_ptr
                tuser |= _RC_EOP << eop | (lo + n - 1) << (_RC_EOP_PTR + 4 * eop)
                eop += 1
                if self.segments == 1:
                    last = 1
                cur = None
        self.cur, self.off = cur, off
        tdata = int.from_bytes(b"".join(parts), "little")
        return tdata, keep, tuser, last


def rc_stream_beats(tlps, segments: int = 1) -> list[tuple[int, int, int, int]]:
    """The beats of completions ``tlps`` (Tlp_us) on the 512-bit RC stream when all of them
    are queued from the start: the package's ``pack_us_rc`` and ``RcSource._run``."""
    frames = [rc_encode(t) for t in tlps]
    frames.reverse()
    packer = RcPacker(segments)
    beats = []
    while (beat := packer.build(lambda: frames.pop() if frames else None)) is not None:
        beats.append(beat)
    return beats


def _native_streams():
    """The model's C++ stream player (tb/common/cosim_main.cpp), when this simulator process
    has it and COSIM_NATIVE_STREAMS is not 0; else None."""
    if os.environ.get(NATIVE_ENV, "1") in ("0", ""):
        return None
    try:
        lib = ctypes.CDLL(None)
        _ = lib.cosim_stream_open
    except (AttributeError, OSError):
        return None
    lib.cosim_stream_open.argtypes = [ctypes.c_char_p] * 8 + [ctypes.c_int, ctypes.c_int]
    lib.cosim_stream_open.restype = ctypes.c_int
    lib.cosim_stream_close.argtypes = [ctypes.c_int]
    lib.cosim_stream_close.restype = None
    lib.cosim_stream_words.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.cosim_stream_words.restype = ctypes.c_int
    lib.cosim_stream_push.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                      ctypes.c_char_p, ctypes.c_int]
    lib.cosim_stream_pause.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.cosim_stream_pause.restype = None
    lib.cosim_stream_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
    lib.cosim_stream_stats.restype = None
    lib.cosim_stream_push.restype = ctypes.c_uint64
    lib.cosim_stream_moved.argtypes = [ctypes.c_int]
    lib.cosim_stream_moved.restype = ctypes.c_uint64
    lib.cosim_stream_driven.argtypes = [ctypes.c_int]
    lib.cosim_stream_driven.restype = ctypes.c_uint64
    return lib


def _int(sig) -> int:
    """A control signal's value; X or Z count as 0 (as the package's streams take them)."""
    try:
        return int(sig.value)
    except ValueError:
        return 0


class RcStream(RcSource):
    """The RC stream (hard IP to card) from one coroutine, or from the model's C++ player
    (:attr:`native`); frames are :class:`RcTlp` (Python: :meth:`send_nowait`) or Tlp_us
    (native: :meth:`push`)."""

    def __init__(self, bus, clock, reset=None, segments=1, *args, limit: int = 2,
                 **kwargs) -> None:
        self._packer = RcPacker(segments)
        self._built = None                 # the beat built after the staged one (_run's)
        self._staged = None                # the beat that goes up at the next handshake
        self._work = Event()
        self._driven = [0, 0, 0, 0]        # tdata, tkeep, tuser, tlast as last written
        self._by_tlps = [0] * 5            # beats driven by the TLPs in them (stats())
        self._starts = 0                   # bit k: a TLP started in segment k
        #: called after a frame left the queue (the hard IP's RC logic may send the next)
        self.on_dequeue = None
        #: awaited at each clock edge while the stream runs, before the handshake (the link
        #: delivers the completions that arrived since the last edge)
        self.edge_hook = None
        #: called with False when the stream goes to sleep, True when it wakes
        self.on_active = None
        #: the C++ player's id (tb/common/cosim_main.cpp), or None: the Python coroutine
        self.native: int | None = None
        super().__init__(bus, clock, reset, segments, *args, **kwargs)
        _check_width(self, (1, 2, 4))
        self.queue_occupancy_limit_frames = limit
        self._lib = _native_streams()
        if self._lib is not None:
            b = self.bus
            sid = self._lib.cosim_stream_open(
                clock._path.encode(), reset._path.encode() if reset is not None else b"",
                *(getattr(b, n)._path.encode() for n in ("tvalid", "tready", "tdata", "tkeep",
                                                          "tuser", "tlast")), limit, segments)
            if sid >= 0 and self._lib.cosim_stream_words(sid, 0) * 4 == BEAT_BYTES:
                self.native = sid
                cocotb.start_soon(self._hold_native())

    # -- the C++ player -----------------------------------------------------------------------
    async def _hold_native(self) -> None:
        # the player drives until the test ends (its tasks are cancelled then)
        try:
            await Event().wait()
        finally:
            self._lib.cosim_stream_close(self.native)

    def push(self, tlp) -> int:
        """Native: completion ``tlp`` joins the player's backlog; returns the frames that have
        left the backlog so far (into the queue: the package's RC logic sent them)."""
        f = rc_encode(tlp)
        return self._lib.cosim_stream_push(self.native, f.data, f.dwords, f.be.encode(),
                                           int(f.disc))

    def moved(self) -> int:
        """Native: the frames that have left the player's backlog so far."""
        return self._lib.cosim_stream_moved(self.native)

    def driven(self) -> int:
        """Native: the beats the player has driven so far."""
        return self._lib.cosim_stream_driven(self.native)

    # -- queue ------------------------------------------------------------------------------
    async def send(self, frame) -> None:
        while self.full():
            self.dequeue_event.clear()
            await self.dequeue_event.wait()
        self.send_nowait(frame)

    def send_nowait(self, frame) -> None:
        if self.native is not None:
            raise TypeError("RcStream: a native stream takes completions with push()")
        if not isinstance(frame, RcTlp):
            raise TypeError(f"RcStream sends RcTlp (rc_encode), not {type(frame).__name__}")
        if self.full():
            raise QueueFull()
        self.queue.put_nowait(frame)       # (the package's send_nowait copies into a UsPcieFrame)
        self.idle_event.clear()
        self.queue_occupancy_bytes += len(frame)
        self.queue_occupancy_frames += 1
        self._stage()

    def _pause_update(self, val) -> None:
        if self.native is not None:
            self._lib.cosim_stream_pause(self.native, int(bool(val)))

    def _take(self) -> RcTlp | None:
        if self.queue.empty():
            return None
        self._took = True
        return self._get_frame_nowait()

    def _stage(self) -> None:
        """The package's _run, synchronously: one beat waits for the driver (staged) and the
        next is built as soon as the one before it was staged, taking frames from the queue as
        it needs them (the rest of the current frame first; with straddling, a frame joins a
        beat only if it is queued when the beat is built); a frame that arrives while nothing
        is being built starts a beat at once. Then, if a frame left, ``on_dequeue`` (the queue
        has room)."""
        self._took = False
        if self._staged is None:
            if self._built is None:
                self._built = self._packer.build(self._take)
                if self._built is None:
                    return
            self._staged = self._built
            self._built = None
            self._work.set()
        if self._built is None:
            self._built = self._packer.build(self._take)
        if self._took and self.on_dequeue is not None:
            self.on_dequeue()

    # -- the bus ----------------------------------------------------------------------------
    async def _run(self) -> None:
        return                             # the frame builder: _stage, called synchronously

    def stats(self) -> tuple[list[int], set[int]]:
        """The beats driven so far by the TLPs they carry (a part of), 0..4, and the segments
        (4 DWORDs: 0..3) TLPs started in."""
        if self.native is not None:
            out = (ctypes.c_uint64 * 6)()
            self._lib.cosim_stream_stats(self.native, out)
            return list(out[:5]), {k for k in range(4) if out[5] >> k & 1}
        return list(self._by_tlps), {k for k in range(4) if self._starts >> k & 1}

    def _drive_beat(self, beat) -> None:
        bus = self.bus
        d = self._driven
        tdata, tkeep, tuser, tlast = beat
        sop = (tuser >> 64) & 0xF
        tlps = 1                           # a TLP from an earlier beat unless one starts at 0
        if sop:
            for k in range(4):
                if sop >> k & 1:
                    ptr = (tuser >> (_RC_SOP_PTR + 2 * k)) & 3
                    self._starts |= 1 << ptr
                    tlps += ptr != 0
        self._by_tlps[min(tlps, 4)] += 1
        bus.tdata.value = tdata            # these two change with every beat
        bus.tuser.value = tuser
        if tkeep != d[1]:
            bus.tkeep.value = tkeep
        if tlast != d[3]:
            bus.tlast.value = tlast
        d[0], d[1], d[2], d[3] = beat

    async def _run_source(self) -> None:
        self.active = False
        if self.native is not None:
            return                         # the C++ player drives the bus
        edge = RisingEdge(self.clock)
        bus = self.bus
        valid = 0                          # TVALID as driven
        while True:
            await edge
            if self.reset is not None and _int(self.reset):
                if valid:
                    bus.tvalid.value = 0
                    valid = 0
                continue
            if self.edge_hook is not None:
                await self.edge_hook()
            if valid and not _int(bus.tready):
                continue                   # the card holds the beat
            if self._staged is not None and not self.pause:
                self._drive_beat(self._staged)
                self._staged = None
                if not valid:
                    bus.tvalid.value = 1
                    valid = 1
                self.active = True
                self._stage()
            else:
                if valid:
                    bus.tvalid.value = 0
                    valid = 0
                self.active = self._staged is not None
                if self._staged is None:
                    self.idle_event.set()
                    self._work.clear()
                    if self.on_active is not None:
                        self.on_active(False)
                    await self._work.wait()
                    if self.on_active is not None:
                        self.on_active(True)


class RqStream(RqSink):
    """The RQ stream (card to hard IP): sampling and frame assembly in one edge coroutine."""

    def __init__(self, bus, clock, reset=None, segments=1, *args, **kwargs) -> None:
        self._frame: UsPcieFrame | None = None
        self._ready = 0                    # TREADY as driven
        super().__init__(bus, clock, reset, segments, *args, **kwargs)
        _check_width(self, (1, 2))

    async def _run(self) -> None:
        return                             # assembly happens in _run_sink

    async def _run_tready_monitor(self) -> None:
        # the package wakes the sink when TREADY rises, which only the sink itself drives
        # (while awake): a value-change callback that would cost every time step of the model
        return

    def _assemble(self, tdata: int, tkeep: int, tuser: int, tlast: int) -> None:
        """One beat into the frame, as the package's RqSink._run assembles it."""
        if self.seg_count != 1:
            self._assemble_straddled(tdata, tuser)
            return
        frame = self._frame
        if frame is None:
            frame = self._frame = UsPcieFrame()
            frame.first_be = tuser & 0xF
            frame.last_be = (tuser >> 8) & 0xF
            frame.seq_num = (tuser >> 61) & 0x3F
        if tuser & _RQ_DISCONTINUE:
            frame.discontinue = True
        raw = tdata.to_bytes(BEAT_BYTES, "little")
        par = tuser >> _RQ_PARITY
        if tkeep & (tkeep + 1) == 0:           # lanes 0..n-1: the usual case
            n = tkeep.bit_length()
            frame.data.extend(struct.unpack_from(f"<{n}L", raw))
            frame.parity.extend((par >> (4 * k)) & 0xF for k in range(n))
        else:
            for k in range(LANES):
                if tkeep >> k & 1:
                    frame.data.append(int.from_bytes(raw[4 * k:4 * k + 4], "little"))
                    frame.parity.append((par >> (4 * k)) & 0xF)
        if tlast:
            self.log.info("RX RQ frame: %r", frame)
            self._sink_frame(frame)
            self.active = False
            self._frame = None

    def _assemble_straddled(self, tdata: int, tuser: int) -> None:
        """One beat of the straddled RQ stream (two segments of eight DWORDs) into frames, as
        the package's RqSink._run assembles it: the DWORDs from each is_sop pointer (or from
        the beat's start, continuing a frame) to the is_eop pointer after it are valid; a
        segment with a start opens a frame with the next start's byte enables and sequence
        number, a segment with an end hands its frame over."""
        starts = ends = 0
        for k in range(2):
            if tuser >> (_RQ_SOP + k) & 1:
                starts |= 1 << (((tuser >> (_RQ_SOP_PTR + 2 * k)) & 3) * 4)
            if tuser >> (_RQ_EOP + k) & 1:
                ends |= 1 << ((tuser >> (_RQ_EOP_PTR + 4 * k)) & 0xF)
        valid = seg_valid = seg_sop = seg_eop = 0
        state = 1
        for k in range(LANES):
            mask = 1 << k
            seg = 1 << (k >> 3)
            if starts & mask:
                state = 1
                seg_sop |= seg
            if state:
                valid |= mask
                seg_valid |= seg
            if ends & mask:
                state = 0
                seg_eop |= seg
        raw = tdata.to_bytes(BEAT_BYTES, "little")
        par = tuser >> _RQ_PARITY
        sop = 0
        frame = self._frame
        for seg in range(2):
            bit = 1 << seg
            if not seg_valid & bit:
                continue
            if seg_sop & bit:
                frame = self._frame = UsPcieFrame()
                frame.first_be = (tuser >> (4 * sop)) & 0xF
                frame.last_be = (tuser >> (4 * sop + 8)) & 0xF
                frame.seq_num = (tuser >> (6 * sop + 61)) & 0x3F
                sop += 1
            if frame is None:               # (data before any start: kept, as the package
                frame = self._frame = UsPcieFrame()  # keeps it in its first frame)
            if tuser & _RQ_DISCONTINUE:
                frame.discontinue = True
            for k in range(8 * seg, 8 * seg + 8):
                if valid >> k & 1:
                    frame.data.append(int.from_bytes(raw[4 * k:4 * k + 4], "little"))
                    frame.parity.append((par >> (4 * k)) & 0xF)
            if seg_eop & bit:
                self.log.info("RX RQ frame: %r", frame)
                self._sink_frame(frame)
                self.active = False
                frame = self._frame = None

    async def _run_sink(self) -> None:
        edge = RisingEdge(self.clock)
        wake = self.wake_event.wait()
        bus = self.bus
        while True:
            pause_sample = bool(self.pause)
            await edge
            tvalid = _int(bus.tvalid)
            if self.reset is not None and _int(self.reset):
                if self._ready:
                    bus.tready.value = 0
                    self._ready = 0
                continue
            # (the package decides TREADY before its assembling coroutine queues a frame that
            # ends at this edge: full() before _assemble)
            paused = self.full() or pause_sample
            if tvalid and self._ready:
                self.active = True
                self._assemble(int(bus.tdata.value), int(bus.tkeep.value),
                               int(bus.tuser.value), int(bus.tlast.value))
            if self._ready != (not paused):
                self._ready = int(not paused)
                bus.tready.value = self._ready
            if (not tvalid or paused) and pause_sample == bool(self.pause):
                self.wake_event.clear()
                await wake


class CcStream(CcSink):
    """The package's CC stream sink (the card's completions to MMIO reads) without the TREADY
    monitor (module doc)."""

    async def _run_tready_monitor(self) -> None:
        return

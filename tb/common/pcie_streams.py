"""The hard IP model's requester streams (RC: completions to the card, RQ: requests from the
card) with one coroutine per stream and whole-TLP encoding, for tb/common/pcie_link.py's
CardPcieDevice.

cocotbext-pcie's RcSource runs two coroutines that meet once per beat (one builds the next beat
lane by lane, the other drives it at a clock edge), and its RqSink likewise (one samples at the
edge, the other assembles the frame); the RC frame itself is built dword by dword with a parity
call per dword. Here (subclasses, the package's per-beat methods replaced):

- :func:`rc_beats` encodes a completion (Tlp_us) straight into the beats of the 512-bit RC
  stream: the same tdata, tkeep, tuser (byte enables, is_sop, is_eop and its pointer,
  discontinue, parity) and tlast as the package's ``pack_us_rc`` followed by ``RcSource._run``
  (tests/tb/test_pcie_streams.py compares them on random completions).
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

Only the configuration card_top_pcie uses is implemented: 512-bit streams, one segment (no
straddling); anything else raises.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections import deque

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
_RC_DISCONTINUE = 1 << 96
_RC_PARITY = 97
#: Set to 0 to drive the RC stream from Python even where the model has the C++ player.
NATIVE_ENV = "COSIM_NATIVE_STREAMS"
# RqSink's tuser fields on a 512-bit interface
_RQ_DISCONTINUE = 1 << 36
_RQ_PARITY = 73


def _check_width(stream) -> None:
    if stream.width != 512 or stream.seg_count != 1:
        raise NotImplementedError(
            f"{type(stream).__name__}: a {stream.width}-bit stream of {stream.seg_count} "
            "segments (only 512 bits, one segment, as card_top_pcie has, is implemented)")


class RcFrame:
    """A completion encoded as the beats of the RC stream; len() is its dword count (what the
    package's queue accounting counts of a UsPcieFrame)."""

    __slots__ = ("beats", "dwords")

    def __init__(self, beats: list[tuple[int, int, int, int]], dwords: int) -> None:
        self.beats = beats
        self.dwords = dwords

    def __len__(self) -> int:
        return self.dwords


def _rc_encode(tlp) -> tuple[bytes, list[tuple[int, int, int]]]:
    """The frame of completion ``tlp`` (a Tlp_us) on the 512-bit RC stream: its bytes (whole
    beats, zero padded) and per beat (tkeep, tuser, tlast), as the package's ``pack_us_rc``
    followed by ``RcSource._run`` make them."""
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
    dwords = 3 + n
    nbeats = (dwords + LANES - 1) // LANES
    frame = b"".join((_HDR.pack(dw0, dw1, dw2), data if len(data) == 4 * n else data[:4 * n],
                      bytes(nbeats * BEAT_BYTES - 4 * dwords)))
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
    # odd parity of every byte, as '0'/'1' characters (empty lanes: zeros, parity 1: 0xf)
    par = frame.translate(_PARITY_CHARS)
    disc = _RC_DISCONTINUE if tlp.discontinue else 0
    beats = []
    top = len(be)
    for k in range(nbeats):
        lo = BEAT_BYTES * k
        lanes = min(LANES, dwords - LANES * k)
        tuser = int(be[top - LANES * k - lanes:top - LANES * k], 16) \
            | int(par[lo:lo + BEAT_BYTES][::-1], 2) << _RC_PARITY | disc
        if k == 0:
            tuser |= _RC_SOP
        if k == nbeats - 1:
            beats.append(((1 << lanes) - 1, tuser | _RC_EOP | (lanes - 1) << _RC_EOP_PTR, 1))
        else:
            beats.append((0xFFFF, tuser, 0))
    return frame, beats


def rc_beats(tlp) -> RcFrame:
    """The beats (tdata, tkeep, tuser, tlast) of completion ``tlp`` (a Tlp_us) on the 512-bit
    RC stream: the package's ``pack_us_rc`` and ``RcSource._run``, encoded a beat at a time."""
    frame, beats = _rc_encode(tlp)
    return RcFrame([(int.from_bytes(frame[BEAT_BYTES * k:BEAT_BYTES * (k + 1)], "little"),
                     keep, tuser, last) for k, (keep, tuser, last) in enumerate(beats)],
                   len(tlp.data) // 4 + 3)


def rc_packed(tlp, user_bytes: int) -> tuple[bytes, int]:
    """:func:`rc_beats` as cosim_stream_push takes it: per beat tdata, tuser (``user_bytes``),
    tkeep and tlast (4 bytes each), little-endian; and the number of beats."""
    frame, beats = _rc_encode(tlp)
    parts = []
    for k, (keep, tuser, last) in enumerate(beats):
        parts += (frame[BEAT_BYTES * k:BEAT_BYTES * (k + 1)], tuser.to_bytes(user_bytes, "little"),
                  keep.to_bytes(4, "little"), last.to_bytes(4, "little"))
    return b"".join(parts), len(beats)


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
    lib.cosim_stream_open.argtypes = [ctypes.c_char_p] * 8 + [ctypes.c_int]
    lib.cosim_stream_open.restype = ctypes.c_int
    lib.cosim_stream_close.argtypes = [ctypes.c_int]
    lib.cosim_stream_close.restype = None
    lib.cosim_stream_words.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.cosim_stream_words.restype = ctypes.c_int
    lib.cosim_stream_push.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
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
    (:attr:`native`); frames are :class:`RcFrame` (Python) or :func:`rc_packed` (native)."""

    def __init__(self, bus, clock, reset=None, segments=1, *args, limit: int = 2,
                 **kwargs) -> None:
        self._beats: deque = deque()       # beats of the frame being handed over
        self._staged = None                # the beat that goes up at the next handshake
        self._work = Event()
        self._driven = [0, 0, 0, 0]        # tdata, tkeep, tuser, tlast as last written
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
        _check_width(self)
        self.queue_occupancy_limit_frames = limit
        self._lib = _native_streams()
        if self._lib is not None:
            b = self.bus
            sid = self._lib.cosim_stream_open(
                clock._path.encode(), reset._path.encode() if reset is not None else b"",
                *(getattr(b, n)._path.encode() for n in ("tvalid", "tready", "tdata", "tkeep",
                                                          "tuser", "tlast")), limit)
            if sid >= 0 and self._lib.cosim_stream_words(sid, 0) * 4 == BEAT_BYTES:
                self.native = sid
                self._user_bytes = 4 * self._lib.cosim_stream_words(sid, 1)
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
        buf, n = rc_packed(tlp, self._user_bytes)
        return self._lib.cosim_stream_push(self.native, buf, n)

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
        if not isinstance(frame, RcFrame):
            raise TypeError(f"RcStream sends RcFrame (rc_beats), not {type(frame).__name__}")
        if self.full():
            raise QueueFull()
        self.queue.put_nowait(frame)       # (the package's send_nowait copies into a UsPcieFrame)
        self.idle_event.clear()
        self.queue_occupancy_bytes += len(frame)
        self.queue_occupancy_frames += 1
        self._stage()

    def _stage(self) -> None:
        """Hand the next beat to the driver as the package's _run does: one beat waits for the
        driver at a time, and the next frame leaves the queue as soon as the last beat of the
        previous one has been handed over (or when it arrives, if that has happened). Then,
        if a frame left, ``on_dequeue`` (the queue has room)."""
        took = False
        if self._staged is None:
            if not self._beats:
                if self.queue.empty():
                    return
                self._beats.extend(self._get_frame_nowait().beats)
                took = True
            self._staged = self._beats.popleft()
            self._work.set()
        if not self._beats and not self.queue.empty():
            self._beats.extend(self._get_frame_nowait().beats)
            took = True
        if took and self.on_dequeue is not None:
            self.on_dequeue()

    # -- the bus ----------------------------------------------------------------------------
    async def _run(self) -> None:
        return                             # the frame builder: _stage, called synchronously

    def _drive_beat(self, beat) -> None:
        bus = self.bus
        d = self._driven
        tdata, tkeep, tuser, tlast = beat
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
        _check_width(self)

    async def _run(self) -> None:
        return                             # assembly happens in _run_sink

    async def _run_tready_monitor(self) -> None:
        # the package wakes the sink when TREADY rises, which only the sink itself drives
        # (while awake): a value-change callback that would cost every time step of the model
        return

    def _assemble(self, tdata: int, tkeep: int, tuser: int, tlast: int) -> None:
        """One beat into the frame, as the package's RqSink._run assembles it."""
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

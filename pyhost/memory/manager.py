"""The memory manager: the RiscVDNN tensor API over the PCIe driver, with transparent swapping.

`MemoryManager` keeps every tensor's bytes on the host (a host copy it allocates, or the user's
buffer) and on the card only while needed there, evicting and compacting as the card fills:

- transfers are lazy: `write_tensor` fills the host copy; bytes cross PCIe when `need_in_device`
  needs them on the card; `read_tensor` moves bytes only if the card holds the newer copy;
- out of memory (`OutOfMemoryError`) only when a host copy cannot be allocated or the distinct
  tensors of one need call exceed the card; fragmentation is solved by compaction (card-to-card
  moves, always down), never by failing;
- each need call sends its write-backs, compaction moves and uploads as at most one batched
  driver call per direction, coalescing neighbours; with a schedule hint it also prefetches the
  next calls' small tensors in the same batch (only when that moves no extra bytes);
- eviction is a pluggable policy (`policies.py`); reduced precision is opt-in per tensor
  (`codec.py`); calls can be recorded as JSON lines (`trace.py`).

The same code runs on a real driver (ModelCard or the RTL) and in a dry run (`dry_run()`):
`DryRunDriver` and `VirtualHost` take the place of the card and host memory and every byte is
accounted by the same `Transport`.
"""

from __future__ import annotations

import bisect
import collections
import functools
import json
import threading
import time
from _thread import get_ident
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import numpy as np

from pyhost.backend import HostBuffer, HostRangeError
from pyhost.memory.allocator import CardAllocator
from pyhost.memory.codec import Codec, PrecisionReport, codec_from_json
from pyhost.memory.errors import (
    CardCapacityError,
    ConcurrentUseError,
    DoubleFreeError,
    FreedTensorError,
    MemoryManagerError,
    NeverWrittenError,
    NotOnCardError,
    PrecisionError,
    ScheduleError,
    TensorSizeError,
    UnknownTensorError,
)
from pyhost.memory.handle import TensorHandle, _Entry
from pyhost.memory.hoststore import HostArena, HostProvider, RealHost, VirtualHost
from pyhost.memory.policies import INF, EvictionPolicy, make_policy, take_in_order
from pyhost.memory.repeat import RepeatDetector
from pyhost.memory.stats import LatencyHistogram
from pyhost.memory.transport import Driver, DryRunDriver, Transport

if TYPE_CHECKING:
    from pyhost.memory.trace import Trace

#: Default preferred alignment of card addresses: one 512-bit AXI beat / DRAM line.
DEFAULT_ALIGN = 64
#: A PCIe byte costs about as much time as this many bytes copied inside card memory (PCIe
#: Gen3 x16 ~12 GB/s; a card-to-card copy reads and writes DDR4-3200, 25.6 GB/s shared): when
#: compaction would copy more than this many times the bytes it places, evicting the policy's
#: next victims where they sit together is considered instead.
C2C_PER_PCIE = 4
#: When compaction would copy more than EvictionPolicy.window_gate times the bytes it places,
#: evicting neighbours is considered, among the policy's next victims (window_candidates times
#: the bytes to place, window_cost), if that evicts at most this many times those bytes.
WINDOW_MAX_COST = 2
#: On a large card map (allocator.LARGE blocks), the window for a placement is looked for among
#: at most this many of the policy's next victims, and the compaction it is weighed against is
#: searched again only after this many window evictions that found it costlier
#: (MemoryManager._evict_window_large).
LARGE_CANDIDATES = 64
COMPACTION_RECHECK = 16
#: The default policy: LIRS, plus the plan of the repetition when the repeat detector finds the
#: need sequence repeating (and "planned" when given a schedule); see docs/memory-manager.md.
DEFAULT_POLICY = "auto"
#: Deferred writes: host writes of tensors up to this many card bytes are uploaded together, at
#: the first need of any of them, into the free card space (no eviction for them), at most
#: DEFER_SHARE of the card per call.
DEFER_MAX = 64 << 10
DEFER_SHARE = 0.5
#: ... but once the card has had to evict (it is full), only while at least DEFER_FULL_USED of
#: such uploads were needed before they left the card: on a full card the room a guess takes
#: is evicted for by the next calls, and a wrong guess moved its bytes for nothing (a random
#: miss-heavy workload refilled the holes its evictions left with guesses at every call, 61 %
#: of them used).
DEFER_FULL_USED = 0.9
#: Read gathering: a read that writes back a small dirty tensor also writes back the next ones
#: in update order once the reads have followed that order; the batch starts at GATHER_START
#: tensors and doubles while the reader keeps up, to GATHER_MAX tensors / GATHER_MAX_BYTES.
GATHER_START = 4
GATHER_MAX = 1024
GATHER_MAX_BYTES = 1 << 20
#: A plan learned from a repetition is used only if its replay moves this much less than
#: next-use order alone, and dropped when a repetition moves this much more than its replay.
PLAN_MARGIN = 0.05
#: Copies of the recorded repetition replayed to estimate plan and next-use order (the first
#: and the last are not measured: an empty card, no future).
SIM_COPIES = 6

HostData = HostBuffer | np.ndarray | bytes | bytearray | memoryview
_F = TypeVar("_F", bound=Callable[..., Any])
_ADDR = attrgetter("addr")
_perf_counter = time.perf_counter
_CARD_SIZE = attrgetter("card_size")


def _host_order(e: _Entry) -> tuple[int, int]:
    """Sort key: host chunk, then host address (a run placed in this order on the card moves
    in one transfer when the host copies are adjacent too)."""
    h = e.home
    return (h.chunk, h.address) if h is not None else (0, 0)


def _exclusive(fn: _F) -> _F:
    """One thread at a time: a call that starts while another thread is inside a call of the
    same manager raises ConcurrentUseError before touching anything. The same thread may nest
    calls (the seed's aliases call the API). (need_in_device and tensor_updated, the calls of
    every operation, call _enter and _leave themselves: this wrapper's frame and argument
    packing cost them about 0.2 us each.)"""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: MemoryManager, *args: Any, **kwargs: Any) -> Any:
        self._enter(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._leave()
    return call  # type: ignore[return-value]


def _need_args(t1: Any, t2: Any, t3: Any, more: tuple[Any, ...]) -> tuple[Any, ...]:
    """need_in_device's tensors: its arguments without the unused optional ones (trailing
    Nones); a None before a tensor is an error."""
    given = (t1, t2, t3, *more)
    n = len(given)
    while n and given[n - 1] is None:
        n -= 1
    args = given[:n]
    if not args:
        raise TypeError("need_in_device needs at least one tensor")
    if None in args:
        raise TypeError(
            f"need_in_device argument {args.index(None) + 1} is None but a tensor follows "
            "it; the addresses answer the arguments in order, so pass tensors without gaps")
    return args


@dataclass
class ManagerStats:
    """What the manager did; bytes and driver calls are in `transport` (TransportStats)."""

    calls: dict[str, int] = field(default_factory=dict)
    need_hits: int = 0          # tensors already on the card when needed
    need_misses: int = 0        # tensors that had to be placed (uploaded if written)
    evictions: int = 0
    writebacks: int = 0         # dirty tensors written back (eviction or read)
    compactions: int = 0
    prefetched: int = 0
    plan_s: float = 0.0         # time spent planning (set_schedule_trace, learned repetitions)
    deferred_uploads: int = 0   # tensors uploaded with another's deferred write, unasked
    deferred_unused: int = 0    # ... of which left the card (or were freed) before a need
    gathered_reads: int = 0     # dirty tensors written back with another's read, unasked
    gathered_unused: int = 0    # ... of which were updated or freed again before a read
    repeats_detected: int = 0   # times the repeat detector locked on a repetition
    repeat_breaks: int = 0      # ... and dropped it
    planned_repeats: int = 0    # plans made from a recorded repetition
    online_repeats: int = 0     # repetitions of a locked one where the online experts chose
    window_evictions: int = 0   # placements done by evicting neighbours instead of compacting
    slot_evictions: int = 0     # large map: victims evicted while placing (_place_in_victims)
    time_s: dict[str, float] = field(default_factory=dict)   # manager time, driver time excluded
    #: need-call times (driver excluded): a fixed-size histogram, not one entry per call
    need_hist: LatencyHistogram = field(default_factory=LatencyHistogram)


class MemoryManager:
    """The RiscVDNN memory-manager API over a PcieDriver (or a DryRunDriver).

    `driver` gives the capacity (`driver.mem_size`, read from the card); `host` provides host
    copies (default: the driver's backend HostMemory, or virtual memory for a DryRunDriver).
    """

    def __init__(self, driver: Driver, *, policy: str | EvictionPolicy = DEFAULT_POLICY,
                 host: HostProvider | None = None, align: int = DEFAULT_ALIGN,
                 batching: bool = True, prefetch_calls: int = 32,
                 prefetch_max_tensor: int = 256 << 10,
                 record: IO[str] | None = None) -> None:
        self._busy = threading.RLock()     # held by the thread inside a call (_exclusive)
        self._busy_in: tuple[int | None, str] = (None, "")
        self._busy_depth = 0
        self.driver = driver
        self.capacity = int(driver.mem_size)
        if host is None:
            backend_host = getattr(getattr(driver, "backend", None), "host", None)
            host = RealHost(backend_host) if backend_host is not None else VirtualHost()
        self.host = host
        self.payload = host.payload
        self.arena = HostArena(host)
        self.alloc = CardAllocator(self.capacity, align)
        self.transport = Transport(driver, batching=batching)
        self.policy = make_policy(policy)
        self.policy.next_use = self._next_use
        self.policy.capacity = self.capacity
        #: the repeat detector, for a policy that learns (the default): see repeat.py
        self.detector = RepeatDetector() if self.policy.learns else None
        self._own_detector = self.detector   # saw every allocation (knows every size)
        self._observes = self.policy.observes
        self._plan_lock: object = None   # the detector lock the current plan was made for
        self._arms: dict[str, int] = {}  # plan / order / online -> bytes per repetition
        self._arm = "order"
        self._arm_warm = True
        self._online_mark: dict[str, int] = {}   # each expert's shadow bytes at that start
        self._online_scale = 1.0         # real / shadow bytes of the online arm, last measured
        self._learned_drops: set[tuple[Any, int]] = set()
        self._period_mark = (0, 0)       # (epoch, bytes moved) at the last repetition start
        self._costly_compactions = 0     # window evictions left before compaction is re-costed
        self._pending: collections.OrderedDict[int, _Entry] = collections.OrderedDict()
        self._spec_used = 0.0            # deferred uploads that were needed / not: the share
        self._spec_unused = 0.0          # of the card a batch of deferred writes may take
        self._useq = 0
        self._upd_log: list[_Entry] = []   # updates in order (stale entries skipped, pruned)
        self._upd_seq: list[int] = []      # ... their useq, for bisect
        self._last_read = -1               # useq of the last small dirty tensor read
        self._gather = 0                   # tensors the next sequential read gathers
        self.stats = ManagerStats()
        self.prefetch_calls = prefetch_calls if batching else 0
        self.prefetch_max_tensor = prefetch_max_tensor
        self._token = object()
        self._entries: dict[int, _Entry] = {}
        self._by_key: dict[str, _Entry] = {}
        self._next_id = 0
        self._epoch = 0           # need-call counter; pins are per call
        self._now = 0             # position for the policy: schedule position or epoch
        self._sched: list[frozenset[str]] | None = None
        self._sched_pos = 0       # index of the next expected call in the schedule
        self._positions: dict[str, list[int]] = {}
        self._staging = 0         # chunk ids for staging buffers (negative, unique)
        self._will_read: collections.Counter[str] = collections.Counter()
        self._complete_hint = False   # the schedule is the whole future (set_schedule_trace)
        self._future_sizes: dict[str, int] = {}   # key -> bytes, tensors of the schedule trace
        self._record = record
        if record is not None:
            self._rec({"op": "header", "format": "dnncard-memory-trace", "version": 1,
                       "capacity": self.capacity})

    @classmethod
    def dry_run(cls, capacity: int, *, host_size: int = 64 << 30, **kwargs: Any) -> MemoryManager:
        """A manager on a DryRunDriver of `capacity` bytes: placement and bytes, no payload."""
        return cls(DryRunDriver(capacity), host=VirtualHost(host_size), **kwargs)

    # --- the API ----------------------------------------------------------------------------

    @_exclusive
    def allocate_tensor(self, host_buffer_or_size: HostBuffer | int, size: int | None = None,
                        *, precision: Codec | str | None = None, name: str | None = None
                        ) -> TensorHandle:
        """A new tensor of `size` bytes (or the size of the given host buffer).

        With a HostBuffer, that buffer is the tensor's host copy (the manager reads and writes it
        and never frees it); with a size, the manager allocates the host copy. Nothing is placed
        on the card until the tensor is needed there, so a tensor larger than the card may exist.
        `precision` opts the tensor into reduced-precision transfer (fp32 data only): a Codec, or
        one of the names "fp16", "bf16", "int8" (per-tensor int8); anything else is a
        PrecisionError.
        """
        t0 = _perf_counter()
        buf = host_buffer_or_size if isinstance(host_buffer_or_size, HostBuffer) else None
        if buf is not None:
            if not self.payload:
                raise TypeError("a dry run has no host memory; allocate by size")
            nbytes = buf.size if size is None else size
            if not isinstance(nbytes, int) or not 0 <= nbytes <= buf.size:
                raise TensorSizeError(f"size {nbytes!r} does not fit {buf!r}; pass a size of 0.."
                                      f"{buf.size} or omit it")
            if buf.memory is not getattr(self.host, "memory", None):
                raise TensorSizeError(f"{buf!r} is not in the card's host memory; allocate it "
                                      "from driver.backend.host")
            buf = buf.sub(0, nbytes) if nbytes else buf
        else:
            nbytes = host_buffer_or_size if size is None else size
            if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) \
                    or nbytes < 0:
                raise TensorSizeError(f"tensor size {nbytes!r} is not a non-negative integer")
            nbytes = int(nbytes)
        precision = self._codec(precision)
        if precision is not None:
            precision.check(nbytes)
        card_size = precision.encoded_size(nbytes) if precision is not None else nbytes
        if buf is not None and nbytes:
            home = self.arena.adopt(buf)
        else:
            home = self.arena.alloc(nbytes) if nbytes else None
        handle = TensorHandle(self._next_id, nbytes, name, self._token)
        self._next_id += 1
        key = name if name is not None else f"#{handle.id}"
        e = _Entry(handle, key, card_size, home, precision)
        object.__setattr__(handle, "_entry", e)   # (frozen: set once here, cleared when freed)
        self._entries[handle.id] = e
        self._by_key[key] = e
        if self.detector is not None:
            self.detector.allocated(e.id, card_size, self._epoch)
        if self._record is not None:
            rec: dict[str, Any] = {"op": "alloc", "t": handle.id, "size": nbytes}
            if name is not None:
                rec["name"] = name
            if precision is not None:
                rec["precision"] = precision.to_json()
            self._rec(rec)
        self._account("alloc", t0, self.transport.stats.driver_time_s)
        return handle

    @_exclusive
    def write_tensor(self, tensor: TensorHandle, size: int, host_src: HostData | None) -> None:
        """Write the first `size` bytes of the tensor from `host_src` (lazily: host copy only).

        In a dry run `host_src` may be None.
        """
        t0, d0 = _perf_counter(), self.transport.stats.driver_time_s
        e = self._entry(tensor)
        self._check_size(e, size, "write")
        if e.codec is not None and size != e.size:
            raise TensorSizeError(f"{tensor!r} uses {e.codec.name} transfer and must be written "
                                  f"whole ({e.size} bytes), not {size}")
        if size == 0 and e.size:
            self._account("write", t0, d0)
            return
        src = self._source(host_src, size) if self.payload and size else None
        if e.dirty and size < e.size:
            self._writeback([e])                  # the rest of the tensor must survive
        if e.addr is not None:
            self._release(e)                      # the card copy is stale now
        if src is not None and e.home is not None:
            dst = self.host.view(e.home.address, size)
            if dst.__array_interface__["data"][0] != src.__array_interface__["data"][0]:
                dst[:] = src
        e.written, e.host_valid, e.dirty, e.discarded = True, True, False, False
        self._ungather(e)
        if 0 < e.card_size <= DEFER_MAX and self.transport.batching:
            self._pending[e.id] = e               # deferred: uploaded with the next batch
            self._pending.move_to_end(e.id)
        if self.detector is not None:
            self.detector.op("write", e.id, size, self._epoch)
        if self._observes:
            self.policy.observe_one("write", e, self._epoch)
        if self._record is not None:
            self._rec({"op": "write", "t": e.id, "size": size})
        self._account("write", t0, d0)

    @_exclusive
    def read_tensor(self, tensor: TensorHandle, size: int, host_dst: HostData | None) -> None:
        """Copy the first `size` bytes of the tensor to `host_dst` (a transfer only if dirty)."""
        t0, d0 = _perf_counter(), self.transport.stats.driver_time_s
        e = self._entry(tensor)
        self._check_size(e, size, "read")
        if not e.written:
            raise NeverWrittenError(f"{tensor!r} was never written by the host nor updated on "
                                    "the card; write_tensor (or tensor_updated) it first")
        if e.discarded:
            raise ScheduleError(
                f"{tensor!r} was dropped from the card without a write-back because the "
                "schedule given to set_schedule_trace never reads or needs it again; pass the "
                "complete upcoming trace, or use set_schedule, which never discards data")
        if e.dirty:
            ahead = self._read_ahead(e)
            self._writeback([e, *(ahead or self._gathered_with(e))])
        elif e.gathered:
            e.gathered = False                    # the gathering was right
        if 0 < e.card_size <= DEFER_MAX and e.useq >= 0:
            self._last_read = e.useq
        if self._will_read[e.key] > 0:
            self._will_read[e.key] -= 1
        if self.detector is not None:
            self.detector.op("read", e.id, size, self._epoch)
        if self._observes:
            self.policy.observe_one("read", e, self._epoch)
        if self.payload and size:
            dst = self._destination(host_dst, size)
            assert e.home is not None
            src = self.host.view(e.home.address, size)
            if dst.__array_interface__["data"][0] != src.__array_interface__["data"][0]:
                dst[:] = src
        if self._record is not None:
            self._rec({"op": "read", "t": e.id, "size": size})
        self._account("read", t0, d0)

    def need_in_device(self, t1: TensorHandle, t2: TensorHandle | None = None,
                       t3: TensorHandle | None = None, *more: TensorHandle | None
                       ) -> tuple[int, ...]:
        """Make the tensors resident on the card; their card addresses, in argument order.

        The addresses hold until the next manager call. The tensors of one call never evict each
        other. Raises CardCapacityError only if the distinct tensors exceed the card.
        A zero-size tensor gets address 0 (it has no bytes).
        """
        self._enter("need_in_device")                  # (as _exclusive)
        try:
            t0, d0 = _perf_counter(), self.transport.stats.driver_time_s
            if more or t3 is None or t2 is None or t1 is None:
                args = _need_args(t1, t2, t3, more)
            else:
                args = (t1, t2, t3)               # the common call: three tensors
            distinct: dict[int, _Entry] = {}
            arg_ents = []
            sizes = []
            token = self._token
            total = 0
            for t in args:
                e = t._entry if type(t) is TensorHandle and t._owner is token else None
                if e is None or e.handle is not t:
                    e = self._entry(t)                # the rules, and the error that says why
                arg_ents.append(e)
                if e.id not in distinct:
                    distinct[e.id] = e
                    n = e.card_size
                    sizes.append(n)
                    total += n
                    if e.discarded:
                        raise ScheduleError(
                            f"{t!r} was dropped from the card without a write-back because "
                            "the schedule given to set_schedule_trace never needs it again; "
                            "pass the complete upcoming trace")
            ents = list(distinct.values())
            if total > self.capacity:
                raise CardCapacityError(
                    f"the {len(ents)} distinct tensors of this call need {total} bytes on the "
                    f"card together, more than its {self.capacity}-byte capacity; split the "
                    "operation into smaller tensors")
            self._epoch += 1
            epoch = self._epoch
            if self.detector is not None:
                self._learn(tuple(distinct), tuple(sizes), epoch)
            if self._observes:
                self.policy.observe("need", ents, epoch)
            if self._sched is None:
                self._now = epoch                    # _advance_schedule without a schedule
            else:
                self._advance_schedule(ents)
            missing = []
            for e in ents:
                e.pin = epoch
                if e.spec:
                    e.spec = False                    # a deferred upload that paid off
                    self._spec_used += 1
                if e.addr is None:
                    if e.card_size:
                        missing.append(e)
                    else:
                        e.addr = 0
            if not self.policy.keeps_resident:      # (this call's tensors are pinned: they stay)
                self._evict([e for e in self._entries.values()
                             if e.addr is not None and e.pin != epoch and e.card_size])
            st = self.stats
            st.need_hits += len(ents) - len(missing)
            if missing:
                st.need_misses += len(missing)
                self._bring_in(missing, epoch)
            self.policy.touch_all(ents, self._now)
            if self._record is not None:
                self._rec({"op": "need", "ts": [t.id for t in args]})
            out = tuple(map(_ADDR, arg_ents))
            self._account("need", t0, d0, need=True)
            return out  # type: ignore[return-value]
        finally:
            self._leave()

    def tensor_updated(self, tensor: TensorHandle) -> None:
        """The card changed the tensor: its card copy is now the only current one."""
        self._enter("tensor_updated")                  # (as _exclusive)
        try:
            t0, d0 = _perf_counter(), self.transport.stats.driver_time_s
            e = self._entry(tensor)
            if e.addr is None:
                raise NotOnCardError(
                    f"{tensor!r} is not on the card (never needed, evicted by a later call, or "
                    "overwritten by write_tensor); call need_in_device for it, run the "
                    "operation, then tensor_updated before the next need_in_device")
            e.written, e.discarded = True, False
            if e.card_size:
                e.dirty, e.host_valid = True, False
                self.policy.recost(e, self._now)
                if e.gathered:
                    self._ungather(e)
                if e.card_size <= DEFER_MAX:
                    self._log_update(e)
            else:
                e.host_valid = True         # no bytes: the host copy is trivially current
            if self.detector is not None:
                self.detector.op("updated", e.id, None, self._epoch)
            if self._observes:
                self.policy.observe_one("updated", e, self._epoch)
            if self._record is not None:
                self._rec({"op": "updated", "t": e.id})
            self._account("updated", t0, d0)
        finally:
            self._leave()

    @_exclusive
    def free_tensor(self, tensor: TensorHandle) -> None:
        """Forget the tensor: its card space and host copy are released, nothing is written."""
        t0, d0 = _perf_counter(), self.transport.stats.driver_time_s
        if isinstance(tensor, TensorHandle) and tensor._owner is self._token \
                and tensor.id not in self._entries and tensor.id < self._next_id:
            raise DoubleFreeError(f"{tensor!r} was already freed; free each tensor once")
        e = self._entry(tensor)
        if e.addr is not None:
            self._release(e)
        else:
            self.policy.forget(e)
        self._pending.pop(e.id, None)
        self._ungather(e)
        e.useq = -1
        if e.home is not None:
            self.arena.free(e.home)
        del self._entries[e.id]
        object.__setattr__(e.handle, "_entry", None)
        if self.detector is not None:
            self.detector.freed(e.id, self._epoch)
        if self._observes:
            self.policy.observe_one("free", e, self._epoch)
        if self._by_key.get(e.key) is e:
            del self._by_key[e.key]
        if self._record is not None:
            self._rec({"op": "free", "t": e.id})
        self._account("free", t0, d0)

    # the seed's names
    def allocateTensorOnDevice(self, pointer: HostBuffer | int | None,  # noqa: N802
                               size: int | None = None) -> TensorHandle:
        """The seed's allocateTensorOnDevice(HostMem* pointer, size): pointer may be None."""
        if pointer is None:
            if size is None:
                raise TensorSizeError("allocateTensorOnDevice(None, size) needs a size")
            return self.allocate_tensor(size)
        return self.allocate_tensor(pointer, size)

    def writeTensorToDevice(self, dest_pointer: TensorHandle, size: int,  # noqa: N802
                            orig_pointer: HostData | None) -> None:
        self.write_tensor(dest_pointer, size, orig_pointer)

    def readTensorFromDevice(self, orig_pointer: TensorHandle, size: int,  # noqa: N802
                             dest_pointer: HostData | None) -> None:
        self.read_tensor(orig_pointer, size, dest_pointer)

    def needInDevice(self, pointer1: TensorHandle, pointer2: TensorHandle | None = None,  # noqa: N802
                     pointer3: TensorHandle | None = None) -> tuple[int, ...]:
        return self.need_in_device(pointer1, pointer2, pointer3)

    def tensorUpdated(self, pointer: TensorHandle) -> None:  # noqa: N802
        self.tensor_updated(pointer)

    def freeTensor(self, pointer: TensorHandle) -> None:  # noqa: N802
        self.free_tensor(pointer)

    # --- schedule hint ------------------------------------------------------------------------

    @_exclusive
    def set_schedule(self, needs: Iterable[Sequence[TensorHandle | str]] | None,
                     reads: Iterable[TensorHandle | str] = ()) -> None:
        """The upcoming need_in_device calls, in order (handles, or names given at allocation).

        The next need calls are matched against it; a call that is not the next entry (nor one
        of the few after it) drops the schedule and the policy falls back to recency. None
        clears it. `reads` names tensors the host will read: when one read needs a write-back,
        the others that are dirty and not needed on the card again are written back in the
        same batch (their write-back is due anyway).
        """
        self._future_sizes = {}
        self._will_read = collections.Counter(
            t if isinstance(t, str) else self._entry(t).key for t in reads)
        self._complete_hint = False
        if needs is None:
            self._sched = None
            self._positions = {}
        else:
            sched: list[frozenset[str]] = []
            for i, call in enumerate(needs):
                keys = []
                for t in call:
                    if isinstance(t, str):
                        keys.append(t)
                    elif isinstance(t, TensorHandle):
                        keys.append(self._entry(t).key)
                    else:
                        raise ScheduleError(f"schedule entry {i} names {t!r}; use TensorHandle "
                                            "objects or the names given to allocate_tensor")
                sched.append(frozenset(keys))
            positions: dict[str, list[int]] = {}
            for i, keys in enumerate(sched):
                for k in keys:
                    positions.setdefault(k, []).append(i)
            self._sched, self._positions, self._sched_pos = sched, positions, 0
        self._now = 0 if self._sched is not None else self._epoch
        self._set_planning()
        self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                           and e.card_size], self._now)

    @_exclusive
    @_exclusive
    def set_schedule_trace(self, trace: Trace, key_of: Callable[[int], str] = "t{}".format,
                           *, plan: set[tuple[int, int]] | None = None,
                           complete: bool = True) -> None:
        """The upcoming calls as a whole trace (sizes, writes, reads): the need sequence and
        reads as in `set_schedule`, plus, for a planning policy ("planned"), its plan (`plan`:
        (tensor id, start step) drops already solved, else the interval MILP is solved here).
        `key_of` maps the trace's tensor ids to the names given to allocate_tensor. With
        `complete` the trace is the whole future: dirty tensors it never needs or reads again
        are dropped without a write-back. Without, they are written back when evicted, and the
        plan is made for that (`hold_dead`: it holds such a tensor until its free or drops it
        with its write-back)."""
        self.set_schedule([[key_of(t) for t in ts] for ts in trace.needs()],
                          reads=[key_of(r[1]) for r in trace.records if r[0] == "read"])
        self._complete_hint = complete
        self._future_sizes = {key_of(t): n for t, n in trace.sizes().items()}
        set_plan = getattr(self.policy, "set_plan", None)
        planner = getattr(self.policy, "planner", self.policy)
        if hasattr(planner, "plan_key"):           # plans name intervals by key and position
            planner.plan_key = lambda e, since: (e.key, since)
            planner.hold = not complete
        if set_plan is not None:
            t0 = _perf_counter()
            if plan is None:
                # scipy (the MILP) is loaded only when a planning policy needs it
                from pyhost.memory.bound import BoundError, solve_plan
                try:
                    plan, proven = solve_plan(
                        trace, self.capacity,
                        time_limit=getattr(self.policy, "plan_seconds", 5.0),
                        hold_dead=not complete)
                except BoundError:
                    plan, proven = set(), True    # a call larger than the card: Belady order
                if plan and not proven:
                    # The MILP's best solution in time is not proven good: it is used only if
                    # a dry-run replay of the hint moves fewer bytes with it than without.
                    with_plan = self._hint_bytes(trace, key_of, plan, complete)
                    without = self._hint_bytes(trace, key_of, set(), complete)
                    if with_plan is None or without is None or with_plan >= without:
                        plan = set()
            set_plan({(key_of(t), s) for t, s in plan})
            self.stats.plan_s += _perf_counter() - t0
            self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                               and e.card_size], self._now)

    def _hint_bytes(self, trace: Trace, key_of: Callable[[int], str],
                    plan: set[tuple[int, int]], complete: bool) -> int | None:
        """PCIe bytes a dry run of this card moves replaying `trace` from an empty card with
        it as the schedule hint and `plan` as its plan (set_schedule_trace's measure of an
        unproven plan). None if the trace uses a tensor it does not allocate (one of this
        manager's: the replay cannot stand in for it) or makes a call the API refuses (a read
        of a tensor never written, ...): the hint is the caller's, and a plan is not worth an
        error of the stand-in's."""
        sim = MemoryManager.dry_run(self.capacity, policy="planned", align=self.alloc.align,
                                    batching=self.transport.batching,
                                    prefetch_calls=self.prefetch_calls,
                                    prefetch_max_tensor=self.prefetch_max_tensor)
        sim.set_schedule_trace(trace, key_of, plan=plan, complete=complete)
        try:
            if not sim._replay(trace, key_of):
                return None
        except MemoryManagerError:
            return None
        s = sim.transport.stats
        return s.bytes_h2c + s.bytes_c2h

    def _replay(self, trace: Trace, key_of: Callable[[int], str],
                before_need: Callable[[], None] | None = None) -> bool:
        """Run the trace's calls on this (dry-run) manager, its tensors named by `key_of`;
        `before_need()` runs before each need. False, stopping there, at a call on a tensor the
        trace did not allocate. (tb.memory.replay is the testbench's replay, with payload.)"""
        handles: dict[int, TensorHandle] = {}
        for op, t, size, extra in trace.records:
            if op == "alloc":
                prec = extra.get("precision") if extra else None
                handles[t] = self.allocate_tensor(
                    size, name=key_of(t), precision=codec_from_json(prec) if prec else None)
                continue
            if op == "need":
                if any(x not in handles for x in t):
                    return False
                if before_need is not None:
                    before_need()
                self.need_in_device(*(handles[x] for x in t))
                continue
            h = handles.get(t)
            if h is None:
                return False
            if op == "write":
                self.write_tensor(h, size, None)
            elif op == "updated":
                self.tensor_updated(h)
            elif op == "read":
                self.read_tensor(h, size, None)
            elif op == "free":
                self.free_tensor(handles.pop(t))
        return True

    def _advance_schedule(self, ents: list[_Entry]) -> None:
        sched = self._sched
        if sched is None:
            self._now = self._epoch
            return
        keys = frozenset(e.key for e in ents)
        pos = self._sched_pos
        for j in range(pos, min(pos + 8, len(sched))):
            if sched[j] == keys:
                self._now = j
                self._sched_pos = j + 1
                return
        self._sched = None           # off the schedule: fall back to recency
        self._positions = {}
        self._now = self._epoch
        self._set_planning()
        self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                           and e.card_size], self._now)

    # --- learning the repetition ------------------------------------------------------------

    def _set_planning(self) -> None:
        """A policy with an online and a planning half plans while it has a schedule: a hint,
        or a repetition the detector follows."""
        if hasattr(self.policy, "planning"):
            det = self.detector
            self.policy.planning = self._sched is not None or (     # type: ignore[attr-defined]
                det is not None and det.lock is not None and self._arm != "online")

    def _learn(self, ids: tuple[int, ...], sizes: tuple[int, ...], epoch: int) -> None:
        """Report the call (its distinct tensors and their card bytes) to the repeat detector;
        on a new lock, plan the repetition."""
        det = self.detector
        assert det is not None
        had = det.lock
        det.observe(epoch, ids, sizes, det is self._own_detector)   # (sized; positional)
        lock = det.lock
        if lock is not had:
            if had is not None:
                self.stats.repeat_breaks += 1
            if lock is not None:
                self.stats.repeats_detected += 1
        if lock is not None and lock is self._plan_lock:
            self._check_plan()
        if lock is not self._plan_lock:
            if lock is not None and self._sched is None:
                self._plan_repetition()
            self._plan_lock = lock
            self._set_planning()
            if self._sched is None:
                self._now = epoch
                self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                                   and e.card_size], self._now)

    def _plan_repetition(self) -> None:
        """Solve the interval MILP on the recorded repetition (as set_schedule_trace does for a
        hint) and name its drops by role and phase, so that they apply to every repetition.

        A plan applied periodically is optimal among periodic schedules, which can be worse
        than next-use order (a loop over 40 tensors of which 38 fit: Belady reloads 2.05 per
        pass, a one-pass plan 3), and either can fare worse from the card's actual state than
        from the empty card of a replay. So the manager replays the recorded repetition (three
        copies, dry run) with the plan and with next-use order alone and starts with the one
        that moves fewer bytes in the middle copy; after each repetition, if the one in use
        moved more than PLAN_MARGIN over its estimate, that becomes its estimate and the
        cheaper one is used (`_check_plan`)."""
        det = self.detector
        planner = getattr(self.policy, "planner", None)
        if det is None or planner is None:
            return
        from pyhost.memory.bound import BoundError, plan_drops  # scipy: only when needed

        t0 = _perf_counter()
        tr = det.plan_trace()
        drops: set[tuple[Any, int]] = set()
        self._arms = {}
        if tr is not None:
            phases, mid, off = tr.meta["step_phase"], tr.meta["middle"], tr.meta["offset"]
            all_phases = tr.meta["phases"]

            def solve(tie: Callable[[int, int], Any] | None) -> set[tuple[Any, int]]:
                try:
                    got = plan_drops(tr, self.capacity, time_limit=planner.plan_seconds,
                                     tie=tie, hold_dead=True)
                except BoundError:
                    return set()
                # the middle copy's intervals, named by the recorded tensor and the phase
                return {(t % off, phases[k - mid]) for t, k in got if 0 <= k - mid < len(phases)}
            # tied: one decision per role and phase in all three copies (periodic, but the
            # first copy's empty card and the last one's missing future pull on it); free: the
            # middle copy's own optimum, applied to every repetition all the same. The plan
            # is the one whose replay moves less.
            drops = solve(lambda t, k: (t % off, all_phases[k]))
            free = solve(None)
            long = det.plan_trace(copies=SIM_COPIES)
            try:
                assert long is not None
                # next-use order as the live arm runs it: the planning half without drops
                self._arms["order"] = self._simulate(long, "planned", None)
                if drops:
                    self._arms["plan"] = self._simulate(long, "planned", drops)
                if free and free != drops:
                    moved = self._simulate(long, "planned", free)
                    if not drops or moved < self._arms["plan"]:
                        drops, self._arms["plan"] = free, moved
            except MemoryManagerError:      # a recording the replay cannot follow
                self._arms = {}
        self._learned_drops = drops
        planner.plan_key = lambda e, since: (det.role_of(e.id), det.phase(since))
        planner.hold = True                  # solved with hold_dead: this manager keeps data
        self._use_arm(min(self._arms, key=self._arms.__getitem__) if self._arms else "order")
        self._period_mark = (self._epoch, self._moved())
        self._online_mark = self.policy.shadow_moved()[1]       # type: ignore[attr-defined]
        self.stats.planned_repeats += bool(drops)
        self.stats.plan_s += _perf_counter() - t0

    def _use_arm(self, arm: str) -> None:
        self._arm = arm
        self._arm_warm = True
        self._set_planning()
        if arm == "online":          # the online experts choose, the lock stays (predictions)
            return
        planner = self.policy.planner                       # type: ignore[attr-defined]
        planner.set_plan(self._learned_drops if arm == "plan" else set())
        self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                           and e.card_size], self._now)

    def _moved(self) -> int:
        s = self.transport.stats
        return s.bytes_h2c + s.bytes_c2h

    def _simulate(self, tr: Trace, policy: str, drops: set[tuple[int, int]] | None) -> int:
        """PCIe bytes of the middle copy of a plan trace, replayed in a dry run with the trace
        as the (incomplete: dirty tensors are written back) schedule and, for "planned", the
        drops named by role and phase as the live manager applies them: in every copy."""
        sim = MemoryManager.dry_run(self.capacity, policy=policy, align=self.alloc.align,
                                    batching=self.transport.batching)
        sim.set_schedule_trace(tr, plan=set(), complete=False)
        if drops:
            off, phases = tr.meta["offset"], tr.meta["phases"]
            sim.policy.plan_key = lambda e, since: (   # type: ignore[attr-defined]
                int(e.key[1:]) % off, phases[since] if since < len(phases) else -1)
            sim.policy.set_plan(drops)                  # type: ignore[attr-defined]
        # measured over the copies between the first and the last, per copy
        cs = tr.meta["copy_starts"]
        first, last = cs[1], cs[-1]
        marks = {first: 0, last: 0}

        def mark() -> None:
            if sim._epoch in marks:
                marks[sim._epoch] = sim._moved()
        if not sim._replay(tr, "t{}".format, mark):
            raise MemoryManagerError("the recorded repetition uses a tensor it does not allocate")
        return ((marks[last] or sim._moved()) - marks[first]) // max(len(cs) - 2, 1)

    def _check_plan(self) -> None:
        """After each repetition of a learned one: what the way of choosing victims in use
        (the plan, next-use order, or the online experts) moved becomes its estimate, the online
        arm's estimate is renewed from the shadows when another one is in use, and if another
        arm's estimate is lower by PLAN_MARGIN, that one is used from now on. The repetition
        after a lock or a switch is not measured (the card's state is still the previous
        policy's)."""
        det = self.detector
        if not self._arms or det is None or det.lock is None or self._sched is not None:
            return                           # (a hint's plan is not the learned one's to change)
        t, moved = self._period_mark
        if self._epoch - t < det.lock.lag:
            return
        now = self._moved()
        self._period_mark = (self._epoch, now)
        # the followed expert's shadow, from its own mark (the expert may change in between)
        expert, shadow = self.policy.shadow_moved()             # type: ignore[attr-defined]
        online = shadow.get(expert, 0) - self._online_mark.get(expert, 0)
        self._online_mark = shadow
        if self._arm_warm:
            self._arm_warm = False
            return
        self._arms[self._arm] = now - moved
        if self._arm == "online":
            self.stats.online_repeats += 1
            if online > 0:           # how far the shadows' bytes were from the card's
                self._online_scale = (now - moved) / online
        else:
            # what the online experts would have moved in this repetition: their shadows
            # (no fragmentation), scaled as the online arm's were off when last measured
            self._arms["online"] = round(online * self._online_scale)
        best = min(self._arms, key=self._arms.__getitem__)
        if self._arms[best] < (1 - PLAN_MARGIN) * self._arms[self._arm]:
            self._use_arm(best)

    # --- deferred writes and gathered reads ---------------------------------------------------

    def _deferred_companions(self, placing: set[int]) -> list[_Entry]:
        """Deferred writes to upload with this call's: the oldest pending small tensors that
        fit the free card space (nothing is evicted for them), at most a share of the card that
        shrinks when such uploads go unused; none once the card has had to evict, unless
        DEFER_FULL_USED of them were used."""
        if not self._pending or self._sched is not None or not self.policy.keeps_resident:
            return []
        used, unused = self._spec_used, self._spec_unused
        if self.stats.evictions and unused > (1 - DEFER_FULL_USED) * (used + unused):
            return []
        share = DEFER_SHARE * (used + 1) / (used + unused + 1)
        budget = min(self.alloc.free, int(share * self.capacity))
        out, got = [], 0
        for e in self._pending.values():
            if e.id in placing or e.addr is not None:
                continue
            if got + e.card_size > budget:
                break
            out.append(e)
            got += e.card_size
        return out

    def _ungather(self, e: _Entry) -> None:
        """e is updated, overwritten or freed: a gathered write-back of it was for nothing."""
        if e.gathered:
            e.gathered = False
            self.stats.gathered_unused += 1
            self._gather = 0

    def _log_update(self, e: _Entry) -> None:
        self._useq += 1
        e.useq = self._useq
        log, seq = self._upd_log, self._upd_seq
        log.append(e)
        seq.append(e.useq)
        if len(log) > 2 * len(self._entries) + 64:        # drop stale entries: O(live)
            keep = [(x, q) for x, q in zip(log, seq, strict=True)
                    if x.useq == q and x.dirty and x.id in self._entries]
            self._upd_log = [x for x, _ in keep]
            self._upd_seq = [q for _, q in keep]

    def _gathered_with(self, e: _Entry) -> list[_Entry]:
        """Dirty small tensors to write back with e's read: once reads follow the update order
        (this read is of the dirty tensor updated right after the last one read), the next
        ones in that order; the batch doubles while the pattern holds."""
        if not self.transport.batching or not 0 < e.card_size <= DEFER_MAX or e.useq < 0:
            return []
        log, seq = self._upd_log, self._upd_seq
        i = bisect.bisect_left(seq, e.useq)
        if i == len(seq) or log[i] is not e:
            return []
        # sequential: no dirty small tensor updated between the last one read and this one
        j = bisect.bisect_right(seq, self._last_read)
        sequential = 0 <= self._last_read < e.useq and i - j <= 64 and not any(
            x.dirty and x.useq == q and x.id in self._entries
            for x, q in zip(log[j:i], seq[j:i], strict=True))
        if not sequential:
            self._gather = 0
            return []
        self._gather = min(GATHER_MAX, max(GATHER_START, 2 * self._gather))
        out, got = [], 0
        for x, q in zip(log[i + 1:], seq[i + 1:], strict=False):
            if len(out) >= self._gather or got >= GATHER_MAX_BYTES:
                break
            if x.useq == q and x.dirty and x.id in self._entries:
                out.append(x)
                got += x.card_size
        for x in out:
            x.gathered = True
        self.stats.gathered_reads += len(out)
        return out

    def _read_ahead(self, first: _Entry) -> list[_Entry]:
        """Dirty tensors the schedule says the host reads and the card no longer needs."""
        if self._sched is None or not self._will_read or not self.transport.batching:
            return []
        out = []
        for k, n in self._will_read.items():
            e = self._by_key.get(k) if n > 0 else None
            if e is not None and e is not first and e.dirty and self._next_use(e) == INF:
                out.append(e)
        return out

    def _next_use(self, e: _Entry) -> float:
        if self._sched is None:
            det = self.detector
            return det.next_use(e.id, self._now) if det is not None else INF
        lst = self._positions.get(e.key)
        if not lst:
            return INF
        i = bisect.bisect_right(lst, self._now)
        return lst[i] if i < len(lst) else INF

    # --- placement, eviction, transfers -------------------------------------------------------

    def _bring_in(self, missing: list[_Entry], epoch: int) -> None:
        # (loops, not comprehensions, on this path: each comprehension is a function call)
        placing = set()                          # ids, for the window rules and companions
        for e in missing:
            placing.add(e.id)
        placed = missing.copy()                   # the entries placed, for the upload
        # Prefetch only when this call uploads anyway: one batch then covers the next calls,
        # instead of every call topping up the window by one tensor.
        pre, horizon_bytes = [], 0
        if self._sched is not None and any(e.written and e.host_valid for e in missing):
            pre, horizon_bytes = self._prefetch_candidates(missing)
        unplaced = missing
        if self.alloc.large and not pre:         # evicts in the policy's order as it places
            unplaced = self._place_in_victims(missing, epoch)
        need = 0
        for e in unplaced:
            need += e.card_size
        must = need - self.alloc.free            # bytes this call cannot do without
        short = max(must, horizon_bytes - (self.alloc.free - need)) if pre else must
        if short > 0:
            victims = self.policy.pick(short, epoch, self._now)
            if pre and (sum(v.card_size for v in victims) < short
                        or not self._prefetch_victims_ok(victims, must)):
                pre = []
                victims = self.policy.pick(must, epoch, self._now) if must > 0 else []
            got = sum(v.card_size for v in victims)
            if got < must:
                raise MemoryManagerError(
                    f"internal error: policy {self.policy.name} freed {got} of {must} bytes "
                    "although the call fits the card; please report with a recorded trace")
            self._evict(victims)
        moves = self._place(unplaced, placing, epoch) if unplaced else []
        if pre:
            self.stats.prefetched += self._place_along(pre, placed, spec=False)
        pending, deferred = self._pending, False
        for e in missing:
            if pending.pop(e.id, None) is not None:
                deferred = True
        if not pre and deferred:
            # a deferred write is needed: upload the other deferred writes with it
            comp = self._deferred_companions(placing)
            if comp:                             # (none once the card evicts, mostly)
                self.stats.deferred_uploads += self._place_along(comp, placed, spec=True)
        if moves:
            self.stats.compactions += 1
            self.transport.move([(m.src, m.size, m.dst) for m in moves if m.copy])
        admit, now = self.policy.admit, self._now
        for e in missing:
            admit(e, now)
        up = []
        for e in placed:
            if e.written and e.host_valid:
                up.append(e)
        self._upload(up)

    def _place_along(self, ents: list[_Entry], placed: list[_Entry], spec: bool) -> int:
        """Place tensors this call uploads unasked (prefetches, or deferred writes: `spec`):
        back to back in host order if one hole holds them, else each where it fits. Each one
        placed joins `placed`, leaves the deferred writes and is inserted into the policy. How
        many were placed."""
        order = sorted(ents, key=_host_order)
        addrs = self._run(order)
        if addrs is None:                        # no room in one piece: each where it fits
            addrs = [self.alloc.alloc(e.card_size, e.id) for e in order]
        pending, insert, now = self._pending, self.policy.insert, self._now
        n = 0
        for e, a in zip(order, addrs, strict=True):
            if a is not None:
                e.addr = a
                if spec:
                    e.spec = True
                placed.append(e)
                pending.pop(e.id, None)          # (uploaded by the caller, if written)
                insert(e, now)
                n += 1
        return n

    def _run(self, ents: list[_Entry]) -> list[int] | None:
        """CardAllocator.alloc_run for the entries, in their order (their addresses, or None
        if no hole holds them all). (A loop: a comprehension is a call.)"""
        sizes, keys = [], []
        for e in ents:
            sizes.append(e.card_size)
            keys.append(e.id)
        return self.alloc.alloc_run(sizes, keys)

    def _place_in_victims(self, missing: list[_Entry], epoch: int) -> list[_Entry]:
        """Placement on a large map (allocator.LARGE blocks: many small tensors on a full
        card): best fit, largest first; a tensor that fits no hole makes the policy evict on,
        in its order, until one does (the victims of a round cover what is still unplaced;
        their holes merge with their neighbours), up to LARGE_CANDIDATES victims. The bytes
        evicted beyond the call's need stay as holes for the next calls' tensors (best fit
        again), so over many calls the card evicts in the policy's order what it places, with
        no search of the map and no compaction. The tensors still unplaced are returned, for
        the general rule (window or compaction)."""
        rest = sorted(missing, key=_CARD_SIZE, reverse=True)   # (stable: ties keep order)
        budget = LARGE_CANDIDATES
        while True:
            rest = self._fit_each(rest)
            if not rest or budget <= 0:
                return rest
            cands = self.policy.candidates(epoch)
            if cands is None:
                return rest
            short = 0
            for e in rest:
                short += e.card_size
            victims = take_in_order(cands, short, budget)
            if not victims:
                return rest
            budget -= len(victims)
            self._evict(victims)
            self.stats.slot_evictions += len(victims)

    def _fit_each(self, ents: list[_Entry]) -> list[_Entry]:
        """Best fit for each, in the given order (its address set); those that fit no hole."""
        alloc = self.alloc
        left = []
        for e in ents:
            a = alloc.alloc(e.card_size, e.id)
            if a is None:
                left.append(e)
            else:
                e.addr = a
        return left

    def _prefetch_candidates(self, missing: list[_Entry]) -> tuple[list[_Entry], int]:
        """Small written tensors of the next `prefetch_calls` scheduled calls, and the bytes of
        every tensor those calls need that is not on the card (known from the schedule trace).

        The manager prefetches only if it can make room for all of those now, evicting only
        tensors the policy may drop early (`window_cost`) and that are not needed before the
        horizon: then nothing is evicted before the prefetched tensors are used, and prefetch
        changes when bytes move (in this call's batch), not how many."""
        if not self.prefetch_calls or not self.policy.uses_schedule or self._sched is None:
            return [], 0
        out: list[_Entry] = []
        seen = {e.id for e in missing}
        seen_keys = {e.key for e in missing}
        lacking = 0
        sched = self._sched
        for j in range(self._sched_pos, min(self._sched_pos + self.prefetch_calls, len(sched))):
            for k in sched[j]:
                if k in seen_keys:
                    continue
                seen_keys.add(k)
                e = self._by_key.get(k)
                if e is None:                    # allocated later: its size from the trace
                    size = self._future_sizes.get(k)
                    if size is None:
                        return [], 0
                    lacking += size
                    continue
                if e.addr is not None or e.id in seen:
                    continue
                seen.add(e.id)
                lacking += e.card_size
                if e.written and e.host_valid and 0 < e.card_size <= self.prefetch_max_tensor:
                    out.append(e)
        if lacking > self.capacity // 2:
            return [], 0
        return out, lacking

    def _prefetch_victims_ok(self, victims: list[_Entry], must: int) -> bool:
        """Victims beyond the `must` bytes this call needs make room for prefetches only: they
        must be droppable out of order (window_cost) and not needed before the horizon."""
        horizon = self._sched_pos + self.prefetch_calls
        got = 0
        for v in victims:
            if got >= must and (self._next_use(v) < horizon
                                or self.policy.window_cost(v) is None):
                return False
            got += v.card_size
        return True

    def _evict_window(self, size: int, loaded: Callable[[object], bool], placing: set[int],
                      epoch: int) -> bool:
        """When compaction would copy far more than it places, evict the policy's next victims
        that sit together instead, if that moves fewer (weighted) bytes. True if done."""
        if not self.policy.window_candidates:
            return False
        if self.alloc.large:
            done = self._evict_window_large(size, loaded, placing, epoch)
            if done is not None:
                return done
        comp = self.alloc.compaction_cost(size, loaded)
        if comp <= self.policy.window_gate * size:
            return False
        cands = self.policy.pick(min(self.capacity, self.policy.window_candidates * size), epoch,
                                 self._now)
        allowed = {}
        near = []
        for e in cands:
            c = self.policy.window_cost(e)
            if c is not None and e.id not in placing:
                allowed[e.id] = c
                near.append(e.addr)
        win = self.alloc.cheapest_window(size, allowed.get, near)
        # Worth it only if it copies far less, and never evicting much more than it places.
        if win is None or win[0] * C2C_PER_PCIE >= comp or win[0] > WINDOW_MAX_COST * size:
            return False
        self._evict([self._entries[self.alloc.key_at(s)] for s in win[1]],  # type: ignore[index]
                    in_order=False)
        self.stats.window_evictions += 1
        return True

    def _evict_window_large(self, size: int, loaded: Callable[[object], bool],
                            placing: set[int], epoch: int) -> bool | None:
        """_evict_window on a large map (more than allocator.LARGE blocks: 100k small tensors
        on the card), at a bounded cost per call:

        - the window candidates are the policy's next victims in its order (`candidates`,
          lazily: not `pick` with its corrections), at most LARGE_CANDIDATES of them within
          window_candidates times the bytes to place; windows start at the first LOCAL_NEAR
          (allocator.window_near), the cheapest wins, as in cheapest_window;
        - the compaction it is weighed against is searched (locally, allocator.compaction_cost)
          only while it copies less than what would make the window lose, and a verdict
          "compaction costs more" is reused for the next COMPACTION_RECHECK window evictions
          (the fragmentation that made it costly changes slowly), so most calls search no
          compaction at all.

        None when the policy has no lazy order: the full rule decides."""
        pol = self.policy
        cands = pol.candidates(epoch)
        if cands is None:
            return None
        budget = min(self.capacity, pol.window_candidates * size)
        allowed: dict[int, float] = {}
        near: list[int] = []
        got = 0
        if pol.plain_window_cost:        # EvictionPolicy.window_cost, inlined
            for e in cands:
                if got >= budget or len(allowed) >= LARGE_CANDIDATES:
                    break
                n = e.card_size
                got += n
                if e.id not in placing:
                    allowed[e.id] = float(2 * n if e.dirty else n)
                    near.append(e.addr)  # type: ignore[arg-type]
        else:
            cost_of = pol.window_cost
            for e in cands:
                if got >= budget or len(allowed) >= LARGE_CANDIDATES:
                    break
                got += e.card_size
                c = cost_of(e)
                if c is not None and e.id not in placing:
                    allowed[e.id] = c
                    near.append(e.addr)  # type: ignore[arg-type]
        alloc = self.alloc
        win = alloc.window_near(size, allowed.get, near)
        if win is None or win[0] > WINDOW_MAX_COST * size:
            return False
        if self._costly_compactions > 0:
            self._costly_compactions -= 1
        else:
            # Compaction instead when it copies at most window_gate times the bytes placed,
            # or at most C2C_PER_PCIE times the window's cost (the rule of _evict_window).
            bar = max(pol.window_gate * size, C2C_PER_PCIE * win[0])
            if alloc.compaction_cost(size, loaded, limit=int(bar) + 1) <= bar:
                return False
            self._costly_compactions = COMPACTION_RECHECK
        self._evict([self._entries[alloc.key_at(s)] for s in win[1]],  # type: ignore[index]
                    in_order=False)
        self.stats.window_evictions += 1
        return True

    def _place(self, missing: list[_Entry], placing: set[int], epoch: int) -> list:
        order = sorted(missing, key=_host_order) if len(missing) > 1 else missing
        addrs = self._run(order)
        if addrs is not None:
            for e, a in zip(order, addrs, strict=True):
                e.addr = a
            return []
        rest = self._fit_each(sorted(missing, key=_CARD_SIZE, reverse=True))
        if not rest:
            return []
        entries = self._entries

        def loaded(key: object) -> bool:
            x = entries[key]  # type: ignore[index]
            return x.id not in placing and x.written
        size = sum(e.card_size for e in rest)
        if not self._evict_window(size, loaded, placing, epoch):
            moves = self.alloc.compact_for(size, loaded)
        else:
            moves = []
        for m in moves:
            entries[m.key].addr = m.dst  # type: ignore[index]
        rest.sort(key=_host_order)
        addrs = self._run(rest)
        assert addrs is not None, "compaction made no hole for the remaining tensors"
        for e, a in zip(rest, addrs, strict=True):
            e.addr = a
        return moves

    def _evict(self, victims: list[_Entry], in_order: bool = True) -> None:
        dirty = []
        for v in victims:
            if v.dirty:
                dirty.append(v)
        if dirty and self._complete_hint and self._sched is not None:
            # The whole future is known: bytes that are never needed nor read again need no
            # write-back (a later read would contradict the schedule; see read_tensor).
            dead = [v for v in dirty if self._next_use(v) == INF and not self._will_read[v.key]]
            for v in dead:
                v.dirty, v.host_valid, v.discarded = False, False, True
            dirty = [v for v in dirty if not v.discarded]
        if dirty:
            self._writeback(dirty, evicting=True)
        self._release_all(victims, evicted=in_order)
        self.stats.evictions += len(victims)

    def _release(self, e: _Entry, evicted: bool = False) -> None:
        """Give up the card copy (no write-back: callers decide that)."""
        self._release_all((e,), evicted)

    def _release_all(self, ents: Iterable[_Entry], evicted: bool = False) -> None:
        """_release of each (one loop: the miss path evicts a few tensors per call)."""
        free_block = self.alloc.free_block
        gone = self.policy.evicted if evicted else self.policy.remove
        unused = 0
        for e in ents:
            if e.spec:
                e.spec = False                    # uploaded for nothing
                unused += 1
            if e.card_size:
                free_block(e.addr)  # type: ignore[arg-type]
                gone(e)
            e.addr = None
            e.dirty = False
        if unused:
            self._spec_unused += unused
            self.stats.deferred_unused += unused

    def _stage(self, size: int) -> tuple[Any, int]:
        self._staging -= 1
        return self.host.alloc(size, 64), self._staging

    def _writeback(self, ents: list[_Entry], evicting: bool = False) -> None:
        """Card -> host copy for dirty resident tensors, as one batch. The policy re-costs the
        tensors unless they are being evicted (it then sees them as evicted, with the cost they
        had: GreedyDual-Size raises L to that)."""
        items, staged = [], []
        for e in ents:
            assert e.addr is not None and e.home is not None
            if e.codec is None:
                items.append((e.addr, e.card_size, e.home.address, e.home.chunk))
            else:
                buf, chunk = self._stage(e.card_size)
                items.append((e.addr, e.card_size, buf.address, chunk))
                staged.append((e, buf))
        try:
            self.transport.download(items)
            for e, buf in staged:
                if self.payload:
                    data = self.host.view(buf.address, e.card_size)
                    home = self.host.view(e.home.address, e.size)  # type: ignore[union-attr]
                    home[:] = e.codec.decode(data, e.size).view(np.uint8)  # type: ignore
        finally:
            for _, buf in staged:
                self.host.free(buf)
        for e in ents:
            e.dirty, e.host_valid = False, True
            if not evicting:
                self.policy.recost(e, self._now)
        self.stats.writebacks += len(ents)

    def _upload(self, ents: list[_Entry]) -> None:
        """Host -> card copy of placed tensors, as one batch (the caller has taken them out of
        the deferred writes)."""
        items, staged = [], []
        for e in ents:
            assert e.addr is not None and e.home is not None
            if e.codec is None:
                items.append((e.home.address, e.card_size, e.addr, e.home.chunk))
            else:
                buf, chunk = self._stage(e.card_size)
                if self.payload:
                    x = self.host.view(e.home.address, e.size).view(np.float32)
                    enc = e.codec.encode(x)
                    self.host.view(buf.address, e.card_size)[:] = enc
                    e.report = e.codec.report(x, enc)
                items.append((buf.address, e.card_size, e.addr, chunk))
                staged.append(buf)
        try:
            self.transport.upload(items)
        finally:
            for buf in staged:
                self.host.free(buf)

    # --- helpers ------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        """The start of a call `name`: this thread holds the manager, or ConcurrentUseError."""
        if not self._busy.acquire(False):        # (positional: the keyword costs ~0.1 us)
            self._refuse(name)
        if self._busy_depth == 0:
            self._busy_in = (get_ident(), name)  # the thread's name only for the error
        self._busy_depth += 1

    def _leave(self) -> None:
        self._busy_depth -= 1
        self._busy.release()

    def _refuse(self, name: str) -> NoReturn:
        """The error of a call (`name`) that another thread's call overlaps (_exclusive)."""
        ident, inside = self._busy_in
        holder = next((t.name for t in threading.enumerate() if t.ident == ident), str(ident))
        raise ConcurrentUseError(
            f"MemoryManager.{name} was called from thread "
            f"{threading.current_thread().name!r} while thread {holder!r} is inside "
            f"{inside}: the memory manager is not thread-safe (the addresses "
            "need_in_device returns hold only until the next call); serialize the calls "
            "and the use of those addresses with one lock, or give each thread its own "
            "manager")

    def _entry(self, t: object) -> _Entry:
        if type(t) is TensorHandle and t._owner is self._token:
            e = t._entry
            if e is not None and e.handle is t:   # (a copy of the handle: by its id, below)
                return e
        if not isinstance(t, TensorHandle) or t._owner is not self._token:
            raise UnknownTensorError(
                f"{t!r} is not a tensor handle of this memory manager; pass what its "
                "allocate_tensor returned")
        e = self._entries.get(t.id)
        if e is None:
            raise FreedTensorError(f"{t!r} was freed; allocate a new tensor")
        return e

    @staticmethod
    def _codec(precision: object) -> Codec | None:
        if precision is None or isinstance(precision, Codec):
            return precision
        if isinstance(precision, str):
            return codec_from_json({"codec": precision})
        raise PrecisionError(f"precision {precision!r} is not a codec; pass Fp16(), Bf16(), "
                             "Int8Affine(), one of 'fp16', 'bf16', 'int8', or None")

    @staticmethod
    def _check_size(e: _Entry, size: object, what: str) -> None:
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 0:
            raise TensorSizeError(f"{what} size {size!r} is not a non-negative integer")
        if size > e.size:
            raise TensorSizeError(f"{what} of {size} bytes is larger than {e.handle!r}; the "
                                  f"allocation holds {e.size} bytes")

    @staticmethod
    def _source(src: HostData | None, size: int) -> np.ndarray:
        if isinstance(src, HostBuffer):
            try:
                return src.view(0, size)
            except HostRangeError as err:
                raise TensorSizeError(f"write of {size} bytes from {src!r}: {err}") from err
        if isinstance(src, np.ndarray):
            arr = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        elif isinstance(src, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(src, dtype=np.uint8)
        else:
            raise TypeError(f"host_src must be a HostBuffer, numpy array or bytes, got "
                            f"{type(src).__name__}")
        if arr.size < size:
            raise TensorSizeError(f"host_src holds {arr.size} bytes, the write needs {size}")
        return arr[:size]

    @staticmethod
    def _destination(dst: HostData | None, size: int) -> np.ndarray:
        if isinstance(dst, HostBuffer):
            try:
                return dst.view(0, size)
            except HostRangeError as err:
                raise TensorSizeError(f"read of {size} bytes into {dst!r}: {err}") from err
        if isinstance(dst, np.ndarray):
            if not dst.flags.c_contiguous or not dst.flags.writeable:
                raise TypeError("host_dst must be a writable C-contiguous numpy array")
            arr = dst.reshape(-1).view(np.uint8)
        elif isinstance(dst, (bytearray, memoryview)):
            arr = np.frombuffer(dst, dtype=np.uint8)
            if not arr.flags.writeable:
                raise TypeError("host_dst must be writable")
        else:
            raise TypeError(f"host_dst must be a HostBuffer, writable numpy array or bytearray, "
                            f"got {type(dst).__name__}")
        if arr.size < size:
            raise TensorSizeError(f"host_dst holds {arr.size} bytes, the read needs {size}")
        return arr[:size]

    def _rec(self, obj: dict[str, Any]) -> None:
        assert self._record is not None
        self._record.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def _account(self, op: str, t0: float, d0: float, need: bool = False) -> None:
        dt = _perf_counter() - t0 - (self.transport.stats.driver_time_s - d0)
        st = self.stats
        calls, times = st.calls, st.time_s
        calls[op] = calls.get(op, 0) + 1
        times[op] = times.get(op, 0.0) + dt
        if need:
            st.need_hist.add(dt)

    # --- inspection ---------------------------------------------------------------------------

    @_exclusive
    def address(self, tensor: TensorHandle) -> int | None:
        """The tensor's card address now (None when not on the card). For tests and tools."""
        return self._entry(tensor).addr

    @_exclusive
    def is_dirty(self, tensor: TensorHandle) -> bool:
        return self._entry(tensor).dirty

    @_exclusive
    def precision_report(self, tensor: TensorHandle) -> PrecisionReport | None:
        """Error of the tensor's last reduced-precision upload (None: exact, or not yet sent)."""
        return self._entry(tensor).report

    @property
    @_exclusive
    def resident_bytes(self) -> int:
        return self.alloc.used

    @_exclusive
    def resident(self) -> list[tuple[TensorHandle, int, int]]:
        """(handle, card address, card bytes) of every tensor holding card space."""
        return [(e.handle, e.addr, e.card_size) for e in self._entries.values()
                if e.addr is not None and e.card_size]

    @_exclusive
    def check(self) -> None:
        """Raise AssertionError if the manager's state breaks an invariant (for tests)."""
        self.alloc.check()
        blocks = {s: (n, k) for s, n, k in self.alloc.blocks()}
        res = [e for e in self._entries.values() if e.addr is not None and e.card_size]
        assert len(blocks) == len(res), f"{len(blocks)} blocks for {len(res)} resident tensors"
        for e in res:
            assert blocks.get(e.addr) == (e.card_size, e.id), f"{e.handle!r} block mismatch"
        for e in self._entries.values():
            assert not e.dirty or (e.addr is not None and not e.host_valid), \
                f"{e.handle!r} dirty but not resident or host copy current"
            assert not e.written or e.host_valid or e.dirty or e.discarded, \
                f"{e.handle!r} lost its bytes"
        assert self.alloc.used <= self.capacity

    @_exclusive
    def close(self) -> None:
        """Release every host copy the manager allocated."""
        self.arena.close()
        for e in self._entries.values():
            object.__setattr__(e.handle, "_entry", None)
        self._entries.clear()
        self._by_key.clear()

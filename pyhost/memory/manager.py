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
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from pyhost.backend import HostBuffer, HostRangeError
from pyhost.memory.allocator import CardAllocator
from pyhost.memory.codec import Codec, PrecisionReport
from pyhost.memory.errors import (
    CardCapacityError,
    DoubleFreeError,
    FreedTensorError,
    MemoryManagerError,
    NeverWrittenError,
    NotOnCardError,
    ScheduleError,
    TensorSizeError,
    UnknownTensorError,
)
from pyhost.memory.handle import TensorHandle, _Entry
from pyhost.memory.hoststore import HostArena, HostProvider, RealHost, VirtualHost
from pyhost.memory.policies import INF, EvictionPolicy, make_policy
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
#: Compaction copying more than this many times the bytes it places is pathological (free
#: space in many small holes); then evicting neighbours is considered, among the policy's next
#: victims (EvictionPolicy.window_candidates times the bytes to place, window_cost).
COMPACTION_LIMIT = 16
WINDOW_MAX_COST = 2
#: The default policy: the best online policy measured by bench/memory_bench.py (see
#: docs/memory-manager.md). With a schedule (set_schedule_trace), use "planned".
DEFAULT_POLICY = "gds"

HostData = HostBuffer | np.ndarray | bytes | bytearray | memoryview


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
    plan_s: float = 0.0         # time spent planning a schedule (set_schedule_trace)
    window_evictions: int = 0   # placements done by evicting neighbours instead of compacting
    time_s: dict[str, float] = field(default_factory=dict)   # manager time, driver time excluded
    need_times_s: list[float] = field(default_factory=list)  # per need call, driver excluded


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

    def allocate_tensor(self, host_buffer_or_size: HostBuffer | int, size: int | None = None,
                        *, precision: Codec | None = None, name: str | None = None) -> TensorHandle:
        """A new tensor of `size` bytes (or the size of the given host buffer).

        With a HostBuffer, that buffer is the tensor's host copy (the manager reads and writes it
        and never frees it); with a size, the manager allocates the host copy. Nothing is placed
        on the card until the tensor is needed there, so a tensor larger than the card may exist.
        `precision` opts the tensor into reduced-precision transfer (fp32 data only).
        """
        t0 = time.perf_counter()
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
        self._entries[handle.id] = e
        self._by_key[key] = e
        if self._record is not None:
            rec: dict[str, Any] = {"op": "alloc", "t": handle.id, "size": nbytes}
            if name is not None:
                rec["name"] = name
            if precision is not None:
                rec["precision"] = precision.to_json()
            self._rec(rec)
        self._account("alloc", t0, self.transport.stats.driver_time_s)
        return handle

    def write_tensor(self, tensor: TensorHandle, size: int, host_src: HostData | None) -> None:
        """Write the first `size` bytes of the tensor from `host_src` (lazily: host copy only).

        In a dry run `host_src` may be None.
        """
        t0, d0 = time.perf_counter(), self.transport.stats.driver_time_s
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
        if self._record is not None:
            self._rec({"op": "write", "t": e.id, "size": size})
        self._account("write", t0, d0)

    def read_tensor(self, tensor: TensorHandle, size: int, host_dst: HostData | None) -> None:
        """Copy the first `size` bytes of the tensor to `host_dst` (a transfer only if dirty)."""
        t0, d0 = time.perf_counter(), self.transport.stats.driver_time_s
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
            self._writeback([e, *self._read_ahead(e)])
        if self._will_read[e.key] > 0:
            self._will_read[e.key] -= 1
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
        t0, d0 = time.perf_counter(), self.transport.stats.driver_time_s
        args = [t for t in (t1, t2, t3, *more) if t is not None]
        if not args:
            raise TypeError("need_in_device needs at least one tensor")
        distinct: dict[int, _Entry] = {}
        for t in args:
            e = self._entry(t)
            if e.id not in distinct:
                distinct[e.id] = e
                if e.discarded:
                    raise ScheduleError(
                        f"{t!r} was dropped from the card without a write-back because the "
                        "schedule given to set_schedule_trace never needs it again; pass the "
                        "complete upcoming trace")
        ents = list(distinct.values())
        total = sum(e.card_size for e in ents)
        if total > self.capacity:
            raise CardCapacityError(
                f"the {len(ents)} distinct tensors of this call need {total} bytes on the card "
                f"together, more than its {self.capacity}-byte capacity; split the operation "
                "into smaller tensors")
        self._epoch += 1
        epoch = self._epoch
        self._advance_schedule(ents)
        for e in ents:
            e.pin = epoch
        if not self.policy.keeps_resident:
            self._evict([e for e in self._entries.values()
                         if e.addr is not None and e.pin != epoch and e.card_size])
        missing = []
        for e in ents:
            if e.addr is None:
                if e.card_size:
                    missing.append(e)
                else:
                    e.addr = 0
        self.stats.need_hits += len(ents) - len(missing)
        self.stats.need_misses += len(missing)
        if missing:
            self._bring_in(missing, epoch)
        now, policy = self._now, self.policy
        for e in ents:
            if e.card_size:
                policy.touch(e, now)
        if self._record is not None:
            self._rec({"op": "need", "ts": [t.id for t in args]})
        out = tuple(distinct[t.id].addr for t in args)
        self._account("need", t0, d0, need=True)
        return out  # type: ignore[return-value]

    def tensor_updated(self, tensor: TensorHandle) -> None:
        """The card changed the tensor: its card copy is now the only current one."""
        t0, d0 = time.perf_counter(), self.transport.stats.driver_time_s
        e = self._entry(tensor)
        if e.addr is None:
            raise NotOnCardError(
                f"{tensor!r} is not on the card (never needed, evicted by a later call, or "
                "overwritten by write_tensor); call need_in_device for it, run the operation, "
                "then tensor_updated before the next need_in_device")
        e.written, e.discarded = True, False
        if e.card_size:
            e.dirty, e.host_valid = True, False
            self.policy.recost(e, self._now)
        else:
            e.host_valid = True         # no bytes: the host copy is trivially current
        if self._record is not None:
            self._rec({"op": "updated", "t": e.id})
        self._account("updated", t0, d0)

    def free_tensor(self, tensor: TensorHandle) -> None:
        """Forget the tensor: its card space and host copy are released, nothing is written."""
        t0, d0 = time.perf_counter(), self.transport.stats.driver_time_s
        if isinstance(tensor, TensorHandle) and tensor._owner is self._token \
                and tensor.id not in self._entries and tensor.id < self._next_id:
            raise DoubleFreeError(f"{tensor!r} was already freed; free each tensor once")
        e = self._entry(tensor)
        if e.addr is not None:
            self._release(e)
        if e.home is not None:
            self.arena.free(e.home)
        del self._entries[e.id]
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
        self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                           and e.card_size], self._now)

    def set_schedule_trace(self, trace: Trace, key_of: Callable[[int], str] = "t{}".format
                           ) -> None:
        """The upcoming calls as a whole trace (sizes, writes, reads): the need sequence and
        reads as in `set_schedule`, plus, for a planning policy ("planned"), its plan. `key_of`
        maps the trace's tensor ids to the names given to allocate_tensor."""
        self.set_schedule([[key_of(t) for t in ts] for ts in trace.needs()],
                          reads=[key_of(r[1]) for r in trace.records if r[0] == "read"])
        self._complete_hint = True
        self._future_sizes = {key_of(t): n for t, n in trace.sizes().items()}
        set_plan = getattr(self.policy, "set_plan", None)
        if set_plan is not None:
            # scipy (the MILP) is loaded only when a planning policy needs it
            from pyhost.memory.bound import BoundError, plan_drops

            t0 = time.perf_counter()
            try:
                drops = plan_drops(trace, self.capacity,
                                   time_limit=getattr(self.policy, "plan_seconds", 5.0))
            except BoundError:
                drops = set()           # a call larger than the card: no plan, Belady order
            set_plan({(key_of(t), s) for t, s in drops})
            self.stats.plan_s += time.perf_counter() - t0
            self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                               and e.card_size], self._now)

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
        self.policy.rekey([e for e in self._entries.values() if e.addr is not None
                           and e.card_size], self._now)

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
        lst = self._positions.get(e.key)
        if not lst:
            return INF
        i = bisect.bisect_right(lst, self._now)
        return lst[i] if i < len(lst) else INF

    # --- placement, eviction, transfers -------------------------------------------------------

    def _bring_in(self, missing: list[_Entry], epoch: int) -> None:
        need = sum(e.card_size for e in missing)
        must = need - self.alloc.free            # bytes this call cannot do without
        # Prefetch only when this call uploads anyway: one batch then covers the next calls,
        # instead of every call topping up the window by one tensor.
        pre, horizon_bytes = [], 0
        if self._sched is not None and any(e.written and e.host_valid for e in missing):
            pre, horizon_bytes = self._prefetch_candidates(missing)
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
        placing = {e.id for e in missing}
        moves = self._place(missing, placing, epoch)
        if pre:
            order = sorted(pre, key=lambda e: (e.home.chunk, e.home.address))  # type: ignore
            addrs = self.alloc.alloc_run([e.card_size for e in order], [e.id for e in order])
            if addrs is None:                    # no room in one piece: each where it fits
                addrs = [self.alloc.alloc(e.card_size, e.id) for e in order]
            for e, a in zip(order, addrs, strict=True):
                if a is not None:
                    e.addr = a
                    placing.add(e.id)
                    self.policy.insert(e, self._now)
                    self.stats.prefetched += 1
        if moves:
            self.stats.compactions += 1
            self.transport.move([(m.src, m.size, m.dst) for m in moves if m.copy])
        for e in missing:
            self.policy.insert(e, self._now)
        self._upload([self._entries[i] for i in placing
                      if self._entries[i].written and self._entries[i].host_valid])

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
        comp = self.alloc.compaction_cost(size, loaded)
        if comp <= COMPACTION_LIMIT * size:
            return False
        cands = self.policy.pick(min(self.capacity, self.policy.window_candidates * size), epoch,
                                 self._now)
        allowed = {}
        for e in cands:
            c = self.policy.window_cost(e)
            if c is not None and e.id not in placing:
                allowed[e.id] = c
        win = self.alloc.cheapest_window(size, allowed.get)
        # Worth it only if it copies far less, and never evicting much more than it places.
        if win is None or win[0] * C2C_PER_PCIE >= comp or win[0] > WINDOW_MAX_COST * size:
            return False
        blocks = {s: k for s, _, k in self.alloc.blocks()}
        self._evict([self._entries[blocks[s]] for s in win[1]],   # type: ignore[index]
                    in_order=False)
        self.stats.window_evictions += 1
        return True

    def _place(self, missing: list[_Entry], placing: set[int], epoch: int) -> list:
        order = sorted(missing, key=lambda e: (e.home.chunk, e.home.address)  # type: ignore
                       if e.home is not None else (0, 0))
        addrs = self.alloc.alloc_run([e.card_size for e in order], [e.id for e in order])
        if addrs is not None:
            for e, a in zip(order, addrs, strict=True):
                e.addr = a
            return []
        rest = []
        for e in sorted(missing, key=lambda e: -e.card_size):
            a = self.alloc.alloc(e.card_size, e.id)
            if a is None:
                rest.append(e)
            else:
                e.addr = a
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
        rest.sort(key=lambda e: (e.home.chunk, e.home.address)  # type: ignore[union-attr]
                  if e.home is not None else (0, 0))
        addrs = self.alloc.alloc_run([e.card_size for e in rest], [e.id for e in rest])
        assert addrs is not None, "compaction made no hole for the remaining tensors"
        for e, a in zip(rest, addrs, strict=True):
            e.addr = a
        return moves

    def _evict(self, victims: list[_Entry], in_order: bool = True) -> None:
        dirty = [v for v in victims if v.dirty]
        if dirty and self._complete_hint and self._sched is not None:
            # The whole future is known: bytes that are never needed nor read again need no
            # write-back (a later read would contradict the schedule; see read_tensor).
            dead = [v for v in dirty if self._next_use(v) == INF and not self._will_read[v.key]]
            for v in dead:
                v.dirty, v.host_valid, v.discarded = False, False, True
            dirty = [v for v in dirty if not v.discarded]
        if dirty:
            self._writeback(dirty, evicting=True)
        for v in victims:
            self._release(v, evicted=in_order)
        self.stats.evictions += len(victims)

    def _release(self, e: _Entry, evicted: bool = False) -> None:
        """Give up the card copy (no write-back: callers decide that)."""
        if e.card_size:
            self.alloc.free_block(e.addr)  # type: ignore[arg-type]
            if evicted:
                self.policy.evicted(e)
            else:
                self.policy.remove(e)
        e.addr = None
        e.dirty = False

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

    def _entry(self, t: object) -> _Entry:
        if not isinstance(t, TensorHandle) or t._owner is not self._token:
            raise UnknownTensorError(
                f"{t!r} is not a tensor handle of this memory manager; pass what its "
                "allocate_tensor returned")
        e = self._entries.get(t.id)
        if e is None:
            raise FreedTensorError(f"{t!r} was freed; allocate a new tensor")
        return e

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
        dt = time.perf_counter() - t0 - (self.transport.stats.driver_time_s - d0)
        st = self.stats
        st.calls[op] = st.calls.get(op, 0) + 1
        st.time_s[op] = st.time_s.get(op, 0.0) + dt
        if need:
            st.need_times_s.append(dt)

    # --- inspection ---------------------------------------------------------------------------

    def address(self, tensor: TensorHandle) -> int | None:
        """The tensor's card address now (None when not on the card). For tests and tools."""
        return self._entry(tensor).addr

    def is_dirty(self, tensor: TensorHandle) -> bool:
        return self._entry(tensor).dirty

    def precision_report(self, tensor: TensorHandle) -> PrecisionReport | None:
        """Error of the tensor's last reduced-precision upload (None: exact, or not yet sent)."""
        return self._entry(tensor).report

    @property
    def resident_bytes(self) -> int:
        return self.alloc.used

    def resident(self) -> list[tuple[TensorHandle, int, int]]:
        """(handle, card address, card bytes) of every tensor holding card space."""
        return [(e.handle, e.addr, e.card_size) for e in self._entries.values()
                if e.addr is not None and e.card_size]

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

    def close(self) -> None:
        """Release every host copy the manager allocated."""
        self.arena.close()
        self._entries.clear()
        self._by_key.clear()

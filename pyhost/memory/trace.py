"""Traces of memory-manager API calls: the in-memory form, JSON lines, and replay.

A trace is the sequence of API calls a program made (allocate, write, read, need, updated, free),
with tensors named by id. `MemoryManager(record=file)` writes one as JSON lines as it runs;
`Trace.load` reads it back; `replay` runs a trace on any manager (real or dry run), optionally
passing the trace's own need sequence as the schedule hint and checking every byte read.

JSON lines format: a header line ``{"op": "header", "format": "dnncard-memory-trace",
"version": 1, ...}``, then one object per call: ``{"op": "alloc", "t": 3, "size": 1024}`` (optional
``"name"``, ``"precision"``), ``{"op": "write", "t": 3, "size": 1024}``, ``{"op": "read", ...}``,
``{"op": "need", "ts": [1, 2, 3]}``, ``{"op": "updated", "t": 3}``, ``{"op": "free", "t": 3}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from pyhost.memory.codec import codec_from_json
from pyhost.memory.errors import TraceError
from pyhost.memory.manager import MemoryManager
from pyhost.memory.tensor import Tensor

FORMAT = "dnncard-memory-trace"
VERSION = 1
OPS = ("alloc", "write", "read", "need", "updated", "free")

#: One call: (op, tensor id or tuple of ids for "need", size or None, extra dict or None).
Record = tuple[str, Any, Any, Any]


@dataclass
class Trace:
    """A sequence of API calls. `meta` is free-form (name, model, batch, ...)."""

    records: list[Record] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    # --- building -----------------------------------------------------------------------------

    def alloc(self, t: int, size: int, name: str | None = None,
              precision: dict[str, Any] | None = None) -> None:
        extra = {k: v for k, v in (("name", name), ("precision", precision)) if v is not None}
        self.records.append(("alloc", t, size, extra or None))

    def write(self, t: int, size: int) -> None:
        self.records.append(("write", t, size, None))

    def read(self, t: int, size: int) -> None:
        self.records.append(("read", t, size, None))

    def need(self, *ts: int) -> None:
        self.records.append(("need", tuple(ts), None, None))

    def updated(self, t: int) -> None:
        self.records.append(("updated", t, None, None))

    def free(self, t: int) -> None:
        self.records.append(("free", t, None, None))

    # --- views --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.meta.get("name", "trace"))

    def sizes(self) -> dict[int, int]:
        return {r[1]: r[2] for r in self.records if r[0] == "alloc"}

    def needs(self) -> list[tuple[int, ...]]:
        return [r[1] for r in self.records if r[0] == "need"]

    def footprint(self) -> int:
        """Bytes of all tensors allocated (the host footprint if none were freed)."""
        return sum(self.sizes().values())

    def peak_live(self) -> int:
        """Largest number of bytes allocated at once."""
        live = peak = 0
        sizes = self.sizes()
        for op, t, size, _ in self.records:
            if op == "alloc":
                live += size
                peak = max(peak, live)
            elif op == "free":
                live -= sizes[t]
        return peak

    def max_need(self) -> int:
        """Bytes of the largest need call (a capacity below this cannot run the trace)."""
        sizes = self.sizes()
        return max((sum(sizes[t] for t in set(ts)) for ts in self.needs()), default=0)

    def __len__(self) -> int:
        return len(self.records)

    # --- JSON lines ---------------------------------------------------------------------------

    def dump(self, f: IO[str]) -> None:
        f.write(json.dumps({"op": "header", "format": FORMAT, "version": VERSION, **self.meta})
                + "\n")
        for op, t, size, extra in self.records:
            obj: dict[str, Any] = {"op": op}
            if op == "need":
                obj["ts"] = list(t)
            else:
                obj["t"] = t
            if size is not None:
                obj["size"] = size
            if extra:
                obj.update(extra)
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def save(self, path: str | Path) -> None:
        with open(path, "w") as f:
            self.dump(f)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Trace:
        tr = cls()
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
                op = obj["op"]
                if op == "header":
                    if obj.get("format") != FORMAT or obj.get("version") != VERSION:
                        raise TraceError(f"line {n}: not a {FORMAT} version {VERSION} trace")
                    tr.meta.update({k: v for k, v in obj.items()
                                    if k not in ("op", "format", "version")})
                elif op == "need":
                    tr.records.append(("need", tuple(int(x) for x in obj["ts"]), None, None))
                elif op in ("alloc", "write", "read"):
                    extra = {k: obj[k] for k in ("name", "precision") if k in obj} or None
                    tr.records.append((op, int(obj["t"]), int(obj["size"]), extra))
                elif op in ("updated", "free"):
                    tr.records.append((op, int(obj["t"]), None, None))
                else:
                    raise TraceError(f"line {n}: unknown op {op!r}; expected one of {OPS}")
            except (KeyError, TypeError, ValueError) as e:
                if isinstance(e, TraceError):
                    raise
                raise TraceError(f"line {n}: malformed record {line[:80]!r}: {e}") from e
        return tr

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        with open(path) as f:
            return cls.parse(f)

    def validate(self) -> None:
        """Raise TraceError if the trace uses a tensor before alloc / after free, or calls
        updated on a tensor its previous need call did not name."""
        live: dict[int, int] = {}
        last_need: set[int] = set()
        for i, (op, t, size, _) in enumerate(self.records):
            ids = t if op == "need" else (t,)
            if op == "alloc":
                if t in live:
                    raise TraceError(f"record {i}: tensor {t} allocated twice")
                live[t] = size
                continue
            for x in ids:
                if x not in live:
                    raise TraceError(f"record {i}: {op} of tensor {x}, which is not allocated")
            if op in ("write", "read") and size > live[t]:
                raise TraceError(f"record {i}: {op} of {size} bytes exceeds tensor {t}")
            if op == "need":
                last_need = set(ids)
            elif op == "updated" and t not in last_need:
                raise TraceError(f"record {i}: updated({t}) not after a need naming it")
            elif op == "free":
                del live[t]
                last_need.discard(t)


def schedule_of(trace: Trace) -> list[list[str]]:
    """The trace's need sequence as a `set_schedule` hint, in the names `replay` gives tensors
    (`set_schedule_trace` takes the whole trace instead)."""
    return [[f"t{t}" for t in ts] for ts in trace.needs()]


#: A stand-in for the accelerator: writes `data` to card memory at `addr` (used by replay to
#: give tensor_updated real new contents that read_tensor must then return).
CardKernel = Callable[[int, np.ndarray], None]


@dataclass
class ReplayResult:
    handles: dict[int, Tensor]
    reads_checked: int = 0


def replay(trace: Trace, mgr: MemoryManager, *, schedule: bool = False, seed: int = 0,
           kernel: CardKernel | None = None, verify: bool = True,
           after: Callable[[int], None] | None = None) -> ReplayResult:
    """Run `trace` on `mgr`. With payload, writes deterministic data; with `kernel`, every
    updated tensor gets new bytes on the card first; `verify` checks every read against what
    was last written or updated (AssertionError on a mismatch); `after(i)` runs after record i
    (e.g. `lambda i: mgr.check()`)."""
    payload = mgr.payload
    handles: dict[int, Tensor] = {}
    expected: dict[int, np.ndarray] = {}
    exact: set[int] = set()
    addrs: dict[int, int] = {}
    rng = np.random.default_rng(seed)
    res = ReplayResult(handles)
    if schedule:
        mgr.set_schedule_trace(trace)
    for i, (op, t, size, extra) in enumerate(trace.records):
        if op == "alloc":
            prec = codec_from_json(extra.get("precision")) if extra else None
            handles[t] = mgr.allocate_tensor(size, precision=prec, name=f"t{t}")
            if prec is None:
                exact.add(t)
        elif op == "write":
            data = None
            if payload:
                data = rng.integers(0, 256, size, dtype=np.uint8) if t in exact else \
                    rng.standard_normal(size // 4).astype(np.float32).view(np.uint8)
                if verify and t in exact:
                    old = expected.get(t)
                    new = data.copy()
                    if old is not None and size < old.size:
                        new = np.concatenate([data, old[size:]])
                    expected[t] = new
            mgr.write_tensor(handles[t], size, data)
        elif op == "need":
            got = mgr.need_in_device(*(handles[x] for x in t))
            addrs.update(zip(t, got, strict=True))
        elif op == "updated":
            if payload and kernel is not None and t in exact and handles[t].size:
                data = rng.integers(0, 256, handles[t].size, dtype=np.uint8)
                kernel(addrs[t], data)
                expected[t] = data
            elif verify:
                expected.pop(t, None)    # contents unknown: nothing to check
            mgr.tensor_updated(handles[t])
        elif op == "read":
            dst = np.empty(size, dtype=np.uint8) if payload else None
            mgr.read_tensor(handles[t], size, dst)
            if payload and verify and t in expected:
                want = expected[t][:size]
                if not np.array_equal(dst, want):
                    bad = int(np.flatnonzero(dst != want)[0])
                    raise AssertionError(
                        f"record {i}: read of tensor {t} differs at byte {bad}: got "
                        f"{dst[bad]:#x}, expected {want[bad]:#x}")
                res.reads_checked += 1
        elif op == "free":
            mgr.free_tensor(handles.pop(t))
            expected.pop(t, None)
        else:
            raise TraceError(f"record {i}: unknown op {op!r}")
        if after is not None:
            after(i)
    return res

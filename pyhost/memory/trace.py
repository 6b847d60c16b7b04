"""Traces of memory-manager API calls: the in-memory form and JSON lines.

A trace is the sequence of API calls a program made (allocate, write, read, need, updated, free),
with tensors named by id. `MemoryManager(record=file)` writes one as JSON lines as it runs;
`Trace.load` reads it back; the schedule-aware policy plans from one, and `tb.memory.replay` runs
one on any manager (real or dry run), checking every byte read.

JSON lines format: a header line ``{"op": "header", "format": "dnncard-memory-trace",
"version": 1, ...}``, then one object per call: ``{"op": "alloc", "t": 3, "size": 1024}`` (optional
``"name"``, ``"precision"``), ``{"op": "write", "t": 3, "size": 1024}``, ``{"op": "read", ...}``,
``{"op": "need", "ts": [1, 2, 3]}``, ``{"op": "updated", "t": 3}``, ``{"op": "free", "t": 3}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pyhost.memory.errors import TraceError

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

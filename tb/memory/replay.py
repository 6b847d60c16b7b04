"""Replaying a memory-manager trace on a manager, checking every byte it reads back.

`replay` runs a `pyhost.memory.trace.Trace` on any `MemoryManager` (real or dry run): it writes
deterministic data, optionally lets a stand-in for the accelerator give updated tensors new
contents on the card, optionally hands the manager the trace's own need sequence as its schedule
hint, and checks every read against what was last written or updated. The memory tests and
`bench/memory_bench.py` use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pyhost.memory import MemoryManager, TensorHandle
from pyhost.memory.codec import codec_from_json
from pyhost.memory.errors import TraceError
from pyhost.memory.trace import Trace

#: A stand-in for the accelerator: writes `data` to card memory at `addr` (used by replay to
#: give tensor_updated real new contents that read_tensor must then return).
CardKernel = Callable[[int, np.ndarray], None]


@dataclass
class ReplayResult:
    handles: dict[int, TensorHandle]
    reads_checked: int = 0


def replay(trace: Trace, mgr: MemoryManager, *, schedule: bool = False, seed: int = 0,
           kernel: CardKernel | None = None, verify: bool = True,
           after: Callable[[int], None] | None = None) -> ReplayResult:
    """Run `trace` on `mgr`. With payload, writes deterministic data; with `kernel`, every
    updated tensor gets new bytes on the card first; `verify` checks every read against what
    was last written or updated (AssertionError on a mismatch); `after(i)` runs after record i
    (e.g. `lambda i: mgr.check()`)."""
    payload = mgr.payload
    handles: dict[int, TensorHandle] = {}
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

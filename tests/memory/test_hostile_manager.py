"""The memory manager's public API under hostile arguments: every bad handle, size or buffer is
refused with the exact error class and a message that says what to do, and the manager stays
consistent (``check()``) after each refusal.

The host store's out-of-memory rule and concurrent use are issue 18's (pyhost/memory/); these
tests do not depend on them. Two defects found here (a None between tensors in need_in_device,
an unknown precision name) were fixed in pyhost/memory/ by issue 18.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pyhost.driver import PcieDriver
from pyhost.memory import MemoryManager
from pyhost.memory.errors import (
    CardCapacityError,
    DoubleFreeError,
    FreedTensorError,
    HostAllocationError,
    MemoryManagerError,
    NeverWrittenError,
    PrecisionError,
    TensorSizeError,
    UnknownTensorError,
)
from pyhost.model_card import ModelCard


@pytest.fixture
def mgr() -> MemoryManager:
    return MemoryManager(PcieDriver(ModelCard(1 << 20, host_size=8 << 20)))


def _other_manager_handle(m: MemoryManager) -> Any:
    return MemoryManager(PcieDriver(ModelCard(1 << 20, host_size=8 << 20))).allocate_tensor(64)


CASES: list[tuple[str, Callable[[MemoryManager, Any, Any], Any], type[Exception], str]] = [
    ("size -1", lambda m, t, u: m.allocate_tensor(-1), TensorSizeError, "-1 is not a"),
    ("size True", lambda m, t, u: m.allocate_tensor(True), TensorSizeError, "True is not a"),
    ("size 1.5", lambda m, t, u: m.allocate_tensor(1.5), TensorSizeError, "1.5"),
    ("size '64'", lambda m, t, u: m.allocate_tensor("64"), TensorSizeError, "'64'"),
    ("size None", lambda m, t, u: m.allocate_tensor(None), TensorSizeError, "None"),
    ("size 2**62", lambda m, t, u: m.allocate_tensor(1 << 62), HostAllocationError,
     "could not be allocated"),
    ("write past the end", lambda m, t, u: m.write_tensor(t, 128, np.zeros(128, np.uint8)),
     TensorSizeError, "the allocation holds 64 bytes"),
    ("write a short source", lambda m, t, u: m.write_tensor(t, 64, np.zeros(8, np.uint8)),
     TensorSizeError, "host_src holds 8 bytes, the write needs 64"),
    ("write size -1", lambda m, t, u: m.write_tensor(t, -1, b""), TensorSizeError, "-1"),
    ("write size True", lambda m, t, u: m.write_tensor(t, True, b"x"), TensorSizeError, "True"),
    ("write a str", lambda m, t, u: m.write_tensor(t, 4, "abcd"), TypeError,
     "HostBuffer, numpy array or bytes"),
    ("read never written", lambda m, t, u: m.read_tensor(u, 64, np.zeros(64, np.uint8)),
     NeverWrittenError, "write_tensor (or tensor_updated) it first"),
    ("need an int", lambda m, t, u: m.need_in_device(5), UnknownTensorError,
     "not a tensor handle"),
    ("need nothing", lambda m, t, u: m.need_in_device(None), TypeError,
     "at least one tensor"),
    ("updated a str", lambda m, t, u: m.tensor_updated("x"), UnknownTensorError,
     "not a tensor handle"),
    ("foreign handle", lambda m, t, u: m.need_in_device(_other_manager_handle(m)),
     UnknownTensorError, "of this memory manager"),
    ("larger than the card", lambda m, t, u: m.need_in_device(m.allocate_tensor(2 << 20)),
     CardCapacityError, "more than its 1048576-byte capacity"),
]


@pytest.mark.parametrize(("call", "exc", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_arguments_are_refused(mgr: MemoryManager, call: Any, exc: type[Exception],
                                   words: str) -> None:
    t = mgr.allocate_tensor(64)
    u = mgr.allocate_tensor(64)
    mgr.write_tensor(t, 64, np.arange(64, dtype=np.uint8))
    with pytest.raises(exc) as e:
        call(mgr, t, u)
    assert words in str(e.value), str(e.value)
    mgr.check()
    # and the manager still works
    (addr,) = mgr.need_in_device(t)
    assert isinstance(addr, int)
    out = np.zeros(64, np.uint8)
    mgr.read_tensor(t, 64, out)
    assert (out == np.arange(64)).all()


def test_freed_handles(mgr: MemoryManager) -> None:
    t = mgr.allocate_tensor(64)
    mgr.free_tensor(t)
    with pytest.raises(DoubleFreeError, match="already freed"):
        mgr.free_tensor(t)
    for call in (lambda: mgr.need_in_device(t), lambda: mgr.write_tensor(t, 1, b"x"),
                 lambda: mgr.read_tensor(t, 1, bytearray(1)), lambda: mgr.tensor_updated(t)):
        with pytest.raises(FreedTensorError, match="was freed"):
            call()
    mgr.check()


def test_every_error_is_a_manager_error_or_a_type_error(mgr: MemoryManager) -> None:
    """The error classes callers can catch: the family, or TypeError for a wrong kind of
    argument."""
    for _, call, exc, _ in CASES:
        assert issubclass(exc, (MemoryManagerError, TypeError))
        del call


def test_need_in_device_with_a_gap_is_refused(mgr: MemoryManager) -> None:
    """need_in_device(t, None, t) answers per argument or refuses: it refuses, naming the gap;
    trailing Nones (the unused optional arguments) are fine."""
    t = mgr.allocate_tensor(64)
    mgr.write_tensor(t, 64, np.zeros(64, np.uint8))
    with pytest.raises(TypeError, match="argument 2 is None but a tensor follows"):
        mgr.need_in_device(t, None, t)
    mgr.check()
    assert len(mgr.need_in_device(t, None, None)) == 1
    assert len(mgr.need_in_device(t, t, None)) == 2


def test_an_unknown_precision_is_a_clear_error(mgr: MemoryManager) -> None:
    with pytest.raises(PrecisionError, match="unknown codec 'fp4'"):
        mgr.allocate_tensor(64, precision="fp4")
    with pytest.raises(PrecisionError, match="is not a codec"):
        mgr.allocate_tensor(64, precision=16)   # type: ignore[arg-type]
    t = mgr.allocate_tensor(64, precision="fp16")   # a name of a known codec works
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    mgr.write_tensor(t, 64, x.view(np.uint8))
    mgr.need_in_device(t)
    out = np.zeros(16, np.float32)
    mgr.read_tensor(t, 64, out.view(np.uint8))
    assert np.allclose(out, x, atol=1e-3)
    assert mgr.precision_report(t).codec == "fp16"   # type: ignore[union-attr]
    mgr.check()

"""Exceptions of the memory manager: one class per kind of bad call, each message says what to do.

Every error derives from `MemoryManagerError`. Out-of-memory has exactly two causes (the seed's
contract): host allocation failed (`HostAllocationError`) or the distinct tensors of one
need-in-device call exceed the card's capacity (`CardCapacityError`); both are `OutOfMemoryError`.
"""

from __future__ import annotations


class MemoryManagerError(Exception):
    """Base class of memory-manager errors."""


class OutOfMemoryError(MemoryManagerError, MemoryError):
    """Out of memory, for one of the two reasons the contract allows (see the subclasses)."""


class HostAllocationError(OutOfMemoryError):
    """The host copy of a tensor (or a staging buffer) could not be allocated."""


class CardCapacityError(OutOfMemoryError):
    """The distinct tensors of one need_in_device call do not fit the card together."""


class TensorHandleError(MemoryManagerError, ValueError):
    """A tensor handle that this manager cannot use."""


class UnknownTensorError(TensorHandleError):
    """Not a handle this manager returned (another manager's, or not a TensorHandle at all)."""


class FreedTensorError(TensorHandleError):
    """A handle used after free_tensor."""


class DoubleFreeError(FreedTensorError):
    """free_tensor on a handle that was already freed."""


class TensorSizeError(MemoryManagerError, ValueError):
    """A size that is negative, larger than the allocation, or not what the call needs."""


class NeverWrittenError(MemoryManagerError):
    """read_tensor of a tensor that neither the host wrote nor the card updated."""


class NotOnCardError(MemoryManagerError):
    """tensor_updated on a tensor that is not (validly) on the card."""


class PrecisionError(MemoryManagerError, ValueError):
    """A reduced-precision opt-in that cannot work for this tensor or this data."""


class ScheduleError(MemoryManagerError, ValueError):
    """A schedule hint that names tensors this manager cannot resolve."""


class TraceError(MemoryManagerError, ValueError):
    """A malformed or inconsistent trace record (record / replay)."""


class ConcurrentUseError(MemoryManagerError, RuntimeError):
    """A manager call started while another thread was inside a call of the same manager.

    The manager is not thread-safe (the addresses need_in_device returns hold only until the
    next call, whichever thread makes it): it refuses the overlapping call, changing nothing,
    instead of corrupting its state."""

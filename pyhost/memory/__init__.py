"""The memory manager (RiscVDNN API): transparent swapping of tensors between host and card.

See docs/memory-manager.md. The main entry points are re-exported here.
"""

from pyhost.memory.codec import Bf16, Codec, Fp16, Int8Affine, PrecisionReport
from pyhost.memory.errors import (
    CardCapacityError,
    ConcurrentUseError,
    DoubleFreeError,
    FreedTensorError,
    HostAllocationError,
    MemoryManagerError,
    NeverWrittenError,
    NotOnCardError,
    OutOfMemoryError,
    PrecisionError,
    ScheduleError,
    TensorHandleError,
    TensorSizeError,
    TraceError,
    UnknownTensorError,
)
from pyhost.memory.handle import TensorHandle
from pyhost.memory.manager import DEFAULT_POLICY, ManagerStats, MemoryManager
from pyhost.memory.policies import (
    POLICIES,
    BeladyPolicy,
    EvictionPolicy,
    GreedyDualSizePolicy,
    LruPolicy,
    NaivePolicy,
)
from pyhost.memory.transport import DryRunDriver

__all__ = [
    "DEFAULT_POLICY", "POLICIES", "Bf16", "BeladyPolicy", "CardCapacityError", "Codec",
    "ConcurrentUseError", "DoubleFreeError", "DryRunDriver", "EvictionPolicy", "Fp16",
    "FreedTensorError",
    "GreedyDualSizePolicy", "HostAllocationError", "Int8Affine", "LruPolicy", "ManagerStats",
    "MemoryManager", "MemoryManagerError", "NaivePolicy", "NeverWrittenError", "NotOnCardError",
    "OutOfMemoryError", "PrecisionError", "PrecisionReport", "ScheduleError", "TensorHandle",
    "TensorHandleError", "TensorSizeError", "TraceError", "UnknownTensorError",
]

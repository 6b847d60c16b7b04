"""The accelerator's build configuration: `AccelConfig`, its defaults, and the unit parameters that
the timing estimate and the RTL share.

One small, dependency-free config in the manner of VTA's ``vta_config.json``: the RTL's parameter
lists take their defaults from ``rtl/include/accel_cfg.vh`` (generated from this module by
``python -m pyhost.spec.gen``), the card reports the build it has in the ACC_CFG_* registers, the
driver reads them into an `AccelConfig`, and the compiler generates code for one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pyhost.spec.isa import Buffer, element_bytes

# --- the default build (AccelConfig's defaults; reported in ACC_CFG_*) --------------------------
#: GEMM array size: an N x N int8 multiply per cycle (N*N MACs).
DEFAULT_N = 8
#: Scratchpad depths in rows (elements): INP rows are N int8, WGT rows N*N int8, ACC rows N int32.
DEFAULT_INP_DEPTH = 8192
DEFAULT_WGT_DEPTH = 1024
DEFAULT_ACC_DEPTH = 4096
#: Instructions each unit's queue holds (the unit holds one more while it runs it).
DEFAULT_QUEUE_DEPTH = 8

# --- unit parameters that are not reported in registers ------------------------------------------
#: Bits of the card's AXI data bus (one beat; the accelerator's memory ports).
DATA_WIDTH = 512
BEAT_BYTES = DATA_WIDTH // 8
#: Longest burst (beats) of the load and store units: one burst per memory row, split above this.
MEM_MAX_BURST = 16
#: Bursts the load unit keeps in flight, and write bursts the store unit leaves awaiting B.
MEM_MAX_OUTSTANDING = 4
#: Longest instruction-fetch read burst (beats).
FETCH_MAX_BURST = 8


def fetch_buffer_beats(max_burst: int = FETCH_MAX_BURST) -> int:
    """The fetch unit's prefetch buffer (beats) for a MAX_BURST of ``max_burst``: two bursts,
    at least 16 beats, rounded up to a power of two (rtl/accel/accel_fetch.v derives its
    BUF_AW from its MAX_BURST parameter the same way; the performance model uses this)."""
    beats = max(2 * max_burst, 16)
    return 1 << (beats - 1).bit_length()


#: The default build's prefetch buffer (beats).
FETCH_BUFFER_BEATS = fetch_buffer_beats()


@dataclass(frozen=True)
class AccelConfig:
    """The accelerator's build parameters (the RTL's parameters, reported in ACC_CFG_*)."""

    n: int = DEFAULT_N
    inp_depth: int = DEFAULT_INP_DEPTH
    wgt_depth: int = DEFAULT_WGT_DEPTH
    acc_depth: int = DEFAULT_ACC_DEPTH
    queue_depth: int = DEFAULT_QUEUE_DEPTH

    def __post_init__(self) -> None:
        for name in ("n", "inp_depth", "wgt_depth", "acc_depth", "queue_depth"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"AccelConfig.{name} must be a positive integer, got {v!r}")

    def depth(self, buf: Buffer) -> int:
        """Rows of the scratchpad a LOAD/STORE buffer names."""
        return {Buffer.INP: self.inp_depth, Buffer.WGT: self.wgt_depth,
                Buffer.ACC: self.acc_depth, Buffer.ACC8: self.acc_depth}[Buffer(buf)]

    def element_bytes(self, buf: Buffer) -> int:
        return element_bytes(buf, self.n)


#: The default build.
DEFAULT_CONFIG = AccelConfig()

#: The configuration's fields, in the order of the ACC_CFG_* registers' names.
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(AccelConfig))

#: RTL parameter defaults the generated include defines: `ACCEL_<NAME>` -> value.
RTL_DEFAULTS: dict[str, int] = {
    "N": DEFAULT_N,
    "INP_DEPTH": DEFAULT_INP_DEPTH,
    "WGT_DEPTH": DEFAULT_WGT_DEPTH,
    "ACC_DEPTH": DEFAULT_ACC_DEPTH,
    "QUEUE_DEPTH": DEFAULT_QUEUE_DEPTH,
    "DATA_WIDTH": DATA_WIDTH,
    "MEM_MAX_BURST": MEM_MAX_BURST,
    "MEM_MAX_OUTSTANDING": MEM_MAX_OUTSTANDING,
    "FETCH_MAX_BURST": FETCH_MAX_BURST,
}

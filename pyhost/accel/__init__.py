"""The accelerator in the device stack.

- `model`: the bit-exact functional model (`AccelModel`) that runs instruction streams of the ISA
  in pyhost/spec/isa.py exactly as the RTL under rtl/accel/ does (scratchpads and card memory agree
  bit for bit on race-free programs);
- `timing`: its timing rules without data (busy cycles per instruction, a static estimate of a
  stream), which the compiler's tiling search also uses;
- `layout`: the tensor layouts in card memory and packing between them and numpy;
- `abi`: how a compiled program meets the card (slots, alignment, `IoSpec`, `AccelImage`);
- `control`: the driver's accelerator calls (`AccelControl`, part of `pyhost.driver.PcieDriver`).

The configuration (`AccelConfig`) is part of the spec, `pyhost.spec.accel`.
"""

from pyhost.accel.model import AccelModel, AccelResult
from pyhost.spec.accel import AccelConfig

__all__ = ["AccelConfig", "AccelModel", "AccelResult"]

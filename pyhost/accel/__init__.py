"""The accelerator on the host side: its bit-exact functional model and a random program generator.

`model.AccelModel` runs instruction streams of the ISA in pyhost/spec/isa.py exactly as the RTL
under rtl/accel/ does (the scratchpads and card memory agree bit for bit on race-free programs);
`randprog` generates constrained-random programs for comparing the two.
"""

from pyhost.accel.model import AccelModel, AccelResult
from pyhost.spec.accel import AccelConfig

__all__ = ["AccelConfig", "AccelModel", "AccelResult"]

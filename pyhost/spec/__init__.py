"""The hardware/software contract, defined once in Python.

Everything that both the RTL and the host software must agree on (DRAM timing defaults and
command codes today; register maps, descriptor layouts and the ISA later) lives here. The
Verilog include files under rtl/include/ are generated from these modules by
``python -m pyhost.spec.gen`` and a test fails when they are stale.
"""

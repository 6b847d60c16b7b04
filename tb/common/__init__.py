"""Shared testbench glue: the one simulator wrapper (simulator.py), clock and reset, the
host-memory model, RtlCard and waveforms."""

"""Shared testbench glue: the one simulator runner wrapper and BFM helpers."""

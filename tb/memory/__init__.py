"""Checks of the memory manager: trace replay with byte checks (`replay`) and the exhaustive
optimum that validates the lower bound (`optimum`)."""

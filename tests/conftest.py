"""Session-wide pytest glue: the long tests first, then the RTL benches, and a closing line
per simulator, so a run shows what each one did."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tb.common.simulator import SIMULATORS
from tests import durations


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: the tests recorded in tests/data/durations.json by their time, then the
    other RTL benches, then the rest; dealt round-robin to the workers. ``make test``'s
    work-stealing scheduler (pytest-xdist ``--dist worksteal``) first gives each of its n
    workers one contiguous n-th of the collection, so the order is laid out as n such runs, each
    longest first: every worker starts on a long simulation, the quick Python tests fill the
    gaps at the end, and a worker that runs dry steals the other's shortest tests."""
    known = durations.load()
    items.sort(key=lambda it: (-known.get(it.nodeid, 0.0), it.get_closest_marker("rtl") is None))
    items[:] = durations.deal(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts: dict[str, Counter[str]] = {s: Counter() for s in SIMULATORS}
    for outcome in ("passed", "failed", "skipped", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if getattr(rep, "when", "call") not in ("call", "setup"):
                continue
            if outcome == "passed" and rep.when != "call":
                continue
            for sim in SIMULATORS:
                if f"[{sim}" in nodeid or f"-{sim}]" in nodeid or f"-{sim}-" in nodeid:
                    counts[sim][outcome] += 1
    if not any(counts.values()):
        return
    terminalreporter.section("RTL regression by simulator")
    for sim in SIMULATORS:
        c = counts[sim]
        parts = [f"{c[k]} {k}" for k in ("passed", "failed", "error", "skipped") if c[k]]
        terminalreporter.write_line(f"{sim:10} {', '.join(parts) or 'no runs'}")

"""Session-wide pytest glue: the RTL benches first (they are the long ones), and a closing line
per simulator, so a run shows what each one did."""

from __future__ import annotations

from collections import Counter

import pytest

from tb.common.simulator import SIMULATORS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The RTL benches run first: under ``make test``'s work-stealing scheduler (pytest-xdist
    ``--dist worksteal``) the long simulations start at once on every worker and the quick
    Python tests fill the gaps at the end, instead of one simulation running alone last."""
    items.sort(key=lambda it: it.get_closest_marker("rtl") is None)


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

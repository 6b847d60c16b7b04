"""Record the longest tests' durations for the scheduling in tests/conftest.py.

``python -m tests.durations LOG`` reads the "slowest durations" section that ``make test`` prints
(pytest ``--durations``) from a saved log of a full run and writes tests/data/durations.json:
call time in seconds per test id. The file only orders the tests (longest first, so that the
two workers never end on a long simulation started late); a stale or missing entry costs time,
never correctness.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

OUT = Path(__file__).resolve().parent / "data" / "durations.json"
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s call\s+(\S+)\s*$")


def parse(text: str) -> dict[str, float]:
    """{test id: call seconds} from pytest's --durations lines."""
    found = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            found[m[2]] = float(m[1])
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def load() -> dict[str, float]:
    return json.loads(OUT.read_text()) if OUT.exists() else {}


def deal(items: list[T], workers: int) -> list[T]:
    """Lay out `items` (longest first) as `workers` contiguous runs dealt round-robin, each run
    longest first: pytest-xdist's work-stealing scheduler gives worker k the k-th contiguous
    share of the collection, so every worker starts on one of the longest tests."""
    if workers <= 1:
        return list(items)
    runs = [items[w::workers] for w in range(workers)]
    return [it for run in runs for it in run]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = parse(Path(argv[0]).read_text())
    if not found:
        print(f"{argv[0]}: no --durations lines found", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {OUT} ({len(found)} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

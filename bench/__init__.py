"""Benchmarks (`make bench`, `python -m bench NAME`); JSON results in bench/results/."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def record(key: str, value: Any) -> None:
    """Merge ``{key: value}`` into the JSON file named by $BENCH_OUT: what a cocotb bench running
    inside the simulator hands back to the runner that started it."""
    path = Path(os.environ["BENCH_OUT"])
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2))

"""The sweep's progress bar: points done, running, failed and the estimated time left.

On a terminal one line redrawn in place; otherwise (a log, CI) a line whenever the counts change
and at most every ``every_s`` seconds while they do not.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from tb.sweep.engine import Progress


def _clock(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def render(p: Progress, width: int = 24) -> str:
    finished = p.done + p.failed
    fill = int(width * finished / p.total) if p.total else width
    bar = "#" * fill + "-" * (width - fill)
    parts = [f"[{bar}] {finished}/{p.total} points", f"done {p.done}"
             + (f" ({p.cached} cached)" if p.cached else ""), f"running {p.running}",
             f"failed {p.failed}"]
    if p.compiling:
        parts.append(f"compiling {p.compiling}")
    parts.append(f"elapsed {_clock(p.elapsed_s)}")
    parts.append(f"ETA {_clock(p.eta_s)}" if finished < p.total else "finished")
    return "  ".join(parts)


class ProgressBar:
    """A callable for run_sweep's ``on_progress``."""

    def __init__(self, stream: IO[str] | None = None, every_s: float = 10.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every_s = every_s
        self._last = ""
        self._last_counts: tuple[int, ...] = ()
        self._last_t = 0.0

    def __call__(self, p: Progress) -> None:
        line = render(p)
        if self.tty:
            pad = max(0, len(self._last) - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()
            self._last = line
            return
        counts = (p.done, p.failed, p.running, p.compiling)
        now = time.monotonic()
        if counts != self._last_counts or now - self._last_t >= self.every_s:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_counts, self._last_t = counts, now

    def close(self) -> None:
        if self.tty and self._last:
            self.stream.write("\n")
            self.stream.flush()

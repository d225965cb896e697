"""A small progress bar for the command line (on a terminal only)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """``[#####.....] 12/64 partitions  1.2M rows  0.5M rows/s`` on stderr, if a terminal."""

    def __init__(self, total: int, what: str = "partitions", stream: TextIO | None = None) -> None:
        self.total = total
        self.what = what
        self.stream = stream or sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.perf_counter()
        self.done = 0
        self.rows = 0

    def update(self, done: int, rows: int) -> None:
        """Show ``done`` steps of ``total`` and ``rows`` rows so far."""
        self.done, self.rows = done, rows
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        if not self.total:  # the number of steps is not known in advance
            self.stream.write(f"\r{done} {self.what} done ({elapsed:.1f}s)")
            self.stream.flush()
            return
        width = 30
        filled = width * done // self.total
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {self.what}  "
            f"{_human(rows)} rows  {_human(rows / elapsed)} rows/s"
        )
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


class PercentBar(ProgressBar):
    """``[#####.....] 45% sort``: a phase only DuckDB's estimate measures."""

    def update(self, done: int, rows: int) -> None:
        """Show ``done`` percent (``rows`` is ignored)."""
        if self.enabled:
            filled = 30 * min(done, 100) // 100
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done:3d}% {self.what}")
            self.stream.flush()


def _human(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"

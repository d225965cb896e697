"""Progress bars for the command line, drawn on a terminal only.

Drawn by `rich <https://rich.readthedocs.io>`_.

The console script routes stderr through a filter pipe (:mod:`sqlfeed.cli.native`), so a
bar cannot ask ``sys.stderr.isatty()``: it draws on the terminal that
:func:`sqlfeed.cli.native.terminal` names (decided before the pipe was put in place), and
draws nothing when there is none (output to a file, a pipe or a CI log).
"""

from __future__ import annotations

import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from sqlfeed.cli.native import terminal

__all__ = ["PercentBar", "ProgressBar", "RowsBar", "human"]


class ProgressBar:
    """``━━━━━━━━╺━━━━━━ 12/64 partitions  1.2M rows  0.5M rows/s  0:00:03`` on the terminal.

    Args:
        total: the number of steps; 0: not known in advance (a count of steps done).
        what: what a step is, shown after the count.
        stream: where to draw (default: the terminal, if there is one; a stream that is
            not a terminal: no bar).
        show_rows: show the rows so far beside the count (False when a step is a row).
    """

    def __init__(
        self,
        total: int,
        what: str = "partitions",
        stream: TextIO | None = None,
        *,
        show_rows: bool = True,
    ) -> None:
        self.what = what
        self.show_rows = show_rows
        self.stream = terminal() if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = isatty is not None and bool(isatty())
        self.started = time.perf_counter()
        self.done = 0
        self.rows = 0
        self._total = total
        self._progress: Progress | None = None
        self._task = TaskID(0)
        if self.enabled:
            console = Console(file=self.stream, force_terminal=True, highlight=False)
            self._progress = Progress(*self._columns(), console=console, refresh_per_second=5)
            self._task = self._progress.add_task(what, total=total or None, rows="", rate="")
            self._progress.start()

    def _columns(self) -> tuple[BarColumn | TextColumn | TimeElapsedColumn, ...]:
        count = "{task.completed}/{task.total}" if self._total else "{task.completed}"
        return (
            BarColumn(bar_width=30),
            TextColumn(count + " {task.description}"),
            TextColumn("{task.fields[rows]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
        )

    @property
    def total(self) -> int:
        """The number of steps (0: not known)."""
        return self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = value
        if self._progress is not None:
            self._progress.update(self._task, total=value or None)

    def update(self, done: int, rows: int) -> None:
        """Show ``done`` steps of ``total`` and ``rows`` rows so far."""
        self.done, self.rows = done, rows
        if self._progress is None:
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self._progress.update(
            self._task,
            completed=done,
            rows=f"{human(rows)} rows" if rows and self.show_rows else "",
            rate=f"{human(rows / elapsed)} rows/s" if rows else "",
        )

    def close(self) -> None:
        """Draw the bar once more as it ends, and leave it on its own line."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class PercentBar(ProgressBar):
    """``━━━━━━━━╺━━━━━━  45% sort``: a phase only DuckDB's estimate measures."""

    def _columns(self) -> tuple[BarColumn | TextColumn | TimeElapsedColumn, ...]:
        return (
            BarColumn(bar_width=30),
            TextColumn("{task.percentage:>3.0f}% {task.description}"),
            TimeElapsedColumn(),
        )

    def update(self, done: int, rows: int) -> None:
        """Show ``done`` percent (``rows`` is ignored)."""
        self.done = done
        if self._progress is not None:
            self._progress.update(self._task, completed=min(done, 100))


def human(value: float) -> str:
    """``value`` in three significant figures or so: ``999``, ``57.5k``, ``1.0M``.

    >>> [human(v) for v in (0, 999, 999_949, 999_950, 1_000_000, 57_512, 2.5e9)]
    ['0', '999', '999.9k', '1.0M', '1.0M', '57.5k', '2.5G']
    """
    if round(value) < 1000:
        return f"{value:.0f}"
    for unit, size in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if round(value / size, 1) < 1000 or unit == "G":
            return f"{value / size:.1f}{unit}"
    raise AssertionError("unreachable")


class _RowsColumn(ProgressColumn):
    """``57.5k/200.0k rows``: the rows so far and, once known, the rows expected."""

    def render(self, task: Task) -> Text:
        total = f"/{human(task.total)}" if task.total else ""
        return Text(f"{human(task.completed)}{total} {task.description}")


class _TimeLeftColumn(ProgressColumn):
    """``ETA 0:01:05``: the time left at the run's mean rate so far (nothing before a row)."""

    def render(self, task: Task) -> Text:
        elapsed, done, total = task.elapsed, task.completed, task.total
        if not (elapsed and done and total) or done >= total:
            return Text("")
        left = int(elapsed * (total - done) / done)
        return Text(f"ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}")


class RowsBar(ProgressBar):
    """``━━━━╺━━━━ 57.5k/200.0k rows  12.1k rows/s  0:00:04 ETA 0:00:12``: rows written.

    The ``progress(rows, expected)`` callback of the table sink's jobs: the total is set
    when a call first knows it (the count column shows it from then on), and the time
    left is estimated from the rows so far.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(0, what="rows", stream=stream, show_rows=False)

    def _columns(self) -> tuple[ProgressColumn, ...]:  # type: ignore[override]
        return (
            BarColumn(bar_width=30),
            _RowsColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            _TimeLeftColumn(),
        )

    def __call__(self, rows: int, expected: int | None) -> None:
        if expected and not self.total:
            self.total = expected
        self.update(rows, rows)

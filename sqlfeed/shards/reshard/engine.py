"""Reshard's DuckDB session: SQL rendering, error wrapping, settings, progress and monitor.

:func:`session` sets DuckDB up for a run (temp folder, memory limit, threads, the
attached work database) and puts a borrowed connection back as it was afterwards; the
:class:`Monitor` samples the temp folder (bytes spilled) and DuckDB's query progress.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import EngineError, SqlfeedError, get_dialect
from sqlfeed.io import driver_message
from sqlfeed.shards.reshard.options import ReshardOptions

ProgressCallback = Callable[[str, int, int], None]


# -- SQL ----------------------------------------------------------------------------------


def ident(name: str) -> exp.Identifier:
    """A quoted identifier."""
    return exp.to_identifier(name, quoted=True)


def col(name: str) -> exp.Column:
    """A column by its quoted name."""
    return exp.column(ident(name))


def literal(value: str) -> str:
    """A string as a DuckDB literal."""
    rendered: str = exp.Literal.string(value).sql(dialect="duckdb")
    return rendered


def render(tree: exp.Expr) -> str:
    """The expression as DuckDB SQL."""
    rendered: str = get_dialect("duckdb").sql(tree)
    return rendered


# -- errors -------------------------------------------------------------------------------


_DRIVER_MODULES = frozenset(("duckdb", "_duckdb"))
"""The top-level modules DuckDB's Python errors are defined in."""


def _is_duckdb_error(err: BaseException) -> bool:
    return (type(err).__module__ or "").split(".")[0] in _DRIVER_MODULES


@contextlib.contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """DuckDB, OS and Arrow errors inside, raised as ``EngineError("duckdb failed <what>")``."""
    try:
        yield
    except SqlfeedError:
        raise
    except Exception as err:
        if _is_duckdb_error(err) or isinstance(err, OSError | pa.ArrowException):
            raise EngineError(f"duckdb failed {what}: {driver_message(err)}") from None
        raise


# -- settings -----------------------------------------------------------------------------


class Settings:
    """DuckDB settings for the run, put back as they were on a connection reshard borrowed."""

    def __init__(self, engine: duckdb.DuckDBPyConnection, restore: bool) -> None:
        self.engine = engine
        self.restore = restore
        self._old: dict[str, Any] = {}

    def set(self, name: str, value: Any) -> None:
        """Set ``name`` (remembering its value first when restoring)."""
        if self.restore and name not in self._old:
            row = self.engine.execute(f"SELECT current_setting({literal(name)})").fetchall()
            self._old[name] = row[0][0]
        rendered = literal(value) if isinstance(value, str) else str(value).lower()
        self.engine.execute(f"SET {name} = {rendered}")

    def put_back(self) -> None:
        """Set the remembered values again (errors ignored)."""
        for name, value in reversed(list(self._old.items())):
            with contextlib.suppress(Exception):
                rendered = literal(value) if isinstance(value, str) else str(value).lower()
                self.engine.execute(f"SET {name} = {rendered}")
        self._old.clear()


@contextlib.contextmanager
def session(
    borrowed: duckdb.DuckDBPyConnection | None,
    *,
    owned: bool,
    options: ReshardOptions,
    work: Path,
    alias: str,
    reporter: Reporter,
) -> Iterator[tuple[duckdb.DuckDBPyConnection, Monitor]]:
    """DuckDB set up for a run, with ``work/extract.duckdb`` attached as ``alias``.

    Args:
        borrowed: the query's DuckDB connection, or ``None`` for a new in-memory one.
        owned: reshard opened the source itself (its settings need not be put back).
        options: the run's memory limit, threads and temp folder.
        work: the work folder (extracted rows; spill files unless DuckDB keeps its own).
        alias: the name the work database is attached under.
        reporter: where the monitor reports DuckDB's progress.

    Yields:
        The connection and the running monitor.
    """
    spill_here = work / "spill"
    if borrowed is None:
        engine = duckdb.connect()
        settings = Settings(engine, restore=False)
        spill: Path | None = spill_here
    else:
        engine = borrowed
        settings = Settings(engine, restore=not owned)
        # A borrowed database keeps its temp folder unless one is asked for: it may have
        # spilled there already, and it outlives this run.
        spill = spill_here if (owned or options.temp_dir is not None) else None
    attached = False
    monitor: Monitor | None = None
    try:
        with engine_errors("setting up"):
            if spill is not None:
                settings.set("temp_directory", str(spill))
            if options.memory_limit is not None:
                settings.set("memory_limit", options.memory_limit)
            if options.threads is not None:
                settings.set("threads", options.threads)
            settings.set("preserve_insertion_order", True)
            settings.set("enable_progress_bar", True)
            settings.set("enable_progress_bar_print", False)
            if spill is None:
                row = engine.execute("SELECT current_setting('temp_directory')").fetchall()
                spill = Path(str(row[0][0])) if row and row[0][0] else None
            # READ_WRITE: the source's own database may be a file sqlfeed opened read-only.
            engine.execute(
                f"ATTACH {literal(str(work / 'extract.duckdb'))} AS {alias} (READ_WRITE)"
            )
            attached = True
        monitor = Monitor(engine, spill, reporter)
        yield engine, monitor
    finally:
        if monitor is not None:
            monitor.stop()
        if attached:
            with contextlib.suppress(Exception):
                engine.execute(f"DETACH {alias}")
        settings.put_back()
        if borrowed is None:
            engine.close()


# -- progress and the monitor -------------------------------------------------------------


class Reporter:
    """Progress for the current phase only (the monitor thread may report late)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.phase: str | None = None
        self._lock = threading.Lock()

    def start(self, phase: str) -> None:
        """Make ``phase`` the current one."""
        with self._lock:
            self.phase = phase

    def report(self, phase: str, done: int, total: int) -> None:
        """Call the callback, if ``phase`` is still the current one."""
        if self.callback is None:
            return
        with self._lock:
            if phase == self.phase:
                self.callback(phase, done, total)


def _folder_bytes(folder: Path | None) -> int:
    """Bytes on disk of the files in ``folder`` (not recursive; DuckDB's temp dir is flat)."""
    if folder is None:
        return 0
    total = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False):
                        stat = entry.stat(follow_symlinks=False)
                        total += min(stat.st_size, getattr(stat, "st_blocks", 0) * 512 or 2**62)
    except OSError:
        return 0
    return total


class Monitor:
    """Samples DuckDB's temp folder size (peak = bytes spilled) and its query progress."""

    def __init__(
        self,
        engine: duckdb.DuckDBPyConnection,
        spill: Path | None,
        reporter: Reporter,
        interval: float = 0.1,
    ) -> None:
        self.engine = engine
        self.spill = spill
        self.reporter = reporter
        self.interval = interval
        self.peak = 0
        self.percent_phase: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlfeed-reshard-monitor")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
            phase = self.percent_phase
            if phase is not None and self.reporter.callback is not None:
                try:
                    percent = float(self.engine.query_progress())
                except Exception:
                    continue
                if percent >= 0:
                    self.reporter.report(phase, min(100, int(percent)), 100)

    def sample(self) -> None:
        """Update the peak size of the temp folder."""
        self.peak = max(self.peak, _folder_bytes(self.spill))

    def stop(self) -> None:
        """Stop the thread and take a last sample."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()

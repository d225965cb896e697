"""Keep native libraries' panic reports off the CLI's stderr.

connectorx is written in Rust: when a query fails while it streams (a division by zero in
a PostgreSQL partition), Rust's panic hook prints a report of 3 to 100+ lines (with a
stack backtrace when ``RUST_BACKTRACE`` is set) straight to file descriptor 2, before
sqlfeed turns the panic into its one-line error. Python cannot silence that hook, so the
console script routes descriptor 2 through a pipe and drops those reports: the user sees
sqlfeed's own line and nothing else. ``SQLFEED_DEBUG=1`` leaves stderr alone.

A pipe is not a terminal, and the filter passes on whole lines only: so whether stderr is
a terminal is decided before the filter, and a progress bar draws on the terminal itself
(:func:`terminal`), beside the pipe.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TextIO

__all__ = ["drop_panic_reports", "filter_native_stderr", "set_terminal", "terminal"]

_TERMINAL: list[TextIO | None] = []
"""The terminal the console script found on stderr (see :func:`set_terminal`)."""


def set_terminal(stream: TextIO | None) -> None:
    """Say where the progress bars draw.

    The terminal stderr was before :func:`filter_native_stderr` replaced it with a pipe, or
    None (no terminal).
    """
    _TERMINAL[:] = [stream]


def terminal() -> TextIO | None:
    """The terminal progress bars may draw on, or None.

    What :func:`set_terminal` said (the console script); otherwise ``sys.stderr`` if it
    is a terminal (the command line run in-process, as by tests).
    """
    if _TERMINAL:
        return _TERMINAL[0]
    isatty = getattr(sys.stderr, "isatty", None)
    return sys.stderr if isatty is not None and isatty() else None


_NATIVE_LOG = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"  # glog/absl: I0000 00:00:... x.cc:1]
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow)"
)
"""TensorFlow's native start-up lines, written to descriptor 2 whatever its log level."""
_PANIC_START = "panicked at "
_PANIC_END = "note: "


def drop_panic_reports(lines: Iterable[str]) -> Iterator[str]:
    r"""``lines`` without Rust panic reports and TensorFlow's native log lines.

    A report starts with ``thread '...' panicked at ...`` and ends with its ``note: ...``
    line (or just before a line of sqlfeed's own, if it has no note).

    >>> list(drop_panic_reports([
    ...     "thread '<unnamed>' (7) panicked at src/a.rs:1:2:\n", "cx writer failed\n",
    ...     "stack backtrace:\n", "   0: f\n", "note: run with RUST_BACKTRACE=1\n", "\n",
    ...     "sqlfeed: engine error: division by zero\n"]))
    ['sqlfeed: engine error: division by zero\n']
    >>> list(drop_panic_reports([
    ...     "WARNING: All log messages before absl::InitializeLog() is called are written\n",
    ...     "I0000 00:00:1795696287.881569   10331 port.cc:153] oneDNN custom operations\n",
    ...     "sqlfeed: done\n"]))
    ['sqlfeed: done\n']
    """
    in_report = after_report = False
    held = 0  # blank lines held back: Rust prints one before a report too
    for line in lines:
        if _NATIVE_LOG.match(line):
            continue
        if not line.strip() and not in_report:
            if not after_report:
                held += 1
            continue
        if line.startswith("thread '") and _PANIC_START in line:
            in_report, held = True, 0
            continue
        if in_report and line.startswith("sqlfeed:"):
            in_report = False
        if in_report:
            if line.startswith(_PANIC_END):
                in_report, after_report = False, True
            continue
        after_report = False
        yield from ["\n"] * held
        held = 0
        yield line
    yield from ["\n"] * held


def filter_native_stderr() -> TextIO | None:
    """Route file descriptor 2 through :func:`drop_panic_reports` for this process.

    The filter runs in a daemon thread; at exit the original descriptor is put back and
    what is still in the pipe is written out.

    Returns:
        The terminal descriptor 2 was, as a stream that bypasses the filter (for progress
        bars), or None when it was no terminal.
    """
    if os.environ.get("SQLFEED_DEBUG"):
        return terminal()
    try:
        is_terminal = os.isatty(2)
        original = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:
        return None  # no descriptor 2 (or none to spare): nothing to filter
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as pipe:
            for line in drop_panic_reports(pipe):
                os.write(original, line.encode("utf-8", "replace"))

    thread = threading.Thread(target=pump, name="sqlfeed-stderr", daemon=True)
    thread.start()

    def restore() -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(original, 2)  # closes the pipe's last write end: the pump sees its end
        thread.join(timeout=2)

    atexit.register(restore)
    if not is_terminal:
        return None
    return os.fdopen(os.dup(original), "w", encoding="utf-8", errors="replace", buffering=1)

"""The console script keeps native libraries' panic reports (connectorx) off stderr."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from sqlfeed.cli.native import drop_panic_reports
from tests.conftest import get_engine
from tests.helpers.engines import POSTGRES_URL

PANIC = [
    "thread '<unnamed>' (31431) panicked at src/arrow_batch_iter.rs:162:39:\n",
    'cx writer failed: Source(PostgresError(... message: "division by zero" ...))\n',
    "stack backtrace:\n",
    "   0: __rustc::rust_begin_unwind\n",
    "             at ./ceval.c:4336:31\n",
    "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n",
    "\n",
]


def test_a_panic_report_is_dropped_and_everything_else_kept() -> None:
    lines = ["before\n", *PANIC, "sqlfeed: engine error: division by zero\n", "\n", "after\n"]
    assert list(drop_panic_reports(lines)) == [
        "before\n",
        "sqlfeed: engine error: division by zero\n",
        "\n",
        "after\n",
    ]


def test_a_report_without_a_note_ends_at_sqlfeeds_own_line() -> None:
    lines = [*PANIC[:4], "sqlfeed: engine error: boom\n"]
    assert list(drop_panic_reports(lines)) == ["sqlfeed: engine error: boom\n"]


def test_the_filter_drops_what_native_code_writes_to_descriptor_2() -> None:
    script = (
        "import os, sys\n"
        "from sqlfeed.cli.native import filter_native_stderr\n"
        "filter_native_stderr()\n"
        f"os.write(2, {''.join(PANIC).encode()!r})\n"
        "print('sqlfeed: engine error: division by zero', file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert run.returncode == 0
    assert run.stderr == "sqlfeed: engine error: division by zero\n"


@pytest.mark.engine
def test_a_postgres_error_mid_stream_is_one_stderr_line_from_the_console_script() -> None:
    get_engine("postgres")  # skips (or fails under CI=true) when the server is down
    env = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}
    env["RUST_BACKTRACE"] = "1"  # the longest report Rust prints
    sql = "SELECT g, 1/(g-50000) AS r FROM generate_series(1,100000) g"
    run = subprocess.run(
        [sys.executable, "-m", "sqlfeed", "sample", "--db", POSTGRES_URL, "--rows", "100000", sql],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "sqlfeed: engine error: postgres failed running the partition query: division by zero"
    ]


@pytest.mark.parametrize("terminal", [True, False], ids=["pty", "pipe"])
def test_the_terminal_is_found_before_the_filter_replaces_stderr(terminal: bool) -> None:
    """Progress bars draw on the terminal stderr was; the filter's pipe is none."""
    script = (
        "import os, sys\n"
        "from sqlfeed.cli.native import filter_native_stderr\n"
        "found = filter_native_stderr()\n"
        "print(found is not None and found.isatty(), os.isatty(2))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}
    leader, follower = pty.openpty() if terminal else os.pipe()  # (ours, the child's)
    try:
        run = subprocess.run(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert run.returncode == 0
    assert run.stdout.split() == [str(terminal), "False"]  # fd 2 itself is the filter's pipe

"""The console script on a real terminal (a tmux pane): its progress bar appears, and
what stays on the screen is exactly the bar, with no leftovers of earlier draws.

The console script routes stderr through the panic filter's pipe (tests/cli/test_native_stderr.py),
so the bar cannot find the terminal by asking stderr; and a bar that draws shorter text
over longer text leaves artefacts (``57.5k rows/ss/s``). tmux renders what a user sees.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

SQLFEED = Path(sys.executable).with_name("sqlfeed")
BAR = re.compile(
    r"^━{30} 16/16 partitions 1\.0M rows [\d.]+[kMG]? rows/s \d+:\d\d:\d\d$"
)  # rich's finished bar: 30 cells, the counts, the elapsed time; nothing after it


def _screen(command: str, folder: Path) -> list[str]:
    """The tmux pane's lines once ``command`` has finished in it."""
    session = f"sqlfeed-{uuid.uuid4().hex[:8]}"
    done = folder / "done"
    script = f"cd {shlex.quote(str(folder))} && {command}; touch {shlex.quote(str(done))}; sleep 60"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "20", script], check=True
    )
    try:
        deadline = time.monotonic() + 120
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists(), "the command did not finish in 120 s"
        shown = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    return [line.rstrip() for line in shown.splitlines() if line.strip()]


@pytest.mark.parametrize("debug", [False, True], ids=["console-script", "SQLFEED_DEBUG"])
def test_export_draws_its_bar_on_a_terminal_without_artefacts(tmp_path: Path, debug: bool) -> None:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id, range % 7 AS g FROM range(1000000)")
    env = "SQLFEED_DEBUG=1 " if debug else "env -u SQLFEED_DEBUG "
    command = (
        f"{env}{shlex.quote(str(SQLFEED))} export --db duckdb:///d.duckdb --out o.parquet "
        "-m 16 --strategy hash --key id 'SELECT id, g FROM t'"
    )
    lines = _screen(command, tmp_path)
    assert len(lines) == 2, lines
    assert BAR.match(lines[0]), lines
    assert lines[1] == "wrote 1000000 rows to o.parquet (parquet, 1 file(s), 16 hash partitions)"


def test_quiet_draws_no_bar_on_a_terminal(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(300000)")
    command = (
        f"env -u SQLFEED_DEBUG {shlex.quote(str(SQLFEED))} --quiet export --db duckdb:///d.duckdb "
        "--out o.parquet -m 8 'SELECT id FROM t'"
    )
    lines = _screen(command, tmp_path)
    assert lines == ["wrote 300000 rows to o.parquet (parquet, 1 file(s), 8 ctid partitions)"]


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(1000)")
    env = {k: v for k, v in os.environ.items() if k != "SQLFEED_DEBUG"}
    run = subprocess.run(
        [
            str(SQLFEED),
            "export",
            "--db",
            "duckdb:///d.duckdb",
            "--out",
            "o.parquet",
            "-m",
            "4",
            "SELECT id FROM t",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_reshard_draws_one_bar_per_phase(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "d.duckdb")) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS id FROM range(300000)")
    command = (
        f"env -u SQLFEED_DEBUG {shlex.quote(str(SQLFEED))} reshard --db duckdb:///d.duckdb "
        "--out rs --shuffle 3 --shard-rows 100000 'SELECT id FROM t'"
    )
    lines = _screen(command, tmp_path)
    bars = [line for line in lines if line.startswith("━")]
    expected = [
        r"━{30} 100% extract \d+:\d\d:\d\d",
        r"━{30} 100% sort \d+:\d\d:\d\d",
        r"━{30} 300000/300000 rows written  [\d.]+[kMG]? rows/s \d+:\d\d:\d\d",
    ]
    assert len(bars) == len(expected), lines
    for bar, pattern in zip(bars, expected, strict=True):
        assert re.fullmatch(pattern, bar), lines
    assert lines[len(bars)].startswith("wrote 300000 rows shuffled (seed 3) to rs"), lines

"""Time travel to a version or time a table never had is refused in one line, the same way
for Iceberg and Delta: a time before the first commit (delta-rs alone would read version 0),
a version past the latest or below 0 (delta-rs alone says "delta kernel error"); by URL and
by the command line's ``--as-of`` (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import sqlfeed
from tests.helpers.cli import run_cli
from tests.lake import builders as b

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BEFORE = "2001-01-01T00:00:00"
"""A time before any test table's first commit."""


def _data(start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + 10), pa.int64())})


@pytest.fixture
def delta_url(tmp_path: Path) -> str:
    """A Delta table of versions 0 (10 rows) and 1 (20 rows)."""
    path = tmp_path / "d"
    write_deltalake(str(path), _data(0))
    write_deltalake(str(path), _data(10), mode="append")
    return f"delta:///{path}?view=t"


@pytest.fixture
def iceberg_url(tmp_path: Path) -> str:
    """An Iceberg table of two snapshots (10, then 20 rows), by its metadata file."""
    catalog = b.iceberg_catalog(tmp_path / "ice")
    table = b.iceberg_table(catalog, "t", _data(0))
    b.append(table, _data(10))
    return f"iceberg:///{table.metadata_location.removeprefix('file://')}?view=t"


def _refused(url: str) -> str:
    with pytest.raises(sqlfeed.InvalidArgumentError) as caught:
        sqlfeed.connect(url)
    message = str(caught.value)
    assert "\n" not in message
    assert "kernel" not in message
    return message


def test_a_time_before_the_first_commit_is_refused_by_both_formats(
    delta_url: str, iceberg_url: str
) -> None:
    for url in (delta_url, iceberg_url):
        message = _refused(f"{url}&as_of={BEFORE}")
        assert "no version at" in message or "no snapshot at" in message, message
        assert "(it is younger" in message, message
        assert "give a later time" in message, message


def test_a_time_after_a_commit_reads_that_version(delta_url: str) -> None:
    path = delta_url.removeprefix("delta:///").partition("?")[0]
    for version, rows in ((0, 10), (1, 20)):
        log = os.path.join(path, "_delta_log", f"{version:020d}.json")
        committed = os.stat(log).st_mtime_ns // 1_000_000
        source = sqlfeed.connect(f"{delta_url}&as_of={committed}")
        assert source.scalar("SELECT COUNT(*) FROM t") == rows
        source.close()


@pytest.mark.parametrize("version", [99, 2, -1])
def test_a_version_the_table_never_had_names_the_latest(delta_url: str, version: int) -> None:
    message = _refused(f"{delta_url}&version={version}")
    assert f"has no version {version} (latest: 1)" in message, message


def test_the_command_line_as_of_refuses_the_same_in_one_line(
    delta_url: str, iceberg_url: str
) -> None:
    query = "SELECT * FROM t"
    for url, missing in (
        (delta_url, "has no version 99 (latest: 1)"),
        (iceberg_url, "no snapshot 99"),
    ):
        for as_of, message in ((BEFORE, "(it is younger"), ("99", missing)):
            run = run_cli(["count", "--db", url, "--as-of", as_of, query])
            assert run.code == 2, (url, as_of, run.err)
            lines = run.err.strip().splitlines()
            assert len(lines) == 1, (url, as_of, run.err)
            assert message in lines[0], (url, as_of, run.err)
    run = run_cli(["count", "--db", delta_url, "--as-of", "0", query])
    assert (run.code, run.out.split()) == (0, ["10"]), run.err

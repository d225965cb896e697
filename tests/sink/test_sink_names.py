"""Names the table sink leaves in the output database (issue #36 items 23 and 8).

The output's key is named for the output table, not for the staging table it was written
in (PostgreSQL named it ``sqlfeed_<time>_<hex>0_pkey`` after the rename), on every engine
whose catalog shows a name; and the sink's bookkeeping on MySQL/MariaDB holds no name a
collation could fold (runs and partitions are told apart by number and by generated
lower-case names).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.sink import TableSink
from tests.sink.test_predict_chaos import _server_or_file
from tests.sink.test_sink_faults import Output

pytestmark = pytest.mark.engine

STAGING = re.compile(r"sqlfeed_\d{9,}_")
"""A staging table's name (a scratch table's: ``sqlfeed_<unix time>_<hex>``)."""


def _key_names(source: Any, table: str) -> list[str]:
    """The names of ``table``'s indexes and constraints, as the engine's catalog shows them."""
    engine = source.dialect.name
    if engine == "postgres":
        rows = source.rows(
            f"SELECT indexname FROM pg_indexes WHERE tablename = '{table}' UNION ALL "
            f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass"
        )
    elif engine == "mysql":
        rows = source.rows(
            "SELECT DISTINCT index_name FROM information_schema.statistics WHERE "
            f"table_schema = DATABASE() AND table_name = '{table}'"
        )
    elif engine == "duckdb":
        rows = source.rows(
            f"SELECT constraint_name FROM duckdb_constraints() WHERE table_name = '{table}'"
        )
    else:
        rows = source.rows(f"SELECT name FROM sqlite_master WHERE tbl_name = '{table}'")
    return sorted(str(r[0]) for r in rows)


@pytest.fixture
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The output URL of engine ``request.param``."""
    if request.param == "mariadb":
        output = Output("mariadb")
        yield output.url
        output.drop()
    else:
        yield _server_or_file(request.param, tmp_path)


def _batch(first: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(first, first + 10), pa.int64())})


def _write(url: str, table: str, key: list[str] | None, mode: str, first: int) -> None:
    """10 rows through the sink: ``key`` as the output's primary key (proven unique, as
    the catalog proves a SELECT's), else the rows' identity."""
    batch = _batch(first)
    sink = TableSink.create(
        url, table, batch.schema, mode=mode, key=key, unique_key=bool(key), expected_rows=10
    )
    try:
        assert sink.commit(0, 0, batch)
        sink.finish()
    finally:
        sink.close()


@pytest.mark.parametrize("place", ["postgres", "mariadb", "sqlite", "duckdb"], indirect=True)
@pytest.mark.parametrize("key", [["id"], None], ids=["key", "identity"])
def test_the_output_key_is_named_for_the_output_table(place: str, key: list[str] | None) -> None:
    """After ``create`` and after ``replace`` (over a table with its own key of that
    name), no index or constraint carries the staging table's name; PostgreSQL names them
    as it would for a table made under the output's name."""
    table = f"named_{uuid.uuid4().hex[:8]}"
    _write(place, table, key, "create", 0)  # a SQLite or DuckDB file made
    source = sqlfeed.connect(place)
    try:
        created = _key_names(source, table)
        _write(place, table, key, "replace", 10)
        replaced = _key_names(source, table)
        assert source.rows(f"SELECT COUNT(*) FROM {table}")[0][0] == 10
    finally:
        source.execute(f"DROP TABLE IF EXISTS {table}")
        source.close()
    for names in (created, replaced):
        assert names, "the output has no key"
        assert not [n for n in names if STAGING.search(n)], names
    if source.dialect.name == "postgres":
        want = (
            [f"{table}_pkey"] * 2 if key else [f"{table}__sqlfeed_partition__sqlfeed_row_key"] * 2
        )
        assert created == replaced == want


def test_the_bookkeeping_holds_no_name_a_collation_could_fold() -> None:
    """MariaDB compares text ignoring case (``_ci``) and trailing spaces (PAD SPACE): the
    sink's commit records and row identity are numbers only, and two runs whose output
    tables differ only in case, written at once, stay apart."""
    output = Output("mariadb")
    schema = pa.schema([("id", pa.int64())])
    sinks = [TableSink.create(output.url, name, schema) for name in ("Pair", "pair")]
    try:
        assert sinks[0].spec["staging"] != sinks[1].spec["staging"]
        for sink in sinks:
            tables = (sink.spec["commits"], sink.spec["staging"])
            kinds = output._run(
                "SELECT DISTINCT data_type FROM information_schema.columns WHERE "
                f"table_schema = '{output.tag}' AND table_name IN {tables!r}"
            )
            assert {str(k[0]) for k in kinds} == {"bigint"}
        for part, sink in enumerate(sinks):  # the same partition numbers in both runs
            assert sink.commit(0, 0, _batch(part * 100)) is True
            assert sink.commit(1, 0, _batch(part * 100 + 10)) is True
        for sink in sinks:
            sink.spec["expected_rows"] = 20
            assert sink.finish().rows == 20
        ids = [
            sorted(r[0] for r in output._run(f"SELECT id FROM {output.tag}.{name}"))
            for name in ("Pair", "pair")
        ]
        assert ids == [list(range(20)), list(range(100, 120))]
    finally:
        for sink in sinks:
            sink.abort()
            sink.close()
        output.drop()

"""File and dataset fragment plans put a piece inside the user's query, rendered from its
tree: only where sqlglot renders it unchanged; else the query is read as written.

sqlglot writes DuckDB's ``log2(v)`` as ``LOG(2, v)``, which rounds differently (a last
digit off: a silent wrong value), and ``^@`` as ``STARTS_WITH``. A fragments plan of such
a query is refused in one line, and ``auto`` picks a plan that embeds the user's text:
every value equal to DuckDB's own result. ORC files (read through Arrow streams that
replace each ``read_orc`` call when the SQL runs) get the calls replaced in the text, not
the statement re-rendered.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

import sqlfeed
from sqlfeed.dialects import SqlfeedError
from sqlfeed.shards import create_dataset

N = 600

# (query over {t}, a word of the refusal): queries sqlglot writes back with other words
CHANGED = [
    ("SELECT id, log2(f + 1) AS c FROM {t} WHERE id % 3 <> 1", "LOG"),  # other rounding
    ("SELECT id, s FROM {t} WHERE s ^@ 'a1'", "STARTS_WITH"),
    ("SELECT id, f ** 2 AS p FROM {t}", "POWER"),
]


def _table(n: int = N) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "f": ids * 1.37,
            "s": pa.array([f"{'ab'[i % 2]}{i % 5}" for i in range(n)]),
        }
    )


def _rows(source: Any, sql: str) -> Counter[tuple[Any, ...]]:
    return _rows_of(source.arrow(sql))


def _check(source: Any, sql: str, word: str) -> None:
    expected = _rows(source, sql)
    assert sum(expected.values()) > 0
    plan = sqlfeed.plan(sql, source, partitions=4)
    got: Counter[tuple[Any, ...]] = Counter()
    for partition in plan.partitions:
        got.update(_rows(source, partition.sql))
    assert got == expected  # every float equal, not only close
    assert plan.strategy != "fragments"
    with pytest.raises(SqlfeedError) as refused:
        sqlfeed.plan(sql, source, strategy="fragments", partitions=4)
    message = str(refused.value)
    assert "\n" not in message, message
    assert message.startswith("strategy fragments:"), message
    assert word in message, message


@pytest.mark.parametrize(("sql", "word"), CHANGED)
def test_a_file_query_sqlglot_changes_is_not_cut_into_pieces(
    tmp_path: Path, sql: str, word: str
) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(_table(), path, row_group_size=50)
    with sqlfeed.connect("duckdb://") as source:
        _check(source, sql.format(t=f"read_parquet('{path}')"), word)


@pytest.mark.parametrize(("sql", "word"), CHANGED)
def test_a_dataset_query_sqlglot_changes_is_not_cut_into_fragments(
    tmp_path: Path, sql: str, word: str
) -> None:
    dataset = create_dataset(tmp_path / "ds")
    dataset.add_shardset("rows", _table().rename_columns(["uid", "f", "s"]), shard_rows=200)
    with sqlfeed.connect(f"dataset:///{tmp_path / 'ds'}") as source:
        _check(source, sql.replace("id", "uid").format(t="dataset"), word)


def test_a_file_query_sqlglot_renders_unchanged_is_still_cut(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(_table(), path, row_group_size=50)
    sql = f"SELECT id, f * 2 AS d, s FROM read_parquet('{path}') WHERE s LIKE 'a%'"
    with sqlfeed.connect("duckdb://") as source:
        plan = sqlfeed.plan(sql, source, strategy="fragments", partitions=4)
        got: Counter[tuple[Any, ...]] = Counter()
        for partition in plan.partitions:
            got.update(_rows(source, partition.sql))
        assert plan.num_partitions == 4
        assert got == _rows(source, sql)


@pytest.mark.parametrize(
    "table",
    ["read_orc('{d}/rows.orc')", "'{d}/rows.orc'", "READ_ORC ( '{d}/rows.orc' ) AS r"],
)
def test_orc_reads_run_the_users_text(tmp_path: Path, table: str) -> None:
    """Every value equals DuckDB's own over the same rows in Parquet: log2 stays log2."""
    orc.write_table(_table(), tmp_path / "rows.orc")
    pq.write_table(_table(), tmp_path / "rows.parquet")
    sql = "SELECT id, log2(f + 1) AS c, s FROM {t} WHERE s ^@ 'a'"
    expected = Counter(
        duckdb.sql(sql.format(t=f"read_parquet('{tmp_path}/rows.parquet')")).fetchall()
    )
    query = sql.format(t=table.format(d=tmp_path))
    with sqlfeed.connect("duckdb://") as source:
        for m in (1, 3):
            plan = sqlfeed.plan(query, source, partitions=m)
            got: Counter[tuple[Any, ...]] = Counter()
            for partition in plan.partitions:
                got.update(_rows(source, partition.sql))
            assert got == expected, m
        fed = pa.Table.from_batches(list(sqlfeed.Feeder(query, source, partitions=3)))
        assert _rows_of(fed) == expected


def _rows_of(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(
        zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True)
    )

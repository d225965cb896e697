"""File and dataset fragment plans put a piece inside the user's query, rendered from its
tree: only where sqlglot renders it unchanged; else the query is read as written.

sqlglot writes DuckDB's ``log2(v)`` as ``LOG(2, v)``, which rounds differently (a last
digit off: a silent wrong value), and ``^@`` as ``STARTS_WITH``. A fragments plan of such
a query is refused in one line, and ``auto`` picks a plan that embeds the user's text:
every value equal to DuckDB's own result.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlfeed
from dialects import SqlfeedError
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
    table = source.arrow(sql)
    return Counter(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)),
                       strict=True))  # fmt: skip


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

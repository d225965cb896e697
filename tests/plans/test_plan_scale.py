"""Plan building is linear: the query is rendered once, not once per partition; M is capped.

Rendering a query's AST per partition made ``plan -m 10000`` take 47 s; the rewriter now
renders one partition's SQL with slots and fills each partition's number (or bounds) in.
The tests count the renders (the work), never the time.
"""

from __future__ import annotations

import types
from typing import Any

import duckdb
import pytest

import sqlfeed
from sqlfeed.dialects import Dialect, InvalidArgumentError
from sqlfeed.plans import prepare
from sqlfeed.sql import MAX_PARTITIONS, partition_sqls, range_partition_sqls
from tests.helpers.cli import run_cli

# A long analytical query (TPC-DS-like): CTEs, joins, grouping, windows, a LIMIT with ties.
BIG = """
WITH sales AS (
  SELECT s.item_id, s.store_id, d.year, d.month, SUM(s.amount) AS total, COUNT(*) AS n
  FROM store_sales s JOIN date_dim d ON d.id = s.date_id JOIN item i ON i.id = s.item_id
  WHERE i.category IN ('Books', 'Music', 'Sports') AND d.year BETWEEN 1999 AND 2001
  GROUP BY s.item_id, s.store_id, d.year, d.month
), ranked AS (
  SELECT item_id, store_id, year, month, total, n,
         AVG(total) OVER (PARTITION BY item_id, store_id, year) AS avg_total,
         RANK() OVER (PARTITION BY item_id ORDER BY total DESC) AS rnk
  FROM sales
)
SELECT item_id, store_id, year, month, total, avg_total, rnk, n
FROM ranked
WHERE avg_total > 0 AND ABS(total - avg_total) / avg_total > 0.1
ORDER BY total - avg_total, item_id
LIMIT 1000
"""


def count_renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL text a dialect renders from now on (the rewriter's unit of work)."""
    rendered: list[str] = []
    render = Dialect.sql

    def counting(self: Dialect, expression: Any, pretty: bool = False) -> str:
        text = render(self, expression, pretty=pretty)
        rendered.append(text)
        return text

    monkeypatch.setattr(Dialect, "sql", counting)
    return rendered


def rendered_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every template render the whole query per partition (the old way)."""
    monkeypatch.setattr("sqlfeed.sql.render._SENTINEL_BASES", ())


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql", "sqlite", "tsql"])
def test_ten_thousand_hash_partitions_render_the_query_a_constant_number_of_times(
    monkeypatch: pytest.MonkeyPatch, dialect: str
) -> None:
    renders = count_renders(monkeypatch)
    assert len(partition_sqls(BIG, 10, dialect=dialect)) == 10
    few = len(renders)
    renders.clear()
    many = partition_sqls(BIG, 10_000, dialect=dialect)
    assert len(renders) == few <= 3
    assert len(set(many)) == 10_000
    # The filled-in SQL is exactly what rendering each partition on its own gives.
    rendered_one_by_one(monkeypatch)
    for k in (0, 1, 4321, 9999):
        assert partition_sqls(BIG, 10_000, dialect=dialect, only=k) == [many[k]]


def test_ten_thousand_ranges_render_the_query_a_constant_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    query = "SELECT id, v FROM t WHERE v IS NOT NULL"
    renders = count_renders(monkeypatch)
    ranges = range_partition_sqls(query, "id", list(range(0, 20_000, 2)), dialect="postgres")
    assert len(ranges) == 10_002  # 10,001 ranges and the NULL rows
    assert len(renders) <= 5
    rendered_one_by_one(monkeypatch)
    assert range_partition_sqls(query, "id", [0, 2, 4], dialect="postgres") == [
        ranges[0],
        ranges[1],
        ranges[2],
        ranges[-2].replace("19998", "4"),
        ranges[-1],
    ]


def test_a_plan_of_ten_thousand_partitions_renders_as_much_as_one_of_ten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT range AS id, range % 7 AS k FROM range(1000)")
    renders = count_renders(monkeypatch)
    sqlfeed.plan("SELECT k, id FROM t ORDER BY k LIMIT 500", connection, partitions=10)
    few = len(renders)
    renders.clear()
    planned = sqlfeed.plan(
        "SELECT k, id FROM t ORDER BY k LIMIT 500", connection, partitions=10_000
    )
    assert planned.num_partitions == 10_000
    assert len(renders) == few
    connection.close()


def test_more_partitions_than_the_limit_is_an_error_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match=f"at most {MAX_PARTITIONS}"):
        partition_sqls("SELECT a FROM t", MAX_PARTITIONS + 1)
    with pytest.raises(InvalidArgumentError, match=f"partitions must be at most {MAX_PARTITIONS}"):
        sqlfeed.plan("SELECT 1 AS a", partitions=1_000_000)
    run = run_cli(["plan", "-m", "1000000", "SELECT a FROM t"])
    assert run.code == 2
    assert run.err.count("\n") == 1
    assert f"--partitions must be at most {MAX_PARTITIONS}, got 1000000" in run.err


def test_a_capped_partition_count_is_said_in_the_reason() -> None:
    connection = duckdb.connect()
    connection.execute(
        "CREATE TABLE t AS SELECT range AS id, CASE WHEN range % 3 = 0 THEN NULL ELSE 7 END "
        "AS k FROM range(40)"
    )
    planned = sqlfeed.plan(
        "SELECT id, k FROM t", connection, partitions=8, strategy="range", key="k"
    )
    assert planned.num_partitions == 2  # one range of k = 7, and the NULL rows
    assert "2 partitions instead of the 8 asked for: range cannot cut this data finer" in (
        planned.reason
    )
    connection.close()


def test_a_partition_count_from_a_huge_row_count_is_capped_and_said() -> None:
    counted = types.SimpleNamespace(count=lambda parsed, columns: 10**12)
    context: Any = types.SimpleNamespace(source=counted, parsed=None, columns=[], table=None)
    sizing = prepare.partition_count(context, "hash", None, 100_000, 1)
    assert (sizing.rows, sizing.m) == (10**12, MAX_PARTITIONS)
    assert f"M capped at {MAX_PARTITIONS}" in sizing.capped
    assert "--target-rows" in sizing.capped

"""Statistics wrap the user's own text: queries sqlglot would re-render get true statistics.

``compute_stats`` used to re-parse the query and render it again from sqlglot's tree, which
changed or broke queries sqlglot cannot write back (MariaDB ``REGEXP``/``RLIKE`` became a
``REGEXP_LIKE`` MariaDB lacks, ``FROM DUAL`` a table, SQLite ``CAST(x AS NUMERIC)`` a
``REAL`` that rounds values above 2**53). Every method's statistics of such queries must
equal the statistics of the engine's own result rows (read by the engine's own driver).
"""

from __future__ import annotations

import decimal
import json
import math
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.stats.model import ColumnStats, FeatureStats, StatsSpec
from sqlfeed.stats.pushdown import compute_pushdown, positions
from tests.engines.test_corpus_engines import _close_sources, corpus_engine, source_for
from tests.helpers.corpus_engines import ENGINE_CORPUS, EngineCase
from tests.helpers.engines import Engine

pytestmark = pytest.mark.engine

__all__ = ["_close_sources"]  # the module fixture that closes the shared sources

# Queries sqlglot writes back differently (``sqlfeed.sql.rendering_problem``), and
# everyday engine spellings next to them.
_IDS = {
    "mysql": (
        "regexp",
        "rlike",
        "not_regexp",
        "from_dual",
        "from_dual_where",
        "regexp_top",
        "force_index",
        "adjacent_literals",
    ),
    "sqlite": ("cast_numeric", "cast_numeric_grouped", "cast_numeric_top", "json_each"),
    "duckdb": (
        "alias_in_where",
        "integer_division",
        "star_exclude",
        "from_first",
        "starts_with_operator",
        "positional_refs",
        "lateral_alias",
        "list_ops",
        "list_ordered",
    ),
    "postgres": ("regex_case_insensitive", "ilike_regex", "distinct_on", "dollar_quoted"),
}
CASES = [
    case
    for engine, cases in ENGINE_CORPUS.items()
    for case in cases
    if case.id.split("-", 1)[1] in _IDS[engine]
]
METHODS = ("pushdown", "sample", "accumulate")
SPEC = StatsSpec(buckets=7, top_k=100)  # every value of these tables


def _value(value: Any) -> Any:
    """A value as a comparable Python number (an exact decimal stays exact)."""
    if isinstance(value, decimal.Decimal) and value == value.to_integral_value():
        return int(value)
    return value


def expected_column(
    values: list[Any], numeric: bool, buckets: int = SPEC.buckets
) -> dict[str, Any]:
    """What a column's statistics must say, from the engine's own rows."""
    present = [_value(v) for v in values if v is not None]
    found: dict[str, Any] = {
        "count": len(values),
        "nulls": len(values) - len(present),
        "distinct": len(set(present)),
    }
    if numeric:
        ordered = sorted(present)
        found["min"] = ordered[0] if ordered else None
        found["max"] = ordered[-1] if ordered else None
        if ordered:
            found["boundaries"] = [ordered[p - 1] for p in positions(len(ordered), buckets)]
    else:
        counts = Counter(present)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[: SPEC.top_k]
        found["vocabulary"] = sorted(str(v) for v, _ in top)
    return found


def actual_column(stats: ColumnStats, numeric: bool) -> dict[str, Any]:
    found: dict[str, Any] = {"count": stats.count, "nulls": stats.nulls, "distinct": stats.distinct}
    if numeric:
        found["min"], found["max"] = _value(stats.min), _value(stats.max)
        if stats.count > stats.nulls:
            found["boundaries"] = [_value(v) for v in stats.boundaries]
    else:
        found["vocabulary"] = sorted(str(v) for v in stats.vocabulary)
    return found


def _compute(engine: Engine, sql: str, method: str, spec: StatsSpec = SPEC) -> FeatureStats:
    options: dict[str, Any] = {}
    if method == "sample":
        options = {"sample_rows": 1_000_000}  # every row: the sample is the whole result
    if method == "accumulate":
        options = {"partitions": 3, "strategy": "hash"}
    return sqlfeed.compute_stats(sql, source_for(engine), spec=spec, method=method, **options)


def _comparable(engine: Engine, stats: ColumnStats) -> bool:
    """Columns whose values the driver and the feeds give alike (not lists, JSON, text)."""
    kind = stats.arrow_type
    return not (stats.elements or kind.startswith(("list", "struct", "map")) or "json" in kind)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_statistics_of_queries_sqlglot_would_re_render(case: EngineCase, method: str) -> None:
    engine = corpus_engine(case.engine)
    sql = case.sql_for(engine.qualify)
    rows = engine.rows(sql)
    names = engine.columns(sql)
    stats = _compute(engine, sql, method)
    assert stats.rows == len(rows)
    assert list(stats.columns) == names
    compared = 0
    for i, name in enumerate(names):
        column = stats.columns[name]
        if not _comparable(engine, column):
            continue
        numeric = column.kind == "numeric"
        expected = expected_column([row[i] for row in rows], numeric)
        assert actual_column(column, numeric) == expected, (case.id, method, name)
        compared += 1
    assert compared > 0


def test_a_numeric_cast_above_2_to_the_53_keeps_every_digit() -> None:
    """SQLite's NUMERIC keeps 2**53 + 1 exact; the REAL sqlglot wrote rounded it."""
    engine = corpus_engine("sqlite")
    sql = f"SELECT id, CAST(v AS NUMERIC) AS n FROM {engine.qualify('ce_docs')} WHERE id % 5 = 1"
    exact = sorted(row[0] for row in engine.rows(f"SELECT n FROM ({sql})"))
    assert exact[0] == 2**53 + 1
    for method in METHODS:
        stats = _compute(engine, sql, method).columns["n"]
        assert (_value(stats.min), _value(stats.max)) == (exact[0], exact[-1]), method
        assert stats.distinct == len(set(exact)), method


def _canonical(value: Any) -> str:
    return json.dumps(json.loads(value) if isinstance(value, str) else value, sort_keys=True)


@pytest.mark.parametrize("method", METHODS)
def test_postgres_columns_described_by_their_text_wrap_the_users_text(method: str) -> None:
    """A jsonb column is grouped by its JSON text (a statement over the relation): that
    statement embeds the relation as written too (sqlglot would write ``^`` as POWER)."""
    engine = corpus_engine("postgres")
    sql = f"SELECT id, body, x ^ 2 AS p, $$it's$$ AS s FROM {engine.qualify('ce_docs')}"
    rows = engine.rows(sql)
    stats = _compute(engine, sql, method)
    assert stats.rows == len(rows)
    bodies = [row[1] for row in rows]
    body = stats.columns["body"]
    assert body.nulls == bodies.count(None)
    present = {_canonical(b) for b in bodies if b is not None}
    assert body.distinct == len(present)
    assert {_canonical(v) for v in body.vocabulary} == present
    for i, name in ((0, "id"), (2, "p"), (3, "s")):
        numeric = stats.columns[name].kind == "numeric"
        expected = expected_column([row[i] for row in rows], numeric)
        assert actual_column(stats.columns[name], numeric) == expected, (method, name)


@pytest.mark.parametrize("ending", [";", " ;\n", " -- the last line", " -- a comment;"])
def test_compute_pushdown_embeds_text_that_ends_in_a_semicolon_or_comment(ending: str) -> None:
    """Each statement holds the text as written, cut to one statement (a trailing
    semicolon left out; a trailing line comment ended before the closing parenthesis)."""
    query = "SELECT range AS n, log2(range + 1) AS l FROM range(1, 9)"
    statements: list[str] = []
    with sqlfeed.connect("duckdb://") as source:

        def run(sql: str) -> pa.Table:
            statements.append(sql)
            return source.arrow(sql)

        schema = source.schema(query)
        stats = compute_pushdown(query + ending, schema, run, dialect="duckdb")
    assert stats.rows == 8
    assert (stats["n"].min, stats["n"].max) == (1, 8)
    assert stats["l"].max == math.log2(9)
    assert all("log2(range + 1)" in s for s in statements)  # not sqlglot's LOG(2, ...)


@pytest.mark.parametrize("method", METHODS)
def test_duckdb_statistics_see_the_users_functions(method: str) -> None:
    """sqlglot writes DuckDB's ``log2(v)`` as ``LOG(2, v)``, which rounds differently."""
    engine = corpus_engine("duckdb")
    sql = f"SELECT id, log2(id * 1.37 + 1) AS l FROM {engine.qualify('ce_docs')}"
    values = [row[0] for row in engine.rows(f"SELECT l FROM ({sql})")]
    every = StatsSpec(buckets=len(values))  # every value is a boundary
    stats = _compute(engine, sql, method, every).columns["l"]
    assert actual_column(stats, True) == expected_column(values, True, every.buckets)

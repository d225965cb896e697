"""Property-based: random tables with NULLs, negatives and odd strings, on every engine."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqlfeed.sql import parse, partition_sqls, schema_sql
from tests.engines.test_partitions_engines import assert_partitions_exact
from tests.helpers.engines import Engine, multiset

pytestmark = pytest.mark.engine

COLUMNS = [("i", "int"), ("b", "bigint"), ("f", "float"), ("s", "text")]

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=6,
)
rows = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**31), 2**31 - 1),
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.floats(min_value=-1e100, max_value=1e100, allow_nan=False),
        st.none() | texts,
    ),
    max_size=30,
)
queries = st.sampled_from(
    [
        "SELECT i, b, f, s FROM {t}",
        "SELECT * FROM {t} WHERE i < 0 OR s IS NULL",
        "SELECT s, COUNT(*) AS n, MIN(b) AS lo FROM {t} GROUP BY s",
        "SELECT DISTINCT i, s FROM {t}",
        "SELECT t1.i, t2.b FROM {t} t1 JOIN {t} t2 ON t1.i = t2.i",
    ]
)
keys = st.sampled_from([None, ("i",), ("s",), ("i", "s")])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=rows, template=queries, key=keys, m=st.integers(1, 16))
def test_random_tables_partition_exactly(
    engine: Engine, data: list[tuple[Any, ...]], template: str, key: Any, m: int
) -> None:
    table = f"h_{uuid.uuid4().hex[:8]}"
    engine.create_table(table, COLUMNS, data)
    try:
        sql = template.format(t=table)
        parsed = parse(sql, engine.name)
        columns = engine.columns(schema_sql(parsed))
        if key is not None and not set(key) <= set(columns):
            key = None
        partitions = partition_sqls(parsed, m, key=key, columns=columns)
        assert_partitions_exact(engine, multiset(engine.rows(sql)), partitions)
    finally:
        engine.execute(f"DROP TABLE {table}")

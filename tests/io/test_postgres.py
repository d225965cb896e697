"""PostgreSQL specifics: types without a hash function, and session-independent buckets."""

from __future__ import annotations

from collections import Counter

import pytest

from sqlfeed.io import connect
from sqlfeed.sql import partition_sqls
from tests.conftest import get_engine
from tests.engines.test_partitions_engines import assert_partitions_exact
from tests.helpers.engines import POSTGRES_URL, Engine

pytestmark = pytest.mark.engine

ODD_TYPES = """
SELECT i,
       json_build_object('i', i, 'tag', 'x' || i % 3) AS doc,
       point(i, -i) AS pos,
       (i * 1.25)::money AS price,
       timestamptz '2024-03-10 01:30:00+00' + i * interval '37 minutes' AS at,
       (i * 0.1)::float8 AS f,
       ARRAY[i, i % 4] AS pair
FROM generate_series(-50, 250) AS g(i)
"""


@pytest.fixture
def postgres() -> Engine:
    return get_engine("postgres")


def test_columns_without_a_hash_function_are_hashed_as_text(postgres: Engine) -> None:
    with connect(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://")) as source:
        columns = source.output_columns(ODD_TYPES)
        text_columns = source.text_columns(ODD_TYPES)
    assert sorted(text_columns) == ["doc", "pos", "price"]
    queries = partition_sqls(
        ODD_TYPES, 5, dialect="postgres", columns=columns, text_columns=text_columns
    )
    expected = Counter(tuple(map(str, row)) for row in postgres.rows(ODD_TYPES))
    union: Counter[tuple[str, ...]] = Counter()
    for query in queries:
        union.update(tuple(map(str, row)) for row in postgres.rows(query))
    assert union == expected


@pytest.mark.parametrize(
    "settings",
    [
        ["SET TimeZone = 'America/New_York'", "SET extra_float_digits = 0"],
        ["SET TimeZone = 'Asia/Kolkata'", "SET IntervalStyle = 'sql_standard'"],
    ],
)
def test_bucket_of_a_row_does_not_depend_on_session_settings(
    postgres: Engine, settings: list[str]
) -> None:
    sql = "SELECT i, at, f, pair FROM (" + ODD_TYPES + ") AS q"
    queries = partition_sqls(sql, 4, dialect="postgres")
    postgres.execute("SET TimeZone = 'UTC'")
    before = [Counter(postgres.rows(q)) for q in queries]
    try:
        for setting in settings:
            postgres.execute(setting)
        after = [Counter(postgres.rows(q)) for q in queries]
    finally:
        for reset in ("RESET TimeZone", "RESET extra_float_digits", "RESET IntervalStyle"):
            postgres.execute(reset)
    assert after == before
    assert_partitions_exact(postgres, Counter(postgres.rows(sql)), queries)

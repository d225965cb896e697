"""The query corpus: analytical SELECTs over small tables full of awkward values.

Every query is written in SQL that DuckDB, SQLite, PostgreSQL and MariaDB all accept
(``transpile_from`` marks the few written in one dialect and translated by sqlglot).
The data has NULLs in every column, negative and extreme integers, floats, decimals,
dates, timestamps, strings with separators and quotes, and duplicate rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import sqlglot

D = decimal.Decimal

PEOPLE_COLUMNS = [
    ("id", "int"),
    ("name", "text"),
    ("city", "text"),
    ("age", "int"),
    ("score", "float"),
    ("big", "bigint"),
    ("born", "date"),
    ("seen", "timestamp"),
    ("balance", "decimal"),
    ("active", "bool"),
]
ORDERS_COLUMNS = [
    ("order_id", "int"),
    ("person_id", "int"),
    ("amount", "decimal"),
    ("note", "text"),
    ("placed", "timestamp"),
]
DUPS_COLUMNS = [("a", "int"), ("b", "text")]
EMPTY_COLUMNS = [("a", "int"), ("b", "text")]

STRINGS = [
    "a|b",
    "a,b",
    'he said "hi"',
    "it's",
    "back\\slash",
    "tab\tsep",
    "",
    "é ü 中文",
    "NULL",
    "|",
    "line\nbreak",
    "semi;colon",
    None,
]
BIG = [9223372036854775807, -9223372036854775808, 0, -1, 2**40, -(2**53) - 1, None]
FLOATS = [0.1, -2.5, 1e150, -1e-300, 0.0, 3.14159, 123456.789, None]
CITIES = ["Oslo", "Lima", "Pune", "Kyiv", None]


def people_rows(n: int = 240) -> list[tuple[Any, ...]]:
    """Deterministic rows for ``people``: every column has NULLs."""
    rows = []
    for i in range(n):
        rows.append(
            (
                i,
                STRINGS[i % len(STRINGS)] if i % 11 else f"name{i}",
                CITIES[i % len(CITIES)],
                None if i % 7 == 0 else (i * 37) % 90 - 5,
                FLOATS[i % len(FLOATS)],
                BIG[i % len(BIG)],
                None if i % 9 == 0 else dt.date(1950, 1, 1) + dt.timedelta(days=i * 113),
                None
                if i % 8 == 0
                else dt.datetime(2020, 1, 1, 0, 0, 0, 123456)
                + dt.timedelta(hours=i * 7, seconds=i),
                None if i % 10 == 0 else D(f"{(i * 7919) % 200000 - 100000}.{i % 100:02d}"),
                None if i % 6 == 0 else bool(i % 2),
            )
        )
    return rows


def orders_rows(n: int = 600) -> list[tuple[Any, ...]]:
    """Rows for ``orders``: some reference nobody (dangling), some have NULL references."""
    rows = []
    for i in range(n):
        rows.append(
            (
                i,
                None if i % 13 == 0 else (i * 31) % 260,  # ids 240..259 match no person
                None if i % 17 == 0 else D(f"{(i * 104729) % 50000 / 100:.2f}"),
                STRINGS[(i * 5) % len(STRINGS)],
                dt.datetime(2021, 6, 1) + dt.timedelta(minutes=i * 97),
            )
        )
    return rows


def dups_rows() -> list[tuple[Any, ...]]:
    """Duplicate rows, including duplicate all-NULL rows."""
    base = [
        (1, "x"),
        (1, "x"),
        (1, "x"),
        (2, None),
        (2, None),
        (None, None),
        (None, None),
        (-3, "a|b"),
        (-3, "a|b"),
        (4, ""),
        (None, ""),
    ]
    return base * 3


@dataclass(frozen=True)
class TopN:
    """A LIMIT/OFFSET whose ORDER BY ties at the cut: which results are valid.

    ``base`` is the query without its ORDER BY and LIMIT; ``key`` the output positions
    (0-based) of the ORDER BY keys, integers without NULLs (so every engine sorts them
    alike). A valid result is ``base``'s rows ``offset .. offset + limit`` in some order
    that sorts by ``key``: its key values are exactly those of that slice, and each row is
    a row of ``base`` (so every row strictly inside the cut is there, and the right number
    from each tie group at its ends).
    """

    base: str
    key: tuple[int, ...]
    limit: int
    offset: int = 0
    desc: bool = False


@dataclass(frozen=True)
class Numbering:
    """A ``ROW_NUMBER()`` over a non-unique window order: which results are valid.

    Grouped by the ``partition`` output positions, the rows ordered by the number at
    ``number`` are numbered 1..n and their ``order`` values (integers, no NULLs) never
    decrease; ``base`` is the query without the number, whose rows the result must have.
    """

    base: str
    partition: tuple[int, ...]
    order: int
    number: int


@dataclass(frozen=True)
class Case:
    """One corpus query."""

    id: str
    sql: str
    key: tuple[str, ...] | None = None
    transpile_from: str | None = None
    cannot_run: dict[str, str] = field(default_factory=dict)
    """Engines whose SQL cannot express this query, with the reason (no gap: the tests
    assert that the engine and sqlfeed refuse it, ``assert_engine_refuses``)."""
    valid: TopN | Numbering | None = None
    """For a query SQL lets return several results: how to tell a valid one."""

    def sql_for(self, engine: str) -> str:
        """The query in ``engine``'s dialect."""
        if self.transpile_from is None:
            return self.sql
        write = {"postgres": "postgres", "mysql": "mysql", "sqlite": "sqlite", "duckdb": "duckdb"}
        return sqlglot.transpile(self.sql, read=self.transpile_from, write=write[engine])[0]


CORPUS: list[Case] = [
    # -- plain scans, filters and projections (pushdown candidates)
    Case("scan_all", "SELECT * FROM people"),
    Case("scan_columns", "SELECT id, name, city, age, score FROM people"),
    Case("filter_or_and", "SELECT id, age FROM people WHERE age > 30 OR city = 'Oslo' AND age < 0"),
    Case("filter_null", "SELECT id, score, big FROM people WHERE score IS NULL OR big IS NULL"),
    Case("projection_dup_names", "SELECT id, id, name FROM people WHERE id % 3 = 0"),
    Case("projection_exprs_unnamed", "SELECT age + 1, score * 2, id FROM people"),
    Case("projection_exprs_dup_unnamed", "SELECT age + 1, age + 1 FROM people"),
    Case(
        "case_coalesce",
        "SELECT id, CASE WHEN age IS NULL THEN 'unknown' WHEN age < 18 THEN "
        "'minor' ELSE 'adult' END AS band, COALESCE(name, '?') AS name2 FROM people",
    ),
    Case("guarded_division", "SELECT id, 1000 / age AS per_year FROM people WHERE age <> 0"),
    Case("constants", "SELECT 1 AS one, 'x|y' AS s, NULL AS nil"),
    Case("null_column", "SELECT NULL AS n, id FROM people WHERE id < 50"),
    Case("extreme_ints", "SELECT big, id FROM people"),
    Case("floats", "SELECT score FROM people"),
    Case(
        "dates_timestamps",
        "SELECT born, seen, id FROM people WHERE born > '1960-01-01' OR seen IS NULL",
    ),
    Case("decimals", "SELECT balance, id FROM people WHERE balance IS NULL OR balance < 0"),
    Case("booleans", "SELECT active, id FROM people"),
    Case(
        "strings_separators",
        "SELECT note, order_id FROM orders WHERE note LIKE '%|%' "
        "OR note LIKE '%,%' OR note IS NULL OR note = ''",
    ),
    Case("duplicate_rows", "SELECT a, b FROM dups"),
    Case("duplicate_rows_one_column", "SELECT b FROM dups"),
    Case("empty_table", "SELECT * FROM empty_t"),
    Case("empty_result", "SELECT id, name FROM people WHERE 1 = 0"),
    Case(
        "in_between_like",
        "SELECT id FROM people WHERE id IN (1, 2, 3, 50) "
        "OR age BETWEEN 10 AND 20 OR name LIKE 'a%'",
    ),
    Case(
        "not_in_with_null",
        "SELECT id FROM people WHERE age NOT IN (SELECT a FROM dups WHERE a IS NOT NULL)",
    ),
    Case("keyed_low_cardinality", "SELECT id, city FROM people", key=("city",)),
    Case(
        "keyed_composite",
        "SELECT order_id, person_id, amount FROM orders",
        key=("person_id", "amount"),
    ),
    # -- joins
    Case(
        "inner_join",
        "SELECT p.id, p.name, o.order_id, o.amount FROM people p "
        "JOIN orders o ON o.person_id = p.id",
    ),
    Case(
        "left_join_nulls",
        "SELECT p.id, o.order_id, o.note FROM people p "
        "LEFT JOIN orders o ON o.person_id = p.id AND o.amount > 200",
    ),
    Case(
        "join_dup_output_names",
        "SELECT p.id, o.order_id AS id, o.amount FROM people p JOIN orders o ON o.person_id = p.id",
    ),
    Case("star_join_dup_names", "SELECT * FROM dups d1 JOIN dups d2 ON d1.a = d2.a"),
    Case(
        "three_way_join",
        "SELECT p.city, o.order_id, d.b FROM people p JOIN orders o ON "
        "o.person_id = p.id JOIN dups d ON d.a = p.id % 5",
    ),
    Case(
        "self_join",
        "SELECT a.id, b.id AS other FROM people a JOIN people b ON a.age = b.age AND a.id < b.id",
    ),
    # -- aggregation
    Case(
        "group_by_having",
        "SELECT city, COUNT(*) AS n, MIN(age) AS youngest FROM people "
        "GROUP BY city HAVING COUNT(*) > 1",
    ),
    Case(
        "group_by_float_aggregates",
        "SELECT city, SUM(score) AS total, AVG(score) AS mean FROM people GROUP BY city",
    ),
    Case(
        "group_by_decimal_sum",
        "SELECT person_id, SUM(amount) AS total, COUNT(*) AS n FROM orders GROUP BY person_id",
    ),
    Case("aggregate_single_row_unnamed", "SELECT COUNT(*), SUM(age), MAX(name) FROM people"),
    Case("aggregate_empty_table", "SELECT COUNT(*) AS n, MAX(a) AS m FROM empty_t"),
    Case(
        "count_distinct",
        "SELECT active, COUNT(DISTINCT city) AS cities FROM people GROUP BY active",
    ),
    Case("distinct", "SELECT DISTINCT a, b FROM dups"),
    Case("distinct_expression", "SELECT DISTINCT age % 10 AS digit FROM people"),
    # -- subqueries
    Case(
        "scalar_subquery",
        "SELECT p.id, (SELECT COUNT(*) FROM orders o WHERE "
        "o.person_id = p.id) AS n_orders FROM people p",
    ),
    Case(
        "correlated_exists",
        "SELECT id, name FROM people p WHERE EXISTS (SELECT 1 FROM "
        "orders o WHERE o.person_id = p.id AND o.amount > 300)",
    ),
    Case(
        "derived_table",
        "SELECT x.city, x.n FROM (SELECT city, COUNT(*) AS n FROM people "
        "GROUP BY city) x WHERE x.n > 10",
    ),
    Case(
        "derived_with_total_limit",
        "SELECT x.id, x.age FROM (SELECT id, age FROM people "
        "ORDER BY id, age LIMIT 30) x WHERE x.age IS NOT NULL",
    ),
    # -- CTEs
    Case(
        "cte",
        "WITH t AS (SELECT person_id, SUM(amount) AS s FROM orders GROUP BY "
        "person_id) SELECT p.name, t.s FROM t JOIN people p ON p.id = t.person_id",
    ),
    Case(
        "cte_twice",
        "WITH t AS (SELECT person_id, COUNT(*) AS c FROM orders GROUP BY "
        "person_id) SELECT a.person_id, a.c, b.c AS c2 FROM t a JOIN t b ON "
        "a.person_id = b.person_id",
    ),
    Case(
        "recursive_cte",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
        "WHERE n < 100) SELECT n, n * n AS sq FROM r",
    ),
    # -- windows
    Case(
        "window_row_number",
        "SELECT id, city, ROW_NUMBER() OVER (PARTITION BY city ORDER BY id) AS rn FROM people",
    ),
    Case(
        "window_rank_lag",
        "SELECT id, RANK() OVER (ORDER BY age) AS r, LAG(score) OVER "
        "(ORDER BY id) AS prev FROM people",
    ),
    Case(
        "window_sum_decimal",
        "SELECT order_id, SUM(amount) OVER (PARTITION BY person_id) AS per_person FROM orders",
    ),
    # -- set operations
    Case("union_distinct", "SELECT a FROM dups UNION SELECT age FROM people"),
    Case("union_all", "SELECT a, b FROM dups UNION ALL SELECT id, name FROM people"),
    Case("intersect", "SELECT a FROM dups INTERSECT SELECT id FROM people"),
    Case("except", "SELECT id FROM people EXCEPT SELECT a FROM dups"),
    Case(
        "union_order_limit",
        "SELECT a AS v FROM dups UNION SELECT id FROM people ORDER BY 1 LIMIT 10",
    ),
    # -- ORDER BY and LIMIT
    Case("order_by_no_limit", "SELECT id, name FROM people ORDER BY name, id"),
    Case("order_by_total_limit", "SELECT id, name FROM people ORDER BY id, name LIMIT 50"),
    Case("order_by_limit_offset", "SELECT id, age FROM people ORDER BY id, age LIMIT 20 OFFSET 5"),
    # -- quoting
    Case(
        "quoted_mixed_case",
        'SELECT id AS "Id", name AS "NAME", city AS "a b" FROM people',
        transpile_from="postgres",
    ),
    Case(
        "values_list",
        "SELECT * FROM (VALUES (1, 'a'), (2, NULL), (2, NULL)) AS v(x, y)",
        cannot_run={
            "mysql": "MariaDB cannot name the columns of a VALUES derived table",
            "sqlite": "SQLite cannot name the columns of a derived table",
        },
    ),
    # -- ORDER BY ... LIMIT with ties at the cut (completed with tie-breakers)
    Case(
        "limit_ties_at_the_cut",
        "SELECT id % 7 AS k, name, city FROM people ORDER BY k LIMIT 50",
        valid=TopN("SELECT id % 7 AS k, name, city FROM people", (0,), 50),
    ),
    Case(
        "limit_offset_ties_desc",
        "SELECT id % 5 AS k, age, score FROM people ORDER BY k DESC LIMIT 20 OFFSET 30",
        valid=TopN("SELECT id % 5 AS k, age, score FROM people", (0,), 20, 30, desc=True),
    ),
    Case(
        "limit_ties_duplicate_rows",
        "SELECT COALESCE(a, -9) AS k, b FROM dups ORDER BY k LIMIT 7",
        valid=TopN("SELECT COALESCE(a, -9) AS k, b FROM dups", (0,), 7),
    ),
    Case("limit_without_order", "SELECT id % 3 AS k, big FROM people LIMIT 10"),
    Case(
        "limit_ties_nested",
        "SELECT x.k, COUNT(*) AS n FROM (SELECT id % 7 AS k, name "
        "FROM people ORDER BY k LIMIT 50) x GROUP BY x.k",
    ),
    Case(
        "limit_ties_in_subquery_filter",
        "SELECT id, name FROM people WHERE id IN (SELECT "
        "person_id FROM (SELECT person_id FROM orders ORDER BY order_id % 4 LIMIT 30) x)",
    ),
    Case(
        "limit_ties_union_all",
        "SELECT a AS v, b AS w FROM dups UNION ALL SELECT age % 3, city "
        "FROM people ORDER BY 1 LIMIT 40",
    ),
    Case(
        "limit_ties_aggregate_order",
        "SELECT age % 4 AS g, COUNT(*) AS n, SUM(score) AS s FROM "
        "people GROUP BY age % 4 ORDER BY n DESC LIMIT 2",
    ),
    Case("limit_ties_unnamed_columns", "SELECT id % 7, name FROM people ORDER BY 1 LIMIT 9"),
    Case(
        "limit_ties_duplicate_names", "SELECT id % 7 AS k, city AS k FROM people ORDER BY 1 LIMIT 9"
    ),
    # -- GROUP BY / DISTINCT keys in the ORDER BY (provably total: nothing added)
    Case(
        "group_keys_order_limit",
        "SELECT city, COUNT(*) AS n FROM people GROUP BY city ORDER BY city LIMIT 3",
    ),
    Case("distinct_order_limit", "SELECT DISTINCT age % 10 AS d FROM people ORDER BY d LIMIT 4"),
    Case(
        "union_distinct_order_limit",
        "SELECT a AS v FROM dups UNION SELECT age FROM people ORDER BY v LIMIT 6",
    ),
    # -- windows over non-unique orders (completed with tie-breakers)
    Case(
        "window_row_number_ties",
        "SELECT id % 3 AS t, city, name, ROW_NUMBER() OVER "
        "(PARTITION BY city ORDER BY id % 3) AS rn FROM people",
        valid=Numbering("SELECT id % 3 AS t, city, name FROM people", (1,), 0, 3),
    ),
    Case(
        "window_row_number_duplicates",
        "SELECT COALESCE(a, 0) AS k, b, ROW_NUMBER() OVER "
        "(ORDER BY COALESCE(a, 0)) AS rn FROM dups",
        valid=Numbering("SELECT COALESCE(a, 0) AS k, b FROM dups", (), 0, 2),
    ),
    Case("window_without_order", "SELECT a, b, ROW_NUMBER() OVER () AS rn FROM dups"),
    Case(
        "window_lag_lead_ties",
        "SELECT id, LAG(id) OVER (ORDER BY city) AS prev, LEAD(name) "
        "OVER (PARTITION BY active ORDER BY age) AS nxt FROM people",
    ),
    Case(
        "window_first_value_ties",
        "SELECT id, FIRST_VALUE(name) OVER (PARTITION BY city "
        "ORDER BY age) AS first_name FROM people",
    ),
    Case("window_ntile_ties", "SELECT age, NTILE(4) OVER (ORDER BY city) AS q FROM people"),
    Case(
        "window_over_groups",
        "SELECT city, SUM(age) AS s, ROW_NUMBER() OVER (ORDER BY "
        "COUNT(*)) AS rn FROM people GROUP BY city",
    ),
    Case(
        "window_then_limit_ties",
        "SELECT id, city, ROW_NUMBER() OVER (PARTITION BY city "
        "ORDER BY age) AS rn FROM people ORDER BY rn LIMIT 10",
    ),
    # -- SELECT * over joins, unnamed aggregates, duplicate names
    Case("star_join", "SELECT * FROM people p JOIN orders o ON o.person_id = p.id"),
    Case(
        "table_star_left_join",
        "SELECT p.*, o.amount FROM people p LEFT JOIN orders o "
        "ON o.person_id = p.id AND o.amount > 400",
    ),
    Case(
        "star_join_limit_ties",
        "SELECT * FROM people p JOIN orders o ON o.person_id = p.id ORDER BY p.city LIMIT 25",
    ),
    Case("unnamed_aggregates", "SELECT city, COUNT(*), AVG(age) FROM people GROUP BY city"),
    Case(
        "unnamed_aggregates_limit",
        "SELECT COUNT(*), active FROM people GROUP BY active ORDER BY 1 DESC LIMIT 2",
    ),
    Case("duplicate_names_grouped", "SELECT city, city, COUNT(*) FROM people GROUP BY city"),
]


def invalid_result(
    valid: TopN | Numbering, result: Counter[tuple[Any, ...]], base: Counter[tuple[Any, ...]]
) -> str | None:
    """Why ``result`` is not a valid result of a query with ties (None when it is one).

    ``base`` holds the rows of ``valid.base`` (see :class:`TopN`, :class:`Numbering`).
    """
    if isinstance(valid, TopN):
        if result - base:
            return f"rows the query cannot return: {list(result - base)[:3]}"
        keys = sorted(
            (tuple(row[i] for i in valid.key) for row in base.elements()), reverse=valid.desc
        )
        wanted = Counter(keys[valid.offset : valid.offset + valid.limit])
        got = Counter(tuple(row[i] for i in valid.key) for row in result.elements())
        if got != wanted:
            return f"the cut keeps keys {sorted(got.items())}, not {sorted(wanted.items())}"
        return None
    stripped = Counter(r[: valid.number] + r[valid.number + 1 :] for r in result.elements())
    if stripped != base:
        return "the numbered rows are not the query's rows"
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in result.elements():
        groups.setdefault(tuple(row[i] for i in valid.partition), []).append(row)
    for group, rows in groups.items():
        rows.sort(key=lambda r: r[valid.number])
        if [r[valid.number] for r in rows] != list(range(1, len(rows) + 1)):
            return f"partition {group} is not numbered 1..{len(rows)}"
        orders = [r[valid.order] for r in rows]
        if orders != sorted(orders):
            return f"partition {group} is numbered against its ORDER BY: {orders[:8]}"
    return None


KEYED_COLUMNS = [
    ("id", "bigint"),
    ("k", "bigint"),
    ("ts", "timestamp"),
    ("v", "float"),
    ("s", "text"),
]


def keyed_rows(n: int = 400) -> list[tuple[Any, ...]]:
    """Rows for the plan tests: NULL keys, int64 extremes, timestamps, negative floats."""
    extremes = [9223372036854775807, -9223372036854775808, 0, -1]
    rows = []
    for i in range(n):
        k = None if i % 9 == 0 else extremes[i % 4] if i % 50 < 4 else (i * 7919) % 1000 - 500
        rows.append(
            (
                i,
                k,
                None if i % 11 == 0 else dt.datetime(2022, 1, 1) + dt.timedelta(minutes=i * 613),
                None if i % 13 == 0 else (i % 37) * 1.5 - 20,
                STRINGS[i % len(STRINGS)],
            )
        )
    return rows

"""The query corpus: analytical SELECTs over small tables full of awkward values.

Every query is written in SQL that DuckDB, SQLite, PostgreSQL and MariaDB all accept
(``transpile_from`` marks the few written in one dialect and translated by sqlglot).
The data has NULLs in every column, negative and extreme integers, floats, decimals,
dates, timestamps, strings with separators and quotes, and duplicate rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
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
    "a|b", "a,b", 'he said "hi"', "it's", "back\\slash", "tab\tsep", "", "é ü 中文",
    "NULL", "|", "line\nbreak", "semi;colon", None,
]  # fmt: skip
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
    base = [(1, "x"), (1, "x"), (1, "x"), (2, None), (2, None), (None, None), (None, None),
            (-3, "a|b"), (-3, "a|b"), (4, ""), (None, "")]  # fmt: skip
    return base * 3


@dataclass(frozen=True)
class Case:
    """One corpus query."""

    id: str
    sql: str
    key: tuple[str, ...] | None = None
    transpile_from: str | None = None
    skip: dict[str, str] = field(default_factory=dict)
    """Engines that cannot run this query, with the reason."""

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
    Case("case_coalesce", "SELECT id, CASE WHEN age IS NULL THEN 'unknown' WHEN age < 18 THEN "
         "'minor' ELSE 'adult' END AS band, COALESCE(name, '?') AS name2 FROM people"),
    Case("guarded_division", "SELECT id, 1000 / age AS per_year FROM people WHERE age <> 0"),
    Case("constants", "SELECT 1 AS one, 'x|y' AS s, NULL AS nil"),
    Case("null_column", "SELECT NULL AS n, id FROM people WHERE id < 50"),
    Case("extreme_ints", "SELECT big, id FROM people"),
    Case("floats", "SELECT score FROM people"),
    Case("dates_timestamps", "SELECT born, seen, id FROM people WHERE born > '1960-01-01' "
         "OR seen IS NULL"),
    Case("decimals", "SELECT balance, id FROM people WHERE balance IS NULL OR balance < 0"),
    Case("booleans", "SELECT active, id FROM people"),
    Case("strings_separators", "SELECT note, order_id FROM orders WHERE note LIKE '%|%' "
         "OR note LIKE '%,%' OR note IS NULL OR note = ''"),
    Case("duplicate_rows", "SELECT a, b FROM dups"),
    Case("duplicate_rows_one_column", "SELECT b FROM dups"),
    Case("empty_table", "SELECT * FROM empty_t"),
    Case("empty_result", "SELECT id, name FROM people WHERE 1 = 0"),
    Case("in_between_like", "SELECT id FROM people WHERE id IN (1, 2, 3, 50) "
         "OR age BETWEEN 10 AND 20 OR name LIKE 'a%'"),
    Case("not_in_with_null", "SELECT id FROM people WHERE age NOT IN (SELECT a FROM dups "
         "WHERE a IS NOT NULL)"),
    Case("keyed_low_cardinality", "SELECT id, city FROM people", key=("city",)),
    Case("keyed_composite", "SELECT order_id, person_id, amount FROM orders",
         key=("person_id", "amount")),
    # -- joins
    Case("inner_join", "SELECT p.id, p.name, o.order_id, o.amount FROM people p "
         "JOIN orders o ON o.person_id = p.id"),
    Case("left_join_nulls", "SELECT p.id, o.order_id, o.note FROM people p "
         "LEFT JOIN orders o ON o.person_id = p.id AND o.amount > 200"),
    Case("join_dup_output_names", "SELECT p.id, o.order_id AS id, o.amount FROM people p "
         "JOIN orders o ON o.person_id = p.id"),
    Case("star_join_dup_names", "SELECT * FROM dups d1 JOIN dups d2 ON d1.a = d2.a"),
    Case("three_way_join", "SELECT p.city, o.order_id, d.b FROM people p JOIN orders o ON "
         "o.person_id = p.id JOIN dups d ON d.a = p.id % 5"),
    Case("self_join", "SELECT a.id, b.id AS other FROM people a JOIN people b ON "
         "a.age = b.age AND a.id < b.id"),
    # -- aggregation
    Case("group_by_having", "SELECT city, COUNT(*) AS n, MIN(age) AS youngest FROM people "
         "GROUP BY city HAVING COUNT(*) > 1"),
    Case("group_by_float_aggregates", "SELECT city, SUM(score) AS total, AVG(score) AS mean "
         "FROM people GROUP BY city"),
    Case("group_by_decimal_sum", "SELECT person_id, SUM(amount) AS total, COUNT(*) AS n "
         "FROM orders GROUP BY person_id"),
    Case("aggregate_single_row_unnamed", "SELECT COUNT(*), SUM(age), MAX(name) FROM people"),
    Case("aggregate_empty_table", "SELECT COUNT(*) AS n, MAX(a) AS m FROM empty_t"),
    Case("count_distinct", "SELECT active, COUNT(DISTINCT city) AS cities FROM people "
         "GROUP BY active"),
    Case("distinct", "SELECT DISTINCT a, b FROM dups"),
    Case("distinct_expression", "SELECT DISTINCT age % 10 AS digit FROM people"),
    # -- subqueries
    Case("scalar_subquery", "SELECT p.id, (SELECT COUNT(*) FROM orders o WHERE "
         "o.person_id = p.id) AS n_orders FROM people p"),
    Case("correlated_exists", "SELECT id, name FROM people p WHERE EXISTS (SELECT 1 FROM "
         "orders o WHERE o.person_id = p.id AND o.amount > 300)"),
    Case("derived_table", "SELECT x.city, x.n FROM (SELECT city, COUNT(*) AS n FROM people "
         "GROUP BY city) x WHERE x.n > 10"),
    Case("derived_with_total_limit", "SELECT x.id, x.age FROM (SELECT id, age FROM people "
         "ORDER BY id, age LIMIT 30) x WHERE x.age IS NOT NULL"),
    # -- CTEs
    Case("cte", "WITH t AS (SELECT person_id, SUM(amount) AS s FROM orders GROUP BY "
         "person_id) SELECT p.name, t.s FROM t JOIN people p ON p.id = t.person_id"),
    Case("cte_twice", "WITH t AS (SELECT person_id, COUNT(*) AS c FROM orders GROUP BY "
         "person_id) SELECT a.person_id, a.c, b.c AS c2 FROM t a JOIN t b ON "
         "a.person_id = b.person_id"),
    Case("recursive_cte", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
         "WHERE n < 100) SELECT n, n * n AS sq FROM r"),
    # -- windows
    Case("window_row_number", "SELECT id, city, ROW_NUMBER() OVER (PARTITION BY city "
         "ORDER BY id) AS rn FROM people"),
    Case("window_rank_lag", "SELECT id, RANK() OVER (ORDER BY age) AS r, LAG(score) OVER "
         "(ORDER BY id) AS prev FROM people"),
    Case("window_sum_decimal", "SELECT order_id, SUM(amount) OVER (PARTITION BY person_id) "
         "AS per_person FROM orders"),
    # -- set operations
    Case("union_distinct", "SELECT a FROM dups UNION SELECT age FROM people"),
    Case("union_all", "SELECT a, b FROM dups UNION ALL SELECT id, name FROM people"),
    Case("intersect", "SELECT a FROM dups INTERSECT SELECT id FROM people"),
    Case("except", "SELECT id FROM people EXCEPT SELECT a FROM dups"),
    Case("union_order_limit", "SELECT a AS v FROM dups UNION SELECT id FROM people "
         "ORDER BY 1 LIMIT 10"),
    # -- ORDER BY and LIMIT
    Case("order_by_no_limit", "SELECT id, name FROM people ORDER BY name, id"),
    Case("order_by_total_limit", "SELECT id, name FROM people ORDER BY id, name LIMIT 50"),
    Case("order_by_limit_offset", "SELECT id, age FROM people ORDER BY id, age "
         "LIMIT 20 OFFSET 5"),
    # -- quoting
    Case("quoted_mixed_case", 'SELECT id AS "Id", name AS "NAME", city AS "a b" FROM people',
         transpile_from="postgres"),
    Case("values_list", "SELECT * FROM (VALUES (1, 'a'), (2, NULL), (2, NULL)) AS v(x, y)",
         skip={"mysql": "MariaDB cannot name the columns of a VALUES derived table",
               "sqlite": "SQLite cannot name the columns of a derived table"}),
]  # fmt: skip


KEYED_COLUMNS = [("id", "bigint"), ("k", "bigint"), ("ts", "timestamp"), ("v", "float"),
                 ("s", "text")]  # fmt: skip


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

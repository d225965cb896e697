"""The engine-specific corpus: the constructs real users write on each engine.

Where ``tests/helpers/corpus.py`` holds SQL every engine accepts, this holds each engine's own
dialect: PostgreSQL's DISTINCT ON, LATERAL, FILTER, WITHIN GROUP, GROUPING SETS, arrays
and jsonb; MySQL/MariaDB's ``LIMIT offset, count``, GROUP_CONCAT, JSON functions,
STRAIGHT_JOIN, REGEXP; SQLite's json_each, CAST AS NUMERIC; DuckDB's QUALIFY, ASOF JOIN,
PIVOT, GROUP BY ALL, ``* EXCLUDE``, COLUMNS. ``tests/engines/test_corpus_engines.py`` runs every
query through every strategy that applies and compares with the engine's own result.

Every query returns one result (its ORDER BYs that decide rows are total over the data
below), so the partitions must add up to exactly the engine's own rows. A query sqlfeed
must refuse carries ``refusal``: a piece of the one-line message.

Tables: the generic corpus's (``people``, ``orders``, ``dups``, see ``tests/helpers/corpus.py``)
and ``ce_docs`` (:data:`DOCS_COLUMNS` plus an engine-specific column: PostgreSQL
``tags text[]`` and ``body jsonb``, MySQL ``body JSON``, SQLite ``body`` JSON text, DuckDB
``tags VARCHAR[]``), ``ce_ticks`` (DuckDB's ASOF JOIN). Table names are written
``{people}`` and filled in with the engine's qualified names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ENGINE_TABLES = ("people", "orders", "dups", "ce_docs", "ce_ticks")


@dataclass(frozen=True)
class EngineCase:
    """One query of one engine."""

    id: str
    engine: str
    sql: str
    key: str | None = None
    """An ordered output column range partitions may use (None: no range plan)."""
    refusal: str | None = None
    """A piece of the one-line message every strategy must refuse the query with."""
    order_dependent: bool = False
    """Its rows depend on an ORDER BY that is not the outermost one (DISTINCT ON, WITH
    TIES, ordered aggregates, windows, LIMIT in a subquery)."""

    def sql_for(self, qualify: Any) -> str:
        """The query with its table names qualified by ``qualify(name)``."""
        return self.sql.format(**{name: qualify(name) for name in ENGINE_TABLES})


def docs_rows(n: int = 60) -> list[dict[str, Any]]:
    """Rows of ``ce_docs``: ``g`` groups of 10; ``x`` differs within each group (so an
    ORDER BY g, x is total); ``name`` repeats; some NULLs."""
    rows = []
    for i in range(n):
        tags = [f"t{i % 3}", f"t{i % 5}"] if i % 7 else []
        rows.append(
            {
                "id": i,
                "g": i % 6,
                "x": (i * 7) % 13,
                "name": None if i % 11 == 0 else f"{'ab'[i % 2]}{'xy'[i % 3 % 2]}{i % 4}",
                "v": None if i % 9 == 0 else f"{(i * 37) % 100 - 20}.{i % 10}5",
                "tags": tags,
                "body": {"k": i % 4, "tags": tags, "n": {"m": i * 2}} if i % 8 else None,
            }
        )
    return rows


def ticks_rows() -> list[tuple[int, str, int, float]]:
    """``ce_ticks(id, sym, t, price)``: prices of two symbols at increasing times."""
    return [(i, "ab"[i % 2], i * 10, float(100 + i)) for i in range(40)]


# ``ce_docs`` per engine: the portable columns, then the engine's own.
DOCS_DDL = {
    "postgres": "id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, name TEXT, v TEXT, "
    "tags TEXT[], body JSONB",
    "mysql": "id INT PRIMARY KEY, g INT, x INT, name VARCHAR(20) CHARACTER SET utf8mb4 "
    "COLLATE utf8mb4_bin, v VARCHAR(20), body JSON",
    "sqlite": "id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, name TEXT, v TEXT, body TEXT",
    "duckdb": "id INTEGER PRIMARY KEY, g INTEGER, x INTEGER, name VARCHAR, v VARCHAR, "
    "tags VARCHAR[]",
}


def docs_values(engine: str) -> list[tuple[Any, ...]]:
    """The ``ce_docs`` rows as the engine's driver inserts them."""
    out = []
    for row in docs_rows():
        v = row["v"]
        if engine == "sqlite" and row["id"] % 5 == 1:
            v = str(2**53 + row["id"])  # NUMERIC keeps it exact, REAL rounds it
        base = (row["id"], row["g"], row["x"], row["name"], v)
        body = None if row["body"] is None else json.dumps(row["body"])
        if engine == "postgres":
            out.append((*base, row["tags"], body))
        elif engine == "duckdb":
            out.append((*base, row["tags"]))
        else:
            out.append((*base, body))
    return out


def _cases(engine: str, *specs: tuple[Any, ...]) -> list[EngineCase]:
    cases = []
    for spec in specs:
        name, sql, *rest = spec
        options = rest[0] if rest else {}
        cases.append(EngineCase(f"{engine}-{name}", engine, sql, **options))
    return cases


ORDERED = {"order_dependent": True}

POSTGRES = _cases(
    "postgres",
    (
        "distinct_on",
        "SELECT DISTINCT ON (g) g, x, id FROM {ce_docs} ORDER BY g, x DESC",
        {"key": "g", **ORDERED},
    ),
    (
        "distinct_on_expression",
        "SELECT DISTINCT ON (g % 3) g % 3 AS h, id, name FROM {ce_docs} ORDER BY g % 3, x, id",
        ORDERED,
    ),
    (
        "lateral_top",
        "SELECT p.id, o.order_id FROM {people} p CROSS JOIN LATERAL (SELECT "
        "order_id FROM {orders} o WHERE o.person_id = p.id ORDER BY order_id LIMIT 2) o",
        {"key": "id"},
    ),
    (
        "lateral_left",
        "SELECT p.id, s.total FROM {people} p LEFT JOIN LATERAL (SELECT "
        "SUM(amount) AS total FROM {orders} o WHERE o.person_id = p.id) s ON true",
        {"key": "id"},
    ),
    (
        "filter_clause",
        "SELECT city, COUNT(*) FILTER (WHERE age > 30) AS old, "
        "SUM(score) FILTER (WHERE active) AS s FROM {people} GROUP BY city",
    ),
    (
        "within_group",
        "SELECT g, percentile_disc(0.5) WITHIN GROUP (ORDER BY x) AS med, "
        "mode() WITHIN GROUP (ORDER BY x % 3) AS m FROM {ce_docs} GROUP BY g",
        {"key": "g"},
    ),
    (
        "window_frame_rows",
        "SELECT id, SUM(x) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 "
        "PRECEDING AND CURRENT ROW) AS s FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "window_frame_range",
        "SELECT id, AVG(x) OVER (ORDER BY id RANGE BETWEEN 5 PRECEDING "
        "AND 5 FOLLOWING) AS a FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "window_named",
        "SELECT id, rank() OVER w AS r, lag(x) OVER w AS prev FROM {ce_docs} "
        "WINDOW w AS (PARTITION BY g ORDER BY x)",
    ),
    (
        "grouping_sets",
        "SELECT city, active, COUNT(*) AS n FROM {people} "
        "GROUP BY GROUPING SETS ((city), (active), ())",
    ),
    (
        "rollup",
        "SELECT city, active, COUNT(*) AS n, GROUPING(city, active) AS gr FROM {people} "
        "GROUP BY ROLLUP (city, active)",
    ),
    ("cube", "SELECT g % 2 AS a, g % 3 AS b, SUM(x) AS s FROM {ce_docs} GROUP BY CUBE (1, 2)"),
    (
        "recursive_cte",
        "WITH RECURSIVE r(n, f) AS (SELECT 1, 1::numeric UNION ALL "
        "SELECT n + 1, f * (n + 1) FROM r WHERE n < 30) SELECT n, f FROM r",
        {"key": "n"},
    ),
    ("values", "VALUES (1, 'a'), (2, NULL), (2, NULL), (3, 'c')"),
    (
        "values_in_from",
        "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (2, 'b')) AS v(n, s)",
        {"key": "n"},
    ),
    ("unnest_in_from", "SELECT d.id, t.tag FROM {ce_docs} d, unnest(d.tags) AS t(tag)"),
    (
        "unnest_ordinality",
        "SELECT d.id, t.tag, t.i FROM {ce_docs} d CROSS JOIN LATERAL "
        "unnest(d.tags) WITH ORDINALITY AS t(tag, i)",
        {"key": "id"},
    ),
    ("generate_series", "SELECT s, s * s AS sq FROM generate_series(1, 200) AS s", {"key": "s"}),
    (
        "generate_series_join",
        "SELECT g.d::date AS day, COUNT(o.order_id) AS n FROM "
        "generate_series('2021-06-01'::timestamp, '2021-07-10', interval '1 day') AS g(d) "
        "LEFT JOIN {orders} o ON o.placed::date = g.d::date GROUP BY 1",
    ),
    (
        "array_ops",
        "SELECT id, tags, tags || ARRAY['z'] AS more, cardinality(tags) AS c, "
        "tags[1] AS first FROM {ce_docs} WHERE tags @> ARRAY['t1'] OR tags && ARRAY['t4']",
        {"key": "id"},
    ),
    (
        "jsonb_ops",
        "SELECT id, body->>'k' AS k, body #>> '{{n,m}}' AS m, body->'tags' AS tags "
        "FROM {ce_docs} WHERE body ? 'k' AND body @> '{{\"k\": 1}}'::jsonb",
        {"key": "id"},
    ),
    (
        "jsonb_agg_ordered",
        "SELECT g, jsonb_agg(id ORDER BY id) AS ids, string_agg(name, ',' "
        "ORDER BY id) AS names FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    (
        "array_agg_ordered_ties",
        "SELECT g, array_agg(x % 3 ORDER BY x % 3) AS xs FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    (
        "with_ties",
        "SELECT id, g FROM {ce_docs} ORDER BY g FETCH FIRST 7 ROWS WITH TIES",
        {"key": "id", **ORDERED},
    ),
    # An OFFSET may skip either of two tied rows, and a tie-breaker would drop the ties.
    (
        "with_ties_offset",
        "SELECT id, g FROM {ce_docs} ORDER BY g OFFSET 3 ROWS FETCH FIRST 7 ROWS WITH TIES",
        {"refusal": "may skip either of the rows that tie"},
    ),
    (
        "with_ties_offset_total",
        "SELECT id, g FROM {ce_docs} ORDER BY g, id OFFSET 3 ROWS FETCH FIRST 7 ROWS WITH TIES",
        {"key": "id", **ORDERED},
    ),
    (
        "tablesample_repeatable",
        "SELECT id, name FROM {people} TABLESAMPLE BERNOULLI (50) REPEATABLE (7)",
        {"key": "id"},
    ),
    (
        "tablesample_unseeded",
        "SELECT id FROM {people} TABLESAMPLE SYSTEM (50)",
        {"refusal": "sample"},
    ),
    (
        "materialized_cte",
        "WITH m AS MATERIALIZED (SELECT person_id, SUM(amount) AS s FROM "
        "{orders} GROUP BY person_id) SELECT p.id, m.s FROM {people} p "
        "JOIN m ON m.person_id = p.id",
        {"key": "id"},
    ),
    (
        "not_materialized_cte",
        "WITH m AS NOT MATERIALIZED (SELECT id, age FROM {people}) "
        "SELECT id, age FROM m WHERE age > 10",
        {"key": "id"},
    ),
    (
        "casts_and_numeric",
        "SELECT id, v::numeric AS n, v::numeric(8, 1) AS n1, id::text AS t "
        "FROM {ce_docs} WHERE v IS NOT NULL",
        {"key": "id"},
    ),
    (
        "ilike_regex",
        "SELECT id, name FROM {ce_docs} WHERE name ILIKE 'A%' OR name ~ '^b.1$'",
        {"key": "id"},
    ),
    ("is_distinct_from", "SELECT id FROM {people} WHERE age IS DISTINCT FROM 20", {"key": "id"}),
    (
        "date_trunc_interval",
        "SELECT date_trunc('week', placed) AS wk, COUNT(*) AS n FROM "
        "{orders} WHERE placed > timestamp '2021-06-01' + interval '3 days' GROUP BY 1",
    ),
    (
        "limit_subquery_total",
        "SELECT x.id FROM (SELECT id FROM {people} ORDER BY id LIMIT 20) x",
        {"key": "id"},
    ),
    (
        "row_number_dedupe",
        "SELECT id, g FROM (SELECT id, g, row_number() OVER (PARTITION BY g "
        "ORDER BY x DESC) AS rn FROM {ce_docs}) t WHERE rn = 1",
        {"key": "id", **ORDERED},
    ),
    ("random_refused", "SELECT id, random() AS r FROM {people}", {"refusal": "random"}),
    # -- everyday PostgreSQL spellings sqlglot may re-render
    ("distinct_order_no_limit", "SELECT DISTINCT city FROM {people} ORDER BY city"),
    ("similar_to", "SELECT id FROM {people} WHERE name SIMILAR TO 'a%'", {"key": "id"}),
    ("bool_cast", "SELECT id, (age > 10)::int AS flag FROM {people}", {"key": "id"}),
    (
        "any_array",
        "SELECT id, name FROM {people} WHERE id = ANY(ARRAY[1, 2, 3, 50])",
        {"key": "id"},
    ),
    (
        "extract_to_char",
        "SELECT id, extract(epoch FROM seen) AS e, to_char(born, 'YYYY') AS y FROM {people}",
        {"key": "id"},
    ),
    (
        "bool_aggregates",
        "SELECT city, bool_and(active) AS all_active, bool_or(active) AS any "
        "FROM {people} GROUP BY city",
    ),
    (
        "nulls_first_limit",
        "SELECT id, name FROM {people} ORDER BY name NULLS FIRST, id LIMIT 10",
        {"key": "id"},
    ),
    (
        "json_build",
        "SELECT id, json_build_object('a', id, 'n', name) AS j FROM {people}",
        {"key": "id"},
    ),
    ("row_to_json", "SELECT p.id, row_to_json(p) AS r FROM {people} p", {"key": "id"}),
    (
        "count_distinct_grouped",
        "SELECT g, count(DISTINCT x % 4) AS d FROM {ce_docs} GROUP BY g",
        {"key": "g"},
    ),
    ("nullif_division", "SELECT id, age / NULLIF(age, 0) AS one FROM {people}", {"key": "id"}),
    (
        "regex_case_insensitive",
        "SELECT id FROM {ce_docs} WHERE name ~* '^A' OR name !~ 'y'",
        {"key": "id"},
    ),
    (
        "substring_position",
        "SELECT id, substring(name FROM 1 FOR 2) AS s, position('a' IN name) AS p FROM {people}",
        {"key": "id"},
    ),
    (
        "trailing_comment",
        "SELECT id, city FROM {people} WHERE age > 20 -- adults only",
        {"key": "id"},
    ),
    (
        "collate",
        "SELECT id, name COLLATE \"C\" AS n FROM {people} WHERE city = 'Oslo'",
        {"key": "id"},
    ),
    (
        "distinct_on_limit",
        "SELECT DISTINCT ON (g) g, x, id FROM {ce_docs} ORDER BY g, x DESC LIMIT 4",
        {"key": "g", **ORDERED},
    ),
    ("dollar_quoted", "SELECT id, $$it's$$ AS s, E'a\\tb' AS e FROM {people}", {"key": "id"}),
    (
        "comment_before_limit",
        "SELECT id, name FROM {people} ORDER BY id -- by id\nLIMIT 5",
        {"key": "id"},
    ),
)

MYSQL = _cases(
    "mysql",
    ("limit_offset_count", "SELECT id, name FROM {people} ORDER BY id LIMIT 5, 10", {"key": "id"}),
    (
        "group_concat_ordered",
        "SELECT g, GROUP_CONCAT(name ORDER BY id SEPARATOR ';') AS names FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    (
        "group_concat_distinct",
        "SELECT g, GROUP_CONCAT(DISTINCT x % 4 ORDER BY x % 4) AS xs FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    (
        "group_concat_unordered",
        "SELECT g, GROUP_CONCAT(name) AS names FROM {ce_docs} GROUP BY g",
        {"refusal": "GROUP_CONCAT"},
    ),
    (
        "json_extract",
        "SELECT id, JSON_EXTRACT(body, '$.k') AS k, JSON_UNQUOTE(JSON_EXTRACT("
        "body, '$.n.m')) AS m, JSON_VALUE(body, '$.k') AS k2 FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "json_object",
        "SELECT id, JSON_OBJECT('id', id, 'g', g) AS o, JSON_ARRAY(g, x) AS a FROM "
        "{ce_docs} WHERE JSON_CONTAINS(body, '1', '$.k')",
        {"key": "id"},
    ),
    (
        "json_arrayagg_grouped",
        "SELECT g, JSON_ARRAYAGG(id ORDER BY id) AS ids FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    (
        "json_table",
        "SELECT d.id, j.tag FROM {ce_docs} d, JSON_TABLE(d.body, '$.tags[*]' "
        "COLUMNS (tag VARCHAR(10) PATH '$')) AS j",
        {"key": "id"},
    ),
    (
        "straight_join",
        "SELECT STRAIGHT_JOIN p.id, o.order_id FROM {people} p JOIN {orders} o "
        "ON o.person_id = p.id",
        {"key": "id"},
    ),
    (
        "straight_join_operator",
        "SELECT p.id, o.amount FROM {people} p STRAIGHT_JOIN {orders} o "
        "ON o.person_id = p.id WHERE o.amount > 100",
        {"key": "id"},
    ),
    ("regexp", "SELECT id, name FROM {ce_docs} WHERE name REGEXP '^a.'", {"key": "id"}),
    ("rlike", "SELECT id FROM {ce_docs} WHERE name RLIKE 'y[0-2]$'", {"key": "id"}),
    ("not_regexp", "SELECT id FROM {ce_docs} WHERE name NOT REGEXP '^b'", {"key": "id"}),
    ("from_dual", "SELECT 1 AS one, 'x' AS s FROM DUAL"),
    ("from_dual_where", "SELECT 2 AS two FROM DUAL WHERE 1 = 1"),
    (
        "ifnull_if",
        "SELECT id, IFNULL(age, -1) AS a, IF(active, 'y', 'n') AS act FROM {people}",
        {"key": "id"},
    ),
    (
        "div_mod_nullsafe",
        "SELECT id, age DIV 7 AS d, age MOD 7 AS m FROM {people} WHERE age <=> NULL OR age > 40",
        {"key": "id"},
    ),
    (
        "backticks",
        "SELECT `id`, `name` AS `the name` FROM {people} WHERE `city` = 'Oslo'",
        {"key": "id"},
    ),
    (
        "date_format",
        "SELECT order_id, DATE_FORMAT(placed, '%Y-%m') AS ym FROM {orders}",
        {"key": "order_id"},
    ),
    (
        "cast_char_signed",
        "SELECT id, CAST(g AS CHAR) AS a, CAST(v AS DECIMAL(8,2)) AS d, "
        "CAST(x AS SIGNED) AS s FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "window_functions",
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY g ORDER BY x) AS rn, "
        "SUM(x) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS s FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "cte_recursive",
        "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
        "WHERE n < 50) SELECT n FROM r",
        {"key": "n"},
    ),
    ("rollup", "SELECT city, COUNT(*) AS n FROM {people} GROUP BY city WITH ROLLUP"),
    (
        "limit_in_subquery",
        "SELECT t.id FROM (SELECT id FROM {people} ORDER BY id LIMIT 3, 30) t",
        {"key": "id"},
    ),
    ("rand_refused", "SELECT id, RAND() AS r FROM {people}", {"refusal": "RAND"}),
    # -- everyday MySQL/MariaDB spellings sqlglot may re-render
    ("sql_no_cache", "SELECT SQL_NO_CACHE id, city FROM {people}", {"key": "id"}),
    (
        "force_index",
        "SELECT id, x FROM {ce_docs} FORCE INDEX (PRIMARY) WHERE id > 5",
        {"key": "id"},
    ),
    ("concat_ws", "SELECT id, CONCAT_WS('-', name, city) AS s FROM {people}", {"key": "id"}),
    (
        "date_add_interval",
        "SELECT order_id, DATE_ADD(placed, INTERVAL 1 DAY) AS d FROM {orders}",
        {"key": "order_id"},
    ),
    (
        "bit_or",
        "SELECT g, BIT_OR(x) AS b, BIT_XOR(x) AS bx FROM {ce_docs} GROUP BY g",
        {"key": "g"},
    ),
    ("xor_shift", "SELECT id, x XOR 1 AS xx, x << 2 AS sh FROM {ce_docs}", {"key": "id"}),
    ("convert_char", "SELECT id, CONVERT(x, CHAR) AS c FROM {ce_docs}", {"key": "id"}),
    ("distinct_order_no_limit", "SELECT DISTINCT city FROM {people} ORDER BY city"),
    ("like_escape", "SELECT id FROM {people} WHERE name LIKE 'a!|%' ESCAPE '!'", {"key": "id"}),
    ("hash_comment", "SELECT id, city FROM {people} WHERE age > 20 # adults only", {"key": "id"}),
    (
        "group_by_having_alias",
        "SELECT city, COUNT(*) AS n FROM {people} GROUP BY city HAVING n > 40",
    ),
    ("for_update_refused", "SELECT id FROM {people} FOR UPDATE", {"refusal": "lock"}),
    # tie-breakers spliced into the user's own text (sqlglot would write REGEXP_LIKE)
    (
        "regexp_top",
        "SELECT id, name FROM {ce_docs} WHERE name REGEXP '^a' OR x > 6 ORDER BY g, x LIMIT 2, 9",
        {"key": "id"},
    ),
    ("double_quoted_string", 'SELECT id, name FROM {people} WHERE city = "Oslo"', {"key": "id"}),
    ("adjacent_literals", "SELECT id, 'a' 'b' AS s FROM {people}", {"key": "id"}),
)

SQLITE = _cases(
    "sqlite",
    (
        "json_each",
        "SELECT d.id, j.value AS tag FROM {ce_docs} d, json_each(d.body, '$.tags') j",
        {"key": "id"},
    ),
    (
        "json_each_key",
        "SELECT d.id, j.key, j.type FROM {ce_docs} d, json_each(d.body) AS j "
        "WHERE j.type <> 'null'",
        {"key": "id"},
    ),
    (
        "json_extract",
        "SELECT id, json_extract(body, '$.n.m') AS m, body ->> '$.k' AS k FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "group_concat_unordered",
        "SELECT g, group_concat(name, ';') AS names FROM {ce_docs} GROUP BY g",
        {"refusal": "GROUP_CONCAT"},
    ),
    (
        "group_concat_ordered_subquery",
        "SELECT g, group_concat(name, ';') AS names FROM "
        "(SELECT g, name FROM {ce_docs} ORDER BY g, id) GROUP BY g",
        {"refusal": "GROUP_CONCAT"},
    ),
    (
        "window_row_number",
        "SELECT id, row_number() OVER (PARTITION BY g ORDER BY x) AS rn FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "window_frame",
        "SELECT id, sum(x) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND "
        "CURRENT ROW) AS s, lag(name) OVER (ORDER BY id) AS prev FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "window_groups_filter",
        "SELECT id, count(*) FILTER (WHERE x > 5) OVER (PARTITION BY g) AS big FROM {ce_docs}",
        {"key": "id"},
    ),
    ("cast_numeric", "SELECT id, CAST(v AS NUMERIC) AS n FROM {ce_docs}", {"key": "id"}),
    (
        "cast_numeric_grouped",
        "SELECT g, SUM(CAST(v AS NUMERIC)) AS s FROM {ce_docs} GROUP BY g",
        {"key": "g"},
    ),
    (
        "cast_integer_text",
        "SELECT id, CAST(v AS INTEGER) AS i, CAST(id AS TEXT) AS t FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "iif_printf",
        "SELECT id, iif(age > 30, 'old', 'young') AS band, printf('%05d', id) AS p FROM {people}",
        {"key": "id"},
    ),
    (
        "concat_glob",
        "SELECT id, name || '-' || city AS nc FROM {people} WHERE name GLOB '[a-c]*'",
        {"key": "id"},
    ),
    (
        "strftime",
        "SELECT order_id, strftime('%Y-%m', placed) AS ym FROM {orders}",
        {"key": "order_id"},
    ),
    ("typeof_affinity", "SELECT id, typeof(v) AS t, v + 0 AS n FROM {ce_docs}", {"key": "id"}),
    (
        "recursive_cte",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r "
        "WHERE n < 60) SELECT n FROM r",
        {"key": "n"},
    ),
    ("values", "VALUES (1, 'a'), (2, NULL), (2, NULL)"),
    ("limit_offset_comma", "SELECT id FROM {people} ORDER BY id LIMIT 5, 20", {"key": "id"}),
    ("random_refused", "SELECT id, random() AS r FROM {people}", {"refusal": "random"}),
    # -- everyday SQLite spellings sqlglot may re-render
    ("not_indexed", "SELECT id, x FROM {ce_docs} NOT INDEXED WHERE x > 3", {"key": "id"}),
    ("rowid_output", "SELECT rowid AS r, id FROM {ce_docs}", {"key": "id"}),
    (
        "ifnull_substr_instr",
        "SELECT id, ifnull(name, '?') AS n, substr(name, 1, 2) AS s, "
        "instr(name, 'a') AS i FROM {people}",
        {"key": "id"},
    ),
    ("is_not", "SELECT id, x FROM {ce_docs} WHERE x IS NOT 3", {"key": "id"}),
    ("cast_real", "SELECT id, CAST(v AS REAL) AS r, v * 1.0 AS f FROM {ce_docs}", {"key": "id"}),
    ("total_avg", "SELECT g, total(x) AS t, avg(x) AS a FROM {ce_docs} GROUP BY g", {"key": "g"}),
    ("like_escape", "SELECT id FROM {people} WHERE name LIKE 'a!|%' ESCAPE '!'", {"key": "id"}),
    ("distinct_order_desc", "SELECT DISTINCT g FROM {ce_docs} ORDER BY g DESC"),
    (
        "trailing_comment",
        "SELECT id, x FROM {ce_docs} WHERE x IN (SELECT x FROM {ce_docs} "
        "WHERE g = 1) -- the same x as group 1",
        {"key": "id"},
    ),
    ("julianday", "SELECT order_id, julianday(placed) AS j FROM {orders}", {"key": "order_id"}),
    # tie-breakers spliced into the user's own text (sqlglot would write REAL)
    (
        "cast_numeric_top",
        "SELECT g, x, CAST(v AS NUMERIC) AS n FROM {ce_docs} ORDER BY x, g LIMIT 9",
        {"key": "g"},
    ),
    ("bracket_identifier", 'SELECT id, [name] AS n, "city" AS c FROM {people}', {"key": "id"}),
    ("double_quoted_string", 'SELECT id FROM {people} WHERE city = "Oslo"', {"key": "id"}),
)

DUCKDB = _cases(
    "duckdb",
    (
        "qualify",
        "SELECT id, g, x FROM {ce_docs} QUALIFY row_number() OVER (PARTITION BY g "
        "ORDER BY x DESC) = 1",
        {"key": "id"},
    ),
    (
        "qualify_rank_ties",
        "SELECT id, g FROM {ce_docs} QUALIFY rank() OVER (PARTITION BY g ORDER BY x % 3) = 1",
        {"key": "id"},
    ),
    (
        "asof_join",
        "SELECT a.id, a.sym, b.price FROM {ce_ticks} a ASOF JOIN {ce_ticks} b "
        "ON a.sym <> b.sym AND a.t >= b.t",
        {"key": "id"},
    ),
    (
        "pivot",
        "PIVOT (SELECT g, x % 2 AS parity, x FROM {ce_docs}) ON parity USING sum(x) GROUP BY g",
    ),
    (
        "pivot_select",
        "SELECT * FROM (PIVOT (SELECT g, x % 2 AS parity, x FROM {ce_docs}) "
        "ON parity IN (0, 1) USING count(*) GROUP BY g)",
        {"key": "g"},
    ),
    ("unpivot", "UNPIVOT (SELECT id, g, x FROM {ce_docs}) ON g, x INTO NAME col VALUE val"),
    (
        "group_by_all",
        "SELECT g, x % 2 AS p, count(*) AS n FROM {ce_docs} GROUP BY ALL",
        {"key": "g"},
    ),
    ("order_by_all_limit", "SELECT id, g FROM {ce_docs} ORDER BY ALL LIMIT 10", {"key": "id"}),
    ("star_exclude", "SELECT * EXCLUDE (name, v) FROM {ce_docs}", {"key": "id"}),
    ("star_replace", "SELECT * REPLACE (x * 10 AS x) FROM {ce_docs}", {"key": "id"}),
    ("columns_regex", "SELECT COLUMNS('^(id|g)$') FROM {ce_docs}", {"key": "id"}),
    (
        "columns_lambda",
        "SELECT id, max(COLUMNS(lambda c: c IN ('x', 'g'))) FROM {ce_docs} GROUP BY id",
        {"key": "id"},
    ),
    (
        "sample_seeded",
        "SELECT id, name FROM {people} USING SAMPLE 50% (bernoulli, 7)",
        {"key": "id"},
    ),
    ("sample_unseeded", "SELECT id FROM {people} USING SAMPLE 10%", {"refusal": "sample"}),
    (
        "distinct_on",
        "SELECT DISTINCT ON (g) g, x, id FROM {ce_docs} ORDER BY g, x DESC",
        {"key": "g", **ORDERED},
    ),
    (
        "list_ops",
        "SELECT id, tags, len(tags) AS n, list_contains(tags, 't1') AS has, "
        "tags[1] AS first FROM {ce_docs}",
        {"key": "id"},
    ),
    ("unnest_list", "SELECT id, unnest(tags) AS tag FROM {ce_docs}", {"key": "id"}),
    (
        "list_comprehension",
        "SELECT id, [t || '!' FOR t IN tags IF t <> 't0'] AS l FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "struct_and_map",
        "SELECT id, {{'g': g, 'x': x}} AS s, map([g], [x]) AS m FROM {ce_docs}",
        {"key": "id"},
    ),
    ("from_first", "FROM {ce_docs} SELECT id, g WHERE x > 6", {"key": "id"}),
    (
        "string_agg_ordered",
        "SELECT g, string_agg(name, ',' ORDER BY id) AS names FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    ("arg_max", "SELECT g, arg_max(id, x) AS top FROM {ce_docs} GROUP BY g", {"key": "g"}),
    (
        "first_ordered",
        "SELECT g, first(id ORDER BY x DESC) AS top FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    ("range_table_function", "SELECT r AS n, r * 2 AS d FROM range(0, 300) t(r)", {"key": "n"}),
    (
        "cast_shorthand",
        "SELECT id, v::DECIMAL(8, 2) AS d, x::VARCHAR AS s FROM {ce_docs}",
        {"key": "id"},
    ),
    ("random_refused", "SELECT id, random() AS r FROM {people}", {"refusal": "random"}),
    # -- everyday DuckDB spellings sqlglot may re-render
    ("integer_division", "SELECT id, x // 2 AS h, x % 3 AS m FROM {ce_docs}", {"key": "id"}),
    (
        "list_sort_slice",
        "SELECT id, list_sort(tags) AS s, tags[1:1] AS slice FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "try_cast",
        "SELECT id, x::INTEGER AS i, TRY_CAST(v AS DOUBLE) AS d FROM {ce_docs}",
        {"key": "id"},
    ),
    (
        "list_ordered",
        "SELECT g, list(x ORDER BY x) AS xs FROM {ce_docs} GROUP BY g",
        {"key": "g", **ORDERED},
    ),
    ("histogram", "SELECT g, histogram(x % 3) AS h FROM {ce_docs} GROUP BY g", {"key": "g"}),
    ("regexp_matches", "SELECT id, regexp_matches(name, '^a') AS m FROM {people}", {"key": "id"}),
    ("alias_in_where", "SELECT id, x > 5 AS big FROM {ce_docs} WHERE big", {"key": "id"}),
    ("lateral_alias", "SELECT id, x * 2 AS d, d + 1 AS e FROM {ce_docs}", {"key": "id"}),
    (
        "order_limit_offset",
        "SELECT id, g FROM {ce_docs} ORDER BY g, id LIMIT 5 OFFSET 2",
        {"key": "id"},
    ),
    (
        "strftime",
        "SELECT order_id, strftime(placed, '%Y-%m') AS ym FROM {orders}",
        {"key": "order_id"},
    ),
    ("columns_exclude", "SELECT COLUMNS(* EXCLUDE (name, v, tags)) FROM {ce_docs}", {"key": "id"}),
    ("starts_with_operator", "SELECT id, name FROM {people} WHERE name ^@ 'a'", {"key": "id"}),
    ("positional_refs", "SELECT id, g FROM {ce_docs} ORDER BY #2, #1 LIMIT 5", {"key": "id"}),
)

ENGINE_CORPUS: dict[str, list[EngineCase]] = {
    "postgres": POSTGRES,
    "mysql": MYSQL,
    "sqlite": SQLITE,
    "duckdb": DUCKDB,
}
"""Every engine's queries."""

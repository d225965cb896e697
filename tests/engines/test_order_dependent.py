"""Constructs whose rows depend on an ORDER BY, on every real engine that has them.

``DISTINCT ON``, ``FETCH ... WITH TIES``, order-sensitive aggregates (``string_agg``,
``GROUP_CONCAT``, ``first``, ...), window functions over an order that ties and a LIMIT
inside a subquery or CTE: the partitions of every strategy, at every M, must add up to
exactly the engine's own result (a result SQL leaves open is first made one by
tie-breakers, and checked to be a valid one), or sqlfeed must refuse the query with one
line that says why. The hash or range filter never goes inside such a query.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import sqlfeed
from sqlfeed.dialects import UnstableQueryError, UnsupportedError
from sqlfeed.sql import (
    complete_orders,
    grouped_table,
    parse,
    range_pushdown,
    schema_sql,
    single_table,
)
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.corpus import Numbering, TopN, invalid_result
from tests.helpers.engines import Engine, multiset

pytestmark = pytest.mark.engine

TABLE = "od_rows"
COLUMNS = [("id", "int"), ("g", "int"), ("x", "int"), ("s", "text")]
M_VALUES = (1, 5, 64)
Rows = Counter[tuple[Any, ...]]


def od_rows() -> list[tuple[Any, ...]]:
    """60 rows: 6 groups (one NULL), many rows tied on ``x`` in each group, unique ids."""
    return [(i, None if i % 6 == 5 else i % 6, (i * 7) % 5, f"s{i:02d}") for i in range(60)]


@pytest.fixture
def od(engine: Engine) -> Engine:
    """The engine with :data:`TABLE` loaded (once per engine connection)."""
    if not getattr(engine, "_od_loaded", False):
        engine.create_table(TABLE, COLUMNS, od_rows())
        engine._od_loaded = True  # type: ignore[attr-defined]
    return engine


def first_per_group(descending: bool | None) -> Callable[[Engine, Rows], str | None]:
    """A valid DISTINCT ON (g) ... ORDER BY g, x [DESC] result: one row per group, each a
    row of the table whose x is the group's largest (smallest; any with None)."""

    def check(engine: Engine, rows: Rows) -> str | None:
        table = multiset(engine.rows(f"SELECT g, x, s FROM {TABLE}"))
        if rows - table:
            return f"rows the table does not have: {list(rows - table)[:3]}"
        best: dict[Any, int] = {}
        for g, x, _ in table:
            best[g] = x if g not in best else (max if descending else min)(best[g], x)
        groups = Counter(g for g, _, _ in rows.elements())
        if groups != Counter(best.keys()):
            return f"not one row per group: {sorted(groups.items(), key=str)}"
        wrong = [row for row in rows if descending is not None and row[1] != best[row[0]]]
        return f"rows not first in their group: {wrong[:3]}" if wrong else None

    return check


def same_elements(base_sql: str) -> Callable[[Engine, Rows], str | None]:
    """A valid concatenation per group ``g``: the values ``base_sql`` gives for the group
    (``g, value`` rows), in some order."""

    def check(engine: Engine, rows: Rows) -> str | None:
        base: dict[Any, list[str]] = {}
        for g, value in engine.rows(base_sql.format(t=TABLE)):
            base.setdefault(g, []).append(str(value))
        wanted = Counter((g, tuple(sorted(values))) for g, values in base.items())
        got = Counter((g, tuple(sorted(str(v).split(",")))) for g, v in rows.elements())
        return None if got == wanted else f"other values than the query's: {got - wanted}"

    return check


def same_json(base_sql: str) -> Callable[[Engine, Rows], str | None]:
    """A valid JSON aggregate per group ``g``: an array of the values ``base_sql`` gives
    for the group (``g, value`` rows) in some order, or the object of its ``g, key, value``
    rows."""

    def check(engine: Engine, rows: Rows) -> str | None:
        base: dict[Any, list[Any]] = {}
        for g, *value in engine.rows(base_sql.format(t=TABLE)):
            base.setdefault(g, []).append(value)
        for g, text in rows.elements():
            found = json.loads(text)
            if isinstance(found, dict):
                wanted: Any = {k: v for k, v in base.get(g, [])}
            else:
                found, wanted = sorted(found), sorted(v for (v,) in base.get(g, []))
            if found != wanted:
                return f"group {g}: {found} is not made of the query's values {wanted}"
        return None

    return check


def valid_by(spec: TopN | Numbering) -> Callable[[Engine, Rows], str | None]:
    def check(engine: Engine, rows: Rows) -> str | None:
        return invalid_result(spec, rows, multiset(engine.rows(spec.base.format(t=TABLE))))

    return check


@dataclass(frozen=True)
class Construct:
    """One order-dependent query, per engine (``{t}`` is the table)."""

    id: str
    sql: dict[str, str]
    valid: Callable[[Engine, Rows], str | None] | None = None
    """For a query SQL lets return several results: whether a result is a valid one
    (else the partitions must equal the engine's own result exactly)."""
    refused: dict[str, str] = field(default_factory=dict)
    """Engines where sqlfeed refuses it: a pattern of the one-line reason."""


PG_DUCK = ("postgres", "duckdb")
ALL = ("duckdb", "sqlite", "postgres", "mysql")


def on(engines: tuple[str, ...], sql: str) -> dict[str, str]:
    return dict.fromkeys(engines, sql)


KEPT: list[Construct] = [
    # DISTINCT ON: the ORDER BY decides which row each group keeps.
    Construct(
        "distinct_on_total_order",
        on(PG_DUCK, "SELECT DISTINCT ON (g) g, x, s FROM {t} ORDER BY g, x DESC, s"),
    ),
    Construct(
        "distinct_on_ties",
        on(PG_DUCK, "SELECT DISTINCT ON (g) g, x, s FROM {t} ORDER BY g, x DESC"),
        valid=first_per_group(descending=True),
    ),
    Construct(
        "distinct_on_without_order",
        on(PG_DUCK, "SELECT DISTINCT ON (g) g, x, s FROM {t}"),
        valid=first_per_group(descending=None),
    ),
    Construct(
        "distinct_on_in_cte",
        on(
            PG_DUCK,
            "WITH c AS (SELECT DISTINCT ON (g) g, x, s "
            "FROM {t} ORDER BY g, x) SELECT g, x, s FROM c WHERE x >= 0",
        ),
        valid=first_per_group(descending=False),
    ),
    Construct(
        "distinct_on_star",
        on(
            PG_DUCK,
            "SELECT DISTINCT ON (g) g, x, s FROM (SELECT "
            "DISTINCT ON (g) * FROM {t} ORDER BY g, x) q",
        ),
        valid=first_per_group(False),
    ),
    Construct(
        "distinct_on_limit",
        on(PG_DUCK, "SELECT DISTINCT ON (g) g, x, s FROM {t} ORDER BY g, x DESC, s LIMIT 4"),
    ),
    # FETCH ... WITH TIES keeps every row tied with the last one: one result.
    Construct(
        "with_ties",
        on(("postgres",), "SELECT x, s FROM {t} ORDER BY x FETCH FIRST 5 ROWS WITH TIES"),
    ),
    Construct(
        "with_ties_offset_total",
        on(
            ("postgres",), "SELECT x FROM {t} ORDER BY x OFFSET 3 ROWS FETCH FIRST 5 ROWS WITH TIES"
        ),
    ),
    Construct(
        "with_ties_mariadb",
        on(("mysql",), "SELECT x, s FROM {t} ORDER BY x FETCH FIRST 5 ROWS WITH TIES"),
    ),
    Construct(
        "with_ties_in_subquery_mariadb",
        on(
            ("mysql",),
            "SELECT q.x, COUNT(*) AS n "
            "FROM (SELECT x, s FROM {t} ORDER BY x FETCH FIRST 2 ROWS WITH TIES) q "
            "GROUP BY q.x",
        ),
    ),
    Construct(
        "with_ties_in_subquery",
        on(
            ("postgres",),
            "SELECT q.x, COUNT(*) AS n FROM "
            "(SELECT x, s FROM {t} ORDER BY x FETCH FIRST 2 ROWS WITH TIES) q GROUP BY q.x",
        ),
    ),
    # Ordered aggregates: completed with the aggregated value (without DISTINCT).
    Construct(
        "string_agg_ties",
        {
            "postgres": "SELECT g, string_agg(s, ',' ORDER BY x) AS v FROM {t} GROUP BY g",
            "duckdb": "SELECT g, listagg(s, ',' ORDER BY x) AS v FROM {t} GROUP BY g",
        },
        valid=same_elements("SELECT g, s FROM {t}"),
    ),
    Construct(
        "group_concat_ties",
        on(
            ("mysql",),
            "SELECT g, GROUP_CONCAT(s ORDER BY x SEPARATOR ',') AS v FROM {t} GROUP BY g",
        ),
        valid=same_elements("SELECT g, s FROM {t}"),
    ),
    Construct(
        "string_agg_distinct",
        on(PG_DUCK, "SELECT g, string_agg(DISTINCT s, ',' ORDER BY s) AS v FROM {t} GROUP BY g"),
    ),
    Construct(
        "group_concat_distinct",
        on(("mysql",), "SELECT g, GROUP_CONCAT(DISTINCT s ORDER BY s) AS v FROM {t} GROUP BY g"),
    ),
    Construct(
        "array_agg_distinct",
        {
            "postgres": "SELECT g, array_to_string(array_agg("
            "DISTINCT x ORDER BY x), ',') AS v FROM {t} GROUP BY g",
            "duckdb": "SELECT g, array_to_string(list(DISTINCT x ORDER BY x), ',') AS v "
            "FROM {t} GROUP BY g",
        },
    ),
    Construct(
        "first_ordered",
        on(
            ("duckdb",),
            "SELECT g, first(s ORDER BY id DESC) AS f, last(x ORDER BY s) AS l FROM {t} GROUP BY g",
        ),
    ),
    Construct(
        "json_agg_ordered",
        on(("postgres",), "SELECT g, json_agg(s ORDER BY id)::text AS v FROM {t} GROUP BY g"),
    ),
    Construct(
        "jsonb_agg_ties",
        on(("postgres",), "SELECT g, jsonb_agg(s ORDER BY x)::text AS v FROM {t} GROUP BY g"),
        valid=same_json("SELECT g, s FROM {t}"),
    ),
    Construct(
        "json_object_agg_ties",
        on(
            ("postgres",),
            "SELECT g, json_object_agg(s, x ORDER BY x)::text AS v FROM {t} GROUP BY g",
        ),
        valid=same_json("SELECT g, s, x FROM {t}"),
    ),
    Construct(
        "json_arrayagg_ties",
        on(("mysql",), "SELECT g, JSON_ARRAYAGG(s ORDER BY x) AS v FROM {t} GROUP BY g"),
        valid=same_json("SELECT g, s FROM {t}"),
    ),
    # Windows over an order that ties: completed with the other values they show.
    Construct(
        "row_number_ties",
        on(ALL, "SELECT x, g, s, ROW_NUMBER() OVER (PARTITION BY g ORDER BY x) AS rn FROM {t}"),
        valid=valid_by(Numbering("SELECT x, g, s FROM {t}", (1,), 0, 3)),
    ),
    Construct(
        "qualify_first_per_group",
        on(
            ("duckdb",),
            "SELECT g, x, s FROM {t} QUALIFY "
            "ROW_NUMBER() OVER (PARTITION BY g ORDER BY x DESC) = 1",
        ),
        valid=first_per_group(descending=True),
    ),
    # DuckDB's GROUP BY ALL groups by every output item not aggregated; ORDER BY ALL
    # orders by every output column (total: nothing to add).
    Construct(
        "group_by_all_limit",
        on(("duckdb",), "SELECT g, x, COUNT(*) AS n FROM {t} GROUP BY ALL ORDER BY x LIMIT 4"),
        valid=valid_by(TopN("SELECT g, x, COUNT(*) AS n FROM {t} GROUP BY g, x", (1,), 4)),
    ),
    Construct("order_by_all_limit", on(("duckdb",), "SELECT x, s FROM {t} ORDER BY ALL LIMIT 10")),
    Construct(
        "order_by_all_star_limit", on(("duckdb",), "SELECT * FROM {t} ORDER BY ALL LIMIT 10")
    ),
    # A LIMIT inside a subquery or CTE that cuts between tied rows.
    Construct(
        "limit_in_cte",
        on(ALL, "WITH top AS (SELECT x, g, s FROM {t} ORDER BY x LIMIT 7) SELECT x, g, s FROM top"),
        valid=valid_by(TopN("SELECT x, g, s FROM {t}", (0,), 7)),
    ),
    Construct(
        "limit_in_subquery",
        on(ALL, "SELECT q.x, q.s FROM (SELECT x, s FROM {t} ORDER BY x DESC LIMIT 9 OFFSET 2) q"),
        valid=valid_by(TopN("SELECT x, s FROM {t}", (0,), 9, 2, desc=True)),
    ),
]

_UNORDERED = r"without ORDER BY .*add ORDER BY inside the aggregate"
REFUSED: list[Construct] = [
    Construct(
        "array_agg_unordered",
        on(PG_DUCK, "SELECT g, array_agg(x) AS v FROM {t} GROUP BY g"),
        refused=dict.fromkeys(PG_DUCK, r"array_agg\(\) " + _UNORDERED),
    ),
    Construct(
        "string_agg_unordered",
        on(PG_DUCK, "SELECT g, string_agg(s, ',') AS v FROM {t} GROUP BY g"),
        refused=dict.fromkeys(PG_DUCK, r"string_agg\(\) " + _UNORDERED),
    ),
    Construct(
        "json_agg_unordered",
        on(("postgres",), "SELECT g, json_agg(x) AS v FROM {t} GROUP BY g"),
        refused={"postgres": r"json_agg\(\) " + _UNORDERED},
    ),
    Construct(
        "list_unordered",
        on(("duckdb",), "SELECT g, list(x) AS v FROM {t} GROUP BY g"),
        refused={"duckdb": r"list\(\) " + _UNORDERED},
    ),
    Construct(
        "first_unordered",
        on(("duckdb",), "SELECT g, first(s) AS f FROM {t} GROUP BY g"),
        refused={
            "duckdb": r"first\(\) without ORDER BY picks the value of an arbitrary "
            "row; add ORDER BY inside the aggregate"
        },
    ),
    Construct(
        "group_concat_unordered",
        on(("mysql", "sqlite", "duckdb"), "SELECT g, GROUP_CONCAT(s) AS v FROM {t} GROUP BY g"),
        refused={
            "mysql": r"GROUP_CONCAT\(\) " + _UNORDERED,
            "duckdb": r"GROUP_CONCAT\(\) " + _UNORDERED,
            "sqlite": r"GROUP_CONCAT\(\) " + _UNORDERED + r" \(needs SQLite 3\.44",
        },
    ),
    Construct(
        "group_concat_distinct_other_order",
        on(("mysql",), "SELECT g, GROUP_CONCAT(DISTINCT x ORDER BY s) AS v FROM {t} GROUP BY g"),
        refused={"mysql": r"orders its DISTINCT values by other expressions"},
    ),
    Construct(
        "with_ties_offset",
        on(
            ("postgres", "mysql"),
            "SELECT x, s FROM {t} ORDER BY x OFFSET 3 ROWS FETCH FIRST 5 ROWS WITH TIES",
        ),
        refused=dict.fromkeys(
            ("postgres", "mysql"),
            r"may skip either of the rows that tie on its ORDER BY "
            r"\(sqlfeed cannot complete it: a tie-breaker would change which rows "
            "WITH TIES keeps",
        ),
    ),
]


def qualified(engine: Engine, sql: str) -> str:
    """``sql`` with the test table named as another connection to the engine sees it."""
    return sql.format(t=engine.qualify(TABLE))


def plan_rows(engine: Engine, source: Any, sql: str, m: int, strategy: str) -> Rows:
    """The rows of all the partitions of one plan (none in two partitions)."""
    options: dict[str, Any] = {"strategy": strategy}
    if strategy == "materialize":
        options["scratch"] = engine.scratch
    planned = sqlfeed.plan(sql, source, partitions=m, **options)
    try:
        union: Rows = Counter()
        for partition in planned.partitions:
            rows = multiset(engine.rows(partition.sql))
            union.update(rows)
    finally:
        sqlfeed.plans.drop_scratch(planned, source)
    return union


@pytest.mark.parametrize("strategy", ["hash", "materialize"])
@pytest.mark.parametrize("construct", KEPT, ids=lambda c: c.id)
def test_partitions_add_up_to_the_engines_result(
    od: Engine, construct: Construct, strategy: str
) -> None:
    if od.name not in construct.sql:
        pytest.skip(f"not an engine gap: {od.name}'s SQL has no such construct")
    text = construct.sql[od.name].format(t=TABLE)
    parsed = parse(text, od.name)
    if construct.valid is None:
        expected = multiset(od.rows(text))  # one result (as the rows are)
    else:
        completion = complete_orders(parsed, columns=od.columns(schema_sql(parsed)))
        # The order that ties is named (strict) and completed with tie-breakers.
        assert completion.completed
        assert completion.ties
        assert sqlfeed.unstable_reasons(text, od.name, strict=True)
        expected = multiset(od.rows(parsed.dialect.sql(completion.parsed.tree)))
        problem = construct.valid(od, expected)
        assert problem is None, problem
    sql = qualified(od, construct.sql[od.name])
    with od.source() as source:
        for m in M_VALUES:
            got = plan_rows(od, source, sql, m, strategy)
            extra, missing = list(got - expected)[:3], list(expected - got)[:3]
            assert got == expected, f"M={m}: extra rows {extra}, missing rows {missing}"


@pytest.mark.parametrize("construct", REFUSED, ids=lambda c: c.id)
def test_refused_with_the_reason(od: Engine, construct: Construct) -> None:
    if od.name not in construct.sql:
        pytest.skip(f"not an engine gap: {od.name}'s SQL has no such construct")
    text = construct.sql[od.name].format(t=TABLE)
    pattern = construct.refused[od.name]
    reasons = sqlfeed.unstable_reasons(text, od.name, strict=False)
    assert any(re.search(pattern, r) for r in reasons), reasons
    with od.source() as source, pytest.raises(UnstableQueryError) as refused:
        sqlfeed.plan(qualified(od, construct.sql[od.name]), source, partitions=5)
    message = str(refused.value)
    assert re.search(pattern, message), message
    assert "\n" not in message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x FROM od_rows ORDER BY x FETCH FIRST 3 ROWS WITH TIES",
        "SELECT * FROM (SELECT x FROM od_rows ORDER BY x OFFSET 1 ROWS "
        "FETCH NEXT 3 ROWS WITH TIES) q",
    ],
)
def test_with_ties_on_duckdb_is_refused(sql: str) -> None:
    """DuckDB has no FETCH ... WITH TIES, and sqlglot reads it as a plain LIMIT: refused
    before anything runs, never a silent LIMIT (MariaDB's is kept: see KEPT)."""
    with pytest.raises(UnsupportedError, match=r"no FETCH \.\.\. WITH TIES .*plain LIMIT.*RANK"):
        parse(sql, "duckdb")


PUSHDOWN_BLOCKED = [
    ("postgres", "SELECT DISTINCT ON (g) g, x, s FROM od_rows ORDER BY g, x DESC"),
    ("duckdb", "SELECT DISTINCT ON (g) g, x, s FROM od_rows"),
    ("duckdb", "SELECT DISTINCT g, x FROM od_rows"),
    ("postgres", "SELECT g, x, ROW_NUMBER() OVER (ORDER BY x) AS rn FROM od_rows"),
    ("duckdb", "SELECT g, x FROM od_rows QUALIFY ROW_NUMBER() OVER (ORDER BY x) = 1"),
    ("mysql", "SELECT g, x FROM od_rows ORDER BY x LIMIT 5"),
    ("postgres", "SELECT g, x FROM od_rows ORDER BY x FETCH FIRST 5 ROWS WITH TIES"),
    ("postgres", "SELECT g, COUNT(*) AS n FROM od_rows GROUP BY g ORDER BY n LIMIT 3"),
    (
        "postgres",
        "SELECT DISTINCT ON (g) g, COUNT(*) AS n FROM od_rows GROUP BY g, x ORDER BY g, n",
    ),
]


@pytest.mark.parametrize(("dialect", "sql"), PUSHDOWN_BLOCKED)
def test_no_filter_goes_inside_an_order_dependent_query(dialect: str, sql: str) -> None:
    """A filter inside would change which rows DISTINCT ON, a window or a LIMIT sees."""
    assert single_table(sql, dialect) is None
    assert grouped_table(sql, dialect) is None
    assert range_pushdown(sql, "g", dialect=dialect) == ""


def test_volatile_functions_are_named_as_written() -> None:
    reasons = sqlfeed.unstable_reasons(
        "SELECT random() AS r, now() AS n, current_timestamp AS c FROM t", "postgres"
    )
    assert "random() returns a different value on every run" in reasons
    assert "now() returns a different value on every run" in reasons
    assert "CURRENT_TIMESTAMP returns a different value on every run" in reasons
    assert not any("RAND()" in r for r in reasons)


def test_cli_refusal_names_the_flag_once(tmp_path: Any) -> None:
    import duckdb

    path = tmp_path / "r.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS k FROM range(10)")
    run = run_cli(["plan", "SELECT random() AS r, k FROM t", "--db", f"duckdb:///{path}"])
    assert run.code == 2
    assert "random() returns a different value on every run" in run.err
    assert "pass --allow-unstable if you accept" in run.err, run.err
    assert "True" not in run.err
    assert "(--allow-unstable)" not in run.err
    assert len(run.err.strip().splitlines()) == 1


def test_duckdb_unpivot_and_columns_partition_exactly() -> None:
    engine = get_engine("duckdb")
    engine.execute(
        "CREATE OR REPLACE TABLE od_wide AS SELECT range AS id, range % 3 AS a, "
        "range % 5 AS b, 'v' || range AS c FROM range(40)"
    )
    with engine.source() as source:
        for sql in (
            "UNPIVOT od_wide ON a, b INTO NAME n VALUE v",
            "SELECT COLUMNS('^[ab]$'), id FROM od_wide",
            "SELECT max(COLUMNS(* EXCLUDE (c))) FROM od_wide GROUP BY a",
        ):
            expected = multiset(engine.rows(sql))
            for m in M_VALUES:
                assert plan_rows(engine, source, sql, m, "hash") == expected, sql


# -- DISTINCT ON expressions sqlglot writes otherwise (#36 item 21) ------------------------

NORMALIZED_ON: dict[str, dict[str, tuple[str, ...]]] = {
    "date_trunc": dict.fromkeys(PG_DUCK, ("date_trunc('week', make_date(2024, 1, 1) + g * 3)",)),
    "substr": dict.fromkeys(PG_DUCK, ("substr(s, 1, 2)",)),
    "mod": dict.fromkeys(PG_DUCK, ("mod(id, 4)",)),
    "char_length": dict.fromkeys(PG_DUCK, ("char_length(s) + g",)),
    "strpos": dict.fromkeys(PG_DUCK, ("strpos(s, '1')",)),
    "date_part": {"postgres": ("date_part('dow', make_date(2024, 1, 1) + g)",)},
    "casts": dict.fromkeys(PG_DUCK, ("g::numeric(6, 1)::text",)),
    "two_expressions": dict.fromkeys(PG_DUCK, ("substr(s, 1, 2)", "mod(id, 2)")),
}
"""DISTINCT ON expressions that sqlglot renders in other words (``DATE_TRUNC('WEEK', ...)``,
``SUBSTRING(s FROM 1 FOR 2)``, ``x % 2``, ``LENGTH``, ``POSITION``, ``EXTRACT``, ``CAST``):
PostgreSQL matches DISTINCT ON with the ORDER BY as written, so the tie-breakers must
leave the user's ORDER BY (and the DISTINCT ON text an added ORDER BY starts with) as is."""

ON_FORMS = {
    "order_by": "SELECT DISTINCT ON ({e}) {e0} AS k, x, s FROM {t} ORDER BY {e}, x",
    "no_order_by": "SELECT DISTINCT ON ({e}) {e0} AS k, x, s FROM {t}",
    "limit": "SELECT DISTINCT ON ({e}) {e0} AS k, x, s FROM {t} ORDER BY {e}, x LIMIT 3",
    "comment": "SELECT DISTINCT ON ({e}) {e0} AS k, x, s FROM {t} ORDER BY {e}, x -- first x",
    "in_cte": "WITH c AS (SELECT DISTINCT ON ({e}) {e0} AS k, x, s FROM {t} ORDER BY {e}, x) "
    "SELECT k, x, s FROM c",
}
"""The query forms: the tie-breakers appended to the user's ORDER BY, or an ORDER BY added
(that starts with the DISTINCT ON text); inside a CTE the query is rendered whole."""

NESTED_NEW_WORDS = {
    "postgres": {"substr", "char_length", "strpos", "date_part", "two_expressions"},
    "duckdb": {"substr", "char_length", "two_expressions"},
}
"""Where the ORDER BY to complete is nested (``in_cte``), the query is rendered whole: refused
with one line when sqlglot writes these with words the user did not (``SUBSTRING``)."""


@pytest.mark.parametrize("strategy", ["hash", "materialize"])
@pytest.mark.parametrize("form", list(ON_FORMS))
@pytest.mark.parametrize("expression", list(NORMALIZED_ON))
def test_distinct_on_expressions_sqlglot_normalizes_partition_exactly(
    od: Engine, expression: str, form: str, strategy: str
) -> None:
    if od.name not in NORMALIZED_ON[expression]:
        pytest.skip(f"not an engine gap: {od.name}'s SQL has no such construct")
    on_list = NORMALIZED_ON[expression][od.name]
    e, e0 = ", ".join(on_list), on_list[0]
    text = ON_FORMS[form].format(e=e, e0=e0, t=TABLE)
    parsed = parse(text, od.name)
    completion = complete_orders(parsed, columns=od.columns(schema_sql(parsed)))
    assert completion.completed, completion
    if form == "in_cte" and expression in NESTED_NEW_WORDS[od.name]:
        with od.source() as source, pytest.raises(UnsupportedError) as refused:
            sqlfeed.plan(ON_FORMS[form].format(e=e, e0=e0, t=od.qualify(TABLE)), source)
        assert "cannot write it for" in str(refused.value)
        assert "\n" not in str(refused.value)
        return
    expected = multiset(od.rows(parsed.dialect.sql(completion.parsed.tree)))
    groups = multiset(od.rows(f"SELECT DISTINCT {e} FROM {TABLE}"))
    if form == "limit":
        assert sum(expected.values()) == min(3, len(groups))
    else:  # one row per group
        assert sum(expected.values()) == len(groups)
    with od.source() as source:
        for m in (1, 5):
            sql = ON_FORMS[form].format(e=e, e0=e0, t=od.qualify(TABLE))
            got = plan_rows(od, source, sql, m, strategy)
            assert got == expected, f"M={m}: {list(got - expected)[:3]} {list(expected - got)[:3]}"


# -- output items whose width only the engine knows (#36 item 21) --------------------------

EXPANDING = {
    "duckdb": (
        "CREATE OR REPLACE TABLE od_nested AS SELECT range AS id, "
        "{'a': range, 'b': 'x' || range} AS st, [{'p': range, 'q': range % 3}] AS ls "
        "FROM range(30)",
        [
            "SELECT id, unnest(st) FROM od_nested",
            "SELECT unnest(st) AS u, id FROM od_nested",
            "SELECT id, unnest(ls, recursive := true) FROM od_nested",
            "SELECT id, unnest([id, id + 1]) AS e, id * 2 AS twice FROM od_nested",
            "SELECT id, st.* FROM od_nested",
            "SELECT DISTINCT id % 4 AS g, unnest(st) FROM od_nested",
        ],
    ),
    "postgres": (
        "CREATE TABLE od_nested AS SELECT g AS id, jsonb_build_object('a', g, 'b', 'x' || g) "
        "AS j, ARRAY[g, g + 1] AS arr FROM generate_series(0, 29) AS g",
        [
            "SELECT id, (jsonb_each(j)).* FROM od_nested",
            "SELECT (jsonb_each_text(j)).*, id FROM od_nested",
            "SELECT id, unnest(arr) AS v FROM od_nested",
            "SELECT o.id * 10 AS k, (o).* FROM (SELECT id, id * 2 AS d FROM od_nested) AS o",
        ],
    ),
}
"""Per engine: a table, and queries with an item that makes several columns (or may): a
struct's fields (DuckDB's UNNEST), a composite's (PostgreSQL's ``(f(x)).*``)."""


@pytest.mark.parametrize("engine_name", list(EXPANDING))
def test_items_that_expand_are_read_with_the_engines_columns(engine_name: str) -> None:
    engine = get_engine(engine_name)
    create, queries = EXPANDING[engine_name]
    engine.execute(f"DROP TABLE IF EXISTS {engine.qualify('od_nested')}")
    engine.execute(create.replace("od_nested", engine.qualify("od_nested"), 1))
    try:
        with engine.source() as source:
            for text in queries:
                sql = text.replace("od_nested", engine.qualify("od_nested"))
                expected = multiset(engine.rows(sql))
                planned = sqlfeed.plan(sql, source, partitions=3)
                assert list(planned.columns) == engine.columns(sql), sql
                for m in (1, 5):
                    assert plan_rows(engine, source, sql, m, "hash") == expected, (m, sql)
    finally:
        engine.execute(f"DROP TABLE IF EXISTS {engine.qualify('od_nested')}")

"""Parse and validate one read-only query: :class:`ParsedQuery` and :func:`parse`.

Everything that would modify something is refused before anything runs: several
statements, anything that is not a query (DDL, DML, COPY, GRANT, SET, ...), a
data-modifying part anywhere in the tree, ``SELECT ... INTO``, locking clauses and
functions with side effects. Syntax errors are reported with line and column.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import TokenError

from dialects import (
    Dialect,
    ParseError,
    QueryError,
    UnsafeQueryError,
    UnsupportedError,
    get_dialect,
)
from sqlfeed.sql.syntax import ast_names, function_name, is_star, projection
from sqlfeed.sql.wording import misspelt_keyword, syntax_problem, unclosed

__all__ = ["ParsedQuery", "parse"]

# Functions that change state or wait: never run them on the user's behalf.
_SIDE_EFFECT_FUNCTIONS = frozenset(
    (
        "nextval setval pg_advisory_lock pg_advisory_xact_lock pg_sleep pg_terminate_backend "
        "pg_cancel_backend pg_reload_conf pg_rotate_logfile lo_import lo_export lo_unlink "
        "dblink_exec set_config pg_create_restore_point pg_switch_wal get_lock release_lock "
        "release_all_locks sleep benchmark load_file sys_exec sys_eval xp_cmdshell"
    ).split()
)


@dataclass(frozen=True)
class ParsedQuery:
    """A validated, single read-only query and the dialect it is written in.

    Build it with :func:`parse`. The tree is never mutated: every rewrite works on a copy.
    """

    sql: str
    """The SQL text as the user gave it."""

    dialect: Dialect
    """The engine the query is written for."""

    tree: exp.Expr = field(repr=False)
    """The parsed query: a SELECT, a set operation, or a VALUES list."""

    @property
    def output_names(self) -> list[str | None] | None:
        """The output column names as written, ``None`` for an unnamed expression.

        None as a whole when a ``*`` hides them (ask the engine: ``LIMIT 0``).

        >>> parse("SELECT a, b AS c, a + 1 FROM t").output_names
        ['a', 'c', None]
        """
        names = ast_names(self.tree)
        return None if names is None else [n.name if n is not None else None for n in names]

    @property
    def output_width(self) -> int | None:
        """The number of output columns when the query text tells it (no ``*``)."""
        items = projection(self.tree)
        if items is None:
            return None
        if any(is_star(item) for item in items):
            return None
        return len(items)


def parse(sql: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> ParsedQuery:
    """Parse and validate ``sql``: exactly one read-only query.

    Refuses, before anything runs: empty input, several statements, anything that is not
    a query (DDL, DML, COPY, GRANT, SET, ...), DDL/DML anywhere in the tree (for example
    a data-modifying CTE), ``SELECT ... INTO``, locking clauses and functions with side
    effects.

    Args:
        sql: the SQL text (or an already parsed query, returned as is).
        dialect: the engine's dialect name or object.

    Raises:
        ParseError: the text does not parse (with line and column).
        UnsafeQueryError: the text would modify something.
        QueryError: the text is empty or not a query.
    """
    if isinstance(sql, ParsedQuery):
        return sql
    engine = get_dialect(dialect)
    if not isinstance(sql, str):
        raise QueryError(f"SQL must be a string, not {type(sql).__name__}")
    statements = _parse_statements(sql, engine)
    if not statements:
        raise QueryError("the SQL is empty (or only comments): give one SELECT statement")
    if len(statements) > 1:
        kinds = ", ".join(_statement_kind(s) for s in statements)
        raise UnsafeQueryError(
            f"expected exactly one statement, got {len(statements)} ({kinds}): "
            "sqlfeed runs a single SELECT; remove the others"
        )
    tree = statements[0]
    while isinstance(tree, exp.Subquery) and not tree.alias and _only_this(tree):
        tree = tree.this
    if isinstance(tree, exp.Pivot):
        # DuckDB's PIVOT / UNPIVOT statement: a query, read as SELECT * FROM (PIVOT ...).
        tree = exp.select("*").from_(exp.Subquery(this=tree))
    if not isinstance(tree, (exp.Query, exp.Values)):
        raise UnsafeQueryError(
            f"{_statement_kind(tree)} is not a query: sqlfeed only reads, give a SELECT "
            "(or WITH ... SELECT, UNION/INTERSECT/EXCEPT, VALUES)"
        )
    _refuse_unsafe_nodes(tree)
    _refuse_lost_with_ties(tree, engine)
    return ParsedQuery(sql=sql, dialect=engine, tree=tree)


def _parse_statements(sql: str, engine: Dialect) -> list[exp.Expr]:
    # sqlglot logs a warning and falls back to an opaque Command for syntax it does not
    # know; such a statement is refused below, so the warning would only be noise.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        parsed = sqlglot.parse(sql, read=engine.sqlglot_dialect)
    except SqlglotParseError as err:
        first = err.errors[0] if err.errors else {}
        misspelt = misspelt_keyword(
            sql, engine.sqlglot_dialect, first.get("line"), first.get("col")
        )
        if misspelt is not None:  # SELEC * FROM t: the word, not the '*' after it
            raise ParseError(f"cannot parse the SQL: {misspelt[0]}", *misspelt[1:]) from None
        description = syntax_problem(first.get("description") or "syntax error")
        near = (first.get("highlight") or "").strip()
        message = f"cannot parse the SQL: {description}" + (f" near {near!r}" if near else "")
        raise ParseError(message, first.get("line"), first.get("col")) from None
    except TokenError as err:
        open_part = unclosed(sql)
        if open_part is not None:
            raise ParseError(f"cannot parse the SQL: {open_part[0]}", *open_part[1:]) from None
        raise ParseError(f"cannot parse the SQL: {_first_line(str(err))}") from None
    finally:
        logger.setLevel(level)
    return [statement for statement in parsed if statement is not None]


def _refuse_unsafe_nodes(tree: exp.Expr) -> None:
    for node in tree.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Returning)):
            raise UnsafeQueryError(
                f"the query contains {_statement_kind(node)}: sqlfeed only reads, "
                "remove the data-modifying part"
            )
        if isinstance(node, exp.Into):
            raise UnsafeQueryError(
                "SELECT ... INTO writes a table or variables: sqlfeed only reads, remove INTO"
            )
        if isinstance(node, exp.Lock):
            raise UnsafeQueryError(
                "the query takes row locks (FOR UPDATE/SHARE): remove the locking clause"
            )
        name = function_name(node)
        if name in _SIDE_EFFECT_FUNCTIONS:
            raise UnsafeQueryError(
                f"the query calls {name}(), which has side effects: sqlfeed runs partition "
                "queries several times, so it refuses functions that change state"
            )


def _refuse_lost_with_ties(tree: exp.Expr, engine: Dialect) -> None:
    """Refuse ``FETCH ... WITH TIES`` on an engine that has none.

    sqlglot would silently read it as a plain LIMIT, which drops the rows tied with the last
    one: see :attr:`~dialects.Dialect.FETCH_WITH_TIES`. (For MySQL/MariaDB, whose SQL
    sqlglot also writes as a LIMIT, a partition embeds the user's own text, and a rewrite
    that would lose it is refused when rendered: see
    :func:`sqlfeed.sql.render.render_problem`.)
    """
    if engine.FETCH_WITH_TIES:
        return
    for fetch in tree.find_all(exp.Fetch):
        options = fetch.args.get("limit_options")
        if options is not None and options.args.get("with_ties"):
            raise UnsupportedError(
                f"{engine.name} has no FETCH ... WITH TIES (sqlfeed would read it as a plain "
                "LIMIT, which drops the tied rows): keep the rows with RANK() OVER (ORDER BY "
                "...) <= n in a subquery instead"
            )


def _statement_kind(node: exp.Expr) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    if isinstance(node, (exp.Create, exp.Drop)):
        kind = node.args.get("kind")
        verb = type(node).__name__.upper()
        return f"{verb} {kind}" if kind else verb
    if isinstance(node, exp.TruncateTable):
        return "TRUNCATE"
    if isinstance(node, exp.Returning):
        return "RETURNING"
    return type(node).__name__.upper()


def _only_this(node: exp.Expr) -> bool:
    return all(v is None or k == "this" for k, v in node.args.items() if v != [])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text

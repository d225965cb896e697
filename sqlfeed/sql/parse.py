"""Parse and validate one read-only query: :class:`ParsedQuery` and :func:`parse`.

Everything that would modify something is refused before anything runs: several
statements, anything that is not a query (DDL, DML, COPY, GRANT, SET, ...), a
data-modifying part anywhere in the tree, ``SELECT ... INTO`` (a table, a file, variables),
locking clauses, and the functions of the engine's
:attr:`~sqlfeed.dialects.Dialect.SIDE_EFFECT_FUNCTIONS` (they write, or reach outside the
database) unless the caller allows side effects. Syntax errors are reported with line and
column.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import TokenType

from sqlfeed.dialects import (
    Dialect,
    ParseError,
    QueryError,
    UnsafeQueryError,
    UnsupportedError,
    get_dialect,
)
from sqlfeed.dialects.effects import side_effect
from sqlfeed.sql.syntax import ast_names, function_name, is_star, projection
from sqlfeed.sql.wording import misspelt_keyword, syntax_problem, unclosed

__all__ = ["ParsedQuery", "parse"]


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

    allow_side_effects: bool = False
    """Whether the query may call functions that write or reach outside the database (the
    dialect's :attr:`~sqlfeed.dialects.Dialect.SIDE_EFFECT_FUNCTIONS`): the caller said so."""

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


def parse(
    sql: str | ParsedQuery, dialect: str | Dialect = "duckdb", *, allow_side_effects: bool = False
) -> ParsedQuery:
    """Parse and validate ``sql``: exactly one read-only query.

    Refuses, before anything runs: empty input, several statements, anything that is not
    a query (DDL, DML, COPY, GRANT, SET, ...), DDL/DML anywhere in the tree (for example
    a data-modifying CTE), ``SELECT ... INTO``, locking clauses, and calls of the
    functions that write or reach outside the database (the dialect's
    :attr:`~sqlfeed.dialects.Dialect.SIDE_EFFECT_FUNCTIONS`: ``dblink``, ``lo_create``,
    ``LOAD_FILE``, ``load_extension``, ...) unless ``allow_side_effects``.

    A parsed query given to the planner, the Feeder or a sink in place of SQL text keeps
    its ``allow_side_effects``: ``plan(parse(sql, "postgres", allow_side_effects=True),
    url)``.

    >>> parse("SELECT lo_create(0)", "postgres")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    sqlfeed...UnsafeQueryError: the query calls lo_create(), which creates, writes or deletes ...
    >>> parse("SELECT lo_create(0)", "postgres", allow_side_effects=True).allow_side_effects
    True

    Args:
        sql: the SQL text (or an already parsed query, returned as is).
        dialect: the engine's dialect name or object.
        allow_side_effects: let the query call functions that write or reach outside the
            database (each partition calls them; a retried partition again).

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
    if not allow_side_effects:
        _refuse_side_effects(tree, engine)
    _refuse_lost_with_ties(tree, engine)
    return ParsedQuery(sql=sql, dialect=engine, tree=tree, allow_side_effects=allow_side_effects)


def _parse_statements(sql: str, engine: Dialect) -> list[exp.Expr]:
    # sqlglot logs a warning and falls back to an opaque Command for syntax it does not
    # know; such a statement is refused below, so the warning would only be noise.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        parsed = sqlglot.parse(sql, read=engine.sqlglot_dialect)
    except SqlglotParseError as err:
        _refuse_unparsed_into(sql, engine)
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


def _refuse_side_effects(tree: exp.Expr, engine: Dialect) -> None:
    """Refuse a call of a function of ``engine`` that writes or reaches outside the database.

    Wherever it is: a projection, a WHERE, a FROM (``dblink(...) AS t(...)``), a CTE, a
    schema-qualified name (``public.dblink``).
    """
    for node in tree.walk():
        name = function_name(node)
        does = side_effect(engine.SIDE_EFFECT_FUNCTIONS, name) if name else None
        if does is not None:
            raise UnsafeQueryError(
                f"the query calls {name}(), which {does}: a function with side effects "
                "runs once per partition and again on a retry; give allow_side_effects=True "
                "(--allow-side-effects) if that is what you mean"
            )


def _refuse_unparsed_into(sql: str, engine: Dialect) -> None:
    """Refuse an ``INTO`` sqlglot cannot parse as what it is, not as a syntax error.

    MySQL's ``INTO OUTFILE``, ``INTO DUMPFILE`` and ``INTO @variable``.
    """
    try:
        tokens = sqlglot.tokenize(sql, read=engine.sqlglot_dialect)
    except TokenError:
        return
    for token, following in itertools.pairwise(tokens):
        if token.token_type == TokenType.INTO:
            target = following.text.upper()
            if target in ("OUTFILE", "DUMPFILE"):
                raise UnsafeQueryError(
                    f"SELECT ... INTO {target} writes a file on the server: sqlfeed only "
                    "reads, remove INTO"
                )
            raise UnsafeQueryError(
                "SELECT ... INTO writes a table, a file or variables: sqlfeed only reads, "
                "remove INTO"
            )


def _refuse_lost_with_ties(tree: exp.Expr, engine: Dialect) -> None:
    """Refuse ``FETCH ... WITH TIES`` on an engine that has none.

    sqlglot would silently read it as a plain LIMIT, which drops the rows tied with the last
    one: see :attr:`~sqlfeed.dialects.Dialect.FETCH_WITH_TIES`. (For MySQL/MariaDB, whose SQL
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

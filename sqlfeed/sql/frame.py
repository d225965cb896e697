"""The frame: a SELECT returning exactly a query's rows, that a WHERE can be added to.

:class:`Frame` pushes a predicate down into the query itself when it is a plain filter
over one table (:func:`pushdown_blocker` says why not otherwise) that sqlglot renders
faithfully, or wraps the query (``SELECT * FROM (q) AS _sqlfeed_q``, with the user's own
text inside: :meth:`Frame.render`), renaming its columns by position where output names
repeat. Every query built from a SELECT starts from a frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError, QueryError, UnsupportedError
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import (
    ast_names,
    computes_aggregate,
    is_star,
    item_names,
    projection,
)
from sqlfeed.sql.verbatim import faithful, wrap_body

__all__ = [
    "Frame",
    "free_alias",
    "output_alias_referenced",
    "pushdown_blocker",
    "single_table",
    "with_ctes",
]

_WRAP_ALIAS = "_sqlfeed_q"
_COLUMN_PREFIX = "_sqlfeed_c"


@dataclass
class Frame:
    """A SELECT returning exactly the query's rows, and how to refer to its output columns.

    Three shapes, cheapest first:

    * pushdown: the query itself, when it is a plain filter over one table and the hashed
      columns are plain columns; the bucket predicate joins its WHERE.
    * wrap: ``SELECT * FROM (q) AS _sqlfeed_q``, columns referred to by name.
    * rename: when output names repeat (or are unnamed), the wrapped relation renames its
      columns by position (``AS _sqlfeed_q(_sqlfeed_c0, ...)`` or a CTE column list) and
      the outer SELECT gives each its original name back.
    """

    select: exp.Select
    dialect: Dialect
    columns: list[exp.Expr] | None
    """Expressions for the output columns usable in a WHERE; None: unknown (``*``)."""
    names: list[str | None] | None
    """Output names for key look-up, aligned with ``columns``."""
    hashable: list[bool] | None
    """Per output column: True unless it is an aggregate or window result."""
    alias: str = _WRAP_ALIAS
    text_columns: frozenset[str] = frozenset()
    """Output names of columns to hash through their text form."""
    embedded: tuple[str, str] | None = None
    """A wrap's placeholder name and the query text it stands for (see :meth:`render`)."""

    def render(self, tree: exp.Expr, pretty: bool = False) -> str:
        """``tree`` (the frame's SELECT, or one built from it) for the engine.

        The user's query text is in place of a wrap's placeholder.
        """
        text = self.dialect.sql(tree, pretty=pretty)
        if self.embedded is None:
            return text
        placeholder, body = self.embedded
        if text.count(placeholder) != 1:
            raise AssertionError("the wrapped query's placeholder is not in the SQL once")
        return text.replace(placeholder, body)

    @classmethod
    def build(
        cls,
        parsed: ParsedQuery,
        engine_columns: Sequence[str] | None,
        pushdown: bool,
        hashing: bool = False,
        key: list[str] | None = None,
        names: bool = True,
        rendered_faithfully: bool | None = None,
    ) -> Frame:
        """The cheapest frame; with ``hashing``, one that can hash ``key`` (or all columns).

        ``rendered_faithfully``: :func:`faithful`'s answer for the query, when the caller
        has it (else asked here, where a push-down is possible).

        A pushed-down predicate may only hash plain columns: the engine may evaluate a
        computed one (``a / b``) on rows the query's own WHERE excludes (``b <> 0``).

        Unnamed output columns (``SELECT a + 1``) whose engine names are not known stay as
        the engine names them in a plain wrap where the engine can hash a whole row (and so
        hashes them as part of it, without a key); elsewhere, with ``names=False`` (a COUNT,
        which shows no column), they are renamed by position and never named back.
        """
        tree = parsed.tree
        engine = parsed.dialect
        if engine_columns is not None:
            engine_columns = [str(c) for c in engine_columns]
            width = parsed.output_width
            if width is not None and width != len(engine_columns):
                raise InvalidArgumentError(
                    f"columns has {len(engine_columns)} names but the query returns {width}"
                )
        hashable = _hashable_outputs(tree)
        frame: Frame | None = None
        if pushdown and isinstance(tree, exp.Select) and pushdown_blocker(tree) is None:
            # Only a query sqlglot renders faithfully is rewritten inside; else it is wrapped.
            if rendered_faithfully is None:
                rendered_faithfully = faithful(parsed)
            if rendered_faithfully:
                frame = cls._pushdown(tree, engine, engine_columns, hashable)
            if frame is not None and hashing:
                args = frame.hash_args(key)
                if args is None or not all(isinstance(a, exp.Column) for a in args):
                    frame = None
        if frame is None:
            whole_row = key is None and engine.WHOLE_ROW_HASH
            frame = cls._wrap(parsed, engine_columns, hashable, whole_row, names, key is not None)
        return frame

    @classmethod
    def plain(cls, parsed: ParsedQuery) -> Frame:
        """``SELECT * FROM (query) AS _sqlfeed_q``: the query as written.

        Its output names are as the engine gives them (unknown to the frame).
        """
        alias = free_alias(parsed.tree)
        body, ctes, embedded = wrap_body(parsed)
        subquery = exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        frame = cls(exp.select("*").from_(subquery), parsed.dialect, None, None, None, alias)
        if ctes is not None:
            frame.select = with_ctes(frame.select, ctes)
        frame.embedded = embedded
        return frame

    @classmethod
    def _pushdown(
        cls,
        tree: exp.Select,
        engine: Dialect,
        engine_columns: Sequence[str] | None,
        hashable: list[bool] | None,
    ) -> Frame | None:
        items = tree.expressions
        if len(items) == 1 and isinstance(items[0], exp.Star):
            if engine_columns is None:
                return None
            columns: list[exp.Expr] = [
                exp.column(exp.to_identifier(c, quoted=True)) for c in engine_columns
            ]
            names: list[str | None] = list(engine_columns)
        elif any(is_star(item) for item in items):
            return None
        else:
            columns = [item.unalias() for item in items]
            if engine_columns is not None:
                names = list(engine_columns)
            else:
                names = [n.name if n is not None else None for n in item_names(items)]
        select = tree.copy()
        return cls(select, engine, columns, names, hashable, alias="")

    @classmethod
    def _wrap(
        cls,
        parsed: ParsedQuery,
        engine_columns: Sequence[str] | None,
        hashable: list[bool] | None,
        whole_row: bool = False,
        names_needed: bool = True,
        keyed: bool = False,
    ) -> Frame:
        tree = parsed.tree
        engine = parsed.dialect
        alias = free_alias(tree)
        body, ctes, embedded = wrap_body(parsed)
        idents: list[exp.Identifier | None] | None
        if engine_columns is not None:
            idents = [exp.to_identifier(c, quoted=True) for c in engine_columns]
        else:
            idents = ast_names(tree)
        # Engines name an unnamed column after its text (MySQL, SQLite: the text as typed,
        # which differs from the rendered SQL), so such columns are renamed by position.
        items = projection(tree)
        unnamed = items is None or any(
            not (is_star(i) or isinstance(i, (exp.Alias, exp.Column))) for i in items
        )
        unique = idents is not None and all(i is not None for i in idents) and not unnamed
        if unique and idents is not None:
            folded = [i.name.casefold() for i in idents if i is not None]
            unique = len(set(folded)) == len(folded)
        named = idents is not None and all(i is not None for i in idents)
        if not unique and not named and engine_columns is None and items is not None:
            # Unnamed columns, engine names unknown: hash the whole row of a plain wrap, or
            # (with a key) hash the named key columns of it when no two names can clash.
            texts = [i.alias_or_name or i.sql(engine.sqlglot_dialect) for i in items]
            folded = [t.casefold() for t in texts]
            if whole_row or (keyed and len(set(folded)) == len(folded)):
                idents, unique = None if whole_row else idents, True
        if idents is None or unique:
            # Plain wrap: names unknown (a * the engine was not asked about) or unique.
            select = exp.select("*").from_(
                exp.Subquery(this=body, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )
            columns: list[exp.Expr] | None = None
            names: list[str | None] | None = None
            if idents is not None:
                columns = [
                    exp.column(i.copy(), table=alias) if i is not None else exp.null()
                    for i in idents
                ]
                names = [i.name if i is not None else None for i in idents]
            frame = cls(select, engine, columns, names, hashable, alias=alias)
        else:
            frame = cls._rename(engine, body, idents, hashable, alias, tree, names_needed)
        if ctes is not None:
            frame.select = with_ctes(frame.select, ctes)
        frame.embedded = embedded
        return frame

    @classmethod
    def _rename(
        cls,
        engine: Dialect,
        body: exp.Expr,
        idents: list[exp.Identifier | None],
        hashable: list[bool] | None,
        alias: str,
        tree: exp.Expr,
        names_needed: bool = True,
    ) -> Frame:
        for position, ident in enumerate(idents):
            if ident is None and names_needed:
                item = projection(tree)
                text = item[position].sql(engine.sqlglot_dialect) if item else "?"
                raise QueryError(
                    f"output column {position + 1} ({text}) has no name, and {engine.name} "
                    "needs it to keep the output columns apart: give it an alias (AS name), "
                    "let sqlfeed read the names from the database (a source or columns=..., "
                    "--db), or name the key column(s) to hash (key=..., --key)"
                )
        inner = [exp.to_identifier(f"{_COLUMN_PREFIX}{i}") for i in range(len(idents))]
        table_alias = exp.TableAlias(this=exp.to_identifier(alias), columns=inner)
        projections = [
            exp.alias_(exp.column(inner[i].copy()), (ident or inner[i]).copy())
            for i, ident in enumerate(idents)
        ]
        if engine.DERIVED_COLUMN_LIST:
            select = exp.select(*projections).from_(exp.Subquery(this=body, alias=table_alias))
        elif engine.CTE_COLUMN_LIST:
            cte = exp.CTE(this=body, alias=table_alias)
            select = exp.select(*projections).from_(exp.table_(alias))
            select.set("with_", exp.With(expressions=[cte]))
        else:
            raise UnsupportedError(
                f"{engine.name} cannot rename the columns of a subquery, and this query's "
                "output names repeat: give every output column a distinct alias"
            )
        columns: list[exp.Expr] = [exp.column(i.copy()) for i in inner]
        names = [i.name if i is not None else None for i in idents]
        return cls(select, engine, columns, names, hashable, alias=alias)

    def bucket(self, key: list[str] | None, m: int) -> exp.Expr:
        """The bucket expression over ``key`` (or all hashable output columns)."""
        args = self.hash_args(key)
        if args is None:
            return self.dialect.bucket_of_hash(self.dialect.whole_row_hash(self.alias), m)
        return self.dialect.bucket(args, m)

    def hash_args(self, key: list[str] | None) -> list[exp.Expr] | None:
        """What the bucket hashes; None for the whole row (dialects that can)."""
        if key is not None:
            return [self._key_column(name) for name in key]
        if self.columns is None:
            if self.dialect.WHOLE_ROW_HASH:
                return None
            raise QueryError(
                "the query's output columns are hidden behind *, so sqlfeed cannot hash them: "
                "name the key column(s) (key=..., --key), or let sqlfeed read the output "
                "columns from the database (columns=..., or --db)"
            )
        args = [self._hash_input(i) for i in range(len(self.columns))]
        if self.hashable is not None and len(self.hashable) == len(args):
            # Aggregates may differ in the last float bit between runs of a parallel
            # engine; grouping columns identify the row as well and are exact.
            args = [a for a, ok in zip(args, self.hashable, strict=True) if ok] or args
        return args

    def _hash_input(self, position: int) -> exp.Expr:
        assert self.columns is not None
        column = self.columns[position].copy()
        name = self.names[position] if self.names is not None else None
        if name is not None and name in self.text_columns:
            return self.dialect.hashable(column)
        return column

    def _key_column(self, name: str) -> exp.Expr:
        if self.columns is None or self.names is None:
            # Output names unknown: trust the key; the engine reports a wrong name.
            return exp.column(exp.to_identifier(name), table=self.alias or None)
        exact = [i for i, n in enumerate(self.names) if n == name]
        matches = exact or [
            i for i, n in enumerate(self.names) if n is not None and n.casefold() == name.casefold()
        ]
        if not matches:
            known = ", ".join(n for n in self.names if n is not None) or "none"
            raise InvalidArgumentError(
                f"key column {name!r} is not in the query's output (output columns: {known})"
            )
        if len(matches) > 1:
            raise InvalidArgumentError(
                f"key column {name!r} names {len(matches)} output columns; alias them apart"
            )
        return self._hash_input(matches[0])

    def with_condition(self, condition: exp.Expr) -> exp.Select:
        """A copy of the frame's SELECT with ``condition`` added to its WHERE."""
        select = self.select.copy()
        where = select.args.get("where")
        if where is None:
            select.set("where", exp.Where(this=condition))
        else:
            combined = exp.And(this=exp.paren(where.this.copy()), expression=condition)
            select.set("where", exp.Where(this=combined))
        return select


def single_table(query: str | ParsedQuery, dialect: str | Dialect = "duckdb") -> exp.Table | None:
    """The table a plain single-table filter reads (None for anything else).

    >>> single_table("SELECT a FROM s.t AS x WHERE a > 1").sql()
    's.t AS x'
    """
    tree = parse(query, dialect).tree
    if not isinstance(tree, exp.Select) or pushdown_blocker(tree) is not None:
        return None
    table = tree.args["from_"].this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None  # a table function such as read_parquet(...)
    return table.copy()


BEYOND_A_FILTER = (
    "with_",
    "joins",
    "laterals",
    "group",
    "having",
    "qualify",
    "distinct",
    "limit",
    "offset",
    "fetch",
    "windows",
    "connect",
    "prewhere",
    "sample",
    "settings",
    "pivots",
    "kind",
    "match",
)
"""SELECT clauses beyond a select-project-filter over one table, in sqlglot's arg names."""


def pushdown_blocker(select: exp.Select) -> str | None:
    """Why the bucket predicate may not join this SELECT's own WHERE (None: it may).

    Only a select-project-filter over one table qualifies: then each output row comes
    from exactly one input row, and a predicate on the output values filters the same rows.
    """
    for arg in BEYOND_A_FILTER:
        if select.args.get(arg):
            return arg
    source = select.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return "source"
    table = source.this
    if table.args.get("sample") or table.args.get("joins") or table.args.get("pivots"):
        return "table"
    for item in select.expressions:
        if computes_aggregate(item):
            return "aggregate"
    return None


def output_alias_referenced(tree: exp.Expr) -> bool:
    """Whether the SELECT's WHERE names one of its output aliases.

    DuckDB and SQLite allow ``SELECT x > 5 AS big ... WHERE big``: its select list cannot
    then be replaced (a count, bounds) where the WHERE stays, without breaking that
    reference.
    """
    where = tree.args.get("where") if isinstance(tree, exp.Select) else None
    if where is None:
        return False
    aliases = {item.alias.casefold() for item in tree.expressions if isinstance(item, exp.Alias)}
    return any(
        not column.table and column.name.casefold() in aliases
        for column in where.find_all(exp.Column)
    )


def _hashable_outputs(tree: exp.Expr) -> list[bool] | None:
    """Per output position, False when some branch computes it with an aggregate/window."""
    selects = _selects(tree)
    if not selects or any(is_star(i) for s in selects for i in s.expressions):
        return None
    width = len(selects[0].expressions)
    flags = [True] * width
    for select in selects:
        if len(select.expressions) != width:
            return None
        for position, item in enumerate(select.expressions):
            if computes_aggregate(item):
                flags[position] = False
    return flags


def _selects(tree: exp.Expr) -> list[exp.Select]:
    """Every SELECT whose rows form the output (all branches of set operations)."""
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.SetOperation):
        return _selects(tree.this) + _selects(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _selects(tree.this)
    return []


def with_ctes(select: exp.Select, ctes: exp.With) -> exp.Select:
    """Put the user's CTEs first in the outer WITH (nested WITH is not valid everywhere)."""
    own = select.args.get("with_")
    merged = ctes.copy()
    if own is not None:
        merged.set("expressions", [*merged.expressions, *own.expressions])
    select.set("with_", merged)
    return select


def free_alias(tree: exp.Expr) -> str:
    """An alias for the wrapped query (``_sqlfeed_q``, numbered on) no name in ``tree`` uses."""
    taken = {ident.name.casefold() for ident in tree.find_all(exp.Identifier)}
    alias = _WRAP_ALIAS
    suffix = 0
    while alias.casefold() in taken:
        suffix += 1
        alias = f"{_WRAP_ALIAS}{suffix}"
    return alias

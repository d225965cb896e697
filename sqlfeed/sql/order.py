"""Complete ORDER BYs that may tie, so every run of a query returns the same rows.

A LIMIT/OFFSET whose ORDER BY is not total may cut between tied rows, a ``ROW_NUMBER()``
(``LAG``, ``LEAD``, ``NTILE``, ``FIRST_VALUE``, ...) over a non-unique window order may number
tied rows either way, and ``string_agg(x ORDER BY k)`` may concatenate tied values either
way: each run (each partition) may then see other rows. SQL allows any of those results, so
:func:`complete_orders` picks one: it appends tie-breakers to every such ORDER BY, after the
user's own keys, ascending with NULLs first (said explicitly, so the engine's default does
not matter):

* a LIMIT's ORDER BY, and the ORDER BY that decides which row of each group a
  ``DISTINCT ON`` keeps (one without ORDER BY gets one, starting with the DISTINCT ON
  expressions): the remaining output columns, by position (plus their binary form
  where the collation holds ``'a' = 'A'``: MySQL), or, behind a ``*`` whose columns are not
  known, the hash of each source row where the engine has a whole-row hash;
* a window's ORDER BY: the GROUP BY keys of a grouped SELECT, else the SELECT's other
  output expressions and the values its window functions read (or the whole-row hash);
  a window that had no ORDER BY and whose function reads its frame gets an explicit
  whole-partition ``ROWS`` frame, so its frame does not change;
* an order-sensitive aggregate's ORDER BY: the aggregated value (with DISTINCT, whose
  ORDER BY may only name the aggregated values, an ORDER BY over all of them is total
  already, and one over anything else cannot be completed).

``FETCH ... WITH TIES`` keeps every row tied with the last one, so it needs nothing; after
an OFFSET, which may skip either of two tied rows, a tie-breaker would change which rows
tie, so it cannot be completed. Orders that are provably total (:mod:`sqlfeed.sql.keys`)
are left alone. What cannot be completed (a frame that ends at the last tie, a ``*`` with
no whole-row hash, an OFFSET before WITH TIES) is reported, as is every order that may
tie as written (the ``strict`` view).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from sqlfeed.dialects import Dialect
from sqlfeed.sql.keys import (
    TableKeys,
    group_expressions,
    order_is_total,
    resolve_output,
    window_is_total,
)
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.syntax import (
    function_name,
    has_limit,
    is_constant,
    is_star,
    item_names,
    projection,
    single_aggregate_row,
)
from sqlfeed.sql.windows import (
    ORDER_SENSITIVE_AGGREGATE_CLASSES,
    ORDER_SENSITIVE_AGGREGATES,
    frame_problem,
    inline_named,
    order_sensitive_aggregate,
    spec_only,
    unwrap,
    whole_partition,
    whole_partition_frame,
    window_candidates,
    window_kind,
)

__all__ = [
    "ORDER_SENSITIVE_AGGREGATES",
    "ORDER_SENSITIVE_AGGREGATE_CLASSES",
    "OrderCompletion",
    "complete_orders",
]


@dataclass(frozen=True)
class OrderCompletion:
    """What :func:`complete_orders` found and did."""

    parsed: ParsedQuery
    """The query with every order that may tie completed (the given one if none was)."""
    completed: tuple[str, ...] = ()
    """One line per completed ORDER BY: which one, and with what."""
    unfixable: tuple[str, ...] = ()
    """Orders that may tie and could not be completed, each with the reason and the fix."""
    ties: tuple[str, ...] = ()
    """Every order that may tie as the query is written (what ``strict`` refuses)."""


def complete_orders(
    query: str | ParsedQuery,
    dialect: str | Dialect = "duckdb",
    *,
    columns: Sequence[str] | None = None,
    table_keys: TableKeys | None = None,
) -> OrderCompletion:
    """Complete every LIMIT, window and aggregate ORDER BY that may tie (see the module).

    Args:
        query: SQL text or a parsed query.
        dialect: the engine (when ``query`` is text).
        columns: the query's output column names as the engine reports them, when known
            (they let a ``SELECT * ... LIMIT`` be completed by position anywhere).
        table_keys: the primary/unique keys of the query's only base table, from the
            catalog: an ORDER BY covering one is total.

    >>> complete_orders("SELECT a, b FROM t ORDER BY a LIMIT 3").parsed.tree.sql()
    'SELECT a, b FROM t ORDER BY a, 2 ASC NULLS FIRST LIMIT 3'
    """
    parsed = parse(query, dialect)
    tree = parsed.tree.copy()
    state = _Completion(parsed.dialect, tree, list(columns) if columns else None, table_keys)
    # Deepest nodes first, so tie-breakers copied from an expression are complete already.
    for node in reversed(list(tree.walk(bfs=True))):
        if isinstance(node, exp.Select):
            state.distinct_on(node)
        if isinstance(node, (exp.Select, exp.SetOperation)):
            state.limit(node)
        elif isinstance(node, exp.Window):
            state.window(node)
        elif isinstance(node, exp.Order) and (
            isinstance(node.parent, exp.AggFunc) or order_sensitive_aggregate(node.parent)
        ):
            state.aggregate(node)
    done = ParsedQuery(sql=parsed.sql, dialect=parsed.dialect, tree=tree)
    return OrderCompletion(
        parsed=done if state.completed else parsed,
        completed=tuple(state.completed),
        unfixable=tuple(state.unfixable),
        ties=tuple(state.ties),
    )


@dataclass
class _Completion:
    engine: Dialect
    tree: exp.Expr
    columns: list[str] | None
    table_keys: TableKeys | None
    completed: list[str] = field(default_factory=list)
    unfixable: list[str] = field(default_factory=list)
    ties: list[str] = field(default_factory=list)

    def _sql(self, node: exp.Expr) -> str:
        text = node.sql(self.engine.sqlglot_dialect)
        return text if len(text) <= 120 else text[:117] + "..."

    # -- LIMIT / OFFSET ---------------------------------------------------------------------

    def limit(self, node: exp.Select | exp.SetOperation) -> None:
        """Complete the ORDER BY of a LIMIT/OFFSET that may cut between tied rows."""
        if not has_limit(node) or _cuts_nothing(node):
            return
        if isinstance(node, exp.Select) and single_aggregate_row(node):
            return
        if isinstance(node.parent, exp.Exists):
            return  # EXISTS is true whichever rows the LIMIT keeps
        order = node.args.get("order")
        width = len(self.columns) if self.columns is not None and node is self.tree else None
        keys = self.table_keys
        if order_is_total(node, order, width=width, table_keys=keys, every_output=False):
            return
        label = self._limit_label(node, order)
        if _with_ties(node):
            if order_is_total(node, order, width=width, table_keys=keys):
                return  # rows tied on every output column look the same
            # OFFSET, then FETCH ... WITH TIES: which tied rows the OFFSET skips is
            # arbitrary, and a tie-breaker would change which rows tie (so drop the ties).
            skips = f"{label} may skip either of the rows that tie on its ORDER BY"
            self.ties.append(skips)
            self.unfixable.append(
                f"{skips} (sqlfeed cannot complete it: a tie-breaker would change which "
                "rows WITH TIES keeps; order by a unique key, or filter on RANK() OVER "
                "(ORDER BY ...) instead of OFFSET ... WITH TIES)"
            )
            return
        exact = self.engine.collation_tiebreak(exp.column("x")) is None
        reason = None
        found: tuple[list[exp.Ordered], str] | str
        if order_is_total(node, order, width=width, table_keys=keys):
            if exact or order is None:
                return
            # Every output column is ordered on, but the collation ties 'a' and 'A'.
            found = self._collation_keys(node), "their binary form"
        else:
            reason = (
                "LIMIT/OFFSET without ORDER BY returns an arbitrary subset of rows"
                if order is None
                else f"{label} may cut between rows that tie on it; order by a unique key "
                "or every output column"
            )
            found = self._limit_tiebreakers(node, order, width)
        if isinstance(found, str):
            self.ties.append(str(reason))
            self.unfixable.append(f"{reason} (sqlfeed cannot complete it: {found})")
            return
        present = {o.this.sql().casefold() for o in (order.expressions if order else [])}
        tiebreakers = [k for k in found[0] if k.this.sql().casefold() not in present]
        if not tiebreakers:
            return  # ordered on every tie-breaker already (completed before)
        if reason is not None:
            self.ties.append(reason)
        if order is None:
            order = exp.Order(expressions=[])
            node.set("order", order)
        for key in tiebreakers:
            order.append("expressions", key)
        self.completed.append(f"{label} completed with {found[1]}")

    def _limit_label(self, node: exp.Expr, order: exp.Order | None) -> str:
        parts = [order] if order is not None else []
        fetch = isinstance(node.args.get("limit"), exp.Fetch)  # written after the OFFSET
        names = ("offset", "limit", "fetch") if fetch else ("limit", "offset", "fetch")
        parts += [node.args[a] for a in names if node.args.get(a)]
        text = " ".join(self._sql(p) for p in parts)
        return text if order is not None else f"{text} (no ORDER BY)"

    def _limit_tiebreakers(
        self, node: exp.Expr, order: exp.Order | None, width: int | None
    ) -> tuple[list[exp.Ordered], str] | str:
        """The tie-breakers of a LIMIT's ORDER BY and their description, or why none."""
        items = projection(node)
        covered = _covered_positions(node, order)
        if items is not None and not any(is_star(i) for i in items):
            keys: list[exp.Ordered] = []
            named: list[str] = []
            names = item_names(items)
            for position, (item, name) in enumerate(zip(items, names, strict=True), start=1):
                value = item.unalias()
                if position not in covered and not is_constant(value):
                    keys.append(_ordered(exp.Literal.number(position)))
                    named.append(name.name if name is not None else self._sql(value))
            keys += self._collation_keys(node)
            return keys, ", ".join(named) + " (NULLS FIRST)" if named else "their binary form"
        if width is not None and self.columns is not None:
            by_name = {
                o.this.name.casefold()
                for o in (order.expressions if order else [])
                if isinstance(o.this, exp.Column) and not o.this.table
            }
            folded = [c.casefold() for c in self.columns]
            covered |= {p for p, c in enumerate(folded, 1) if c in by_name and folded.count(c) == 1}
            positions = [p for p in range(1, width + 1) if p not in covered]
            keys = [_ordered(exp.Literal.number(p)) for p in positions]
            named = [self.columns[p - 1] for p in positions]
            return keys, ", ".join(named) + " (NULLS FIRST)" if named else ""
        hashes = self._row_hashes(node)
        if hashes is None:
            return (
                "its output columns are hidden behind *, and "
                f"{self.engine.name} cannot hash a whole row: list the columns, or pass the "
                "output columns (a source or --db, columns=...)"
            )
        return hashes

    def _collation(
        self, node: exp.Expr, value: exp.Expr, name: exp.Identifier | None
    ) -> exp.Expr | None:
        """The collation tie-breaker of one output value (by its name in a set operation)."""
        if isinstance(node, exp.Select):
            return self.engine.collation_tiebreak(value.copy())
        if name is not None:
            return self.engine.collation_tiebreak(exp.column(name.copy()))
        return None

    def _collation_keys(self, node: exp.Expr) -> list[exp.Ordered]:
        items = projection(node) or []
        keys = []
        for item, name in zip(items, item_names(items), strict=True):
            extra = None if is_star(item) else self._collation(node, item.unalias(), name)
            if extra is not None and not is_constant(item.unalias()):
                keys.append(_ordered(extra))
        return keys

    def _row_hashes(self, node: exp.Expr) -> tuple[list[exp.Ordered], str] | None:
        """Order by the hash of each source row (``*`` with unknown columns), if the engine can."""
        if not self.engine.WHOLE_ROW_HASH or not isinstance(node, exp.Select):
            return None
        sources = _source_names(node)
        if not sources:
            return None
        keys = [_ordered(self.engine.whole_row_hash(s)) for s in sources]
        return keys, "the hash of each row of " + ", ".join(s.name for s in sources)

    # -- DISTINCT ON ------------------------------------------------------------------------

    def distinct_on(self, node: exp.Select) -> None:
        """Complete the ORDER BY that decides which row of each DISTINCT ON group is kept."""
        distinct = node.args.get("distinct")
        on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
        if on is None or distinct is None:
            return
        order = node.args.get("order")
        keys = [o.copy() for o in order.expressions] if order is not None else []
        present = {resolve_output(node, o.this).sql().casefold() for o in keys}
        leading = [_ordered(e.copy()) for e in on.expressions]
        leading = [
            o for o in leading if resolve_output(node, o.this).sql().casefold() not in present
        ]
        whole = exp.Order(expressions=[*leading, *keys])
        width = len(self.columns) if self.columns is not None and node is self.tree else None
        if order_is_total(node, whole, width=width, table_keys=self.table_keys, distinct_on=False):
            return
        on_text = self._sql(distinct)
        label = f"{on_text} {self._sql(order)}" if order is not None else on_text
        if order is None:
            reason = (
                f"{on_text} without ORDER BY keeps an arbitrary row of each group; add an "
                "ORDER BY that starts with the DISTINCT ON expressions"
            )
        else:
            reason = f"{label} keeps either of the rows of a group that tie on its ORDER BY"
        found = self._limit_tiebreakers(node, whole, width)
        self.ties.append(reason)
        if isinstance(found, str):
            self.unfixable.append(f"{reason} (sqlfeed cannot complete it: {found})")
            return
        if order is None:
            # The ORDER BY of a DISTINCT ON starts with its expressions (PostgreSQL).
            order = exp.Order(expressions=[o.copy() for o in leading])
            node.set("order", order)
        have = {o.this.sql().casefold() for o in order.expressions}
        for key in found[0]:
            if key.this.sql().casefold() not in have:
                order.append("expressions", key)
        self.completed.append(f"{label} completed with {found[1] or 'its output columns'}")

    # -- windows ----------------------------------------------------------------------------

    def window(self, window: exp.Window) -> None:
        """Complete the ORDER BY of a window function that numbers or picks tied rows."""
        function = unwrap(window.this)
        select = window.find_ancestor(exp.Select)
        if isinstance(function, exp.Identifier) or select is None:
            return  # a named window's definition (judged where it is used)
        if window.args.get("alias") is not None and not inline_named(window, select):
            return  # OVER w for a w not defined here: the engine reports it
        kind = window_kind(function, window.args.get("spec"))
        if kind is None or window_is_total(window, select, self.table_keys):
            return
        tiebreakers = self._window_tiebreakers(window, select)
        if tiebreakers == []:
            return  # ordered on everything the window's rows show already
        order = window.args.get("order")
        label = f"{_display(function)} OVER ({spec_only(window, self.engine)})"
        if order is None:
            reason = (
                f"{label} without ORDER BY numbers or picks rows in an arbitrary order; "
                "add ORDER BY to the window"
            )
        else:
            reason = f"{label} numbers or picks rows that tie on its ORDER BY in an arbitrary order"
        self.ties.append(reason)
        if tiebreakers is None:
            self.unfixable.append(
                f"{reason} (sqlfeed cannot complete it: its SELECT hides its columns behind *, "
                f"and {self.engine.name} cannot hash a whole row: list the columns)"
            )
            return
        problem = frame_problem(function, kind, window)
        if problem:
            self.unfixable.append(f"{reason} (sqlfeed cannot complete it: {problem})")
            return
        if order is None:
            order = exp.Order(expressions=[])
            window.set("order", order)
            if kind == "value" and whole_partition(window.args.get("spec")):
                window.set("spec", whole_partition_frame())
        for key, _ in tiebreakers:
            order.append("expressions", key)
        described = ", ".join(text for _, text in tiebreakers if text)
        self.completed.append(f"{label} completed with {described} (NULLS FIRST)")

    def _window_tiebreakers(
        self, window: exp.Window, select: exp.Select
    ) -> list[tuple[exp.Ordered, str]] | None:
        """Keys that tell the window's rows apart (with their descriptions), None if none can."""
        groups = group_expressions(select)
        if groups is not None:
            candidates = [g.copy() for g in groups]
        elif any(is_star(i) for i in select.expressions):
            if not self.engine.WHOLE_ROW_HASH:
                return None
            sources = _source_names(select)
            if not sources:
                return None
            candidates = [self.engine.whole_row_hash(s) for s in sources]
        else:
            candidates = window_candidates(select)
        order = window.args.get("order")
        present = {
            k.this.sql().casefold() if isinstance(k, exp.Ordered) else k.sql().casefold()
            for k in [*window.args.get("partition_by", []), *(order.expressions if order else [])]
        }
        found: list[tuple[exp.Ordered, str]] = []
        for candidate in candidates:
            text = candidate.sql().casefold()
            if text in present or is_constant(candidate):
                continue
            present.add(text)
            found.append((_ordered(candidate), self._sql(candidate)))
            extra = self.engine.collation_tiebreak(candidate.copy())
            if extra is not None:
                found.append((_ordered(extra), ""))
        return found

    # -- aggregates -------------------------------------------------------------------------

    def aggregate(self, order: exp.Order) -> None:
        """Complete ``string_agg(x ORDER BY k)``-like orders with the aggregated value."""
        value = order.this
        aggregate = order.parent
        if value is None or aggregate is None or not order_sensitive_aggregate(aggregate):
            return
        keys = {o.this.sql().casefold() for o in order.expressions}
        label = self._sql(aggregate)
        if isinstance(value, exp.Distinct):
            # With DISTINCT the ORDER BY may only name the aggregated values; ordered on
            # all of them, no two different values tie.
            values = [v for v in value.expressions if not is_constant(v)]
            if all(v.sql().casefold() in keys for v in values):
                return
            reason = (
                f"{label} orders its DISTINCT values by other expressions, which rows "
                "sharing a value may disagree on"
            )
            self.ties.append(reason)
            self.unfixable.append(
                f"{reason} (sqlfeed cannot complete it: with DISTINCT, order by the "
                "aggregated values themselves)"
            )
            return
        # The aggregated value, and the other values it shows (json_object_agg's keys).
        others = [a for a in aggregate.expressions if a is not order]
        values = [v for v in [value, *others] if isinstance(v, exp.Expr) and not is_constant(v)]
        missing = [v for v in values if v.sql().casefold() not in keys]
        if not missing:
            return
        picks = isinstance(aggregate, (exp.First, exp.Last, exp.AnyValue)) or function_name(
            aggregate
        ) in ("first", "last", "any_value", "arbitrary")
        what = (
            "picks either of the values that tie on its ORDER BY"
            if picks
            else "concatenates values that tie on its ORDER BY in any order"
        )
        self.ties.append(f"{label} {what}")
        for missed in missing:
            order.append("expressions", _ordered(missed.copy()))
            extra = self.engine.collation_tiebreak(missed.copy())
            if extra is not None:
                order.append("expressions", _ordered(extra))
        shown = ", ".join(self._sql(m) for m in missing)
        self.completed.append(f"{label} completed with {shown} (NULLS FIRST)")


def _ordered(expr: exp.Expr) -> exp.Ordered:
    return exp.Ordered(this=expr, desc=False, nulls_first=True)


def _cuts_nothing(node: exp.Expr) -> bool:
    """LIMIT 0 (no rows at all), or FETCH ... WITH TIES without OFFSET (keeps every tie)."""
    limit = node.args.get("limit")
    if isinstance(limit, exp.Limit):
        count = limit.expression
        if isinstance(count, exp.Literal) and not count.is_string and count.name == "0":
            return True
    if isinstance(limit, exp.Fetch) and not node.args.get("offset"):
        options = limit.args.get("limit_options")
        return bool(options is not None and options.args.get("with_ties"))
    return False


def _with_ties(node: exp.Expr) -> bool:
    """Whether the query node ends in ``FETCH ... WITH TIES``."""
    fetch = node.args.get("limit") or node.args.get("fetch")
    options = fetch.args.get("limit_options") if isinstance(fetch, exp.Fetch) else None
    return bool(options is not None and options.args.get("with_ties"))


def _covered_positions(node: exp.Expr, order: exp.Order | None) -> set[int]:
    """Output positions the ORDER BY already orders on (by position, name or expression)."""
    if order is None:
        return set()
    items = projection(node) or []
    texts = {o.this.sql().casefold() for o in order.expressions}
    if isinstance(node, exp.Select):
        texts |= {resolve_output(node, o.this).sql().casefold() for o in order.expressions}
    covered = set()
    for position, (item, name) in enumerate(zip(items, item_names(items), strict=True), start=1):
        candidates = {str(position)}
        if not is_star(item):
            candidates.add(item.unalias().sql().casefold())
        if name is not None:
            candidates.add(name.name.casefold())
        if candidates & texts:
            covered.add(position)
    return covered


def _source_names(select: exp.Select) -> list[exp.Identifier] | None:
    """The names of the relations a SELECT reads (FROM and joins), None if one has none."""
    source = select.args.get("from_")
    if source is None:
        return None
    relations = [source.this, *(j.this for j in select.args.get("joins") or [])]
    names = []
    for relation in relations:
        alias = relation.args.get("alias")
        if isinstance(alias, exp.TableAlias) and isinstance(alias.this, exp.Identifier):
            names.append(alias.this.copy())
        elif isinstance(relation, exp.Table) and isinstance(relation.this, exp.Identifier):
            names.append(relation.this.copy())
        else:
            return None
    return names


def _display(function: exp.Expr) -> str:
    if isinstance(function, exp.Anonymous):
        return f"{function.name}()"
    if isinstance(function, exp.Func):
        return f"{function.sql_name()}()"
    return function.sql()

"""Complete ORDER BYs that may tie, so every run of a query returns the same rows.

A LIMIT/OFFSET whose ORDER BY is not total may cut between tied rows, a ``ROW_NUMBER()``
(``LAG``, ``LEAD``, ``NTILE``, ``FIRST_VALUE``, ...) over a non-unique window order may number
tied rows either way, and ``string_agg(x ORDER BY k)`` may concatenate tied values either
way: each run (each partition) may then see other rows. SQL allows any of those results, so
:func:`complete_orders` picks one: it appends tie-breakers to every such ORDER BY, after the
user's own keys, ascending with NULLs first (said explicitly, so the engine's default does
not matter):

* a LIMIT's ORDER BY: the remaining output columns, by position (plus their binary form
  where the collation holds ``'a' = 'A'``: MySQL), or, behind a ``*`` whose columns are not
  known, the hash of each source row where the engine has a whole-row hash;
* a window's ORDER BY: the GROUP BY keys of a grouped SELECT, else the SELECT's other
  output expressions and the values its window functions read (or the whole-row hash);
  a window that had no ORDER BY and whose function reads its frame gets an explicit
  whole-partition ``ROWS`` frame, so its frame does not change;
* an order-sensitive aggregate's ORDER BY: the aggregated value.

Orders that are provably total (:mod:`sqlfeed.sql.keys`) are left alone. What cannot be
completed (a frame that ends at the last tie, a ``*`` with no whole-row hash) is reported,
as is every order that may tie as written (the ``strict`` view).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from dialects import Dialect
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
    is_star,
    item_names,
    projection,
    single_aggregate_row,
)

__all__ = [
    "ORDER_SENSITIVE_AGGREGATES",
    "ORDER_SENSITIVE_AGGREGATE_CLASSES",
    "OrderCompletion",
    "complete_orders",
]

ORDER_SENSITIVE_AGGREGATES = frozenset(
    (
        "string_agg listagg array_agg group_concat any_value first last arbitrary json_agg "
        "jsonb_agg json_arrayagg json_group_array list first_value last_value collect_list "
        "array_concat_agg xmlagg"
    ).split()
)
"""Aggregates whose result depends on the order rows arrive in (lower-case names)."""

ORDER_SENSITIVE_AGGREGATE_CLASSES: tuple[type[exp.Expr], ...] = (
    exp.ArrayAgg,
    exp.GroupConcat,
    exp.AnyValue,
    exp.First,
    exp.Last,
)
"""The sqlglot classes of :data:`ORDER_SENSITIVE_AGGREGATES`."""
# Window functions that number or pick rows, ignoring the frame (MariaDB refuses a frame).
_ROW_FUNCTIONS: tuple[type[exp.Expr], ...] = (exp.RowNumber, exp.Lag, exp.Lead, exp.Ntile)
# Window functions that pick a row of the frame.
_VALUE_FUNCTIONS: tuple[type[exp.Expr], ...] = (exp.FirstValue, exp.LastValue, exp.NthValue)


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
        if isinstance(node, (exp.Select, exp.SetOperation)):
            state.limit(node)
        elif isinstance(node, exp.Window):
            state.window(node)
        elif isinstance(node, exp.Order) and isinstance(node.parent, exp.AggFunc):
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
        parts += [node.args[a] for a in ("limit", "offset", "fetch") if node.args.get(a)]
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
                if position not in covered and not _constant(value):
                    keys.append(_ordered(exp.Literal.number(position)))
                    named.append(name.name if name is not None else self._sql(value))
            keys += self._collation_keys(node)
            return keys, ", ".join(named) + " (NULLS FIRST)" if named else "their binary form"
        if width is not None and self.columns is not None:
            by_name = {o.this.name.casefold() for o in (order.expressions if order else [])
                       if isinstance(o.this, exp.Column) and not o.this.table}  # fmt: skip
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
            if extra is not None and not _constant(item.unalias()):
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

    # -- windows ----------------------------------------------------------------------------

    def window(self, window: exp.Window) -> None:
        """Complete the ORDER BY of a window function that numbers or picks tied rows."""
        function = _unwrap(window.this)
        select = window.find_ancestor(exp.Select)
        if isinstance(function, exp.Identifier) or select is None:
            return  # a named window's definition (judged where it is used)
        if window.args.get("alias") is not None and not _inline_named(window, select):
            return  # OVER w for a w not defined here: the engine reports it
        kind = _window_kind(function, window.args.get("spec"))
        if kind is None or window_is_total(window, select, self.table_keys):
            return
        tiebreakers = self._window_tiebreakers(window, select)
        if tiebreakers == []:
            return  # ordered on everything the window's rows show already
        order = window.args.get("order")
        label = f"{_display(function)} OVER ({_spec_only(window, self.engine)})"
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
        problem = _frame_problem(function, kind, window)
        if problem:
            self.unfixable.append(f"{reason} (sqlfeed cannot complete it: {problem})")
            return
        if order is None:
            order = exp.Order(expressions=[])
            window.set("order", order)
            if kind == "value" and _whole_partition(window.args.get("spec")):
                window.set("spec", _whole_partition_frame())
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
            candidates = _window_candidates(select)
        order = window.args.get("order")
        present = {
            k.this.sql().casefold() if isinstance(k, exp.Ordered) else k.sql().casefold()
            for k in [*window.args.get("partition_by", []), *(order.expressions if order else [])]
        }
        found: list[tuple[exp.Ordered, str]] = []
        for candidate in candidates:
            text = candidate.sql().casefold()
            if text in present or _constant(candidate):
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
        if value is None or aggregate is None or not _order_sensitive_aggregate(aggregate):
            return
        keys = {o.this.sql().casefold() for o in order.expressions}
        if value.sql().casefold() in keys or _constant(value):
            return
        label = self._sql(aggregate)
        self.ties.append(f"{label} concatenates values that tie on its ORDER BY in any order")
        order.append("expressions", _ordered(value.copy()))
        extra = self.engine.collation_tiebreak(value.copy())
        if extra is not None:
            order.append("expressions", _ordered(extra))
        self.completed.append(f"{label} completed with {self._sql(value)} (NULLS FIRST)")


def _ordered(expr: exp.Expr) -> exp.Ordered:
    return exp.Ordered(this=expr, desc=False, nulls_first=True)


def _constant(expr: exp.Expr) -> bool:
    return isinstance(expr, (exp.Literal, exp.Null, exp.Boolean)) or (
        isinstance(expr, exp.Paren) and _constant(expr.this)
    )


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


def _unwrap(function: exp.Expr) -> exp.Expr:
    while isinstance(function, (exp.IgnoreNulls, exp.RespectNulls)):
        function = function.this
    return function


def _order_sensitive_aggregate(node: exp.Expr | None) -> bool:
    return node is not None and (
        isinstance(node, ORDER_SENSITIVE_AGGREGATE_CLASSES)
        or function_name(node) in ORDER_SENSITIVE_AGGREGATES
    )


def _window_kind(function: exp.Expr, spec: exp.Expr | None) -> str | None:
    """``rows`` (numbers rows, ignores the frame), ``value`` (picks from its frame), or None
    when ties in the window order cannot change the function's result."""
    if isinstance(function, _ROW_FUNCTIONS) or function_name(function) in {
        "row_number", "lag", "lead", "ntile"
    }:  # fmt: skip
        return "rows"
    if isinstance(function, _VALUE_FUNCTIONS) or _order_sensitive_aggregate(function):
        return "value"
    rows_frame = isinstance(spec, exp.WindowSpec) and str(spec.args.get("kind")).upper() == "ROWS"
    if isinstance(function, exp.AggFunc) and rows_frame:
        return "value"  # a running aggregate over a ROWS frame: which rows it sums is order
    return None


def _frame_problem(function: exp.Expr, kind: str, window: exp.Window) -> str | None:
    """Why completing the order would change a RANGE/GROUPS frame (its bounds follow ties)."""
    if kind != "value" or window.args.get("order") is None:
        return None
    spec = window.args.get("spec")
    mode = str(spec.args.get("kind") or "RANGE").upper() if spec is not None else "RANGE"
    if mode == "ROWS":
        return None
    start = _bound(spec, "start", "UNBOUNDED PRECEDING")
    end = _bound(spec, "end", "CURRENT ROW")
    whole_start = start == "UNBOUNDED PRECEDING"
    whole_end = end == "UNBOUNDED FOLLOWING"
    if isinstance(function, exp.FirstValue) and whole_start:
        return None
    if isinstance(function, exp.LastValue) and whole_end:
        return None
    if whole_start and whole_end:
        return None
    return (
        f"its {mode} frame ends among the tied rows; order the window by a unique key, or "
        "give it a ROWS frame"
    )


def _bound(spec: exp.Expr | None, which: str, default: str) -> str:
    if spec is None or spec.args.get(which) is None:
        return default
    value = spec.args[which]
    text = value if isinstance(value, str) else value.sql()
    side = spec.args.get(f"{which}_side")
    return f"{text} {side}".strip().upper() if side else str(text).upper()


def _whole_partition(spec: exp.Expr | None) -> bool:
    """Whether a window without ORDER BY has the whole partition as its frame (the default)."""
    return spec is None or str(spec.args.get("kind") or "").upper() in ("RANGE", "GROUPS")


def _whole_partition_frame() -> exp.WindowSpec:
    return exp.WindowSpec(
        kind="ROWS",
        start="UNBOUNDED",
        start_side="PRECEDING",
        end="UNBOUNDED",
        end_side="FOLLOWING",
    )


def _inline_named(window: exp.Window, select: exp.Select) -> bool:
    """Copy a named window's definition into ``OVER name``; False if it is not defined here."""
    name = window.args["alias"].name.casefold()
    for definition in select.args.get("windows") or []:
        if isinstance(definition.this, exp.Identifier) and definition.this.name.casefold() == name:
            for arg in ("partition_by", "order", "spec"):
                if not window.args.get(arg) and definition.args.get(arg):
                    value = definition.args[arg]
                    window.set(
                        arg, [v.copy() for v in value] if isinstance(value, list) else value.copy()
                    )
            window.set("alias", None)
            return True
    return False


def _spec_only(window: exp.Window, engine: Dialect) -> str:
    """The window's PARTITION BY / ORDER BY / frame as the engine writes it, for messages."""
    dialect = engine.sqlglot_dialect
    parts: list[str] = []
    if window.args.get("partition_by"):
        parts.append(
            "PARTITION BY " + ", ".join(p.sql(dialect) for p in window.args["partition_by"])
        )
    for arg in ("order", "spec"):
        if window.args.get(arg) is not None:
            parts.append(window.args[arg].sql(dialect).strip())
    text = " ".join(parts)
    return text if len(text) <= 100 else text[:97] + "..."


def _window_candidates(select: exp.Select) -> list[exp.Expr]:
    """What tells the rows of a non-grouped SELECT apart for its windows: its output
    expressions (window results aside), then what every window reads or orders by."""
    candidates = [
        item.unalias().copy() for item in select.expressions if item.find(exp.Window) is None
    ]
    for other in select.find_all(exp.Window):
        if other.find_ancestor(exp.Select) is not select or isinstance(other.this, exp.Identifier):
            continue
        function = _unwrap(other.this)
        for value in function.args.values():
            for arg in value if isinstance(value, list) else [value]:
                if isinstance(arg, exp.Expr) and not _constant(arg):
                    candidates.append(arg.copy())
        order = other.args.get("order")
        candidates += [p.copy() for p in other.args.get("partition_by") or []]
        candidates += [o.this.copy() for o in (order.expressions if order else [])]
    group = select.args.get("group")
    if group is not None:  # ROLLUP / CUBE / GROUPING SETS: their columns too
        candidates += [c.copy() for c in group.find_all(exp.Column)]
    return candidates


def _display(function: exp.Expr) -> str:
    if isinstance(function, exp.Anonymous):
        return f"{function.name}()"
    if isinstance(function, exp.Func):
        return f"{function.sql_name()}()"
    return function.sql()

"""The ``fragments`` strategy: each partition reads its own stored fragment of the data.

A source that stores its rows in fragments (a shardset dataset's shard files, Parquet
row groups, ORC stripes, CSV/JSONL byte ranges) offers them through the
:class:`FragmentSource` capability; the planner asks the source, it does not know what
kind of source it is. :func:`fragment_problem` is the pure SQL analysis that says
whether a query's result is the union of the query over fragments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sqlglot import exp

from sqlfeed.plans.context import Built, PlanContext
from sqlfeed.plans.model import Partition
from sqlfeed.sql import ParsedQuery

__all__ = [
    "FragmentInfo",
    "FragmentSource",
    "build",
    "fragment_problem",
    "problem",
    "reason",
    "stored_rows",
    "view_reference",
]


class FragmentInfo(Protocol):
    """What a partition records of the fragment it reads."""

    @property
    def rows(self) -> int:
        """Rows stored in the fragment (estimated where the file does not say)."""

    @property
    def label(self) -> str:
        """What the fragment covers, for people."""

    @property
    def file(self) -> str:
        """The file the fragment is (part of)."""


@runtime_checkable
class FragmentSource(Protocol):
    """A source whose rows are stored in fragments that partitions can read one by one."""

    view: str
    """The name queries read the fragmented rows by."""

    def stored_rows(self) -> int:
        """Rows stored, from the files' own counts (no scan)."""

    def fragment_partitions(
        self, parsed: ParsedQuery, target_rows: int
    ) -> Sequence[tuple[str, FragmentInfo]]:
        """``(partition SQL, fragment)`` for fragments of about ``target_rows`` rows, in
        storage order: the query with the view replaced by one fragment."""


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Fragments need a fragment source, no key, and a row-by-row query over its view."""
    source = ctx.source
    if not isinstance(source, FragmentSource):
        why = "the source is not a shardset dataset (open one with sqlfeed.shards.datasets)"
    elif ctx.keys:
        why = "a key was given"
    else:
        found = fragment_problem(ctx.parsed, source.view)
        if found is None:
            return None
        why = found
    return f"strategy fragments: {why}"


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """What the partitions read."""
    if auto:
        return (
            "a row-by-row query over a shardset dataset, so each partition reads its "
            "own shard files (or row groups / stripes / byte ranges of one)"
        )
    return "the dataset's shard files, row groups and stripes"


def stored_rows(ctx: PlanContext) -> int:
    """Rows the source stores, by the files' own counts: fragment plans are sized by it
    instead of a COUNT(*) scan."""
    assert isinstance(ctx.source, FragmentSource)
    return ctx.source.stored_rows()


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """The source's fragments, cut to about ``stored rows / m`` rows each."""
    assert isinstance(ctx.source, FragmentSource)
    target = max(1, -(-max(stored_rows(ctx), 1) // m))
    built = ctx.source.fragment_partitions(ctx.parsed, target)
    return [
        Partition(index, sql, fragment.rows, fragment.label, file=fragment.file)
        for index, (sql, fragment) in enumerate(built)
    ], None


def fragment_problem(parsed: ParsedQuery, view: str) -> str | None:
    """Why the query's result is not the union of the query over fragments (None: it is).

    It is when the query reads the view once, in the top-level FROM or an inner join,
    and computes each output row from one row of it: no aggregates, DISTINCT, window
    functions, GROUP BY, LIMIT, set operations or outer joins that keep unmatched rows of
    another table.
    """
    tree = parsed.tree
    if not isinstance(tree, exp.Select):
        return "the query is not a plain SELECT (set operations mix fragments)"
    references = [t for t in tree.find_all(exp.Table) if _is_view(t, view)]
    if len(references) != 1:
        times = len(references)
        return f"the query must read the view {view!r} exactly once (it reads it {times} times)"
    for arg in ("group", "having", "qualify", "distinct", "limit", "offset", "fetch", "windows"):
        if tree.args.get(arg):
            return f"the query has {arg.upper()}, which needs rows from several fragments"
    with_ = tree.args.get("with_")
    for cte in with_.expressions if with_ is not None else []:
        if cte.alias_or_name == view:
            return f"a CTE is named {view!r} too"
    for item in tree.expressions:
        for node in item.walk():
            if isinstance(node, exp.AggFunc | exp.Window) and node.parent_select is tree:
                return "the query computes aggregates or window functions across rows"
    table = references[0]
    parent = table.parent
    joins = tree.args.get("joins") or []
    if isinstance(parent, exp.From) and parent.parent is tree:
        for join in joins:
            if join.side in ("RIGHT", "FULL"):
                return f"a {join.side} JOIN keeps rows of another table in every fragment"
        return None
    if isinstance(parent, exp.Join) and parent.parent is tree:
        if parent.side or any(j.side for j in joins):
            return "the view is on the outer side of an outer join"
        return None
    return "the view is read inside a subquery or CTE"


def _is_view(table: exp.Table, view: str) -> bool:
    return table.name == view and not table.db and isinstance(table.this, exp.Identifier)


def view_reference(tree: exp.Expr, view: str) -> exp.Table | None:
    """The first table reference in ``tree`` that names the view ``view`` (unqualified)."""
    for table in tree.find_all(exp.Table):
        if _is_view(table, view):
            return table
    return None

"""The ``fragments`` strategy: each partition reads its own stored fragment of the data.

Two kinds of sources store their rows in fragments:

* a source with the :class:`FragmentSource` capability (a shardset dataset: shard files,
  Parquet row groups, ORC stripes, CSV/JSONL byte ranges) offers them for its view;
* a query over plain files on DuckDB (``read_parquet``, ``read_csv``, ``read_json``,
  ``read_orc``, ``FROM 'x.parquet'``) is cut into pieces of those files by
  :mod:`sqlfeed.plans.fileplan`, through the :class:`~sqlfeed.plans.fileplan.FileSource`
  capability.

The planner asks the source; it does not know what kind of source it is.
:func:`fragment_problem` (a dataset's view) and :func:`sqlfeed.plans.files.table_problem`
(any table reference) are the pure SQL analysis that says whether a query's result is
the union of the query over fragments.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.plans import fileplan, materialize
from sqlfeed.plans.context import Built, PlanContext
from sqlfeed.plans.files import around_table, file_tables, table_problem
from sqlfeed.plans.model import Partition
from sqlfeed.sql import ParsedQuery

__all__ = [
    "FragmentInfo",
    "FragmentSource",
    "around_view",
    "build",
    "cost",
    "fragment_problem",
    "notes",
    "problem",
    "reason",
    "rereads",
    "stored_rows",
    "view_reference",
]

_BUILT = "fragments:built"


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
        """``(partition SQL, fragment)`` for fragments of about ``target_rows`` rows.

        In storage order; each partition SQL is the query with the view replaced by one
        fragment.
        """


def _dataset(ctx: PlanContext) -> bool:
    """Whether the query reads a shardset dataset's view (else: plain files, if any)."""
    source = ctx.source
    if not isinstance(source, FragmentSource):
        return False
    return view_reference(ctx.parsed.tree, source.view) is not None or not file_tables(ctx.parsed)


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """Why strategy fragments cannot plan the query (None: it can).

    Fragments need no key and a row-by-row query over a shardset dataset's view or over one
    table of plain files (Parquet, CSV, JSON, ORC) on DuckDB.
    """
    source = ctx.source
    if ctx.keys:
        why: str | None = "a key was given"
    elif _dataset(ctx):
        assert isinstance(source, FragmentSource)
        why = fragment_problem(ctx.parsed, source.view)
    else:
        why = fileplan.problem(ctx)
        if why is None and auto:
            why = _rather_materialized(ctx)
    return None if why is None else f"strategy fragments: {why}"


def _rather_materialized(ctx: PlanContext) -> str | None:
    """For ``auto``: why a scratch table is cheaper than pieces of files (None: it is not).

    When the tables every partition reads whole are no smaller than the table cut, M
    partitions read more than twice the files' bytes from M = 3 on, while materialize reads
    them once and its table once.
    """
    extra = fileplan.whole_reads(ctx)
    whole = sum(size for _name, size in extra.files)
    if whole < max(extra.cut, 1) or materialize.problem(ctx, auto=True) is not None:
        return None
    return (
        f"every partition would read {fileplan.size_text(whole)} of other tables whole, "
        f"no less than the {fileplan.size_text(extra.cut)} it cuts"
    )


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """What the partitions read."""
    if not _dataset(ctx):
        found = fileplan.layout(ctx)
        kind = {"csv": "CSV", "json": "JSON", "ndjson": "JSON", "orc": "ORC"}.get(
            found.table.fmt, "Parquet"
        )
        count = len(found.files)
        files = f"{count} {kind} file{'s' if count != 1 else ''}"
        pieces = {
            "Parquet": "row groups",
            "ORC": "stripes",
        }.get(kind, "line-aligned byte ranges")
        also = fileplan.whole_reads(ctx).text()  # the other tables, read whole
        if also:
            size = fileplan.table_bytes(ctx, found.table)
            files += f" ({found.table.patterns[0]}, {fileplan.size_text(size)})"
        if auto:
            once = "" if also else ": one read in all"
            return (
                f"a row-by-row query over {files}, so each partition reads its own files "
                f"(or {pieces} of one){once}{also}"
            )
        return f"the {files}, whole or in {pieces}{also}"
    described = getattr(ctx.source, "fragments_reason", None)
    if described is not None:  # a lakehouse table: its snapshot and files
        return str(described(auto))
    if auto:
        return (
            "a row-by-row query over a shardset dataset, so each partition reads its "
            "own shard files (or row groups / stripes / byte ranges of one)"
        )
    return "the dataset's shard files, row groups and stripes"


def notes(ctx: PlanContext, partitions: int = 1, warn_above: float = 2.0) -> str:
    """After :func:`build`: what it left whole and why (``; ...``), and any cost warning.

    The warning is given when the ``partitions`` cost more than ``warn_above`` reads; the
    text is empty if there is nothing to say.
    """
    spent = cost(ctx, partitions)
    warning = rereads(ctx, spent) if spent > warn_above else ""
    if _dataset(ctx):
        skipped = getattr(ctx.source, "fragments_note", None)  # a lakehouse table's files
        note = str(skipped()) if skipped is not None else ""
        return note + _whole(ctx).text() + warning  # a dataset's reason is said before it is cut
    return fileplan.notes(ctx) + warning


def cost(ctx: PlanContext, partitions: int) -> float:
    """What reading all ``partitions`` costs, in reads of the data once (``plan.cost``).

    The bytes every partition reads (its piece, and every other table whole) over the
    bytes of all the files (a dataset's shards, or the files a query reads).
    """
    return _whole(ctx).cost(partitions)


def _whole(ctx: PlanContext) -> fileplan.WholeReads:
    """What every partition reads whole besides its fragment."""
    if not _dataset(ctx):
        return fileplan.whole_reads(ctx)
    if not isinstance(ctx.source, fileplan.FileSource):
        return fileplan.WholeReads(1, [], [], "")
    assert isinstance(ctx.source, FragmentSource)
    view = ctx.source.view
    position = next(
        i for i, t in enumerate(ctx.parsed.tree.find_all(exp.Table)) if _is_view(t, view)
    )
    built: Sequence[Partition] = ctx.memo.get(_BUILT, ())
    shards = {p.file for p in built if p.file and os.path.isfile(p.file)}
    stored = sum(os.path.getsize(f) for f in shards)
    return fileplan.reads_besides(ctx, position, stored, "partitions cut the dataset's shards")


def rereads(ctx: PlanContext, cost: float) -> str:
    """The warning ``plan.reason`` gets when the partitions read ``cost`` times the files."""
    cut = "the dataset" if _dataset(ctx) else fileplan.layout(ctx).table.patterns[0]
    return (
        f"; WARNING: the partitions read about {cost:g} times the bytes of the files, as "
        f"each reads its piece of {cut} and the other tables whole: a scratch schema "
        "(--strategy materialize --scratch SCHEMA) runs the query once into a table, "
        "or fewer partitions read the other tables fewer times"
    )


def stored_rows(ctx: PlanContext) -> int:
    """Rows the source stores, by the files' own counts.

    Fragment plans are sized by it instead of a COUNT(*) scan.
    """
    if not _dataset(ctx):
        return fileplan.stored_rows(ctx)
    assert isinstance(ctx.source, FragmentSource)
    return ctx.source.stored_rows()


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """The source's fragments, cut to about ``stored rows / m`` rows each."""
    if not _dataset(ctx):
        return fileplan.build(ctx, m), None
    assert isinstance(ctx.source, FragmentSource)
    target = max(1, -(-max(stored_rows(ctx), 1) // m))
    built = ctx.source.fragment_partitions(ctx.parsed, target)
    out = [
        Partition(index, sql, fragment.rows, fragment.label, file=fragment.file)
        for index, (sql, fragment) in enumerate(built)
    ]
    ctx.memo[_BUILT] = out  # their shard files: the bytes plan.cost counts
    return out, None


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
    with_ = tree.args.get("with_")
    for cte in with_.expressions if with_ is not None else []:
        if cte.alias_or_name == view:
            return f"a CTE is named {view!r} too"
    return table_problem(parsed, references[0])


def _is_view(table: exp.Table, view: str) -> bool:
    return table.name == view and not table.db and isinstance(table.this, exp.Identifier)


def view_reference(tree: exp.Expr, view: str) -> exp.Table | None:
    """The first table reference in ``tree`` that names the view ``view`` (unqualified)."""
    for table in tree.find_all(exp.Table):
        if _is_view(table, view):
            return table
    return None


def around_view(parsed: ParsedQuery, view: str, alias: str) -> tuple[str, str]:
    """The query's SQL before and after its one reference to ``view``.

    The query is rendered once around a placeholder for the view (named ``alias`` when it
    has no alias of its own), checked to read back unchanged; each fragment's own SQL goes
    in its place as text.

    Raises:
        InvalidArgumentError: the query is not the union of the query over fragments.
    """
    problem = fragment_problem(parsed, view)
    if problem:
        raise InvalidArgumentError(f"strategy fragments: {problem}")
    tree = parsed.tree.copy()
    table = view_reference(tree, view)
    assert table is not None  # fragment_problem checked it
    named = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(alias))
    token = f"sqlfeed_view_{uuid.uuid4().hex}"
    table.replace(exp.Table(this=exp.to_identifier(token), alias=named))
    return around_table(parsed, tree, token)

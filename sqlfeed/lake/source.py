"""A lakehouse table as a DuckDB source: snapshot-pinned views and fragment partitions.

:class:`LakeSource` is a DuckDB :class:`~sqlfeed.io.Source` in which the table is a view,
so plans, statistics, the Feeder, jobs and the framework feeds work on it unchanged. Its
rows are always those of ONE snapshot, named in the SQL itself:

* the view ``name`` (what users write) reads the snapshot the source is at;
* every query the source parses is **pinned**: ``FROM name`` becomes ``FROM
  name__at_<snapshot> AS name`` (``name__from_<a>_at_<b>``: the rows added after snapshot
  ``a``, for incremental epochs), so a plan's count, sample and partition queries say which
  snapshot they read; any process that runs them (a worker, a Ray task, a resume a week
  later) creates that snapshot's view from the table's metadata when it first meets the
  name. A job over a table being appended to stays exact and reproducible.

The ``fragments`` strategy (chosen by ``auto`` for row-by-row queries) cuts the snapshot's
data files from their own metadata, with no ``COUNT(*)``: small files together, big files
in runs of Parquet row groups, each piece carrying the deletes that apply to it
(:mod:`sqlfeed.lake.pieces`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb
import sqlglot
from sqlglot import exp

from sqlfeed.io import DuckDBSource
from sqlfeed.lake.arrow import LakeArrowReader, marked, marker, projection
from sqlfeed.lake.model import DataFile, TableSnapshot
from sqlfeed.lake.pieces import Piece, fragment_sql, ident, table_sql
from sqlfeed.lake.prune import Term, skipped, terms
from sqlfeed.lake.sidecar import SIDECAR, local_sidecars
from sqlfeed.plans import filemeta
from sqlfeed.plans.fragments import around_view, view_reference
from sqlfeed.sql import ParsedQuery

__all__ = ["Fragment", "LakeSource", "LakeTable"]

_PINNED = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*?)__(?:from_(\d+)_)?at_(\d+)\b")


@dataclass(frozen=True)
class LakeTable:
    """How to read one table: its loaders, bound to where it is (Iceberg or Delta)."""

    kind: str
    name: str
    """The name queries read it by (the view)."""
    location: str
    latest: Callable[[int | None, int | None], int | None]
    """``(snapshot, as_of_ms) -> snapshot id`` (None: the table has no snapshot yet)."""
    load: Callable[[int | None, int | None], TableSnapshot]
    """``(snapshot, since) -> TableSnapshot`` (``since``: only files added after it)."""


@dataclass(frozen=True)
class Fragment:
    """Pieces of data files one partition reads."""

    pieces: tuple[Piece, ...]

    @property
    def rows(self) -> int:
        """Rows stored in the pieces (before deletes)."""
        return sum(p.rows for p in self.pieces)

    @property
    def label(self) -> str:
        """For people."""
        if not self.pieces:
            return "no data files"
        first = self.pieces[0].label()
        more = len(self.pieces) - 1
        return first + (f" and {more} more file{'s' if more != 1 else ''}" if more else "")

    @property
    def file(self) -> str:
        """The first piece's file ("" when none)."""
        return self.pieces[0].file.path if self.pieces else ""


class LakeSource(DuckDBSource):
    """DuckDB with a lakehouse table as a snapshot-pinned view; see the module docstring.

    Args:
        table: the table's loaders.
        snapshot: the snapshot (Iceberg id, Delta version) to read; None: the latest.
        as_of_ms: read the snapshot current at this time (milliseconds since the epoch).
        since: read only the rows added after this snapshot (incremental epochs).
    """

    def __init__(
        self,
        table: LakeTable,
        *,
        snapshot: int | None = None,
        as_of_ms: int | None = None,
        since: int | None = None,
    ) -> None:
        super().__init__(duckdb.connect(), owned=True, label=f"{table.kind}:{table.location}")
        self.table = table
        self._lock = threading.RLock()
        self._snapshots: dict[tuple[int, int | None], TableSnapshot] = {}
        self._views: set[str] = set()
        self.skipped_files = 0
        """Data files the last fragment plan left out by their bounds."""
        self.since = since
        # partitions that only pick columns are read by pyarrow, the others by DuckDB
        self._readers = {LakeArrowReader.name: LakeArrowReader(self), **self._readers}
        self.readers = tuple(self._readers)
        self.snapshot_id = table.latest(snapshot, as_of_ms)
        self._make_view(table.name, self.snapshot_id, since)

    # -- the snapshot ----------------------------------------------------------------------

    @property
    def current(self) -> TableSnapshot:
        """The snapshot the source reads now (with ``since``: its new files only)."""
        return self._snapshot(self.snapshot_id, self.since)

    @property
    def view(self) -> str:
        """The pinned view name of the snapshot read now (what parsed queries name)."""
        return pinned_name(self.table.name, self.snapshot_id, self.since)

    def refresh(self, *, since: int | None = None) -> int | None:
        """Move to the table's latest snapshot (``since``: only rows added after that one).

        The plain view follows. Returns the snapshot id now read.
        """
        with self._lock:
            self.snapshot_id = self.table.latest(None, None)
            self.since = since
            self._make_view(self.table.name, self.snapshot_id, since, replace=True)
        return self.snapshot_id

    def at(self, snapshot: int | None, since: int | None = None) -> None:
        """Read ``snapshot`` (a job resumed at the snapshot its epoch read)."""
        with self._lock:
            self.snapshot_id = self.table.latest(snapshot, None) if snapshot else snapshot
            self.since = since
            self._make_view(self.table.name, self.snapshot_id, since, replace=True)

    def snapshot_at(self, snapshot: int | None, since: int | None = None) -> TableSnapshot:
        """The table at ``snapshot`` (with ``since``: its files added after that one).

        Loaded from its metadata once per source.
        """
        return self._snapshot(snapshot, since)

    def _snapshot(self, snapshot: int | None, since: int | None) -> TableSnapshot:
        key = (snapshot or 0, since)
        with self._lock:
            if key not in self._snapshots:
                self._snapshots[key] = self.table.load(snapshot, since)
            return self._snapshots[key]

    def stored_rows(self) -> int:
        """Rows in the snapshot's data files, from their metadata (before deletes)."""
        return self.current.stored_rows

    def describe(self) -> str:
        """What the source reads: the table, the snapshot, its files."""
        return self.current.describe()

    def fragments_reason(self, auto: bool) -> str:
        """What a ``fragments`` plan of the source reads (``plan.reason``)."""
        found = self.current
        pieces = "its own data files (or runs of row groups of one), deletes applied"
        if auto:
            return (
                f"a row-by-row query over the {found.describe()}, so each partition reads {pieces}"
            )
        return f"the {found.describe()}: {pieces}"

    # -- views: created when a query first names them --------------------------------------

    def _make_view(
        self, name: str, snapshot: int | None, since: int | None, replace: bool = False
    ) -> None:
        with self._lock:
            if name in self._views and not replace:
                return
            found = self._snapshot(snapshot, since)
            body = table_sql(found.files, found.columns)
            with self.connection.cursor() as cursor:
                cursor.execute(f"CREATE OR REPLACE VIEW {ident(name)} AS {body}")
            self._views.add(name)

    def _cursor(self, sql: str = "") -> duckdb.DuckDBPyConnection:
        for match in _PINNED.finditer(sql):
            name, since, snapshot = match.group(1), match.group(2), match.group(3)
            if name == self.table.name and match.group(0) not in self._views:
                self._make_view(
                    match.group(0), int(snapshot) or None, int(since) if since else None
                )
        return super()._cursor(sql)

    def _local_sql(self, cursor: duckdb.DuckDBPyConnection, sql: str) -> str:
        """``sql`` with the deletion-vector files of this machine's cache.

        Made if missing: the snapshot its marker names is loaded.
        """
        if SIDECAR.search(sql):
            spec = marker(sql)
            if spec is not None:
                self.snapshot_at(spec["at"], spec["since"])
            sql = local_sidecars(sql)
        return super()._local_sql(cursor, sql)

    def parse(self, sql: str | ParsedQuery, *, allow_side_effects: bool = False) -> ParsedQuery:
        """Parse ``sql`` with the table's name pinned to the snapshot read now."""
        text = sql if isinstance(sql, str) else sql.sql
        pinned = pin(text, self.table.name, self.view)
        if not isinstance(sql, str) and pinned == text:
            return super().parse(sql)  # parsed already, nothing to pin
        allowed = allow_side_effects or (not isinstance(sql, str) and sql.allow_side_effects)
        return super().parse(pinned, allow_side_effects=allowed)

    # -- fragments -------------------------------------------------------------------------

    def fragments(self, target_rows: int, parsed: ParsedQuery | None = None) -> list[Fragment]:
        """The snapshot's data files cut into fragments of about ``target_rows`` rows.

        Small files go together (in storage order), big files in runs of row groups.
        """
        out: list[Fragment] = []
        pending: list[Piece] = []
        found = self.current
        decided = self._terms(parsed) if parsed is not None else []
        files = [f for f in found.files if not (decided and skipped(f, decided))]
        self.skipped_files = len(found.files) - len(files)
        for file in files:
            if file.rows >= target_rows:
                out.extend(Fragment((p,)) for p in _runs(file, target_rows))
                continue
            pending.append(Piece(file))
            if sum(p.rows for p in pending) >= target_rows:
                out.append(Fragment(tuple(pending)))
                pending = []
        if pending:
            out.append(Fragment(tuple(pending)))
        return out or [Fragment(())]

    def _terms(self, parsed: ParsedQuery) -> list[Term]:
        table = view_reference(parsed.tree, self.view)
        if table is None:
            return []
        kinds = {name: _kind(sql_type) for name, sql_type in self.current.columns}
        return terms(parsed.tree, self.view, table.alias_or_name, kinds)

    def fragments_note(self) -> str:
        """What the last fragment plan left out (``; ...``), or nothing."""
        count = self.skipped_files
        if not count:
            return ""
        files = f"{count} data file{'s' if count != 1 else ''}"
        return f"; {files} skipped: the WHERE is false for every value their bounds allow"

    def fragment_partitions(
        self, parsed: ParsedQuery, target_rows: int
    ) -> list[tuple[str, Fragment]]:
        """``(partition SQL, fragment)`` for every fragment.

        The partition SQL is the query with the pinned view replaced by the fragment's pieces.
        """
        before, after = around_view(parsed, self.view, self.table.name)
        columns = self.current.columns
        picked = projection(parsed, self.view)
        out = []
        for fragment in self.fragments(target_rows, parsed):
            sql = f"{before}({fragment_sql(fragment.pieces, columns)}){after}"
            vectors = any(p.file.deleted_positions for p in fragment.pieces)
            if (picked is not None or vectors) and self.snapshot_id is not None:
                sql = marked(sql, self.snapshot_id, self.since, picked, fragment.pieces)
            out.append((sql, fragment))
        return out


def _kind(sql_type: str) -> str:
    """What :mod:`sqlfeed.lake.prune` compares a column as (empty: it does not)."""
    if sql_type in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT"):
        return "int"
    if sql_type.startswith("DECIMAL"):
        return "decimal"
    return {"DATE": "date", "VARCHAR": "string"}.get(sql_type, "")


def _runs(file: DataFile, target_rows: int) -> list[Piece]:
    """A big file in runs of whole row groups of about ``target_rows`` rows."""
    groups = filemeta.parquet_row_groups(file.path)
    runs = filemeta.even_runs(file.path, "rows", groups, target_rows, by_rows=True)
    return [Piece(file) if run.kind == "file" else Piece(file, run.start, run.end) for run in runs]


def pinned_name(name: str, snapshot: int | None, since: int | None = None) -> str:
    """The view name of ``name`` at ``snapshot`` (with ``since``: its rows added after it)."""
    at = f"at_{snapshot or 0}"
    return f"{name}__from_{since}_{at}" if since is not None else f"{name}__{at}"


def pin(sql: str, name: str, pinned: str) -> str:
    """``sql`` with every table reference to ``name`` read from ``pinned``.

    ``FROM name`` becomes ``FROM pinned AS name``, so qualified columns keep working; the
    rest of the text is as written.
    """
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return sql  # the source's own parse says what is wrong
    edits = []
    for table in tree.find_all(exp.Table):
        if table.name != name or table.db or not isinstance(table.this, exp.Identifier):
            continue
        meta = table.this.meta
        if "start" not in meta or any(
            isinstance(c, exp.CTE) and c.alias_or_name == name for c in tree.find_all(exp.CTE)
        ):
            continue
        alias = "" if table.alias else f" AS {ident(name)}"
        edits.append((meta["start"], meta["end"] + 1, ident(pinned) + alias))
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def names_in(sql: str) -> Sequence[str]:
    """The pinned view names ``sql`` reads (for messages and tests)."""
    return [m.group(0) for m in _PINNED.finditer(sql)]

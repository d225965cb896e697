"""What a lakehouse table is at one snapshot, as sqlfeed reads it: data files and deletes.

Pure: dataclasses that the Iceberg and Delta readers (:mod:`sqlfeed.lake.iceberg`,
:mod:`sqlfeed.lake.delta`) fill from the table's own metadata, and that
:mod:`sqlfeed.lake.pieces` turns into DuckDB SQL. Everything a partition needs is named here
by file path, so a piece's SQL reads the same rows in every process, epoch and resume: data
and delete files are never changed once a snapshot names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Column",
    "DataFile",
    "EqualityDeletes",
    "TableSnapshot",
]


@dataclass(frozen=True)
class Column:
    """One output column of the table at its snapshot, and where a data file holds it."""

    name: str
    """The column's name in the snapshot's schema."""
    sql_type: str
    """Its DuckDB type (every file's values are cast to it: promoted types, added columns)."""
    source: str | None = None
    """The column's name inside the data file (a renamed column keeps its old name there);
    None: the file predates the column, or a Delta partition column, see ``constant``."""
    constant: str | None = None
    """A DuckDB SQL literal the column takes for every row of the file (a Delta partition
    value); None: read ``source`` (or NULL when ``source`` is None too)."""
    cast: bool = False
    """Whether the file's values need a cast to :attr:`sql_type` (the file's type differs)."""


@dataclass(frozen=True)
class EqualityDeletes:
    """Equality delete files that apply to a data file, with the columns they compare."""

    files: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    """``(column in the delete files, column in the data file)`` for each equality column
    (the data file's name empty: the file predates the column, its values are NULL)."""


@dataclass(frozen=True)
class DataFile:
    """A data file of the snapshot and the deletes that apply to its rows."""

    path: str
    """The file's local path (what DuckDB reads)."""
    uri: str
    """The file's path as the table's metadata writes it (what position deletes name)."""
    rows: int
    """Rows stored in the file (before deletes)."""
    size: int
    """Bytes."""
    columns: tuple[Column, ...]
    """The snapshot's columns, mapped to this file."""
    position_deletes: tuple[str, ...] = ()
    """Position delete files (``file_path``, ``pos``) that may name this file's rows."""
    deleted_positions: str | None = None
    """A Parquet file of one ``pos`` column: positions a deletion vector removes (written by
    sqlfeed next to the plan from the vector; None: no vector)."""
    equality_deletes: tuple[EqualityDeletes, ...] = ()
    added_in: int | None = None
    """The snapshot id (Iceberg) or version (Delta) that added the file."""
    bounds: dict[str, tuple[object, object]] = field(default_factory=dict, compare=False)
    """``column -> (lower, upper)`` of the file's non-null values where the metadata says."""
    null_counts: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def has_deletes(self) -> bool:
        """Whether any delete applies to the file."""
        return bool(self.position_deletes or self.equality_deletes or self.deleted_positions)


@dataclass(frozen=True)
class TableSnapshot:
    """A table at one snapshot: its schema and data files."""

    kind: str
    """``iceberg`` or ``delta``."""
    name: str
    """The table's name (what sqlfeed names its view)."""
    location: str
    """Where the table is (metadata JSON or catalog name; Delta folder)."""
    snapshot: int
    """The snapshot id (Iceberg) or version (Delta) read."""
    columns: tuple[tuple[str, str], ...]
    """``(name, DuckDB type)`` of the snapshot's schema."""
    files: tuple[DataFile, ...]
    timestamp_ms: int | None = None
    since: int | None = None
    """With ``new_only``: the snapshot after which the files were added (exclusive)."""

    @property
    def stored_rows(self) -> int:
        """Rows in the data files (before deletes): what plans are sized by."""
        return sum(f.rows for f in self.files)

    @property
    def deleted_files(self) -> int:
        """How many data files have deletes."""
        return sum(1 for f in self.files if f.has_deletes)

    def describe(self) -> str:
        """For ``plan.reason``: the table, the snapshot, the files and their deletes."""
        what = "snapshot" if self.kind == "iceberg" else "version"
        since = f" (only files added after {what} {self.since})" if self.since is not None else ""
        deletes = f", {self.deleted_files} with deletes" if self.deleted_files else ""
        count = len(self.files)
        return (
            f"{self.kind.capitalize()} table {self.name} at {what} {self.snapshot}{since}: "
            f"{count} data file{'s' if count != 1 else ''}{deletes}"
        )

"""DuckDB SQL that reads pieces of a lakehouse table's data files with their deletes applied.

Pure. A piece is a data file, or a run of its rows ``[start, end)`` (whole Parquet row
groups: DuckDB skips the others); its SQL reads the file with DuckDB's ``read_parquet`` and
keeps the rows no delete removes:

* **position deletes**: the delete files' ``pos`` for this file's path, within the piece's
  rows only (``file_row_number NOT IN (...)``), so a piece of a file with deletes stays a
  piece: the file is still split;
* **a deletion vector**: the positions it removes, from the Parquet file sqlfeed wrote them
  to (the vector's own format is read once, when planning);
* **equality deletes**: an anti-join on the equality columns (``IS NOT DISTINCT FROM``: a
  NULL deletes NULLs, as the Iceberg spec says) with the delete files whose sequence number
  is higher than the data file's (the reader chose them, see :mod:`sqlfeed.lake.iceberg`).

Columns are projected to the snapshot's schema: a renamed column read by its name in the
file, a column the file predates as NULL, a promoted type cast, a Delta partition value as
a constant. Rows come in the file's order (``ORDER BY`` the file and row number when the
piece joins deletes or reads several files), so a partition read again (a worker's resume)
yields the same rows in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlfeed.lake.model import Column, DataFile

__all__ = ["Piece", "fragment_sql", "ident", "literal", "table_sql"]

_FILE = "__sqlfeed_file"
_ROW = "__sqlfeed_row"
_PLAIN = ", hive_partitioning = false"
"""Every file read as it is: DuckDB would otherwise take ``a=0/`` in a partitioned table's
paths for a column ``a`` and replace the file's own values (and type) with it."""


class Piece:
    """Rows ``[start, end)`` of a data file (``end`` None: to its end)."""

    __slots__ = ("end", "file", "start")

    def __init__(self, file: DataFile, start: int = 0, end: int | None = None) -> None:
        self.file, self.start, self.end = file, start, end

    @property
    def whole(self) -> bool:
        """Whether the piece is the whole file."""
        return self.start == 0 and (self.end is None or self.end >= self.file.rows)

    @property
    def rows(self) -> int:
        """Rows stored in the piece (before deletes)."""
        end = self.file.rows if self.end is None else min(self.end, self.file.rows)
        return max(0, end - self.start)

    def label(self) -> str:
        """For people: the file and the rows."""
        name = self.file.path.rsplit("/", 1)[-1]
        return name if self.whole else f"{name} rows [{self.start}, {self.start + self.rows})"


def ident(name: str) -> str:
    """A quoted DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """A DuckDB string literal."""
    return "'" + text.replace("'", "''") + "'"


def _files(paths: Sequence[str]) -> str:
    if len(paths) == 1:
        return literal(paths[0])
    return "[" + ", ".join(literal(p) for p in paths) + "]"


def _projection(column: Column) -> str:
    if column.constant is not None:
        value = column.constant
    elif column.source is None:
        value = "NULL"
    else:
        value = "t." + ident(column.source)
        if not column.cast:
            return f"{value} AS {ident(column.name)}"
    return f"CAST({value} AS {column.sql_type}) AS {ident(column.name)}"


def _conditions(piece: Piece) -> list[str]:
    file = piece.file
    out = []
    ranged = not piece.whole
    if ranged:
        out.append(f"t.file_row_number >= {piece.start}")
        if piece.end is not None:
            out.append(f"t.file_row_number < {piece.end}")
    within = f" AND pos >= {piece.start}" + (
        f" AND pos < {piece.end}" if ranged and piece.end is not None else ""
    )
    if file.position_deletes:
        out.append(
            f"t.file_row_number NOT IN (SELECT pos FROM read_parquet("
            f"{_files(file.position_deletes)}{_PLAIN}) WHERE file_path = {literal(file.uri)}"
            f"{within if ranged else ''})"
        )
    if file.deleted_positions:
        out.append(
            f"t.file_row_number NOT IN (SELECT pos FROM read_parquet("
            f"{literal(file.deleted_positions)}{_PLAIN}){' WHERE true' + within if ranged else ''})"
        )
    for group in file.equality_deletes:
        match = " AND ".join(
            f"e.{ident(deleted)} IS NOT DISTINCT FROM t.{ident(data)}"
            if data
            else f"e.{ident(deleted)} IS NULL"  # the file predates the column: NULL
            for deleted, data in group.pairs
        )
        out.append(
            f"NOT EXISTS (SELECT 1 FROM read_parquet({_files(group.files)}{_PLAIN}) AS e "
            f"WHERE {match})"
        )
    return out


def _piece_select(piece: Piece, index: int | None) -> str:
    """One piece's rows, with ``index`` and the row number as ordering columns when given."""
    file = piece.file
    items = [_projection(c) for c in file.columns]
    conditions = _conditions(piece)
    numbered = index is not None or bool(conditions)
    if index is not None:
        items = [f"{index} AS {_FILE}", f"t.file_row_number AS {_ROW}", *items]
    option = _PLAIN + (", file_row_number = true" if numbered else "")
    sql = f"SELECT {', '.join(items)} FROM read_parquet({literal(file.path)}{option}) AS t"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    return sql


def fragment_sql(pieces: Sequence[Piece], columns: Sequence[tuple[str, str]]) -> str:
    """One SELECT of the table's rows stored in ``pieces``, deletes applied.

    The rows come in the order of ``pieces``, each in its file's order, as the snapshot's
    ``columns`` (``(name, DuckDB type)``).
    """
    if not pieces:
        items = ", ".join(f"CAST(NULL AS {t}) AS {ident(n)}" for n, t in columns)
        return f"SELECT {items} WHERE false"
    if len(pieces) == 1 and not pieces[0].file.has_deletes:
        return _piece_select(pieces[0], None)
    union = " UNION ALL ".join(_piece_select(p, i) for i, p in enumerate(pieces))
    return f"SELECT * EXCLUDE ({_FILE}, {_ROW}) FROM ({union}) ORDER BY {_FILE}, {_ROW}"


def table_sql(files: Sequence[DataFile], columns: Sequence[tuple[str, str]]) -> str:
    """Every row of the snapshot: its data files whole, deletes applied.

    Unordered: the view queries read; partitions read :func:`fragment_sql`.
    """
    if not files:
        return fragment_sql([], columns)
    return " UNION ALL ".join(_piece_select(Piece(f), None) for f in files)

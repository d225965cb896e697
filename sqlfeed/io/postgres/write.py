r"""The PostgreSQL write session: a batch's rows sent with ``COPY ... FROM STDIN``.

Arrow writes the batch as CSV (NULL an unquoted empty field, the empty string a quoted
one, floats in their shortest exact form, ``nan`` and ``inf`` as PostgreSQL reads them);
binary values go as ``\x`` hex text, zoned timestamps as UTC instants, durations as
interval text in seconds (a bare number would be read as seconds of another unit). The ``COPY`` runs
in the session's open transaction, so the rows commit together with the sink's commit
record, or not at all.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from sqlfeed.io.writes import DbapiSession

__all__ = ["PostgresSession", "copy_text"]

CHUNK_ROWS = 16_384
"""Rows turned into CSV at a time: PostgreSQL parses a chunk while the next is made."""

_CSV = pcsv.WriteOptions(include_header=False, quoting_style="needed", batch_size=65_536)


class PostgresSession(DbapiSession):
    """A psycopg connection writing with ``COPY FROM STDIN (FORMAT csv)``."""

    def insert(self, table: str, columns: Sequence[str], batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        command = f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)"
        with self.cursor.copy(command) as copy:
            for start in range(0, batch.num_rows, CHUNK_ROWS):  # the server parses one
                copy.write(copy_text(batch.slice(start, CHUNK_ROWS)))  # while we write the next

    def duplicate(self, err: BaseException) -> bool:
        return getattr(err, "sqlstate", None) == "23505" or super().duplicate(err)

    def busy(self, err: BaseException) -> bool:
        return getattr(err, "sqlstate", None) in ("40001", "40P01") or super().busy(err)


def copy_text(batch: pa.RecordBatch) -> bytes:
    """``batch`` as the CSV ``COPY FROM STDIN (FORMAT csv)`` reads."""
    columns = [_copyable(batch.column(i)) for i in range(batch.num_columns)]
    table = pa.Table.from_arrays(columns, names=[f"c{i}" for i in range(len(columns))])
    out = io.BytesIO()
    pcsv.write_csv(table, out, _CSV)
    return out.getvalue()


def _copyable(column: pa.Array) -> pa.Array:
    kind = column.type
    if (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        return pa.array(
            [None if v is None else "\\x" + v.hex() for v in column.to_pylist()], pa.string()
        )
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return pc.cast(column, pa.timestamp(kind.unit, tz="UTC"))
    if pa.types.is_duration(kind):  # a bare number would be read as seconds
        micros = pc.cast(pc.cast(column, pa.duration("us")), pa.int64()).to_pylist()
        return pa.array([None if v is None else _interval(v) for v in micros], pa.string())
    if pa.types.is_dictionary(kind):
        return pc.cast(column, kind.value_type)
    return column


def _interval(micros: int) -> str:
    """A duration in microseconds as the interval text PostgreSQL reads exactly."""
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{seconds}.{fraction:06d} seconds"


def raw_psycopg(connection: Any) -> Any:
    """The psycopg connection under a SQLAlchemy pooled one."""
    return getattr(connection, "dbapi_connection", connection)

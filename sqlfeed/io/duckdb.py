"""DuckDB: :class:`DuckDBSource` (native Arrow, a cursor per thread), opening ``duckdb:`` URLs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa

from dialects import EngineError, get_dialect
from sqlfeed.io.source import Source, driver_message

__all__ = ["DuckDBSource", "open_duckdb"]


class DuckDBSource(Source):
    """DuckDB through its own Python API: native Arrow, a cursor per thread."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, *, owned: bool, label: str) -> None:
        self.dialect = get_dialect("duckdb")
        self.connection = connection
        self._owned = owned
        self.label = label

    def close(self) -> None:
        if self._owned:
            self.connection.close()

    def _cursor(self, sql: str = "") -> duckdb.DuckDBPyConnection:
        """A cursor (its own DuckDB connection) to run ``sql`` on."""
        return self.connection.cursor()

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self._cursor(sql) as cursor:
            return cursor.execute(sql).fetchall()

    def _execute(self, sql: str) -> None:
        with self._cursor(sql) as cursor:
            cursor.execute(sql)

    def _arrow(self, sql: str) -> pa.Table:
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table: pa.Table = to_table()
        return table

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            # DuckDB 2 renamed arrow() / fetch_record_batch() to to_arrow_table/_reader().
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table = to_table()
        return list(table.column_names), table.schema

    def _read(
        self,
        sql: str,
        schema: pa.Schema,
        batch_rows: int,
        stop: threading.Event | None,
        ordered: bool,
        snapshot: str | None,
    ) -> Iterator[pa.RecordBatch]:
        # DuckDB preserves insertion order by default: reads are ordered already.
        with self._cursor(sql) as cursor:
            relation = cursor.sql(sql)
            to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
            reader = to_reader(batch_rows)
            while stop is None or not stop.is_set():
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as err:
                    # DuckDB's errors surface through the Arrow stream as OSError.
                    raise EngineError(
                        f"duckdb failed running the partition query: {driver_message(err)}"
                    ) from None
                yield batch


def open_duckdb(url: str) -> DuckDBSource:
    """Open a DuckDB database named by a URL, owned by the returned source.

    Args:
        url: ``duckdb://`` (in memory), ``duckdb:///path.duckdb``, or a bare path
            (``path.duckdb``, ``:memory:``); a ``?query`` part is ignored.

    Raises:
        EngineError: DuckDB cannot open the database.
    """
    path = url.partition("://")[2] if "://" in url else url
    path = path[1:] if path.startswith("/") else path  # duckdb:///x.duckdb -> x.duckdb
    path = path.split("?", 1)[0] or ":memory:"
    try:
        conn = duckdb.connect(path)
    except duckdb.Error as err:
        raise EngineError(f"cannot open DuckDB database {path!r}: {driver_message(err)}") from None
    return DuckDBSource(conn, owned=True, label=f"duckdb:{path}")

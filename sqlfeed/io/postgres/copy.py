"""The ``copy`` PostgreSQL reader: ``COPY (query) TO STDOUT (FORMAT csv)`` parsed by Arrow.

PostgreSQL prints the query's rows as CSV on a psycopg connection the reading thread keeps
(:mod:`sqlfeed.io.keptconnections`); the rows are taken off the connection at the libpq level
(:class:`CopyOut`: one ``PQgetCopyData`` call per row, no Python frames of psycopg's
``Copy`` in between), and Arrow's CSV reader parses them, :data:`PARSE_ROWS` rows at a
time while the server sends the next ones, straight into the query's own Arrow types
(:func:`~sqlfeed.io.postgres.types.postgres_description_schema`):
``numeric(15,2)`` arrives as ``decimal128(15, 2)`` and ``int4`` as ``int32``, so no batch
is cast after the read. The reader is taken when Arrow parses every column's type exactly
from its text (:func:`copy_fits`): the types read as text come as PostgreSQL prints them,
as through psycopg. No schema probe is needed to choose it; a value Arrow cannot
parse (an ``infinity`` date, a year past 9999) makes the read fall back to the next reader
when no batch was delivered yet. NULL is an unquoted empty field and the empty string a
quoted one, so the two stay apart.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

__all__ = ["COPY_SESSION", "PARSE_ROWS", "CopyOut", "copy_batches", "copy_fits"]

COPY_SESSION = ("SET client_encoding = 'UTF8'",)
"""Session settings of a ``copy`` connection beside the shared PostgreSQL ones."""

PARSE_ROWS = 4_096
"""Rows Arrow parses at a time: the server keeps sending while a block is parsed, so only
the last block of a read is parsed after its last row arrived (a small partition's whole
read would be, in one block of ``batch_rows``); the blocks of a batch are joined."""


def copy_fits(schema: pa.Schema) -> bool:
    """Whether Arrow parses every column of ``schema`` exactly from PostgreSQL's text.

    Strings (text, and the types read as the text PostgreSQL prints), integers, floats,
    decimals (bounded ``numeric``), booleans, dates and timestamps do; durations,
    times, binary and lists do not.
    """
    return all(_parses(field.type) for field in schema)


def _parses(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal128(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_date32(arrow_type)
        or (pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us")
    )


def copy_batches(
    connection: Any,
    sql: str,
    schema: pa.Schema,
    batch_rows: int,
    stop: threading.Event | None,
    settings: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """The rows of ``sql`` as batches of ``schema``, read with ``COPY`` on ``connection``.

    Args:
        connection: a psycopg connection (not in autocommit), its session set up.
        sql: the partition query.
        schema: its Arrow schema; it must satisfy :func:`copy_fits`.
        batch_rows: rows per batch (the last may have fewer).
        stop: when set, the read stops between batches (the ``COPY`` is left unread: the
            caller drops the connection).
        settings: ``SET LOCAL`` statements for this read's transaction.

    The transaction ends (committed) once every row was read.
    """
    parse = _parser(schema)
    block = max(1, min(batch_rows, PARSE_ROWS))
    if settings:  # psycopg begins the transaction they are local to
        with connection.cursor() as cursor:
            for setting in settings:
                cursor.execute(setting)
    command = f"COPY (\n{sql}\n) TO STDOUT (FORMAT csv)"
    stream = CopyOut(connection.pgconn, command, connection.info.encoding)
    parsed: list[pa.RecordBatch] = []
    held = 0
    while True:
        chunk = bytearray()
        wanted = min(block, batch_rows - held)
        rows = stream.receive(chunk, wanted)
        if rows:
            parsed.append(parse(chunk))  # meanwhile the server sends the next rows
            held += rows
        if parsed and (held == batch_rows or rows < wanted):
            yield _joined(parsed)
            parsed, held = [], 0
            if stop is not None and stop.is_set():
                return
        if rows < wanted:
            break
    stream.finish()
    connection.commit()


class CopyOut:
    """One ``COPY ... TO STDOUT`` read on a psycopg connection, at the libpq level.

    psycopg's own ``Copy`` runs several Python frames per row (a ``COPY`` message each);
    this loop costs one call of libpq's ``PQgetCopyData`` per row and waits on the socket
    only when no whole row is buffered, which halves the client's CPU per row. The
    transaction is the connection's: psycopg's, when it began one, else the statement's
    own. Server errors are raised as psycopg raises them.
    """

    def __init__(self, pgconn: Any, command: str, encoding: str) -> None:
        from psycopg import errors, pq

        self.pgconn = pgconn
        self.encoding = encoding
        self._errors = errors
        self._pq = pq
        pgconn.send_query(command.encode(encoding))
        while pgconn.flush():
            _wait(pgconn.socket, write=True)
        first = self._next_result()
        if first is None or first.status != pq.ExecStatus.COPY_OUT:
            self._raise(first)

    def receive(self, chunk: bytearray, rows: int) -> int:
        """Append up to ``rows`` rows to ``chunk``; the rows appended (fewer: the end)."""
        get = self.pgconn.get_copy_data
        got = 0
        while got < rows:
            size, data = get(1)
            if size > 0:
                chunk += data
                got += 1
            elif size == 0:  # no whole row buffered: wait for the socket
                _wait(self.pgconn.socket)
                self.pgconn.consume_input()
            else:  # -1: the COPY ended (its result tells how)
                break
        return got

    def finish(self) -> None:
        """Read the COPY's final result; raise the server's error if it failed."""
        final = self._next_result()
        while self._next_result() is not None:  # a COPY has one, but leave nothing behind
            pass
        if final is None or final.status != self._pq.ExecStatus.COMMAND_OK:
            self._raise(final)

    def _next_result(self) -> Any:
        pgconn = self.pgconn
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                return pgconn.get_result()
            _wait(pgconn.socket)

    def _raise(self, result: Any) -> None:
        while self._next_result() is not None:
            pass
        if result is None:
            raise self._errors.OperationalError("the COPY returned no result")
        raise self._errors.error_from_result(result, encoding=self.encoding)


def _wait(fd: int, write: bool = False) -> None:
    """Until ``fd`` is readable (or writable)."""
    if write:
        select.select([], [fd], [])
    else:
        select.select([fd], [], [])


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _parser(schema: pa.Schema) -> Callable[[bytearray], pa.RecordBatch]:
    """A function parsing a block of whole CSV rows into one batch of ``schema``."""
    names = [f"c{i}" for i in range(len(schema))]  # the query's own names may repeat
    parse_options = pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
    convert_options = pcsv.ConvertOptions(
        column_types=dict(zip(names, schema.types, strict=True)),
        null_values=[""],
        true_values=["t"],
        false_values=["f"],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )

    def parse(chunk: bytearray) -> pa.RecordBatch:
        read_options = pcsv.ReadOptions(
            column_names=names, use_threads=False, block_size=len(chunk) + 1
        )
        table = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(chunk)),
            read_options=read_options,
            parse_options=parse_options,
            convert_options=convert_options,
        )
        columns = [column.combine_chunks() for column in table.columns]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    return parse

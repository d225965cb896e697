"""The ``copy`` PostgreSQL reader: ``COPY (query) TO STDOUT (FORMAT csv)`` parsed by Arrow.

PostgreSQL prints the query's rows as CSV on a psycopg connection the reading thread keeps
(:mod:`sqlfeed.io.pgsessions`), and Arrow's CSV reader parses them, ``batch_rows`` rows at
a time, straight into the query's own Arrow types
(:func:`~sqlfeed.io.pgtypes.postgres_description_schema`):
``numeric(15,2)`` arrives as ``decimal128(15, 2)`` and ``int4`` as ``int32``, so no batch
is cast after the read. The reader is taken when Arrow parses every column's type exactly
from its text (:func:`copy_fits`): the types read as text come as PostgreSQL prints them,
as through psycopg. No schema probe is needed to choose it; a value Arrow cannot
parse (an ``infinity`` date, a year past 9999) makes the read fall back to the next reader
when no batch was delivered yet. NULL is an unquoted empty field and the empty string a
quoted one, so the two stay apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

__all__ = ["COPY_SESSION", "copy_batches", "copy_fits"]

COPY_SESSION = ("SET client_encoding = 'UTF8'",)
"""Session settings of a ``copy`` connection beside the shared PostgreSQL ones."""


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
        batch_rows: rows per batch (PostgreSQL sends a ``COPY`` row per message).
        stop: when set, the read stops between batches (the ``COPY`` is left unread: the
            caller drops the connection).
        settings: ``SET LOCAL`` statements for this read's transaction.

    The transaction ends (committed) once every row was read.
    """
    parse = _parser(schema)
    with connection.cursor() as cursor:
        for setting in settings:
            cursor.execute(setting)
        with cursor.copy(f"COPY (\n{sql}\n) TO STDOUT (FORMAT csv)") as copy:
            chunk = bytearray()
            rows = 0
            for data in copy:
                chunk += data
                rows += 1
                if rows == batch_rows:
                    yield parse(chunk)
                    chunk = bytearray()
                    rows = 0
                    if stop is not None and stop.is_set():
                        return
            if rows:
                yield parse(chunk)
    connection.commit()


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

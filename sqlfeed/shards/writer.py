"""Writing shard files: :class:`ShardWriter` streams record batches into one shard.

A ``tar`` shard (the WebDataset layout, see :mod:`sqlfeed.shards.reader`) is written from
Arrow with the uid column as the record key and every other column as a member
``<key>.<column>``: binary values as they are, strings as UTF-8, anything else as JSON
text; NULLs are left out. Members carry no time stamps or owners, so the same rows give
byte-identical files.

Text shards hold every value exactly, and NULL apart from every value:

* CSV: strings always quoted (``""`` is the empty string), NULL an empty unquoted field,
  floats in shortest round-trip form with ``nan``/``inf``/``-inf``; binary columns as
  base64 text, which the manifest schema records (field metadata set by
  :func:`file_schema`); lists, structs and maps cannot be CSV.
* JSONL: one JSON object per row; NaN and infinities as ``NaN``/``Infinity``; binary as
  base64; dates and timestamps as ISO text; decimals as exact text; times and durations
  as integer ticks of their unit; lists of those as JSON arrays.

View types (``string_view``, ``list_view``, ...) are written as their plain forms.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.orc as orc
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.io.views import plain, plain_schema
from sqlfeed.shards.manifest import UidDigest, check_format
from sqlfeed.shards.textforms import TEXT_ENCODING, base64_encoded, is_binary, json_type

__all__ = ["ROW_GROUP_ROWS", "ShardWriter", "file_schema", "tar_schema"]

ROW_GROUP_ROWS = 122_880
"""Default rows per Parquet row group (DuckDB's own row group size): big shards can then
be cut into several ``fragments`` partitions."""


def file_schema(schema: pa.Schema, fmt: str, uid: str) -> pa.Schema:
    """The schema a shardset of ``fmt`` records for rows of ``schema``.

    View types plain; tar: see :func:`tar_schema`; CSV: binary columns marked as base64
    text.

    Raises:
        InvalidArgumentError: a column the format cannot hold.
    """
    schema = plain_schema(schema)
    if fmt == "tar":
        return tar_schema(schema, uid)
    if fmt == "csv":
        fields = []
        for field in schema:
            if pa.types.is_nested(field.type):
                raise InvalidArgumentError(
                    f"column {field.name!r} is {field.type}, which CSV cannot hold: use "
                    "parquet, orc or jsonl, or turn it into text"
                )
            if is_binary(field.type):
                field = field.with_metadata({TEXT_ENCODING: b"base64"})  # see textforms
            fields.append(field)
        return pa.schema(fields, metadata=schema.metadata)
    if fmt == "jsonl":
        for field in schema:
            problem = _jsonl_problem(field.type)
            if problem:
                raise InvalidArgumentError(
                    f"column {field.name!r} is {field.type}: JSONL cannot hold {problem} "
                    "exactly; use parquet or orc"
                )
    return schema


def _jsonl_problem(arrow_type: pa.DataType, nested: bool = False) -> str | None:
    """What JSONL cannot hold exactly in ``arrow_type``.

    Maps and unions; binary values, times and durations inside lists or structs (their JSON
    forms would not be cast back).
    """
    t = pa.types
    if t.is_dictionary(arrow_type):
        return _jsonl_problem(arrow_type.value_type, nested)
    if t.is_map(arrow_type) or t.is_union(arrow_type):
        return "maps or unions"
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return _jsonl_problem(arrow_type.value_type, True)
    if t.is_struct(arrow_type):
        problems = [_jsonl_problem(f.type, True) for f in arrow_type]
        return next((p for p in problems if p), None)
    if nested and (is_binary(arrow_type) or t.is_time(arrow_type) or t.is_duration(arrow_type)):
        return f"{arrow_type} inside a list or struct"
    return None


def tar_schema(schema: pa.Schema, uid: str) -> pa.Schema:
    """The schema of a tar shardset written from ``schema``.

    The uid (written as the key text, cast back on reading), then one binary column per
    member.
    """
    if uid not in schema.names:
        raise InvalidArgumentError(f"the uid column {uid!r} is not in the columns")
    for name in schema.names:
        if name != uid and (not name or "/" in name or name.startswith(".")):
            raise InvalidArgumentError(
                f"column {name!r} cannot be a tar member extension; rename it in the SELECT"
            )
    return pa.schema(
        [schema.field(uid)] + [pa.field(f.name, pa.binary()) for f in schema if f.name != uid]
    )


class ShardWriter:
    """Stream record batches into one shard file; ``close()`` returns the bytes written.

    >>> import tempfile, pyarrow as pa
    >>> from sqlfeed.shards.reader import read_shard
    >>> folder = tempfile.mkdtemp()
    >>> batch = pa.record_batch({"uid": [1, 2], "x": ["a", None]})
    >>> with ShardWriter(f"{folder}/shard.00000.jsonl", "jsonl", batch.schema) as shard:
    ...     shard.write(batch)
    >>> read_shard(f"{folder}/shard.00000.jsonl", "jsonl", schema=batch.schema).to_pylist()
    [{'uid': 1, 'x': 'a'}, {'uid': 2, 'x': None}]
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fmt: str,
        schema: pa.Schema,
        *,
        uid: str | None = None,
        row_group_rows: int | None = None,
    ) -> None:
        """Open ``path`` for writing.

        ``row_group_rows`` sets Parquet row groups and ORC stripes (default: the writer's
        own sizes); ``uid`` is a tar shard's key column.
        """
        check_format(fmt)
        schema = plain_schema(schema)
        self.path, self.format, self.schema = Path(path), fmt, schema
        self.rows = 0
        self._row_group_rows = row_group_rows
        self._closed = False
        self._uid_column = uid
        self._digest = UidDigest()
        self._pending: list[pa.RecordBatch] = []
        if fmt in ("csv", "jsonl"):
            file_schema(schema, fmt, uid or "")  # a column the format cannot hold
        if fmt == "parquet":
            self._parquet = pq.ParquetWriter(self.path, schema)
        elif fmt == "csv":
            self._text_schema = pa.schema(
                [f.with_type(pa.string()) if base64_encoded(f) else f for f in schema]
            )
            options = pacsv.WriteOptions(quoting_style="needed")
            self._csv = pacsv.CSVWriter(self.path, self._text_schema, write_options=options)
        elif fmt == "orc":
            # A tiny stripe size makes every write its own stripe: row_group_rows apply.
            stripe = {"stripe_size": 1024} if row_group_rows else {}
            self._orc = orc.ORCWriter(str(self.path), **stripe)
        elif fmt == "jsonl":
            self._text = open(self.path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        else:
            if uid is None:
                raise InvalidArgumentError("a tar shard needs the uid column (its record key)")
            self._uid = uid
            self._tar = tarfile.open(self.path, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows (their schema must be the writer's)."""
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if table.num_rows == 0:
            return
        table = plain(table)
        self.rows += table.num_rows
        if self._uid_column in table.column_names:
            self._digest.update(table.column(self._uid_column))
        if self.format == "parquet":
            self._parquet.write_table(table, row_group_size=self._row_group_rows or ROW_GROUP_ROWS)
        elif self.format == "csv":
            self._csv.write_table(self._csv_text(table))
        elif self.format == "orc":
            if self._row_group_rows:
                for chunk in table.to_batches(max_chunksize=self._row_group_rows):
                    self._orc.write(pa.Table.from_batches([chunk]))
            else:
                self._orc.write(table)
        elif self.format == "jsonl":
            for row in _json_ready(table).to_pylist():
                self._text.write(json.dumps(row, default=_json_default, ensure_ascii=False))
                self._text.write("\n")
        else:
            self._write_tar(table)

    def _csv_text(self, table: pa.Table) -> pa.Table:
        """The table with its base64 columns encoded (see :mod:`sqlfeed.shards.textforms`)."""
        columns = []
        for field, column in zip(self.schema, table.columns, strict=True):
            if base64_encoded(field):
                column = pa.array(
                    [
                        None if v is None else base64.b64encode(v).decode()
                        for v in column.to_pylist()
                    ],
                    pa.string(),
                )
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=self._text_schema)

    def _write_tar(self, table: pa.Table) -> None:
        names = [name for name in table.column_names if name != self._uid]
        keys = table.column(self._uid).to_pylist()
        columns = {name: table.column(name).to_pylist() for name in names}
        for position, key in enumerate(keys):
            if key is None:
                raise InvalidArgumentError(
                    f"row {self.rows - table.num_rows + position} has a NULL {self._uid!r}: "
                    "a tar record needs a key"
                )
            text = str(key)
            if not text or "." in text.rpartition("/")[2] or text.endswith("/"):
                raise InvalidArgumentError(
                    f"tar record key {text!r} cannot be a member basename: it must be non-empty "
                    "and have no '.' (members are named <key>.<column>)"
                )
            for name in names:
                value = columns[name][position]
                if value is None:
                    continue
                data = _member_bytes(value)
                info = tarfile.TarInfo(f"{text}.{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                self._tar.addfile(info, io.BytesIO(data))

    @property
    def uid_digest(self) -> str | None:
        """The digest of the uid values written so far, in order.

        See :class:`~sqlfeed.shards.manifest.UidDigest`; None without a uid column.
        """
        return self._digest.hexdigest() if self._uid_column in self.schema.names else None

    def close(self) -> int:
        """Finish the file; returns its size in bytes."""
        if not self._closed:
            self._closed = True
            if self.format == "parquet":
                self._parquet.close()
            elif self.format == "csv":
                self._csv.close()
            elif self.format == "orc":
                if self.rows == 0:
                    self._orc.write(self.schema.empty_table())
                self._orc.close()
            elif self.format == "jsonl":
                self._text.close()
            else:
                self._tar.close()
        return self.path.stat().st_size


def _json_ready(table: pa.Table) -> pa.Table:
    """Columns in their JSON forms (binary as base64 text, see :func:`json_type`)."""
    columns = {}
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_dictionary(field.type):
            column = column.cast(field.type.value_type)
        if is_binary(column.type):
            column = pa.array(
                [None if v is None else base64.b64encode(v).decode() for v in column.to_pylist()],
                pa.string(),
            )
        elif column.type != json_type(column.type):
            column = column.cast(json_type(column.type))
        columns[field.name] = column
    return pa.table(columns)


def _member_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, default=_json_default, ensure_ascii=False).encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)

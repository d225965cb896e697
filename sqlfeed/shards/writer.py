"""Writing shard files: :class:`ShardWriter` streams record batches into one shard.

A ``tar`` shard (the WebDataset layout, see :mod:`sqlfeed.shards.reader`) is written from
Arrow with the uid column as the record key and every other column as a member
``<key>.<column>``: binary values as they are, strings as UTF-8, anything else as JSON
text; NULLs are left out. Members carry no time stamps or owners, so the same rows give
byte-identical files.
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

from dialects import InvalidArgumentError
from sqlfeed.shards.manifest import check_format

__all__ = ["ROW_GROUP_ROWS", "ShardWriter", "tar_schema"]

ROW_GROUP_ROWS = 122_880
"""Default rows per Parquet row group (DuckDB's own row group size): big shards can then
be cut into several ``fragments`` partitions."""


def tar_schema(schema: pa.Schema, uid: str) -> pa.Schema:
    """The schema of a tar shardset written from ``schema``: the uid (written as the key
    text, cast back on reading), then one binary column per member."""
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
        """Open ``path`` for writing; ``row_group_rows`` sets Parquet row groups and ORC
        stripes (default: the writer's own sizes); ``uid`` is a tar shard's key column."""
        check_format(fmt)
        self.path, self.format, self.schema = Path(path), fmt, schema
        self.rows = 0
        self._row_group_rows = row_group_rows
        self._closed = False
        self._pending: list[pa.RecordBatch] = []
        if fmt == "parquet":
            self._parquet = pq.ParquetWriter(self.path, schema)
        elif fmt == "csv":
            self._csv = pacsv.CSVWriter(self.path, schema)
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
        self.rows += table.num_rows
        if self.format == "parquet":
            self._parquet.write_table(table, row_group_size=self._row_group_rows or ROW_GROUP_ROWS)
        elif self.format == "csv":
            self._csv.write_table(table)
        elif self.format == "orc":
            if self._row_group_rows:
                for chunk in table.to_batches(max_chunksize=self._row_group_rows):
                    self._orc.write(pa.Table.from_batches([chunk]))
            else:
                self._orc.write(table)
        elif self.format == "jsonl":
            for row in table.to_pylist():
                self._text.write(json.dumps(row, default=_json_default, ensure_ascii=False))
                self._text.write("\n")
        else:
            self._write_tar(table)

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

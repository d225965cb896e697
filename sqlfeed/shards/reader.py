"""Reading shard files into Arrow: whole shards, and byte ranges of CSV/JSONL shards.

``tar`` shards follow the WebDataset layout: the members of one record share a basename
(``0001.jpg``, ``0001.json``) and sit next to each other. Read as Arrow, a tar shard is
one row per record: the key (the shared basename, a string) plus one ``binary`` column
per extension, NULL where a record has no member of that extension (with a manifest, the
key is cast back to the uid column's type).
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.orc as orc
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError, ShardsetError
from sqlfeed.io.views import plain, plain_schema, plain_type
from sqlfeed.shards.manifest import check_format
from sqlfeed.shards.textforms import base64_encoded, csv_type, is_binary, json_type

__all__ = ["TAR_KEY", "lines_are_rows", "read_shard", "read_text_range"]

TAR_KEY = "__key__"
"""The key column of a tar shard read without a manifest (WebDataset's name)."""


def read_shard(
    path: str | os.PathLike[str],
    fmt: str,
    *,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
    key: str = TAR_KEY,
) -> pa.Table:
    """Read one shard file into an Arrow table.

    Args:
        path: the shard file.
        fmt: its format (see :data:`FORMATS`).
        schema: the shardset's schema; columns are cast to it (CSV and JSONL are parsed
            with it, so their types do not depend on what the values look like).
        columns: read only these columns.
        key: the name of a tar shard's key column.

    Raises:
        ShardsetError: the file is missing, truncated or not in that format.
    """
    check_format(fmt)
    file = Path(path)
    try:
        table = _READERS[fmt](file, schema, key)
    except ShardsetError:
        raise
    except FileNotFoundError:
        raise ShardsetError(f"shard file {file} is missing") from None
    except (OSError, EOFError, ValueError, pa.ArrowException, tarfile.TarError) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ShardsetError(
            f"cannot read {fmt} shard {file}: {message} (the file is truncated or corrupt; "
            "rewrite it or remove the shardset)"
        ) from None
    table = _conform(table, schema, file) if schema is not None else plain(table)
    if columns is not None:
        missing = [name for name in columns if name not in table.column_names]
        if missing:
            raise ShardsetError(f"shard {file} has no column {', '.join(map(repr, missing))}")
        table = table.select(list(columns))
    return table


def _conform(table: pa.Table, schema: pa.Schema, file: Path) -> pa.Table:
    """The table in the manifest's types (view types plain, text encodings undone)."""
    schema = pa.schema([f.remove_metadata() for f in plain_schema(schema)])
    arrays = []
    for target in schema:
        if target.name not in table.column_names:
            raise ShardsetError(
                f"shard {file} has no column {target.name!r} (the manifest lists it)"
            )
        column = table.column(target.name)
        if column.type != target.type:
            try:
                column = column.cast(target.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ShardsetError(
                    f"shard {file}: column {target.name!r} is {column.type}, the manifest says "
                    f"{target.type} ({err})"
                ) from None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def _read_parquet(file: Path, schema: pa.Schema | None, key: str) -> pa.Table:
    return pq.read_table(file, columns=schema.names if schema is not None else None)


def _read_orc(file: Path, schema: pa.Schema | None, key: str) -> pa.Table:
    return orc.ORCFile(file).read(columns=schema.names if schema is not None else None)


def _read_csv(file: Path | io.BytesIO, schema: pa.Schema | None, key: str) -> pa.Table:
    # NULL is an empty unquoted field only: "" is the empty string, and "NULL", "NA" or
    # "nan" are values (see sqlfeed.shards.textforms).
    convert = pacsv.ConvertOptions(
        column_types={f.name: csv_type(f) for f in schema} if schema is not None else None,
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        null_values=[""],
    )
    table = pacsv.read_csv(file, convert_options=convert)
    for field in schema or []:
        if base64_encoded(field):
            position = table.schema.get_field_index(field.name)
            values = _unbase64(table.column(position))
            table = table.set_column(position, field.name, values)
    return table


def _unbase64(column: pa.ChunkedArray) -> pa.Array:
    return pa.array(
        [None if text is None else base64.b64decode(text) for text in column.to_pylist()],
        pa.binary(),
    )


def _read_jsonl(file: Path | io.BytesIO, schema: pa.Schema | None, key: str) -> pa.Table:
    empty = (
        file.getbuffer().nbytes == 0 if isinstance(file, io.BytesIO) else file.stat().st_size == 0
    )
    if empty:
        if schema is None:
            raise ShardsetError(f"shard {file} is empty and there is no manifest to type it")
        return schema.empty_table()
    text_schema = None
    if schema is not None:
        text_schema = pa.schema([(f.name, json_type(plain_type(f.type))) for f in schema])
    parse = pajson.ParseOptions(explicit_schema=text_schema, newlines_in_values=False)
    table = pajson.read_json(file, parse_options=parse)
    if schema is not None:  # binary values are written as base64 text
        for position, target in enumerate(schema):
            if is_binary(target.type):
                values = _unbase64(table.column(target.name))
                table = table.set_column(position, target.name, values)
    return table


def read_text_range(
    path: str | os.PathLike[str], fmt: str, start: int, end: int, schema: pa.Schema
) -> pa.Table:
    """The rows of a CSV or JSONL shard whose line starts in bytes ``[start, end)``.

    Ranges that tile a file give every row exactly once (a line belongs to the range
    holding its first byte). CSV ranges must not cut quoted newlines: check with
    :func:`lines_are_rows` first.
    """
    if fmt not in ("csv", "jsonl"):
        raise InvalidArgumentError(f"byte ranges apply to csv and jsonl shards, not {fmt}")
    file = Path(path)
    try:
        with open(file, "rb") as handle:
            header = handle.readline() if fmt == "csv" else b""
            first = _line_start(handle, max(start, len(header)))
            last = _line_start(handle, end)
            handle.seek(first)
            chunk = handle.read(max(last - first, 0))
        table = (_read_csv if fmt == "csv" else _read_jsonl)(io.BytesIO(header + chunk), schema, "")
    except (OSError, ValueError, pa.ArrowException) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ShardsetError(
            f"cannot read {fmt} shard {file} bytes [{start}, {end}): {message}"
        ) from None
    return _conform(table, schema, file)


def _line_start(handle: Any, position: int) -> int:
    """The offset of the first line starting at or after ``position``."""
    if position <= 0:
        return 0
    handle.seek(position - 1)
    while True:
        block = handle.read(1 << 16)
        if not block:
            return int(handle.tell())
        newline = block.find(b"\n")
        if newline >= 0:
            offset: int = handle.tell() - len(block) + newline + 1
            return offset


def lines_are_rows(path: str | os.PathLike[str], fmt: str, rows: int) -> bool:
    """True when every row of a CSV/JSONL shard is one line (no quoted newlines)."""
    newlines = 0
    last = b""
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            newlines += block.count(b"\n")
            last = block[-1:]
    lines = newlines + (1 if last not in (b"", b"\n") else 0)
    return lines == rows + (1 if fmt == "csv" else 0)


def _read_tar(file: Path, schema: pa.Schema | None, key: str) -> pa.Table:
    keys: list[str] = []
    members: dict[str, list[bytes | None]] = {}
    seen: set[str] = set()
    with tarfile.open(file, "r:") as archive:
        for member in archive:
            if not member.isfile():
                continue
            record, extension = _split_member(member.name, file)
            if not keys or keys[-1] != record:
                if record in seen:
                    raise ShardsetError(
                        f"tar shard {file}: the members of record {record!r} are not next to "
                        "each other (a WebDataset tar keeps a record's files together)"
                    )
                seen.add(record)
                keys.append(record)
                for values in members.values():
                    values.append(None)
            column = members.setdefault(extension, [None] * len(keys))
            if column[-1] is not None:
                raise ShardsetError(
                    f"tar shard {file}: record {record!r} has two {extension!r} members"
                )
            handle = archive.extractfile(member)
            column[-1] = handle.read() if handle is not None else b""
    arrays: dict[str, pa.Array] = {key: pa.array(keys, pa.string())}
    for extension in sorted(members):
        arrays[extension] = pa.array(members[extension], pa.binary())
    if schema is not None:
        for target in schema:
            if target.name not in arrays:
                arrays[target.name] = pa.nulls(len(keys), pa.binary())
    return pa.table(arrays)


def _split_member(name: str, file: Path) -> tuple[str, str]:
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not dot or not stem or not extension:
        raise ShardsetError(
            f"tar shard {file}: member {name!r} has no extension (members are named "
            "<key>.<extension>, like 0001.jpg)"
        )
    return (f"{folder}/{stem}" if folder else stem), extension


_READERS: dict[str, Callable[[Path, pa.Schema | None, str], pa.Table]] = {
    "parquet": _read_parquet,
    "orc": _read_orc,
    "csv": _read_csv,
    "jsonl": _read_jsonl,
    "tar": _read_tar,
}

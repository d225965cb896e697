"""Shard files and shardset manifests: the on-disk layout that shardsets and reshard share.

A shardset is a folder::

    <shardset>/
        manifest.json           # name, uid column, format, Arrow schema, shards, created
        shard.00000.parquet     # shard.NNNNN.<parquet|orc|csv|jsonl|tar>
        shard.00001.parquet

Every shard holds the uid column and the shardset's feature columns. The manifest is
written last and atomically, so a folder with a manifest is complete.

``tar`` shards follow the WebDataset layout: the members of one record share a basename
(``0001.jpg``, ``0001.json``) and sit next to each other. Read as Arrow, a tar shard is
one row per record: the key (the shared basename, a string) plus one ``binary`` column
per extension, NULL where a record has no member of that extension (with a manifest, the
key is cast back to the uid column's type). Written from Arrow, the uid column becomes
the key and every other column a member ``<key>.<column>``:
binary values as they are, strings as UTF-8, anything else as JSON text; NULLs are left
out. Members carry no time stamps or owners, so the same rows give byte-identical files.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import re
import shutil
import tarfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from dialects import InvalidArgumentError, ShardsetError

__all__ = [
    "FORMATS",
    "MANIFEST_NAME",
    "TAR_KEY",
    "Manifest",
    "ShardEntry",
    "ShardWriter",
    "lines_are_rows",
    "read_shard",
    "read_text_range",
    "remove_path",
    "replace_path",
    "shard_file_name",
    "shard_index_of",
    "tar_schema",
]

FORMATS = ("parquet", "orc", "csv", "jsonl", "tar")
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
TAR_KEY = "__key__"
"""The key column of a tar shard read without a manifest (WebDataset's name)."""

ROW_GROUP_ROWS = 122_880
"""Default rows per Parquet row group (DuckDB's own row group size): big shards can then
be cut into several ``fragments`` partitions."""

_SHARD_NAME = re.compile(r"^shard\.(\d{5,})\.([a-z]+)$")


def shard_file_name(index: int, fmt: str) -> str:
    """``shard.00007.parquet`` for shard 7 in Parquet."""
    _check_format(fmt)
    return f"shard.{index:05d}.{fmt}"


def shard_index_of(name: str) -> tuple[int, str] | None:
    """``(index, format)`` of a shard file name, or None when it is not one."""
    match = _SHARD_NAME.match(name)
    if not match or match.group(2) not in FORMATS:
        return None
    return int(match.group(1)), match.group(2)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"shard format must be one of {', '.join(FORMATS)}, not {fmt!r}")


@dataclass(frozen=True)
class ShardEntry:
    """One shard file of a shardset, as the manifest records it."""

    index: int
    file: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """What a shardset holds: its columns, format, shards and when it was created."""

    name: str
    uid: str
    format: str
    schema: pa.Schema
    shards: tuple[ShardEntry, ...]
    created: str = field(default_factory=lambda: utc_now())
    properties: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Rows over all shards."""
        return sum(shard.rows for shard in self.shards)

    @property
    def bytes(self) -> int:
        """Bytes of all shard files."""
        return sum(shard.bytes for shard in self.shards)

    @property
    def columns(self) -> list[str]:
        """Column names, the uid column included."""
        return list(self.schema.names)

    @property
    def features(self) -> list[str]:
        """Column names other than the uid."""
        return [name for name in self.schema.names if name != self.uid]

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict (the Arrow schema in IPC form, base64)."""
        return {
            "sqlfeed_shardset": MANIFEST_VERSION,
            "name": self.name,
            "uid": self.uid,
            "format": self.format,
            "created": self.created,
            "rows": self.rows,
            "columns": [{"name": f.name, "type": str(f.type)} for f in self.schema],
            "arrow_schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
            "shards": [
                {"index": s.index, "file": s.file, "rows": s.rows, "bytes": s.bytes}
                for s in self.shards
            ],
            "properties": dict(self.properties),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "manifest") -> Manifest:
        """Parse :meth:`to_json` output; raises ShardsetError naming what is wrong."""
        try:
            version = data["sqlfeed_shardset"]
            if version != MANIFEST_VERSION:
                raise ShardsetError(
                    f"{where}: manifest version {version} is not supported (this sqlfeed "
                    f"reads version {MANIFEST_VERSION}); upgrade sqlfeed"
                )
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["arrow_schema"])))
            shards = tuple(
                ShardEntry(int(s["index"]), str(s["file"]), int(s["rows"]), int(s["bytes"]))
                for s in data["shards"]
            )
            manifest = cls(
                name=str(data["name"]),
                uid=str(data["uid"]),
                format=str(data["format"]),
                schema=schema,
                shards=shards,
                created=str(data["created"]),
                properties=dict(data.get("properties") or {}),
            )
        except ShardsetError:
            raise
        except (KeyError, TypeError, ValueError, pa.ArrowException) as err:
            raise ShardsetError(f"{where}: not a valid shardset manifest ({err})") from None
        if manifest.format not in FORMATS:
            raise ShardsetError(f"{where}: unknown shard format {manifest.format!r}")
        if manifest.uid not in manifest.schema.names:
            raise ShardsetError(f"{where}: the uid column {manifest.uid!r} is not in its columns")
        return manifest

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> Manifest:
        """The manifest of the shardset in ``folder``."""
        path = Path(folder) / MANIFEST_NAME
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ShardsetError(
                f"{folder} is not a shardset: it has no {MANIFEST_NAME} (create shardsets with "
                "sqlfeed.shards.datasets or sqlfeed reshard)"
            ) from None
        except OSError as err:
            raise ShardsetError(f"cannot read {path}: {err.strerror or err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ShardsetError(
                f"{path} is not valid JSON ({err.msg} at line {err.lineno})"
            ) from None
        if not isinstance(data, dict):
            raise ShardsetError(f"{path} is not a shardset manifest")
        return cls.from_json(data, where=str(path))

    def write(self, folder: str | os.PathLike[str]) -> None:
        """Write ``manifest.json`` into ``folder`` atomically."""
        target = Path(folder) / MANIFEST_NAME
        temporary = target.with_name(f".{MANIFEST_NAME}.tmp-{uuid.uuid4().hex[:8]}")
        temporary.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, target)

    def with_shards(self, shards: Sequence[ShardEntry]) -> Manifest:
        """A copy with other shards."""
        return replace(self, shards=tuple(shards))


def utc_now() -> str:
    """The current time in UTC, ISO 8601 with microseconds (sorts as text)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


# -- reading ------------------------------------------------------------------------------


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
    _check_format(fmt)
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
    if schema is not None:
        table = _conform(table, schema, file)
    if columns is not None:
        missing = [name for name in columns if name not in table.column_names]
        if missing:
            raise ShardsetError(f"shard {file} has no column {', '.join(map(repr, missing))}")
        table = table.select(list(columns))
    return table


def _conform(table: pa.Table, schema: pa.Schema, file: Path) -> pa.Table:
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
    import pyarrow.parquet as pq

    return pq.read_table(file, columns=schema.names if schema is not None else None)


def _read_orc(file: Path, schema: pa.Schema | None, key: str) -> pa.Table:
    import pyarrow.orc as orc

    return orc.ORCFile(file).read(columns=schema.names if schema is not None else None)


def _read_csv(file: Path | io.BytesIO, schema: pa.Schema | None, key: str) -> pa.Table:
    import pyarrow.csv as pacsv

    convert = pacsv.ConvertOptions(
        column_types={f.name: _text_type(f.type) for f in schema} if schema is not None else None,
        strings_can_be_null=True,
    )
    return pacsv.read_csv(file, convert_options=convert)


def _read_jsonl(file: Path | io.BytesIO, schema: pa.Schema | None, key: str) -> pa.Table:
    import pyarrow.json as pajson

    empty = (
        file.getbuffer().nbytes == 0 if isinstance(file, io.BytesIO) else file.stat().st_size == 0
    )
    if empty:
        if schema is None:
            raise ShardsetError(f"shard {file} is empty and there is no manifest to type it")
        return schema.empty_table()
    text_schema = None
    if schema is not None:
        text_schema = pa.schema([(f.name, _text_type(f.type)) for f in schema])
    parse = pajson.ParseOptions(explicit_schema=text_schema, newlines_in_values=False)
    table = pajson.read_json(file, parse_options=parse)
    if schema is not None:  # binary values are written as base64 text
        for position, target in enumerate(schema):
            if pa.types.is_binary(target.type) or pa.types.is_large_binary(target.type):
                values = [
                    None if text is None else base64.b64decode(text)
                    for text in table.column(target.name).to_pylist()
                ]
                table = table.set_column(position, target.name, pa.array(values, target.type))
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


def _text_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type a text format is parsed as before the cast to ``arrow_type``."""
    if pa.types.is_decimal(arrow_type) or pa.types.is_binary(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type) or pa.types.is_temporal(arrow_type):
        return pa.string()
    return arrow_type


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


# -- writing ------------------------------------------------------------------------------


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
        _check_format(fmt)
        self.path, self.format, self.schema = Path(path), fmt, schema
        self.rows = 0
        self._row_group_rows = row_group_rows
        self._closed = False
        self._pending: list[pa.RecordBatch] = []
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self._parquet = pq.ParquetWriter(self.path, schema)
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            self._csv = pacsv.CSVWriter(self.path, schema)
        elif fmt == "orc":
            import pyarrow.orc as orc

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


# -- atomic folders -----------------------------------------------------------------------


def replace_path(temporary: Path, target: Path) -> None:
    """Move ``temporary`` to ``target``, replacing what is there."""
    if target.exists():
        aside = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(target, aside)
        os.replace(temporary, target)
        remove_path(aside)
    else:
        os.replace(temporary, target)


def remove_path(path: Path) -> None:
    """Remove a file or folder if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def iter_shard_files(folder: Path) -> Iterator[tuple[int, str, Path]]:
    """``(index, format, path)`` of the shard files in a folder, by index."""
    found = []
    for entry in folder.iterdir():
        parsed = shard_index_of(entry.name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], entry))
    yield from sorted(found)

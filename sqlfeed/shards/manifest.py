"""Shardset manifests and shard file names: the on-disk layout shardsets and reshard share.

A shardset is a folder::

    <shardset>/
        manifest.json           # name, uid column, format, Arrow schema, shards, created
        shard.00000.parquet     # shard.NNNNN.<parquet|orc|csv|jsonl|tar>
        shard.00001.parquet

Every shard holds the uid column and the shardset's feature columns. The manifest is
written last and atomically, so a folder with a manifest is complete. Shard files are
read by :mod:`sqlfeed.shards.reader` and written by :mod:`sqlfeed.shards.writer`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError, ShardsetError

__all__ = [
    "FORMATS",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "Manifest",
    "ShardEntry",
    "UidDigest",
    "check_format",
    "iter_shard_files",
    "shard_file_name",
    "shard_index_of",
    "utc_now",
]

FORMATS = ("parquet", "orc", "csv", "jsonl", "tar")
"""The shard file formats."""
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
"""The manifest format this sqlfeed reads and writes."""

_SHARD_NAME = re.compile(r"^shard\.(\d{5,})\.([a-z]+)$")


def shard_file_name(index: int, fmt: str) -> str:
    """``shard.00007.parquet`` for shard 7 in Parquet."""
    check_format(fmt)
    return f"shard.{index:05d}.{fmt}"


def shard_index_of(name: str) -> tuple[int, str] | None:
    """``(index, format)`` of a shard file name, or None when it is not one."""
    match = _SHARD_NAME.match(name)
    if not match or match.group(2) not in FORMATS:
        return None
    return int(match.group(1)), match.group(2)


def check_format(fmt: str) -> None:
    """Raise InvalidArgumentError unless ``fmt`` is one of :data:`FORMATS`."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"shard format must be one of {', '.join(FORMATS)}, not {fmt!r}")


@dataclass(frozen=True)
class ShardEntry:
    """One shard file of a shardset, as the manifest records it."""

    index: int
    file: str
    rows: int
    bytes: int
    uid_digest: str | None = None
    """A digest of the shard's uid values in file order (:class:`UidDigest`): two shards
    with the same digest hold the same samples in the same order, so their rows pair up
    by position. None in manifests written before sqlfeed recorded it."""


class UidDigest:
    """A digest of a uid column's values in order, whatever batches they come in.

    Integers hash as int64; anything else as its text (lengths and bytes apart, so the
    batch boundaries do not matter). A NULL uid leaves no digest.

    >>> a, b = UidDigest(), UidDigest()
    >>> a.update(pa.array([1, 2, 3]))
    >>> b.update(pa.array([1])); b.update(pa.array([2, 3], pa.int32()))
    >>> a.hexdigest() == b.hexdigest()
    True
    """

    def __init__(self) -> None:
        self._lengths = hashlib.blake2b(digest_size=16)
        self._data = hashlib.blake2b(digest_size=16)
        self._kind = ""
        self._broken = False

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        """Add the next values (in file order)."""
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        for chunk in chunks:
            if chunk.null_count:
                self._broken = True
            if self._broken or not len(chunk):
                continue
            kind = "int" if pa.types.is_integer(chunk.type) else "text"
            if self._kind and kind != self._kind:
                self._broken = True
                continue
            self._kind = kind
            if kind == "int":
                self._data.update(chunk.cast(pa.int64()).to_numpy().tobytes())
                continue
            try:
                text = chunk.cast(pa.large_string())
            except pa.ArrowException:
                self._broken = True
                continue
            offsets = np.frombuffer(text.buffers()[1], np.int64)[
                text.offset : text.offset + len(text) + 1
            ]
            self._lengths.update(np.diff(offsets).tobytes())
            data = text.buffers()[2]
            self._data.update(b"" if data is None else data[int(offsets[0]) : int(offsets[-1])])

    def hexdigest(self) -> str | None:
        """The digest (None after a NULL uid or a value that has no text)."""
        if self._broken:
            return None
        return self._kind + ":" + self._lengths.hexdigest() + self._data.hexdigest()


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
                {
                    "index": s.index,
                    "file": s.file,
                    "rows": s.rows,
                    "bytes": s.bytes,
                    **({"uid_digest": s.uid_digest} if s.uid_digest else {}),
                }
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
                ShardEntry(
                    int(s["index"]),
                    str(s["file"]),
                    int(s["rows"]),
                    int(s["bytes"]),
                    str(s["uid_digest"]) if s.get("uid_digest") else None,
                )
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


def iter_shard_files(folder: Path) -> Iterator[tuple[int, str, Path]]:
    """``(index, format, path)`` of the shard files in a folder, by index."""
    found = []
    for entry in folder.iterdir():
        parsed = shard_index_of(entry.name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], entry))
    yield from sorted(found)

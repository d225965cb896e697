"""Reshard's arguments: sizes, sort keys, columns, checked into :class:`ReshardOptions`.

Everything but the SQL is checked here, before anything runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlfeed.dialects import InvalidArgumentError

RESHARD_FORMATS = ("parquet", "csv", "jsonl", "tar")
TOLERANCE = 0.10
"""Shards (all but the last) land within this share of the target size."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*%\s*$")
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_INT64 = (-(2**63), 2**63 - 1)


def parse_size(value: str | int, what: str = "size") -> int:
    """Bytes of a size like ``256MB``, ``1.5GB``, ``512MiB`` or ``1000`` (bytes).

    KB, MB, GB and TB are powers of 1000; KiB, MiB, GiB and TiB powers of 1024.

    >>> parse_size("256MB"), parse_size("1KiB"), parse_size(42)
    (256000000, 1024, 42)
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(f"{what} must be a size like 256MB, not {value!r}")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _UNITS:
            raise InvalidArgumentError(
                f"{what} {value!r} is not a size: give a number with a unit, like 256MB, "
                "1.5GB or 512MiB (KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024)"
            )
        number = int(float(match.group(1)) * _UNITS[unit])
    if number < 1:
        raise InvalidArgumentError(f"{what} must be at least 1 byte, got {value!r}")
    return number


def _memory_setting(value: str | int) -> str:
    """DuckDB's ``memory_limit`` for ``2GB``, ``512MiB``, a byte count or ``60%`` (of RAM)."""
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match:
            share = float(match.group(1))
            if not 0 < share <= 100:
                raise InvalidArgumentError(
                    f"memory limit {value!r}: a share of the memory must be in (0%, 100%]"
                )
            return f"{share:g}%"
        if "%" in value:
            raise InvalidArgumentError(
                f"memory limit {value!r} is not a size or a share: give it like 2GB or 60%"
            )
    return f"{parse_size(value, 'memory limit')}B"


@dataclass(frozen=True)
class SortKey:
    """One sort key: a column and its direction."""

    column: str
    descending: bool = False


def _sort_keys(keys: str | Sequence[str] | None) -> list[SortKey]:
    if keys is None:
        return []
    items = [keys] if isinstance(keys, str) else list(keys)
    result = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgumentError(f"a sort key must be a column name, not {item!r}")
        for part in item.split(","):
            words = part.split()
            direction = words[-1].lower() if len(words) > 1 else ""
            if direction in ("asc", "desc"):
                words = words[:-1]
            name = " ".join(words)
            if not name:
                raise InvalidArgumentError(f"empty sort key in {item!r}: give column names")
            result.append(SortKey(name, direction == "desc"))
    if not result:
        raise InvalidArgumentError("sort needs at least one column")
    return result


def _columns(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    names = [part.strip() for item in items for part in str(item).split(",")]
    if not names or not all(names):
        raise InvalidArgumentError(f"empty column name in {what} {value!r}")
    return names


def _positive(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{what} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class ReshardOptions:
    """A reshard's checked arguments (all but the SQL, the source and the tar views).

    Attributes:
        out: the shardset folder to create.
        fmt: the shards' format, one of :data:`RESHARD_FORMATS`.
        seed: the shuffle seed, or ``None`` when not shuffling.
        sort: the sort keys as given (not yet matched to the query's columns).
        group_by: the group columns as given.
        shard_rows: rows per shard, or ``None`` for a byte target.
        shard_bytes: bytes per shard, or ``None`` for a row target.
        memory_limit: DuckDB's ``memory_limit`` setting (``"2000000000B"``, ``"60%"``).
        threads: DuckDB's threads.
        temp_dir: an existing folder for DuckDB's spill files and the extracted rows.
        uid: the uid column asked for.
        overwrite: replace an existing ``out``.
    """

    out: Path
    fmt: str
    seed: int | None
    sort: list[SortKey]
    group_by: list[str]
    shard_rows: int | None
    shard_bytes: int | None
    memory_limit: str | None
    threads: int | None
    temp_dir: Path | None
    uid: str | None
    overwrite: bool


def check_options(
    *,
    out: str | os.PathLike[str],
    shuffle: int | None,
    sort: str | Sequence[str] | None,
    shard_rows: int | None,
    shard_size: str | int | None,
    group_by: str | Sequence[str] | None,
    memory_limit: str | int | None,
    threads: int | None,
    temp_dir: str | os.PathLike[str] | None,
    format: str,
    uid: str | None,
    overwrite: bool,
) -> ReshardOptions:
    """Every argument but the SQL, checked before anything runs.

    Raises:
        InvalidArgumentError: an argument is out of range, contradicts another, or names
            a folder that does not exist (or an output that does, without ``overwrite``).
    """
    if format not in RESHARD_FORMATS:
        raise InvalidArgumentError(
            f"shard format must be one of {', '.join(RESHARD_FORMATS)}, not {format!r}"
        )
    if shuffle is not None and sort is not None:
        raise InvalidArgumentError(
            "give either shuffle (a seed) or sort (columns), not both: a shuffle has no order"
        )
    if shuffle is not None and (
        isinstance(shuffle, bool)
        or not isinstance(shuffle, int)
        or not _INT64[0] <= shuffle <= _INT64[1]
    ):
        raise InvalidArgumentError(f"the shuffle seed must be a 64-bit integer, not {shuffle!r}")
    if (shard_rows is None) == (shard_size is None):
        raise InvalidArgumentError(
            "give the shard size either in rows (--shard-rows N) or in bytes "
            "(--shard-size 256MB), exactly one of them"
        )
    rows = _positive(shard_rows, "shard rows")
    size = parse_size(shard_size, "shard size") if shard_size is not None else None
    memory = _memory_setting(memory_limit) if memory_limit is not None else None
    _positive(threads, "threads")
    spill = None
    if temp_dir is not None:
        spill = Path(temp_dir)
        if not spill.is_dir():
            raise InvalidArgumentError(f"the temp folder {spill} does not exist; create it first")
    if uid is not None and (not isinstance(uid, str) or not uid):
        raise InvalidArgumentError(f"uid must be a column name, not {uid!r}")
    target = _check_out(out, overwrite)
    return ReshardOptions(
        out=target,
        fmt=format,
        seed=shuffle,
        sort=_sort_keys(sort),
        group_by=_columns(group_by, "group_by"),
        shard_rows=rows,
        shard_bytes=size,
        memory_limit=memory,
        threads=threads,
        temp_dir=spill,
        uid=uid,
        overwrite=overwrite,
    )


def _check_out(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """The output folder: a name, in a folder that exists, and new unless ``overwrite``."""
    target = Path(out)
    if target.name in ("", ".", ".."):
        raise InvalidArgumentError(f"the output {str(out)!r} must name a folder to create")
    if not target.absolute().parent.is_dir():
        raise InvalidArgumentError(
            f"the folder {target.absolute().parent} (where {target.name} goes) does not exist"
        )
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise InvalidArgumentError(f"{target} exists; pass --overwrite to replace it")
    return target

"""Reshard: a query's rows into a new shardset, globally shuffled or sorted, out of core.

The map-reduce step that prepares training data, in three phases:

1. **extract**: the query runs once and its rows go into a table of a DuckDB database
   file in a work folder. On DuckDB (the default, also over files: ``read_parquet(...)``,
   or tar shards registered with ``tar=``) the engine does it itself; from any other
   engine the rows are streamed out through sqlfeed's reader and into DuckDB. Each row
   gets a stable identity: its position in the query's result.
2. **sort**: DuckDB orders the table (out of core: it spills to its temp directory rather
   than fail when the rows do not fit ``memory_limit``): by a seeded hash (``shuffle``)
   of the uid column, or of the row identity when the uid is generated (of the group key
   with ``group_by``), by columns (``sort``), or in the query's order. Ties are broken by
   the identity, so the same input and seed give byte-identical shards; with a uid
   column, the same rows give the same order whatever order the engine returned them in.
3. **write**: the ordered rows stream out in record batches and are cut into shards of
   ``shard_rows`` rows or about ``shard_size`` bytes (within ±10 %; the last one may be
   smaller). For a byte target the bytes per row are measured on a sample encoded in the
   output format and on the shard being written, so each shard is closed near the target.
   With ``group_by``, rows sharing the key sit next to each other and a shard is only cut
   between two groups (at the group boundary nearest the target). The ±10 % holds when a
   row (tar: a record) and a group are small next to a shard; tar files also grow in
   10 KiB blocks, so byte targets below ~200 kB are coarse.

The output is a shardset (see :mod:`sqlfeed.shards.files`): ``shard.NNNNN.<format>`` files
and a ``manifest.json`` written last. It appears atomically: everything is written into
``.<name>.tmp-<random>`` beside the output and renamed into place at the end; a failed
or interrupted run removes that folder, and a later run removes those of dead runs (a
live run holds a lock on its folder).

Memory stays bounded: DuckDB works within ``memory_limit``, Python holds a few record
batches (and, for tar input, one input tar file at a time).
"""

from __future__ import annotations

import contextlib
import glob as globlib
import math
import os
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from dialects import (
    EngineError,
    InvalidArgumentError,
    ShardsetError,
    SqlfeedError,
    dialect_for,
    get_dialect,
)
from sqlfeed.io.sources import DuckDBSource, Source, connect
from sqlfeed.shards.files import (
    TAR_KEY,
    Manifest,
    ShardEntry,
    ShardWriter,
    read_shard,
    remove_path,
    replace_path,
    shard_file_name,
    tar_schema,
)
from sqlfeed.sql import ParsedQuery, check_stable, parse, schema_sql

if TYPE_CHECKING:
    import duckdb

__all__ = ["RESHARD_FORMATS", "TOLERANCE", "ReshardMetrics", "parse_size", "reshard"]

RESHARD_FORMATS = ("parquet", "csv", "jsonl", "tar")
TOLERANCE = 0.10
"""Shards (all but the last) land within this share of the target size."""

GENERATED_UID = "uid"
"""The name of the uid column reshard adds when the query has none."""

ProgressCallback = Callable[[str, int, int], None]

_HELPER = "_sqlfeed_"
_GROUP = "_sqlfeed_group"
_ROWID = "_sqlfeed_rowid"
_FIRST = "_sqlfeed_first"
_BATCH_BYTES = 16 << 20
_MAX_BATCH_ROWS = 65_536
_SAMPLE_ROWS = 1_000
_WRITER_BUFFERS = 1 << 15
"""Bytes a shard writer may hold before they reach the file (text and tar buffers)."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*%\s*$")
_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE_FUNCTIONS = re.compile(r"^(read_\w+|parquet_scan|\w+_scan)$", re.IGNORECASE)
_INT64 = (-(2**63), 2**63 - 1)


# -- arguments ----------------------------------------------------------------------------


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
class _SortKey:
    column: str
    descending: bool = False


def _sort_keys(keys: str | Sequence[str] | None) -> list[_SortKey]:
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
            result.append(_SortKey(name, direction == "desc"))
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
class _Options:
    out: Path
    fmt: str
    seed: int | None
    sort: list[_SortKey]
    group_by: list[str]
    shard_rows: int | None
    shard_bytes: int | None
    memory_limit: str | None
    threads: int | None
    temp_dir: Path | None
    uid: str | None
    overwrite: bool


def _check_options(
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
) -> _Options:
    """Every argument but the SQL, checked before anything runs."""
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
    target = Path(out)
    if target.name in ("", ".", ".."):
        raise InvalidArgumentError(f"the output {str(out)!r} must name a folder to create")
    if not target.absolute().parent.is_dir():
        raise InvalidArgumentError(
            f"the folder {target.absolute().parent} (where {target.name} goes) does not exist"
        )
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise InvalidArgumentError(f"{target} exists; pass --overwrite to replace it")
    return _Options(
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


# -- metrics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReshardMetrics:
    """What a reshard did: its phases, volumes and the shards it wrote."""

    out: str
    format: str
    rows: int
    shards: int
    uid: str
    uid_generated: bool
    order: str
    """``shuffle``, ``sort`` or ``query`` (the query's own order)."""
    seed: int | None
    sort: list[str] | None
    group_by: list[str] | None
    target_rows: int | None
    target_bytes: int | None
    bytes_in: int
    bytes_in_from: str
    """``files``: the sizes of the input files; ``arrow``: the Arrow bytes of the rows."""
    bytes_extracted: int
    """Size of the extracted rows in DuckDB's format (the work database file)."""
    bytes_spilled: int
    """Peak size of DuckDB's temp files (sampled during the run)."""
    bytes_out: int
    phase_seconds: dict[str, float]
    seconds: float
    shard_rows: dict[str, float]
    shard_bytes: dict[str, float]
    deviation: float | None
    """Largest relative deviation from the target of a shard other than the last."""
    memory_limit: str | None = None
    threads: int | None = None
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "out": self.out,
            "format": self.format,
            "rows": self.rows,
            "shards": self.shards,
            "uid": self.uid,
            "uid_generated": self.uid_generated,
            "order": self.order,
            "seed": self.seed,
            "sort": self.sort,
            "group_by": self.group_by,
            "target_rows": self.target_rows,
            "target_bytes": self.target_bytes,
            "bytes_in": self.bytes_in,
            "bytes_in_from": self.bytes_in_from,
            "bytes_extracted": self.bytes_extracted,
            "bytes_spilled": self.bytes_spilled,
            "bytes_out": self.bytes_out,
            "phase_seconds": dict(self.phase_seconds),
            "seconds": self.seconds,
            "shard_rows": dict(self.shard_rows),
            "shard_bytes": dict(self.shard_bytes),
            "deviation": self.deviation,
            "memory_limit": self.memory_limit,
            "threads": self.threads,
        }

    def summary(self) -> str:
        """A few lines for people."""
        how = {"shuffle": f"shuffled (seed {self.seed})", "query": "in the query's order"}.get(
            self.order, f"sorted by {', '.join(self.sort or [])}"
        )
        groups = f", grouped by {', '.join(self.group_by)}" if self.group_by else ""
        target = f"{self.target_rows} rows" if self.target_rows else f"{_human(self.target_bytes)}"
        phases = ", ".join(f"{name} {sec:.1f}s" for name, sec in self.phase_seconds.items())
        deviation = "" if self.deviation is None else f", at most {self.deviation:.1%} off"
        uid = f"{self.uid} (generated: 0..{self.rows - 1})" if self.uid_generated else self.uid
        return "\n".join(
            [
                f"wrote {self.rows} rows {how}{groups} to {self.out}: {self.shards} {self.format} "
                f"shard(s), uid {uid}",
                f"time {self.seconds:.1f}s ({phases})",
                f"bytes in {_human(self.bytes_in)} ({self.bytes_in_from}), extracted "
                f"{_human(self.bytes_extracted)}, spilled {_human(self.bytes_spilled)}, "
                f"out {_human(self.bytes_out)}",
                f"shards of {target}: {_human(self.shard_bytes['min'])} to "
                f"{_human(self.shard_bytes['max'])}, mean {_human(self.shard_bytes['mean'])}; "
                f"{self.shard_rows['min']:.0f} to {self.shard_rows['max']:.0f} rows{deviation}",
            ]
        )


def _human(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}B"


# -- tar input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _TarInput:
    """Tar shards read as one view: ``__key__`` plus one binary column per extension."""

    name: str
    files: tuple[Path, ...]
    schema: pa.Schema
    records: int
    bytes: int

    def batches(self, counter: _Counter) -> Iterator[pa.RecordBatch]:
        for path in self.files:
            table = read_shard(path, "tar", schema=self.schema)
            for batch in table.to_batches(max_chunksize=max(1, _batch_rows(table))):
                counter.add(batch)
                yield batch
            del table


def _tar_inputs(tar: Mapping[str, str] | None) -> list[_TarInput]:
    if not tar:
        return []
    if not isinstance(tar, Mapping):
        raise InvalidArgumentError("tar must map view names to glob patterns")
    inputs = []
    for name, pattern in tar.items():
        if not isinstance(name, str) or not _VIEW_NAME.match(name):
            raise InvalidArgumentError(
                f"tar view name {name!r} must be a plain SQL name (letters, digits, _)"
            )
        files = sorted(Path(p) for p in globlib.glob(str(pattern), recursive=True))
        files = [p for p in files if p.is_file()]
        if not files:
            raise InvalidArgumentError(f"--tar {name}={pattern}: no file matches the pattern")
        inputs.append(_scan_tar(name, files))
    return inputs


def _scan_tar(name: str, files: Sequence[Path]) -> _TarInput:
    """The union of member extensions and the record count, from the member headers."""
    import tarfile

    extensions: set[str] = set()
    records = 0
    for path in files:
        last = None
        try:
            with tarfile.open(path, "r:") as archive:
                for member in archive:
                    if not member.isfile():
                        continue
                    key, extension = _split_member(member.name, path)
                    extensions.add(extension)
                    if key != last:
                        records += 1
                        last = key
        except (OSError, tarfile.TarError) as err:
            raise ShardsetError(f"cannot read tar file {path}: {err}") from None
    if TAR_KEY in extensions:
        raise ShardsetError(f"tar files of {name}: a member extension is {TAR_KEY!r}")
    schema = pa.schema(
        [pa.field(TAR_KEY, pa.string())] + [pa.field(e, pa.binary()) for e in sorted(extensions)]
    )
    size = sum(path.stat().st_size for path in files)
    return _TarInput(name, tuple(files), schema, records, size)


def _split_member(member: str, path: Path) -> tuple[str, str]:
    """``("dir/0001", "jpg")`` for ``dir/0001.jpg`` (as :func:`read_shard` splits it)."""
    folder, _, base = member.rpartition("/")
    stem, dot, extension = base.partition(".")
    if not dot or not stem or not extension:
        raise ShardsetError(
            f"tar file {path}: member {member!r} has no extension (members are named "
            "<key>.<extension>, like 0001.jpg)"
        )
    return (f"{folder}/{stem}" if folder else stem), extension


# -- helpers ------------------------------------------------------------------------------


class _Counter:
    """Rows and Arrow bytes streamed, with a progress report every so often."""

    def __init__(self, report: Callable[[int], None] | None = None) -> None:
        self.rows = 0
        self.bytes = 0
        self._report = report

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.bytes += batch.nbytes
        if self._report is not None:
            self._report(self.rows)


def _batch_rows(table: pa.Table | pa.RecordBatch) -> int:
    """Rows per batch so that one batch holds about 16 MB."""
    if table.num_rows == 0:
        return _MAX_BATCH_ROWS
    return _rows_for(table.nbytes / table.num_rows)


def _rows_for(bytes_per_row: float) -> int:
    """Rows per batch of about 16 MB at ``bytes_per_row``."""
    return max(1, min(_MAX_BATCH_ROWS, int(_BATCH_BYTES / max(1.0, bytes_per_row))))


def _plain_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type a shard holds: dictionaries decoded, view types as their plain types."""
    if pa.types.is_dictionary(arrow_type):
        return _plain_type(arrow_type.value_type)
    if pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_binary_view(arrow_type):
        return pa.binary()
    return arrow_type


def _csv_problem(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_nested(arrow_type):
        return "a nested value"
    if (
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    ):
        return "binary"
    return None


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _col(name: str) -> exp.Column:
    return exp.column(_ident(name))


def _literal(value: str) -> str:
    rendered: str = exp.Literal.string(value).sql(dialect="duckdb")
    return rendered


def _driver_message(err: BaseException) -> str:
    from sqlfeed.io.sources import _driver_message as message

    return message(err)


def _is_duckdb_error(err: BaseException) -> bool:
    return (type(err).__module__ or "").split(".")[0] in ("duckdb", "_duckdb")


@contextlib.contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    try:
        yield
    except SqlfeedError:
        raise
    except Exception as err:
        if _is_duckdb_error(err) or isinstance(err, OSError | pa.ArrowException):
            raise EngineError(f"duckdb failed {what}: {_driver_message(err)}") from None
        raise


def _folder_bytes(folder: Path | None) -> int:
    """Bytes on disk of the files in ``folder`` (not recursive; DuckDB's temp dir is flat)."""
    if folder is None:
        return 0
    total = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_file(follow_symlinks=False):
                        stat = entry.stat(follow_symlinks=False)
                        total += min(stat.st_size, getattr(stat, "st_blocks", 0) * 512 or 2**62)
    except OSError:
        return 0
    return total


# -- work folders -------------------------------------------------------------------------


class _LockedFolder:
    """A fresh folder ``<parent>/<prefix><random>`` that this process holds a lock on.

    Creating one first removes the folders of that prefix whose owner is gone (their lock
    can be taken), so a run killed with SIGKILL leaves nothing a later run trips on.
    """

    LOCK = ".lock"

    def __init__(self, parent: Path, prefix: str) -> None:
        _remove_stale(parent, prefix)
        self.path = parent / f"{prefix}{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self._fd: int | None = os.open(self.path / self.LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        _lock(self._fd, wait=False)

    def release(self) -> None:
        """Forget the lock file (before the folder is renamed) and let go of the lock."""
        with contextlib.suppress(OSError):
            (self.path / self.LOCK).unlink()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        remove_path(self.path)
        self.release()


def _lock(fd: int, *, wait: bool) -> bool:
    try:
        import fcntl
    except ImportError:  # no flock: stale folders are only removed by age
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


def _remove_stale(parent: Path, prefix: str, min_age: float = 60.0) -> None:
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return
    for folder in candidates:
        lock = folder / _LockedFolder.LOCK
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # being created or renamed right now, or very old
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > min_age:
                    remove_path(folder)
            continue
        except OSError:
            continue
        try:
            if _lock(fd, wait=False):
                remove_path(folder)
        finally:
            os.close(fd)


# -- DuckDB session -----------------------------------------------------------------------


class _Settings:
    """DuckDB settings for the run, put back as they were on a connection reshard borrowed."""

    def __init__(self, engine: duckdb.DuckDBPyConnection, restore: bool) -> None:
        self.engine = engine
        self.restore = restore
        self._old: dict[str, Any] = {}

    def set(self, name: str, value: Any) -> None:
        if self.restore and name not in self._old:
            row = self.engine.execute(f"SELECT current_setting({_literal(name)})").fetchall()
            self._old[name] = row[0][0]
        rendered = _literal(value) if isinstance(value, str) else str(value).lower()
        self.engine.execute(f"SET {name} = {rendered}")

    def put_back(self) -> None:
        for name, value in reversed(list(self._old.items())):
            with contextlib.suppress(Exception):
                rendered = _literal(value) if isinstance(value, str) else str(value).lower()
                self.engine.execute(f"SET {name} = {rendered}")
        self._old.clear()


class _Reporter:
    """Progress for the current phase only (the monitor thread may report late)."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.phase: str | None = None
        self._lock = threading.Lock()

    def start(self, phase: str) -> None:
        with self._lock:
            self.phase = phase

    def report(self, phase: str, done: int, total: int) -> None:
        if self.callback is None:
            return
        with self._lock:
            if phase == self.phase:
                self.callback(phase, done, total)


class _Monitor:
    """Samples DuckDB's temp folder size (peak = bytes spilled) and its query progress."""

    def __init__(
        self,
        engine: duckdb.DuckDBPyConnection,
        spill: Path | None,
        reporter: _Reporter,
        interval: float = 0.1,
    ) -> None:
        self.engine = engine
        self.spill = spill
        self.reporter = reporter
        self.interval = interval
        self.peak = 0
        self.percent_phase: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlfeed-reshard-monitor")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
            phase = self.percent_phase
            if phase is not None and self.reporter.callback is not None:
                try:
                    percent = float(self.engine.query_progress())
                except Exception:
                    continue
                if percent >= 0:
                    self.reporter.report(phase, min(100, int(percent)), 100)

    def sample(self) -> None:
        self.peak = max(self.peak, _folder_bytes(self.spill))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()


class _Prefetch:
    """Reads the ordered rows in a thread, a few batches ahead of the writer."""

    _END = object()

    def __init__(
        self, reader: pa.RecordBatchReader, engine: duckdb.DuckDBPyConnection, depth: int = 2
    ) -> None:
        self.reader = reader
        self.engine = engine
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlfeed-reshard-read")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    batch = self.reader.read_next_batch()
                except StopIteration:
                    break
                if not self._put(batch):
                    return
            self._put(self._END)
        except BaseException as err:
            self._put(err)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                with _engine_errors("reading the ordered rows"):
                    raise item
            yield item

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            with contextlib.suppress(Exception):
                self.engine.interrupt()
            self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.reader.close()


# -- the ordered stream and the shard cutter ----------------------------------------------


class _Rows:
    """The ordered rows: take the next n, or find a group boundary near a position."""

    def __init__(
        self,
        batches: Iterator[pa.RecordBatch],
        convert: Callable[[pa.RecordBatch], pa.RecordBatch],
        group_index: int | None,
    ) -> None:
        self._batches = batches
        self._convert = convert
        self._group_index = group_index
        self._buffer: list[tuple[pa.RecordBatch, Any]] = []
        self.buffered = 0
        self.eof = False
        self.read_rows = 0
        self.read_bytes = 0
        self._last_group: Any = None

    def fill(self, n: int) -> None:
        """Buffer at least ``n`` rows (fewer at the end)."""
        while self.buffered < n and not self.eof:
            try:
                raw = next(self._batches)
            except StopIteration:
                self.eof = True
                return
            if raw.num_rows == 0:
                continue
            self.read_rows += raw.num_rows
            self.read_bytes += raw.nbytes
            groups = None
            if self._group_index is not None:
                groups = raw.column(self._group_index).to_numpy(zero_copy_only=False)
            self._buffer.append((self._convert(raw), groups))
            self.buffered += raw.num_rows

    def exhausted(self) -> bool:
        self.fill(1)
        return self.buffered == 0

    def head(self, n: int) -> pa.Table:
        """The next ``n`` rows without taking them."""
        self.fill(n)
        batches, left = [], n
        for batch, _ in self._buffer:
            if left <= 0:
                break
            piece = batch.slice(0, min(left, batch.num_rows))
            batches.append(piece)
            left -= piece.num_rows
        return pa.Table.from_batches(batches, schema=self._buffer[0][0].schema)

    def take(self, n: int) -> list[pa.RecordBatch]:
        """Remove and return the next ``n`` rows (fewer at the end)."""
        self.fill(n)
        taken: list[pa.RecordBatch] = []
        left = min(n, self.buffered)
        while left > 0:
            batch, groups = self._buffer[0]
            if batch.num_rows <= left:
                self._buffer.pop(0)
                taken.append(batch)
                if groups is not None:
                    self._last_group = groups[-1]
                left -= batch.num_rows
                self.buffered -= batch.num_rows
            else:
                taken.append(batch.slice(0, left))
                rest = batch.slice(left)
                if groups is not None:
                    self._last_group = groups[left - 1]
                    groups = groups[left:]
                self._buffer[0] = (rest, groups)
                self.buffered -= left
                left = 0
        return taken

    def cut(self, n: int, allow_zero: bool) -> int:
        """A position near ``n`` where a shard may end: never inside a group.

        Without groups that is ``n`` (or the rows left). With groups, the group boundary
        nearest ``n``: backwards (not before 1, or 0 when ``allow_zero``) or forwards.
        """
        import numpy as np

        n = max(n, 0 if allow_zero else 1)
        self.fill(n + 1)
        if self._group_index is None or (self.buffered <= n and self.eof):
            return min(n, self.buffered)
        groups = np.concatenate([g for _, g in self._buffer])
        changes = np.flatnonzero(groups[1:] != groups[:-1]) + 1  # boundaries inside
        before = changes[changes <= n]
        backward = int(before[-1]) if before.size else None
        if (
            backward is None
            and allow_zero
            and (self._last_group is None or groups[0] != self._last_group)
        ):
            backward = 0
        after = changes[changes >= n]
        while not after.size and not self.eof:  # the group goes on: read further
            self.fill(self.buffered + 1)
            groups = np.concatenate([g for _, g in self._buffer])
            changes = np.flatnonzero(groups[1:] != groups[:-1]) + 1
            after = changes[changes >= n]
        forward = int(after[0]) if after.size else self.buffered
        if backward is not None and n - backward < forward - n:
            return backward
        return forward


class _Cutter:
    """Cuts the ordered rows into shard files of a row count or a byte size.

    Rows are written in chunks of a couple of record batches, so memory does not grow
    with the shard size (a Parquet chunk is one row group).
    """

    def __init__(
        self,
        folder: Path,
        fmt: str,
        schema: pa.Schema,
        file_schema: pa.Schema,
        uid: str,
        shard_rows: int | None,
        shard_bytes: int | None,
        work: Path,
        chunk_rows: int,
        on_rows: Callable[[int], None],
    ) -> None:
        self.folder, self.fmt, self.schema, self.file_schema = folder, fmt, schema, file_schema
        self.uid = uid
        self.shard_rows, self.shard_bytes = shard_rows, shard_bytes
        self.work = work
        self.chunk_rows = max(1, chunk_rows)
        self.on_rows = on_rows
        self.entries: list[ShardEntry] = []
        self.rows = 0
        self._data_rows = 0  # rows and bytes (before closing) of the shards so far
        self._data_bytes = 0
        self._opened, self._empty = self._empty_size()
        # What closing adds (footer, tar padding, buffers): an empty shard's, then measured.
        self._closing = max(0, self._empty - self._opened)

    def run(self, rows: _Rows) -> list[ShardEntry]:
        if rows.exhausted():
            self._write_shard(rows)  # one empty shard: the shardset keeps its schema
        while not rows.exhausted():
            self._write_shard(rows)
        return self.entries

    def _write_shard(self, rows: _Rows) -> None:
        index = len(self.entries)
        path = self.folder / shard_file_name(index, self.fmt)
        writer = ShardWriter(path, self.fmt, self.file_schema, uid=self.uid)
        try:
            opened = path.stat().st_size
            if rows.exhausted():
                written = 0
            elif self.shard_rows is not None:
                written = self._write(writer, rows, self.shard_rows, last=True, started=False)
            else:
                written = self._fill_bytes(writer, rows, opened)
            before_close = path.stat().st_size
            size = writer.close()
        except BaseException:
            with contextlib.suppress(Exception):
                writer.close()
            raise
        if written:
            if self.fmt in ("parquet", "tar"):  # a footer; end blocks and padding
                self._closing = max(0, size - before_close)
            self._data_rows += written
            self._data_bytes += max(size - self._empty, 0)
        self.entries.append(ShardEntry(index, path.name, written, size))

    def _write(self, writer: ShardWriter, rows: _Rows, n: int, *, last: bool, started: bool) -> int:
        """Write the next ``n`` rows, chunk by chunk; when ``last``, end the shard there.

        Ending the shard means ending it between two groups: at the group boundary
        nearest the ``n``-th row (searched from the last chunk on).
        """
        written = 0
        while n - written > self.chunk_rows:
            added = self._put(writer, rows.take(self.chunk_rows))
            if not added:
                return written
            written += added
        left = n - written
        if last:
            left = rows.cut(left, allow_zero=started or written > 0)
        return written + self._put(writer, rows.take(left))

    def _put(self, writer: ShardWriter, batches: list[pa.RecordBatch]) -> int:
        if not batches:
            return 0
        table = pa.Table.from_batches(batches, schema=self.schema)
        writer.write(table)
        self.rows += table.num_rows
        self.on_rows(self.rows)
        return int(table.num_rows)

    def _fill_bytes(self, writer: ShardWriter, rows: _Rows, opened: int) -> int:
        """Write pieces, measuring the file, until the shard is about ``shard_bytes``.

        The first piece is 90 % of the rows the estimate calls for; then the bytes per
        row of this very shard give the rest. Parquet takes few pieces (each ends a row
        group), the last one cut where the estimate says; the other formats stream, so the
        rest is approached in halving pieces, which copes with rows of very different
        sizes (images). The text and tar writers hold up to a few buffers of bytes not yet
        in the file: until the file is well past that, the estimate stands in for it.
        """
        assert self.shard_bytes is not None
        target = self.shard_bytes - self._closing
        if self._data_rows:
            estimate = max(self._data_bytes, 1) / self._data_rows
        else:
            estimate = self._sample_per_row(rows)
        per_row = estimate
        streaming = self.fmt != "parquet"
        steps = 48 if streaming else 4
        written = 0
        for step in range(steps):
            size = writer.path.stat().st_size
            if size - opened >= 2 * _WRITER_BUFFERS:
                per_row = max(size - opened, 1) / written
            else:
                size = max(size, opened + round(written * estimate))
            remaining = target - size
            wanted = max(remaining, 0) / per_row
            if step == steps - 1 or (wanted < 2.5 if streaming else remaining <= 0.2 * target):
                return written + self._write(
                    writer, rows, round(wanted), last=True, started=written > 0
                )
            piece = max(1, int(wanted * (0.5 if streaming and written else 0.9)))
            added = self._write(writer, rows, piece, last=False, started=written > 0)
            if not added:
                return written
            written += added
        return written

    def _sample_per_row(self, rows: _Rows) -> float:
        """Output bytes per row of the first rows, encoded in the output format."""
        sample = rows.head(min(_SAMPLE_ROWS, self.chunk_rows))
        path = self.work / f"sample.{self.fmt}"
        with ShardWriter(path, self.fmt, self.file_schema, uid=self.uid) as shard:
            shard.write(sample)
        size = path.stat().st_size
        path.unlink()
        return max(size - self._empty, 1) / max(int(sample.num_rows), 1)

    def _empty_size(self) -> tuple[int, int]:
        """The size of an empty shard when opened and when closed."""
        path = self.work / f"empty.{self.fmt}"
        writer = ShardWriter(path, self.fmt, self.file_schema, uid=self.uid)
        opened = path.stat().st_size
        closed = writer.close()
        path.unlink()
        return opened, closed


# -- the run ------------------------------------------------------------------------------


def reshard(
    sql: str | ParsedQuery,
    source: Any = None,
    *,
    out: str | os.PathLike[str],
    shuffle: int | None = None,
    sort: str | Sequence[str] | None = None,
    shard_rows: int | None = None,
    shard_size: str | int | None = None,
    group_by: str | Sequence[str] | None = None,
    memory_limit: str | int | None = None,
    threads: int | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
    format: str = "parquet",
    uid: str | None = None,
    tar: Mapping[str, str] | None = None,
    overwrite: bool = False,
    allow_unstable: bool = False,
    progress: ProgressCallback | None = None,
) -> ReshardMetrics:
    """Write the query's rows into a new shardset ``out``, shuffled or sorted, out of core.

    Args:
        sql: one read-only SELECT. On DuckDB it may read files (``read_parquet('in/*')``)
            and the tar views of ``tar``.
        source: where the query runs: ``None`` (an in-memory DuckDB), a URL, a DuckDB
            connection, a SQLAlchemy engine or a :class:`~sqlfeed.Source`. The sorting
            always happens in DuckDB; rows from other engines are streamed into it first.
        out: the shardset folder to create (its parent must exist).
        shuffle: a seed: a global shuffle, the same for the same seed and input (by a
            seeded hash of the uid column, so with a uid of the query's, the same rows
            come out in the same order even if the engine returns them in another).
        sort: columns to sort by (``"col"`` or ``"col desc"``, or one string
            ``"a, b desc"``); ties keep the query's order. Not with ``shuffle``.
        shard_rows: rows per shard.
        shard_size: bytes per shard (``"256MB"``, ``"1GiB"`` or an int), within ±10 %.
        group_by: column(s) whose equal values are never split across shards. Groups are
            shuffled as wholes (rows inside a group keep the query's order) or, with
            ``sort``, ordered by their smallest (largest for ``desc``) first sort key.
        memory_limit: DuckDB's memory limit (``"2GB"``, ``"60%"``); beyond it, DuckDB
            spills to its temp folder.
        threads: DuckDB's threads.
        temp_dir: where DuckDB spills and the extracted rows go (default: beside the
            output, in its temporary folder).
        format: the shards' format: parquet, csv, jsonl or tar (WebDataset-style).
        uid: the uid column. Default: ``uid`` if the query has one, else ``__key__`` (tar
            input), else a new BIGINT column ``uid`` numbering the output rows 0..n-1.
            Its values must be unique and not NULL (checked before writing).
        tar: ``{"view": "glob"}``: register a view over tar shards (``__key__`` plus one
            binary column per member extension, one row per record), read one file at a
            time. A view can be scanned once per query.
        overwrite: replace an existing ``out``.
        allow_unstable: accept a query whose result may change between runs.
        progress: called as ``progress(phase, done, total)`` for the phases ``extract``,
            ``sort`` and ``write`` (maybe from a helper thread). ``done`` and ``total`` are
            rows, or a percentage with ``total == 100`` where only DuckDB's own estimate is
            known; ``total`` is 0 when the number of rows is not known yet.

    Returns:
        The run's :class:`ReshardMetrics`.

    Raises:
        InvalidArgumentError: a bad argument, unknown column or non-unique uid (before
            anything is written).
        QueryError: the SQL is not one read-only, stable query.
        EngineError: the engine failed.
    """
    started = time.perf_counter()
    options = _check_options(
        out=out, shuffle=shuffle, sort=sort, shard_rows=shard_rows, shard_size=shard_size,
        group_by=group_by, memory_limit=memory_limit, threads=threads, temp_dir=temp_dir,
        format=format, uid=uid, overwrite=overwrite,
    )  # fmt: skip
    dialect = _dialect_of(source)
    parsed = parse(sql, dialect)
    if not allow_unstable:
        check_stable(parsed)
    tars = _tar_inputs(tar)
    if tars and dialect.name != "duckdb":
        raise InvalidArgumentError(
            f"tar views are read through DuckDB; the query runs on {dialect.name}: drop --db "
            "(or give a duckdb:// URL) to reshard tar files"
        )
    owned = not isinstance(source, Source) and (source is None or isinstance(source, str))
    src = connect(source)
    try:
        return _Run(parsed, src, owned, options, tars, progress, started).run()
    finally:
        if owned:
            src.close()


def _dialect_of(source: Any) -> Any:
    if isinstance(source, Source):
        return source.dialect
    if source is None:
        return get_dialect("duckdb")
    return dialect_for(source)


class _Run:
    """One reshard, from checks to the rename."""

    schema: pa.Schema
    """The query's columns as the engine returns them."""
    out_schema: pa.Schema
    """The shards' columns as Arrow (the generated uid first)."""
    file_schema: pa.Schema
    """The manifest's schema (tar: string key, binary members)."""
    sort: list[_SortKey]
    group_by: list[str]
    uid: str
    uid_generated: bool

    def __init__(
        self,
        parsed: ParsedQuery,
        source: Source,
        owned: bool,
        options: _Options,
        tars: list[_TarInput],
        progress: ProgressCallback | None,
        started: float,
    ) -> None:
        self.parsed, self.source, self.owned = parsed, source, owned
        self.options, self.tars = options, tars
        self.reporter = _Reporter(progress)
        self.started = started
        self.phases: dict[str, float] = {}
        self._phase_started = started
        self.alias = f"_sqlfeed_reshard_{uuid.uuid4().hex[:10]}"
        self.table = exp.Table(this=_ident("rows"), db=_ident(self.alias))

    # -- checks before anything is written ------------------------------------------------

    def _describe(self, engine: duckdb.DuckDBPyConnection | None) -> pa.Schema:
        if engine is None:
            return self.source.schema(self.parsed)
        with _engine_errors("reading the query's columns"):
            relation = engine.sql(schema_sql(self.parsed))
            table: pa.Table = relation.to_arrow_table()
        return table.schema

    def _check_columns(self, schema: pa.Schema) -> None:
        names = list(schema.names)
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise InvalidArgumentError(
                    f"the query returns two columns named {name!r}: a shard needs unique "
                    "column names, rename one in the SELECT"
                )
            seen.add(name)
            if name.startswith(_HELPER):
                raise InvalidArgumentError(
                    f"column {name!r}: names starting with {_HELPER} are reshard's own"
                )
        options = self.options
        self.sort = [_SortKey(self._column(k.column, names, "sort"), k.descending)
                     for k in options.sort]  # fmt: skip
        self.group_by = [self._column(name, names, "group-by") for name in options.group_by]
        if options.uid is not None:
            self.uid, self.uid_generated = self._column(options.uid, names, "uid"), False
        elif GENERATED_UID in names:
            self.uid, self.uid_generated = GENERATED_UID, False
        elif TAR_KEY in names:
            self.uid, self.uid_generated = TAR_KEY, False
        else:
            self.uid, self.uid_generated = GENERATED_UID, True
        fields = [pa.field(f.name, _plain_type(f.type)) for f in schema]
        if self.uid_generated:
            fields.insert(0, pa.field(GENERATED_UID, pa.int64(), nullable=False))
        self.out_schema = pa.schema(fields)
        if options.fmt == "csv":
            for item in self.out_schema:
                problem = _csv_problem(item.type)
                if problem:
                    raise InvalidArgumentError(
                        f"column {item.name!r} is {problem} ({item.type}), which CSV cannot "
                        "hold: write parquet, jsonl or tar, or cast it in the SELECT"
                    )
        self.file_schema = (
            tar_schema(self.out_schema, self.uid) if options.fmt == "tar" else self.out_schema
        )

    @staticmethod
    def _column(name: str, names: list[str], what: str) -> str:
        if name in names:
            return name
        folded = [n for n in names if n.lower() == name.lower()]
        if len(folded) == 1:
            return folded[0]
        raise InvalidArgumentError(
            f"{what} column {name!r} is not in the query's columns ({', '.join(names) or 'none'})"
        )

    # -- the run --------------------------------------------------------------------------

    def run(self) -> ReshardMetrics:
        duck = isinstance(self.source, DuckDBSource)
        engine: duckdb.DuckDBPyConnection | None = None
        if duck:
            assert isinstance(self.source, DuckDBSource)
            engine = self.source.connection.cursor()
        try:
            for view in self.tars:
                assert engine is not None
                engine.register(view.name, view.schema.empty_table())
            self.schema = self._describe(engine)
            self._check_columns(self.schema)
            return self._write_aside(engine)
        finally:
            if engine is not None:
                for view in self.tars:
                    with contextlib.suppress(Exception):
                        engine.unregister(view.name)
                engine.close()

    def _write_aside(self, engine: duckdb.DuckDBPyConnection | None) -> ReshardMetrics:
        out = self.options.out.absolute()
        aside = _LockedFolder(out.parent, f".{out.name}.tmp-")
        work: _LockedFolder | None = None
        try:
            if self.options.temp_dir is not None:
                work = _LockedFolder(self.options.temp_dir, ".sqlfeed-reshard-")
                work_path = work.path
            else:
                work_path = aside.path / ".work"
                work_path.mkdir()
            metrics = self._run(engine, aside.path, work_path)
            if work is None:
                remove_path(work_path)
            aside.release()
            replace_path(aside.path, out)
            return metrics
        except BaseException:
            aside.remove()
            raise
        finally:
            if work is not None:
                work.remove()

    def _run(
        self, borrowed: duckdb.DuckDBPyConnection | None, folder: Path, work: Path
    ) -> ReshardMetrics:
        import duckdb

        options = self.options
        spill_here = work / "spill"
        if borrowed is None:
            engine = duckdb.connect()
            settings = _Settings(engine, restore=False)
            spill: Path | None = spill_here
        else:
            engine = borrowed
            settings = _Settings(engine, restore=not self.owned)
            # A borrowed database keeps its temp folder unless one is asked for: it may have
            # spilled there already, and it outlives this run.
            spill = spill_here if (self.owned or options.temp_dir is not None) else None
        attached = False
        monitor: _Monitor | None = None
        try:
            with _engine_errors("setting up"):
                if spill is not None:
                    settings.set("temp_directory", str(spill))
                if options.memory_limit is not None:
                    settings.set("memory_limit", options.memory_limit)
                if options.threads is not None:
                    settings.set("threads", options.threads)
                settings.set("preserve_insertion_order", True)
                settings.set("enable_progress_bar", True)
                settings.set("enable_progress_bar_print", False)
                if spill is None:
                    row = engine.execute("SELECT current_setting('temp_directory')").fetchall()
                    spill = Path(str(row[0][0])) if row and row[0][0] else None
                engine.execute(f"ATTACH {_literal(str(work / 'extract.duckdb'))} AS {self.alias}")
                attached = True
            monitor = _Monitor(engine, spill, self.reporter)
            return self._phases(engine, monitor, folder, work)
        finally:
            if monitor is not None:
                monitor.stop()
            if attached:
                with contextlib.suppress(Exception):
                    engine.execute(f"DETACH {self.alias}")
            settings.put_back()
            if borrowed is None:
                engine.close()

    def _phases(
        self, engine: duckdb.DuckDBPyConnection, monitor: _Monitor, folder: Path, work: Path
    ) -> ReshardMetrics:
        options = self.options
        # 1. extract
        self._phase("extract")
        bytes_in, bytes_in_from = self._extract(engine, monitor)
        percent = isinstance(self.source, DuckDBSource) and not self.tars
        with _engine_errors("counting the extracted rows"):
            total = int(engine.execute(self._sql(exp.select("COUNT(*)").from_(
                self.table.copy()))).fetchall()[0][0])  # fmt: skip
        self.reporter.report("extract", *((100, 100) if percent else (total, total)))
        if not self.uid_generated:
            self._check_uid(engine)
        extracted = sum(p.stat().st_size for p in work.glob("extract.duckdb*") if p.is_file())
        self._done("extract")
        # 2. sort: DuckDB orders everything before it hands out the first batch
        self._phase("sort")
        monitor.percent_phase = "sort"
        batch_rows = _rows_for(self._arrow_bytes_per_row(engine))
        with _engine_errors("sorting"):
            reader = engine.sql(self._order_sql()).to_arrow_reader(batch_rows)
        prefetch = _Prefetch(reader, engine)
        try:
            stream = _Rows(iter(prefetch), self._converter(), self._group_index)
            stream.fill(1)
            monitor.percent_phase = None
            self.reporter.report("sort", 100, 100)
            self._done("sort")
            # 3. write
            self._phase("write")
            self.reporter.report("write", 0, total)
            cutter = _Cutter(
                folder, options.fmt, self.out_schema, self.file_schema, self.uid,
                options.shard_rows, options.shard_bytes, work, 2 * batch_rows,
                lambda done: self.reporter.report("write", done, total),
            )  # fmt: skip
            entries = cutter.run(stream)
        finally:
            prefetch.close()
        if cutter.rows != total:
            raise EngineError(f"duckdb returned {cutter.rows} ordered rows, expected {total}")
        if bytes_in_from == "arrow" and not bytes_in:
            bytes_in = stream.read_bytes
        monitor.sample()
        self._done("write")
        metrics = self._metrics(entries, bytes_in, bytes_in_from, extracted, monitor.peak)
        manifest = Manifest(
            name=options.out.absolute().name,
            uid=self.uid,
            format=options.fmt,
            schema=self.file_schema,
            shards=tuple(entries),
            properties={"reshard": metrics.to_dict()},
        )
        manifest.write(folder)
        return metrics

    def _phase(self, name: str) -> None:
        self._phase_started = time.perf_counter()
        self.reporter.start(name)

    def _done(self, name: str) -> None:
        self.phases[name] = round(time.perf_counter() - self._phase_started, 3)

    def _sql(self, tree: exp.Expr) -> str:
        rendered: str = get_dialect("duckdb").sql(tree)
        return rendered

    # -- 1. extract -----------------------------------------------------------------------

    def _extract(self, engine: duckdb.DuckDBPyConnection, monitor: _Monitor) -> tuple[int, str]:
        """Run the query into the work table; the input bytes and where they come from."""
        width = len(self.schema)
        alias = exp.TableAlias(
            this=_ident("_sqlfeed_q"), columns=[_ident(f"c{i}") for i in range(width)]
        )
        if isinstance(self.source, DuckDBSource):
            query = self.parsed.tree.copy()
            bytes_in, counter = self._input_files(engine), None
            if self.tars:
                records = sum(view.records for view in self.tars)
                counter = _Counter(lambda rows: self.reporter.report("extract", rows, records))
                for view in self.tars:
                    reader = pa.RecordBatchReader.from_batches(view.schema, view.batches(counter))
                    engine.register(view.name, reader)
                bytes_in = sum(view.bytes for view in self.tars)
            else:
                monitor.percent_phase = "extract"
            select = exp.select("*").from_(exp.Subquery(this=query, alias=alias))
            self._create(engine, select)
            monitor.percent_phase = None
            if bytes_in:
                return bytes_in, "files"
            return 0, "arrow"
        counter = _Counter(lambda rows: self.reporter.report("extract", rows, 0))
        failure: list[BaseException] = []
        input_view = f"{self.alias}_input"
        schema = self.schema

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in self.source.read(self.parsed.sql, schema=schema, ordered=True):
                    counter.add(batch)
                    yield batch
            except BaseException as err:
                failure.append(err)
                raise

        engine.register(input_view, pa.RecordBatchReader.from_batches(schema, batches()))
        try:
            select = exp.select("*").from_(exp.Table(this=_ident(input_view), alias=alias))
            try:
                self._create(engine, select)
            except BaseException:
                if failure:
                    raise failure[0] from None
                raise
        finally:
            with contextlib.suppress(Exception):
                engine.unregister(input_view)
        return counter.bytes, "arrow"

    def _create(self, engine: duckdb.DuckDBPyConnection, select: exp.Select) -> None:
        create = exp.Create(this=self.table.copy(), kind="TABLE", expression=select)
        with _engine_errors("running the query"):
            engine.execute(self._sql(create))

    def _input_files(self, engine: duckdb.DuckDBPyConnection) -> int:
        """Bytes of the local files the query reads (``read_parquet('x/*')`` and the like)."""
        patterns: set[str] = set()
        for node in self.parsed.tree.walk():
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
                name = node.this.name
                if node.this.quoted and ("." in name or "/" in name) and not node.args.get("db"):
                    patterns.add(name)
            if isinstance(node, exp.Func) and not isinstance(node, exp.Table):
                name = node.this if isinstance(node, exp.Anonymous) else node.sql_name()
                if not isinstance(name, str) or not _FILE_FUNCTIONS.match(name):
                    continue
                first = node.this if not isinstance(node, exp.Anonymous) else None
                if first is None and node.expressions:
                    first = node.expressions[0]
                values = first.expressions if isinstance(first, exp.Array) else [first]
                for value in values:
                    if isinstance(value, exp.Literal) and value.is_string:
                        patterns.add(value.this)
        files: set[str] = set()
        for pattern in patterns:
            if "://" in pattern:
                continue
            try:
                found = engine.execute("SELECT file FROM glob(?)", [pattern]).fetchall()
            except Exception:
                continue
            files.update(str(row[0]) for row in found)
        total = 0
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(name)
        return total

    def _check_uid(self, engine: duckdb.DuckDBPyConnection) -> None:
        """The uid column's values are unique, not NULL, and (tar) usable as record keys."""
        column = _col(f"c{self.schema.names.index(self.uid)}")
        nulls_sql = exp.select("COUNT(*)").from_(self.table.copy()).where(column.is_(exp.null()))
        dups = (
            exp.select(column.copy(), exp.func("COUNT", exp.Star()).as_("n"))
            .from_(self.table.copy())
            .group_by(column.copy())
            .having(exp.func("COUNT", exp.Star()) > 1)
        )
        count_sql = exp.select("COUNT(*)").from_(dups.subquery("_d"))
        first_sql = dups.copy().order_by("n DESC", column.copy()).limit(5)
        with _engine_errors("checking the uid column"):
            nulls = engine.execute(self._sql(nulls_sql)).fetchall()[0][0]
            repeated = engine.execute(self._sql(count_sql)).fetchall()[0][0]
            examples = engine.execute(self._sql(first_sql)).fetchall() if repeated else []
        if nulls:
            raise InvalidArgumentError(
                f"the uid column {self.uid!r} is NULL in {nulls} row(s): a uid names a sample; "
                "pick another --uid column, or leave --uid out to number the rows"
            )
        if repeated:
            shown = ", ".join(f"{value!r} ({n} times)" for value, n in examples)
            raise InvalidArgumentError(
                f"the uid column {self.uid!r} is not unique: {repeated} value(s) appear more "
                f"than once, e.g. {shown}; pick a unique --uid column, or leave --uid out to "
                "number the rows"
            )
        if self.options.fmt == "tar":
            text = exp.cast(column.copy(), "VARCHAR")
            bad = exp.not_(
                exp.func("regexp_full_match", text, exp.Literal.string(r"([^/]+/)*[^/.]+"))
            )
            bad_sql = (
                exp.select("COUNT(*)", exp.func("MIN", text.copy()))
                .from_(self.table.copy())
                .where(bad)
            )
            with _engine_errors("checking the uid column"):
                count, example = engine.execute(self._sql(bad_sql)).fetchall()[0]
            if count:
                raise InvalidArgumentError(
                    f"the uid column {self.uid!r} cannot name tar records: {count} value(s) "
                    f"like {example!r} are empty or have a '.' in their last path segment "
                    "(a record's members are <key>.<extension>); pick another --uid column"
                )

    # -- 2. sort --------------------------------------------------------------------------

    @property
    def _group_index(self) -> int | None:
        return len(self.schema) if self.group_by else None

    def _order_sql(self) -> str:
        names = self.schema.names
        columns = [_col(f"c{i}") for i in range(len(names))]
        position = {name: _col(f"c{i}") for i, name in enumerate(names)}
        groups = [position[name].copy() for name in self.group_by]
        inner_items: list[exp.Expr] = [
            *[c.copy() for c in columns],
            exp.column("rowid").as_(_ROWID),
        ]
        outer_items: list[exp.Expr] = [c.copy() for c in columns]
        if groups:
            inner_items.append(exp.func("hash", *[g.copy() for g in groups]).as_(_GROUP))
            outer_items.append(_col(_GROUP))
        rowid = _col(_ROWID)
        order: list[exp.Expr]
        if self.options.seed is not None:
            seed = exp.cast(exp.Literal.number(self.options.seed), "BIGINT")
            if groups:
                order = [exp.func("hash", seed, *[g.copy() for g in groups]),
                         *[g.copy() for g in groups], rowid]  # fmt: skip
            elif not self.uid_generated:  # by the uid: the same order whatever the input order
                uid = position[self.uid]
                order = [exp.func("hash", seed, uid.copy()), uid.copy(), rowid]
            else:
                order = [exp.func("hash", seed, rowid.copy()), rowid]
        elif self.sort:
            keys = [exp.Ordered(this=position[k.column].copy(), desc=k.descending)
                    for k in self.sort]  # fmt: skip
            if groups:
                first = self.sort[0]
                pick = "MAX" if first.descending else "MIN"
                window = exp.Window(
                    this=exp.func(pick, position[first.column].copy()),
                    partition_by=[g.copy() for g in groups],
                )
                inner_items.append(window.as_(_FIRST))
                order = [exp.Ordered(this=_col(_FIRST), desc=first.descending),
                         *[g.copy() for g in groups], *keys, rowid]  # fmt: skip
            else:
                order = [*keys, rowid]
        elif groups:  # the query's order, groups kept together where they first appear
            window = exp.Window(
                this=exp.func("MIN", exp.column("rowid")), partition_by=[g.copy() for g in groups]
            )
            inner_items.append(window.as_(_FIRST))
            order = [_col(_FIRST), rowid]
        else:  # the query's order: the table's, as DuckDB preserves insertion order
            return self._sql(exp.select(*outer_items).from_(self.table.copy()))
        inner = exp.select(*inner_items).from_(self.table.copy())
        outer = exp.select(*outer_items).from_(inner.subquery("_sqlfeed_o")).order_by(*order)
        return self._sql(outer)

    def _arrow_bytes_per_row(self, engine: duckdb.DuckDBPyConnection) -> float:
        names = [_col(f"c{i}") for i in range(len(self.schema))]
        sample_sql = exp.select(*names).from_(self.table.copy()).limit(100)
        with _engine_errors("sampling the rows"):
            table: pa.Table = engine.sql(self._sql(sample_sql)).to_arrow_table()
        if not table.num_rows:
            return 1.0
        return max(1.0, float(table.nbytes) / int(table.num_rows))

    # -- 3. write -------------------------------------------------------------------------

    def _converter(self) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
        """From the ordered query's batches to the shard schema (names, types, uid)."""
        width = len(self.schema)
        generated = self.uid_generated
        out_schema = self.out_schema
        fields = list(out_schema)[1:] if generated else list(out_schema)
        counter = [0]

        def convert(batch: pa.RecordBatch) -> pa.RecordBatch:
            arrays = []
            for i in range(width):
                array = batch.column(i)
                if array.type != fields[i].type:
                    array = array.cast(fields[i].type)
                arrays.append(array)
            if generated:
                start = counter[0]
                arrays.insert(0, pa.array(range(start, start + batch.num_rows), pa.int64()))
                counter[0] += batch.num_rows
            return pa.RecordBatch.from_arrays(arrays, schema=out_schema)

        return convert

    def _metrics(
        self,
        entries: list[ShardEntry],
        bytes_in: int,
        bytes_in_from: str,
        extracted: int,
        spilled: int,
    ) -> ReshardMetrics:
        options = self.options
        sizes = [e.bytes for e in entries]
        counts = [e.rows for e in entries]
        deviation = None
        if len(entries) > 1:
            measured = counts[:-1] if options.shard_rows else sizes[:-1]
            target = options.shard_rows or options.shard_bytes or 1
            deviation = round(max(abs(v - target) / target for v in measured), 4)
        order = "shuffle" if options.seed is not None else "sort" if self.sort else "query"
        return ReshardMetrics(
            out=str(options.out),
            format=options.fmt,
            rows=sum(counts),
            shards=len(entries),
            uid=self.uid,
            uid_generated=self.uid_generated,
            order=order,
            seed=options.seed,
            sort=[f"{k.column} desc" if k.descending else k.column for k in self.sort] or None,
            group_by=self.group_by or None,
            target_rows=options.shard_rows,
            target_bytes=options.shard_bytes,
            bytes_in=bytes_in,
            bytes_in_from=bytes_in_from,
            bytes_extracted=extracted,
            bytes_spilled=spilled,
            bytes_out=sum(sizes),
            phase_seconds=dict(self.phases),
            seconds=round(time.perf_counter() - self.started, 3),
            shard_rows=_spread(counts),
            shard_bytes=_spread(sizes),
            deviation=deviation,
            memory_limit=options.memory_limit,
            threads=options.threads,
            files=[e.file for e in entries],
        )


def _spread(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {"min": 0, "max": 0, "mean": 0.0, "stdev": 0.0}
    mean = sum(values) / len(values)
    stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"min": min(values), "max": max(values), "mean": round(mean, 1),
            "stdev": round(stdev, 1)}  # fmt: skip

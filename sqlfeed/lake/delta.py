"""Delta Lake tables through deltalake (delta-rs): a version's data files and their deletes.

delta-rs reads the transaction log (JSON commits and checkpoints) into the version's add
actions: each data file's path, row count, partition values and statistics. Partition
columns are not stored in Delta data files: a piece gives them as constants. The other
columns are found in each file as :mod:`sqlfeed.lake.deltacolumns` says (the column mapping
the protocol puts in force: physical names, field ids or display names; a column missing
from a file is NULL only where the log shows it was added later). Deletion vectors are
decoded by delta-rs into the rows each removes, which a piece skips (written once to
sqlfeed's cache, :mod:`sqlfeed.lake.sidecar`).

``since`` keeps the files added by the commits after version ``since`` (their ``add``
actions with ``dataChange``), for incremental epochs; a commit in between that rewrote rows
(a delete, update, merge or overwrite: it removes files it re-adds changed) is refused.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError, UnsupportedError
from sqlfeed.dialects.optional import require
from sqlfeed.lake.deltacolumns import DeltaField, absent, check_nested, fields, find, mapping_mode
from sqlfeed.lake.model import Column, DataFile, TableSnapshot
from sqlfeed.lake.pieces import literal
from sqlfeed.lake.sidecar import positions_file
from sqlfeed.lake.types import duckdb_type

__all__ = ["commit_time", "delta_snapshot", "delta_version"]


def _open(path: str, version: int | None = None) -> Any:
    require("deltalake", "reading Delta tables")
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path, version=version)
    except TableNotFoundError:
        raise InvalidArgumentError(
            f"no Delta table at {path} (no _delta_log folder): check the path"
        ) from None
    except Exception as err:  # delta-rs' own errors: a version it has not, a bad log
        if version is None:
            raise InvalidArgumentError(f"the Delta table at {path} cannot be read: {err}") from None
    latest = _open(path).version()
    raise InvalidArgumentError(
        f"the Delta table at {path} has no version {version} (latest: {latest}); pick one of "
        "its history (deltalake: DeltaTable(path).history())"
    )


def delta_version(path: str, version: int | None = None, as_of_ms: int | None = None) -> int:
    """The version to read: ``version`` (checked), the one current at ``as_of_ms``, or the last.

    A time before the table's first commit (or the oldest its log still has) is refused, as
    delta-rs would read that oldest version instead.
    """
    table = _open(path, version)
    if as_of_ms is not None:
        try:
            table.load_as_version(_iso(as_of_ms))
        except Exception as err:
            raise InvalidArgumentError(
                f"the Delta table at {path} had no version at {as_of_ms} ms: {err}"
            ) from None
        committed = commit_time(path, int(table.version()))
        if committed is not None and committed > as_of_ms:
            raise InvalidArgumentError(
                f"the Delta table at {path} had no version at {as_of_ms} ms since the epoch "
                f"(it is younger: version {table.version()}, its oldest, was committed at "
                f"{committed} ms): give a later time"
            )
    return int(table.version())


def _schema_json(path: str, version: int) -> str:
    """The table's schema at ``version``, as the log writes it (JSON)."""
    return str(_open(path, version).schema().to_json())


def commit_time(path: str, version: int) -> int | None:
    """When ``version`` was committed, as time travel sees it (ms; None: its commit is gone).

    The commit's ``inCommitTimestamp`` where the table writes them, else its log file's
    modification time (the Delta protocol's commit timestamp, which delta-rs travels by).
    """
    log = os.path.join(path, "_delta_log", f"{version:020d}.json")
    try:
        with open(log, encoding="utf-8") as handle:
            first = handle.readline()
        stamp = os.stat(log).st_mtime_ns // 1_000_000
    except OSError:
        return None
    try:
        info = json.loads(first).get("commitInfo") or {}
    except ValueError:
        info = {}
    found = info.get("inCommitTimestamp")
    return int(found) if isinstance(found, int) else int(stamp)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def delta_snapshot(path: str, name: str, version: int, since: int | None = None) -> TableSnapshot:
    """The table at ``version`` (with ``since``: only files added after that version)."""
    table = _open(path, version)
    schema = pa.schema(table.schema().to_arrow())
    metadata = table.metadata()
    mode = mapping_mode(table.protocol(), dict(metadata.configuration))
    columns = fields(table.schema(), schema)
    partitions = set(metadata.partition_columns)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    added = _added_since(path, since, version) if since is not None else None
    vectors = _deletion_vectors(table, path)
    files = []
    for action in actions:
        relative = unquote(action["path"])
        if added is not None and relative not in added:
            continue
        full = relative if os.path.isabs(relative) else os.path.join(path, relative)
        found = _File(path, relative, full, version)
        files.append(_data_file(found, action, columns, mode, partitions, vectors))
    stamp = commit_time(path, version)
    described = tuple((f.name, duckdb_type(f.type)) for f in schema)
    return TableSnapshot("delta", name, path, version, described, tuple(files), stamp, since)


class _File:
    """A data file: the table's folder, its path in the log and on disk, the version read."""

    __slots__ = ("full", "relative", "table", "version")

    def __init__(self, table: str, relative: str, full: str, version: int) -> None:
        self.table, self.relative, self.full, self.version = table, relative, full, version


def _file_columns(
    file: _File, action: dict[str, Any], columns: list[DeltaField], mode: str, partitions: set[str]
) -> list[Column]:
    """The snapshot's columns in ``file``: partition values, stored columns, proven NULLs."""
    file_schema = pq.read_schema(file.full)
    out = []
    for field in columns:
        sql_type = duckdb_type(field.type)
        if field.name in partitions:
            value = action.get(f"partition.{field.name}")
            constant = "NULL" if value is None else literal(str(value))
            out.append(Column(field.name, sql_type, constant=constant))
            continue
        index = find(field, file_schema, mode)
        if index < 0:
            absent(file.table, file.relative, file.version, field, _schema_json)
            out.append(Column(field.name, sql_type))
            continue
        stored = file_schema.field(index)
        check_nested(field, stored.type, file.relative)
        cast = duckdb_type(stored.type) != sql_type
        out.append(Column(field.name, sql_type, source=stored.name, cast=cast))
    return out


def _data_file(
    file: _File,
    action: dict[str, Any],
    columns: list[DeltaField],
    mode: str,
    partitions: set[str],
    vectors: dict[str, pa.Array],
) -> DataFile:
    full = file.full
    mapped = _file_columns(file, action, columns, mode, partitions)
    # statistics are keyed by the physical name under column mapping, else the display name
    stats = {f.name: (f.physical if mode != "none" else f.name) for f in columns}
    vector = vectors.get(full)
    bounds: dict[str, tuple[object, object]] = {}
    nulls: dict[str, int] = {}
    for column in mapped:
        if column.constant is not None:  # a partition value: exact
            value = action.get(f"partition.{column.name}")
            if isinstance(value, str | int) and not isinstance(value, bool):
                bounds[column.name] = (value, value)
            nulls[column.name] = int(file_rows(action, full)) if value is None else 0
            continue
        if column.source is None:  # added after the file was written: NULL in every row
            nulls[column.name] = int(file_rows(action, full))
            continue
        key = stats[column.name]
        low, high = action.get(f"min.{key}"), action.get(f"max.{key}")
        if isinstance(low, int | dt.date | decimal.Decimal) and type(low) is type(high):
            bounds[column.name] = (low, high)  # strings left out: Delta may cut them short
        if action.get(f"null_count.{key}") is not None:
            nulls[column.name] = int(action[f"null_count.{key}"])
    return DataFile(
        path=full,
        uri=full,
        rows=file_rows(action, full),
        size=int(action["size_bytes"]),
        columns=tuple(mapped),
        deleted_positions=None
        if vector is None
        else positions_file(f"delta|{full}|{action['modification_time']}", lambda: vector),
        bounds=bounds,
        null_counts=nulls,
    )


def file_rows(action: dict[str, Any], full: str) -> int:
    """A data file's rows: its add action's count, else its footer's."""
    return int(action.get("num_records") or pq.ParquetFile(full).metadata.num_rows)


def _deletion_vectors(table: Any, path: str) -> dict[str, pa.Array]:
    """Deleted row positions of each file with a deletion vector (none: an empty dict)."""
    features = table.protocol().reader_features or []
    if "deletionVectors" not in features:
        return {}
    out = {}
    for batch in pa.RecordBatchReader.from_stream(table.deletion_vectors()):
        for uri, keep in zip(
            batch.column("filepath").to_pylist(),
            batch.column("selection_vector").to_pylist(),
            strict=True,
        ):
            local = unquote(uri[len("file://") :] if uri.startswith("file://") else uri)
            out[local] = pa.array([i for i, kept in enumerate(keep) if not kept], pa.int64())
    return out


def _added_since(path: str, since: int, version: int) -> set[str]:
    """The files the commits after ``since`` up to ``version`` added.

    Each commit is checked to only add rows.
    """
    out: set[str] = set()
    for number in range(since + 1, version + 1):
        log = os.path.join(path, "_delta_log", f"{number:020d}.json")
        if not os.path.exists(log):
            raise InvalidArgumentError(
                f"the Delta log of version {number} is gone (log clean-up): read the whole "
                "table for this epoch"
            )
        with open(log, encoding="utf-8") as handle:
            actions = [json.loads(line) for line in handle if line.strip()]
        removes = [a["remove"] for a in actions if "remove" in a]
        adds = [a["add"] for a in actions if "add" in a]
        if any(r.get("dataChange", True) for r in removes) or any(
            not a.get("dataChange", True) for a in adds
        ):
            raise UnsupportedError(
                f"Delta version {number} rewrote data files after version {since}: rows it "
                "rewrote would be read again as new; read the whole table for this epoch"
            )
        out.update(unquote(a["path"]) for a in adds)
    return out

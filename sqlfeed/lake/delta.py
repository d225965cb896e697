"""Delta Lake tables through deltalake (delta-rs): a version's data files and their deletes.

delta-rs reads the transaction log (JSON commits and checkpoints) into the version's add
actions: each data file's path, row count, partition values and statistics. Partition
columns are not stored in Delta data files: a piece gives them as constants. With column
mapping (``delta.columnMapping.mode`` ``name`` or ``id``) a column is read by its physical
name, so renames are exact. Deletion vectors are decoded by delta-rs into the rows each
removes, which a piece skips (written once to sqlfeed's cache,
:mod:`sqlfeed.lake.sidecar`).

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

from dialects import InvalidArgumentError, UnsupportedError
from dialects.optional import require
from sqlfeed.lake.model import Column, DataFile, TableSnapshot
from sqlfeed.lake.pieces import literal
from sqlfeed.lake.sidecar import positions_file
from sqlfeed.lake.types import duckdb_type

__all__ = ["delta_snapshot", "delta_version"]

_PHYSICAL = "delta.columnMapping.physicalName"


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
    except Exception as err:  # delta-rs raises its own errors for a missing version
        raise InvalidArgumentError(f"the Delta table at {path}: {err}") from None


def delta_version(path: str, version: int | None = None, as_of_ms: int | None = None) -> int:
    """The version to read: ``version`` (checked), the one current at ``as_of_ms``, or the last."""
    table = _open(path, version)
    if as_of_ms is not None:
        try:
            table.load_as_version(_iso(as_of_ms))
        except Exception as err:
            raise InvalidArgumentError(
                f"the Delta table at {path} had no version at {as_of_ms} ms: {err}"
            ) from None
    return int(table.version())


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def delta_snapshot(path: str, name: str, version: int, since: int | None = None) -> TableSnapshot:
    """The table at ``version`` (with ``since``: only files added after that version)."""
    table = _open(path, version)
    schema = pa.schema(table.schema().to_arrow())
    physical = _physical_names(table)
    partitions = set(table.metadata().partition_columns)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    added = _added_since(path, since, version) if since is not None else None
    vectors = _deletion_vectors(table, path)
    files = []
    for action in actions:
        relative = unquote(action["path"])
        if added is not None and relative not in added:
            continue
        full = relative if os.path.isabs(relative) else os.path.join(path, relative)
        files.append(_data_file(full, action, schema, physical, partitions, vectors))
    columns = tuple((f.name, duckdb_type(f.type)) for f in schema)
    history = table.history(1)
    stamp = history[0].get("timestamp") if history else None
    return TableSnapshot("delta", name, path, version, columns, tuple(files), stamp, since)


def _physical_names(table: Any) -> dict[str, str]:
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode == "none":
        return {}
    out = {}
    for field in table.schema().fields:
        value = (field.metadata or {}).get(_PHYSICAL)
        if value is not None:
            out[field.name] = json.loads(value) if value.startswith('"') else value
    return out


def _data_file(
    full: str,
    action: dict[str, Any],
    schema: pa.Schema,
    physical: dict[str, str],
    partitions: set[str],
    vectors: dict[str, pa.Array],
) -> DataFile:
    file_schema = pq.read_schema(full)
    columns = []
    for field in schema:
        sql_type = duckdb_type(field.type)
        if field.name in partitions:
            value = action.get(f"partition.{field.name}")
            constant = "NULL" if value is None else literal(str(value))
            columns.append(Column(field.name, sql_type, constant=constant))
            continue
        stored = physical.get(field.name, field.name)
        index = file_schema.get_field_index(stored)
        if index < 0:
            columns.append(Column(field.name, sql_type))
            continue
        cast = duckdb_type(file_schema.field(index).type) != sql_type
        columns.append(Column(field.name, sql_type, source=stored, cast=cast))
    vector = vectors.get(full)
    bounds: dict[str, tuple[object, object]] = {}
    nulls: dict[str, int] = {}
    for column in columns:
        if column.constant is not None:  # a partition value: exact
            value = action.get(f"partition.{column.name}")
            if isinstance(value, str | int) and not isinstance(value, bool):
                bounds[column.name] = (value, value)
            nulls[column.name] = int(file_rows(action, full)) if value is None else 0
            continue
        low, high = action.get(f"min.{column.name}"), action.get(f"max.{column.name}")
        if isinstance(low, int | dt.date | decimal.Decimal) and type(low) is type(high):
            bounds[column.name] = (low, high)  # strings left out: Delta may cut them short
        if action.get(f"null_count.{column.name}") is not None:
            nulls[column.name] = int(action[f"null_count.{column.name}"])
    return DataFile(
        path=full,
        uri=full,
        rows=file_rows(action, full),
        size=int(action["size_bytes"]),
        columns=tuple(columns),
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

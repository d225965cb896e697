"""Where a Delta table's columns are in each data file: column mapping, field ids, the log.

A Delta column has a display (logical) name, and with column mapping a physical name and a
field id too. Which one a data file's Parquet columns carry depends on the mapping **in
force**, which the protocol decides, not the table's configuration alone: column mapping
applies when the table is on reader version 2, or on reader version 3 with the
``columnMapping`` reader feature (Delta protocol, "Column Mapping"). A table whose
configuration says ``delta.columnMapping.mode = name`` but whose protocol lists other table
features only (deltalake writes such tables when a ``timestamp_ntz`` column or deletion
vectors bring features) is read by display names, as its writer wrote it.

A column is found in a file by (in this order):

* mapping ``id``: its field id (``PARQUET:field_id``), then its physical name;
* mapping ``name``: its physical name, then its field id;
* no mapping in force: its display name, then its physical name and field id, if the
  schema has them.

A display name is never tried under mapping: after a rename or a drop, another column's
values may sit under that name. A column found under none of its names is NULL in that
file only when the table's log shows the file was added before the column was (a column
added by a schema change); otherwise the file is refused (:func:`absent`), never read as
NULLs.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from sqlfeed.dialects import UnsupportedError

__all__ = ["DeltaField", "absent", "fields", "find", "mapping_mode"]

_PHYSICAL = "delta.columnMapping.physicalName"
_ID = "delta.columnMapping.id"
_FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class DeltaField:
    """One top-level column of the table's schema, with the names a data file may use."""

    name: str
    """The display name (what queries read)."""
    type: pa.DataType
    physical: str
    """The physical name (the display name when the schema gives none)."""
    field_id: int | None
    """The column mapping id (None: the schema gives none)."""

    @property
    def key(self) -> str:
        """What the log knows the column by across schema changes (renames keep it)."""
        return self.physical


def mapping_mode(protocol: Any, configuration: dict[str, str]) -> str:
    """The column mapping in force: ``none``, ``name`` or ``id``.

    ``protocol`` is deltalake's ``ProtocolVersions``; the configuration's mode counts only
    when the protocol enables column mapping (reader 2, or reader 3 with the feature).
    """
    mode = configuration.get("delta.columnMapping.mode", "none") or "none"
    reader = int(protocol.min_reader_version)
    features = protocol.reader_features or []
    if reader < 2 or (reader >= 3 and "columnMapping" not in features):
        return "none"
    return mode if mode in ("name", "id") else "none"


def _metadata(value: Any) -> Any:
    if isinstance(value, str) and value.startswith('"'):
        return json.loads(value)
    return value


def fields(schema: Any, arrow: pa.Schema) -> list[DeltaField]:
    """The schema's columns (deltalake's ``Schema`` and its Arrow form, same order)."""
    out = []
    for field, typed in zip(schema.fields, arrow, strict=True):
        meta = field.metadata or {}
        physical = _metadata(meta.get(_PHYSICAL))
        raw_id = _metadata(meta.get(_ID))
        out.append(
            DeltaField(
                field.name,
                typed.type,
                str(physical) if physical else field.name,
                int(raw_id) if raw_id is not None else None,
            )
        )
    return out


def find(field: DeltaField, file_schema: pa.Schema, mode: str) -> int:
    """The index of the file's column holding ``field`` (-1: none of its names is there)."""
    names = {name: i for i, name in enumerate(file_schema.names)}
    ids = {}
    for i, column in enumerate(file_schema):
        raw = (column.metadata or {}).get(_FIELD_ID)
        if raw is not None:
            ids[int(raw)] = i
    by_id = ids.get(field.field_id, -1) if field.field_id is not None else -1
    by_physical = names.get(field.physical, -1)
    if mode == "id":
        tries = [by_id, by_physical]
    elif mode == "name":
        tries = [by_physical, by_id]
    else:
        tries = [names.get(field.name, -1), by_physical, by_id]
    return next((i for i in tries if i >= 0), -1)


def check_nested(field: DeltaField, stored: pa.DataType, path: str) -> None:
    """Refuses a file whose nested field names are not the schema's (nested physical names).

    A struct's fields are matched by name when cast to the schema's type: names the schema
    lacks (column mapping's physical names inside a struct) would read as NULLs.
    """
    if not _names_fit(stored, field.type):
        raise UnsupportedError(
            f"Delta data file {path} stores the fields of column {field.name!r} under names "
            "its schema does not have (column mapping's physical names inside a nested "
            "column): sqlfeed reads a nested column's fields by their names only; rewrite the "
            "table without column mapping (delta.columnMapping.mode none)"
        )


def _names_fit(stored: pa.DataType, wanted: pa.DataType) -> bool:
    if pa.types.is_struct(stored) and pa.types.is_struct(wanted):
        known = {wanted.field(i).name: wanted.field(i).type for i in range(wanted.num_fields)}
        for i in range(stored.num_fields):
            child = stored.field(i)
            if child.name not in known or not _names_fit(child.type, known[child.name]):
                return False
        return True
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(stored) for f in lists) and any(f(wanted) for f in lists):
        return _names_fit(stored.value_type, wanted.value_type)
    if pa.types.is_map(stored) and pa.types.is_map(wanted):
        return _names_fit(stored.key_type, wanted.key_type) and _names_fit(
            stored.item_type, wanted.item_type
        )
    return True


@dataclass(frozen=True)
class LogHistory:
    """What the JSON commits up to a version say about files and columns.

    ``start``: the first version of the contiguous run of commits read (0: the whole log;
    older commits were cleaned up after a checkpoint).
    """

    start: int
    added: dict[str, int]
    """A data file's path (relative, decoded) -> the first version that added it."""
    columns: dict[str, int | None]
    """A column's key -> the version its present run in the schema began (None: before
    ``start``, unknown)."""

    def predates(self, relative: str, key: str) -> bool:
        """Whether the log proves the file was added before the column was."""
        column = self.columns.get(key)
        if column is None:
            return False
        file = self.added.get(relative)
        if file is None:  # added before the run began (a checkpoint holds its add)
            return self.start > 0 and self.start - 1 < column
        return file < column


@functools.lru_cache(maxsize=16)
def log_history(path: str, version: int, schema_at: Callable[[str, int], str]) -> LogHistory:
    """The table's :class:`LogHistory` at ``version`` (read once per process and version).

    ``schema_at(path, v)``: the schema (JSON) at version ``v``, for the columns the table had
    when the commits still in the log begin (a checkpoint holds what came before).
    """
    log = os.path.join(path, "_delta_log")
    start = version
    while start > 0 and os.path.exists(os.path.join(log, f"{start - 1:020d}.json")):
        start -= 1
    added: dict[str, int] = {}
    columns: dict[str, int | None] = {}
    if start > 0:  # the columns then: added at or before ``start``, when is unknown
        columns = dict.fromkeys(_schema_keys(schema_at(path, start)))
    for number in range(start, version + 1):
        name = os.path.join(log, f"{number:020d}.json")
        if not os.path.exists(name):
            break
        with open(name, encoding="utf-8") as handle:
            actions = [json.loads(line) for line in handle if line.strip()]
        for action in actions:
            if "add" in action:
                added.setdefault(unquote(action["add"]["path"]), number)
            elif "metaData" in action and (start == 0 or number > start):
                keys = _schema_keys(action["metaData"].get("schemaString", "{}"))
                columns = {k: columns.get(k, number) for k in keys}
    return LogHistory(start, added, columns)


def _schema_keys(text: str) -> list[str]:
    out = []
    for field in json.loads(text).get("fields", []):
        physical = (field.get("metadata") or {}).get(_PHYSICAL)
        out.append(str(physical) if physical else str(field["name"]))
    return out


def absent(
    path: str,
    relative: str,
    version: int,
    field: DeltaField,
    schema_at: Callable[[str, int], str],
) -> None:
    """Accepts a column missing from a data file only when the log proves it came later.

    ``schema_at``: see :func:`log_history`.

    Raises:
        UnsupportedError: the log cannot show the file predates the column.
    """
    if log_history(path, version, schema_at).predates(relative, field.key):
        return
    names = [field.physical] + ([f"field id {field.field_id}"] if field.field_id else [])
    raise UnsupportedError(
        f"Delta data file {relative} of the table at {path} has no column {field.name!r} "
        f"(looked for {', '.join(dict.fromkeys([field.name, *names]))}) and the table's log "
        "does not show the column was added after the file: sqlfeed will not read it as "
        "NULLs; check the writer's column mapping (delta.columnMapping.mode)"
    )

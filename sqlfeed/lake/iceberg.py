"""Iceberg tables through pyiceberg's metadata: a snapshot's data files and their deletes.

pyiceberg loads the table (a catalog by name, or a metadata JSON file) and reads its
manifests; sqlfeed matches the deletes to the data files itself, per the Iceberg spec, so
that it can apply them to pieces of files (pyiceberg's own scan reads files whole when they
have deletes, and refuses equality deletes):

* a position delete file applies to a data file when its data sequence number is at least
  the data file's, and it is in the same partition (or its spec is unpartitioned);
* an equality delete file when its sequence number is greater than the data file's
  (strictly: rows added in the same commit are not deleted by it), same scope rule;
* a deletion vector (v3, in a Puffin file) to the one data file it references.

Columns are matched to each data file by field id (the Parquet files Iceberg writers make
carry them; a file without them, of a migrated table, through the table's name mapping),
so a renamed column is read by its old name and a column added later is NULL in older
files. ``new_only`` keeps the data files added after a given snapshot, for
incremental epochs; it refuses when a snapshot in between rewrote data files (an overwrite
or compaction would read rewritten rows again).
"""

from __future__ import annotations

import datetime as dt
import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError, NotImplementedYetError, UnsupportedError
from sqlfeed.dialects.optional import require
from sqlfeed.lake.model import Column, DataFile, EqualityDeletes, TableSnapshot
from sqlfeed.lake.sidecar import positions_file
from sqlfeed.lake.types import duckdb_type

__all__ = ["load_table", "snapshot_id_at", "table_snapshot"]

_FIELD_ID = b"PARQUET:field_id"


def load_table(
    location: str, catalog: str | None = None, properties: dict[str, str] | None = None
) -> Any:
    """The pyiceberg table at ``location``.

    ``location`` is a metadata JSON path (``catalog`` None), or the ``namespace.table`` of
    catalog ``catalog`` (pyiceberg's configuration: ``~/.pyiceberg.yaml`` or
    ``PYICEBERG_CATALOG__NAME__...`` variables, plus ``properties``).
    """
    require("pyiceberg", "reading Iceberg tables")
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.table import StaticTable

    if catalog is None:
        if not os.path.isfile(location):
            raise InvalidArgumentError(
                f"no Iceberg metadata file at {location}: give the table's "
                "metadata/vN.metadata.json, or iceberg://CATALOG/namespace.table"
            )
        return StaticTable.from_metadata(location)
    try:
        return load_catalog(catalog, **(properties or {})).load_table(location)
    except NoSuchTableError:
        raise InvalidArgumentError(
            f"no Iceberg table {location!r} in catalog {catalog!r}; check the name "
            "(namespace.table)"
        ) from None
    except (ValueError, KeyError) as err:
        raise InvalidArgumentError(
            f"the Iceberg catalog {catalog!r} cannot be loaded ({err}); configure it in "
            "~/.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__URI / __WAREHOUSE"
        ) from None


def snapshot_id_at(
    table: Any, snapshot: int | None = None, as_of_ms: int | None = None
) -> int | None:
    """The snapshot to read: ``snapshot`` (checked), the one current at ``as_of_ms``, or now.

    Without either: the table's current snapshot (None: the table has none yet).
    """
    metadata = table.metadata
    if snapshot is not None:
        if metadata.snapshot_by_id(snapshot) is None:
            known = ", ".join(str(s.snapshot_id) for s in metadata.snapshots[-5:]) or "none"
            raise InvalidArgumentError(
                f"Iceberg table has no snapshot {snapshot} (latest: {known}); pick one "
                "of its history (pyiceberg: table.history())"
            )
        return snapshot
    if as_of_ms is not None:
        found = table.snapshot_as_of_timestamp(as_of_ms)
        if found is None:
            raise InvalidArgumentError(
                f"the Iceberg table had no snapshot at {as_of_ms} ms since the epoch "
                "(it is younger): give a later time"
            )
        return int(found.snapshot_id)
    current = table.current_snapshot()
    return None if current is None else int(current.snapshot_id)


def table_snapshot(
    table: Any, name: str, location: str, snapshot: int | None, since: int | None = None
) -> TableSnapshot:
    """The table at ``snapshot`` (None: empty, no snapshot yet).

    With ``since``: only the data files added after snapshot ``since``.
    """
    metadata = table.metadata
    if snapshot is None:
        columns = _columns(table.schema())
        return TableSnapshot("iceberg", name, location, 0, columns, ())
    found = metadata.snapshot_by_id(snapshot)
    if found is None:
        raise InvalidArgumentError(
            f"the plan reads snapshot {snapshot} of Iceberg table {name}, which the table no "
            "longer has (expired): plan the query again"
        )
    schema = metadata.schema_by_id(found.schema_id) if found.schema_id is not None else None
    schema = schema or table.schema()
    added = _added_since(table, since, snapshot) if since is not None else None
    data, deletes = _entries(table, found)
    files = _data_files(table, schema, data, deletes, added)
    return TableSnapshot(
        "iceberg",
        name,
        location,
        snapshot,
        _columns(schema),
        tuple(files),
        timestamp_ms=found.timestamp_ms,
        since=since,
    )


def _columns(schema: Any) -> tuple[tuple[str, str], ...]:
    arrow = _arrow_schema(schema)
    return tuple((f.name, duckdb_type(f.type)) for f in arrow)


def _arrow_schema(schema: Any) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    out: pa.Schema = schema_to_pyarrow(schema, include_field_ids=False)
    return out


def _entries(table: Any, snapshot: Any) -> tuple[list[Any], list[Any]]:
    """The snapshot's live data and delete manifest entries."""
    from pyiceberg.manifest import DataFileContent

    io = table.io
    data, deletes = [], []
    for manifest in snapshot.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                data.append(entry)
            else:
                deletes.append(entry)
    return data, deletes


def _added_since(table: Any, since: int, snapshot: int) -> set[int]:
    """The snapshots after ``since`` up to ``snapshot``, each checked to only add rows."""
    from pyiceberg.table.snapshots import Operation

    metadata = table.metadata
    if metadata.snapshot_by_id(since) is None:
        raise InvalidArgumentError(f"Iceberg table has no snapshot {since} to read new rows after")
    out: set[int] = set()
    current = metadata.snapshot_by_id(snapshot)
    while current is not None and current.snapshot_id != since:
        operation = current.summary.operation if current.summary else None
        if operation in (Operation.OVERWRITE, Operation.REPLACE) and _adds_data(current):
            raise UnsupportedError(
                f"Iceberg snapshot {current.snapshot_id} ({operation.value}) rewrote data files "
                f"after snapshot {since}: rows it rewrote would be read again as new; read the "
                "whole table (no new_only) for this epoch"
            )
        out.add(int(current.snapshot_id))
        parent = current.parent_snapshot_id
        current = metadata.snapshot_by_id(parent) if parent is not None else None
    if current is None:
        raise InvalidArgumentError(
            f"Iceberg snapshot {since} is not an ancestor of snapshot {snapshot}: the table's "
            "history was rewritten (rollback); read the whole table"
        )
    return out


def _adds_data(snapshot: Any) -> bool:
    summary = snapshot.summary
    added = summary.additional_properties.get("added-data-files") if summary else None
    return bool(added and int(added) > 0)


def _scope(entry: Any, specs: dict[int, Any]) -> tuple[int, Any] | None:
    """What a delete file is scoped to.

    None (global: unpartitioned spec), else its ``(spec id, partition)``.
    """
    spec = specs.get(entry.data_file.spec_id)
    if spec is None or spec.is_unpartitioned():
        return None
    return entry.data_file.spec_id, tuple(entry.data_file.partition)


def _data_files(
    table: Any, schema: Any, data: list[Any], deletes: list[Any], added: set[int] | None
) -> list[DataFile]:
    from pyiceberg.manifest import DataFileContent, FileFormat

    specs = table.metadata.specs()
    positions: dict[Any, list[Any]] = defaultdict(list)
    vectors: dict[str, list[Any]] = defaultdict(list)
    equalities: dict[Any, list[Any]] = defaultdict(list)
    for entry in deletes:
        delete = entry.data_file
        if delete.file_format not in (FileFormat.PUFFIN, FileFormat.PARQUET):
            raise UnsupportedError(
                f"Iceberg delete file {delete.file_path} is {delete.file_format.value}: "
                "sqlfeed applies Parquet delete files and Puffin deletion vectors"
            )
        if delete.file_format == FileFormat.PUFFIN:
            for referenced in _referenced(table, delete):
                vectors[referenced].append(entry)
        elif delete.content == DataFileContent.POSITION_DELETES:
            positions[_scope(entry, specs)].append(entry)
        else:
            equalities[_scope(entry, specs)].append(entry)
    out = []
    arrow = _arrow_schema(schema)
    for entry in sorted(data, key=lambda e: (e.sequence_number or 0, e.data_file.file_path)):
        if added is not None and entry.snapshot_id not in added:
            continue
        scope = _scope(entry, specs)
        out.append(_data_file(table, arrow, schema, entry, positions, vectors, equalities, scope))
    return out


def _referenced(table: Any, delete: Any) -> list[str]:
    """The data files a deletion vector's Puffin file applies to.

    Its manifest entry's ``referenced_data_file``, else (a manifest read without it) its
    blobs' own.
    """
    named = getattr(delete, "referenced_data_file", None)
    return [named] if named else list(_read_vectors(table, delete))


def _read_vectors(table: Any, delete: Any) -> dict[str, Any]:
    """``data file -> deleted positions`` of a Puffin file, read by pyiceberg."""
    import pyiceberg
    from pyiceberg.io import pyarrow as reading

    try:
        found: dict[str, Any] = reading._read_deletes(table.io, delete)
    except (ValueError, NotImplementedError, AttributeError) as err:
        raise UnsupportedError(
            f"Iceberg deletion vectors in {delete.file_path} cannot be read by pyiceberg "
            f"{pyiceberg.__version__} ({err}): pyiceberg 0.12 reads them"
        ) from None
    return found


def _in_scope(deletes: dict[Any, list[Any]], scope: Any) -> list[Any]:
    """The delete entries of the data file's partition and the global ones, each once.

    An unpartitioned table's scope is the global one (None): listed once, not twice.
    """
    return [*deletes.get(None, [])] + ([] if scope is None else [*deletes.get(scope, [])])


def _applies(deletes: Iterable[Any], sequence: int, strictly: bool) -> list[Any]:
    return [
        d
        for d in deletes
        if (d.sequence_number or 0) > sequence or (not strictly and d.sequence_number == sequence)
    ]


def _data_file(
    table: Any,
    arrow: pa.Schema,
    schema: Any,
    entry: Any,
    positions: dict[Any, list[Any]],
    vectors: dict[str, list[Any]],
    equalities: dict[Any, list[Any]],
    scope: Any,
) -> DataFile:
    data = entry.data_file
    sequence = entry.sequence_number or 0
    uri = data.file_path
    path = local_path(uri)
    if str(data.file_format.value).lower() != "parquet":
        raise UnsupportedError(
            f"Iceberg data file {uri} is {data.file_format.value}: sqlfeed reads Parquet data files"
        )
    ids = _field_ids(path, _name_mapping(table))
    columns = tuple(_column(f, ids, schema, path) for f in arrow)
    position = [
        d
        for d in _applies(_in_scope(positions, scope), sequence, False)
        if getattr(d.data_file, "referenced_data_file", None) in (None, uri)
    ]
    equality = _applies(_in_scope(equalities, scope), sequence, True)
    vector = _applies(vectors.get(uri, []), sequence, False)
    return DataFile(
        path=path,
        uri=uri,
        rows=int(data.record_count),
        size=int(data.file_size_in_bytes),
        columns=columns,
        position_deletes=tuple(local_path(d.data_file.file_path) for d in position),
        deleted_positions=_vector_file(table, vector, uri) if vector else None,
        equality_deletes=_equality_groups(equality, ids, schema),
        added_in=entry.snapshot_id,
        bounds=_bounds(data, schema),
        null_counts=_null_counts(data, schema),
    )


_EPOCH = dt.date(1970, 1, 1)


def _bounds(data: Any, schema: Any) -> dict[str, tuple[object, object]]:
    """``column -> (lower, upper)`` of the data file's values, from its manifest entry.

    Integers, decimals, dates and strings (a truncated string bound still bounds).
    """
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType

    lower, upper = data.lower_bounds or {}, data.upper_bounds or {}
    out: dict[str, tuple[object, object]] = {}
    for field in schema.fields:
        kind = field.field_type
        if not isinstance(kind, IntegerType | LongType | DecimalType | DateType | StringType):
            continue
        if field.field_id not in lower or field.field_id not in upper:
            continue
        low, high = (from_bytes(kind, b[field.field_id]) for b in (lower, upper))
        if isinstance(kind, DateType):
            out[field.name] = (_day(low), _day(high))
        else:
            out[field.name] = (low, high)
    return out


def _day(days: object) -> dt.date:
    return _EPOCH + dt.timedelta(days=int(str(days)))


def _null_counts(data: Any, schema: Any) -> dict[str, int]:
    counts = data.null_value_counts or {}
    return {f.name: int(counts[f.field_id]) for f in schema.fields if f.field_id in counts}


def local_path(uri: str) -> str:
    """A local file's path from its URI (``file:///x`` or ``/x``); other schemes refused."""
    if uri.startswith("file://"):
        return uri[len("file://") :]
    if "://" in uri:
        raise UnsupportedError(
            f"{uri}: sqlfeed reads lakehouse tables on a local or mounted file system "
            "(object stores are not supported yet)"
        )
    return uri


def _name_mapping(table: Any) -> dict[str, int] | None:
    """The table's name mapping (``schema.name-mapping.default``): top-level name -> field id.

    What the columns of a data file written without field ids (a migrated table) are; None:
    the table has none.
    """
    found = table.name_mapping()
    if found is None:
        return None
    return {name: int(field.field_id) for field in found for name in field.names}


def _field_ids(
    path: str, mapping: dict[str, int] | None = None
) -> dict[int, tuple[str, pa.DataType]]:
    """A Parquet file's top-level columns by field id: ``id -> (name, type)``.

    A column without an id takes the one ``mapping`` gives its name; else a negative key.
    """
    try:
        file_schema = pq.read_schema(path)
    except OSError as err:
        raise InvalidArgumentError(f"cannot read the Iceberg data file {path}: {err}") from None
    out = {}
    for position, field in enumerate(file_schema):
        raw = (field.metadata or {}).get(_FIELD_ID)
        if raw is not None:
            key = int(raw)
        elif mapping is not None and field.name in mapping:
            key = mapping[field.name]
        else:
            key = -1 - position
        out[key] = (field.name, field.type)
    return out


def _column(
    field: pa.Field, ids: dict[int, tuple[str, pa.DataType]], schema: Any, path: str
) -> Column:
    """The column ``field`` of the snapshot in a data file, matched by field id.

    A file without field ids and no name mapping is read by the column's name. A field id
    the file lacks is NULL (ids are never reused: the file was written before the column
    was added), as the spec says, unless the column has an initial default (refused).
    """
    iceberg_field = schema.find_field(field.name)
    found = ids.get(iceberg_field.field_id)
    if found is None and ids and all(key < 0 for key in ids):
        # a file without field ids (a migrated table) and no name mapping: read by name
        found = next(((n, t) for key, (n, t) in ids.items() if key < 0 and n == field.name), None)
        if found is None:
            raise UnsupportedError(
                f"Iceberg data file {path} has no field ids and no column {field.name!r}, and "
                "the table has no name mapping (schema.name-mapping.default) to say where the "
                "column is: sqlfeed will not read it as NULLs; set the table's name mapping"
            )
    sql_type = duckdb_type(field.type)
    if found is None:
        if getattr(iceberg_field, "initial_default", None) is not None:
            raise NotImplementedYetError(
                f"Iceberg data file {path} predates column {field.name!r}, whose initial "
                "default sqlfeed does not apply yet: rewrite the older files (a compaction)"
            )
        return Column(field.name, sql_type)
    name, file_type = found
    return Column(field.name, sql_type, source=name, cast=duckdb_type(file_type) != sql_type)


def _equality_groups(
    deletes: list[Any], data_ids: dict[int, tuple[str, pa.DataType]], schema: Any
) -> tuple[EqualityDeletes, ...]:
    """The equality delete files grouped by the columns they compare."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = defaultdict(list)
    for entry in deletes:
        delete = entry.data_file
        path = local_path(delete.file_path)
        delete_ids = _field_ids(path)
        pairs = []
        for field_id in delete.equality_ids or []:
            if field_id not in delete_ids:
                raise UnsupportedError(
                    f"Iceberg equality delete file {path} lacks field id {field_id} it "
                    "names as an equality column"
                )
            data = data_ids.get(field_id)
            pairs.append((delete_ids[field_id][0], data[0] if data else ""))
        groups[tuple(pairs)].append(path)
    return tuple(EqualityDeletes(tuple(files), pairs) for pairs, files in groups.items())


def _vector_file(table: Any, entries: list[Any], uri: str) -> str:
    """The positions the deletion vectors of ``uri`` remove, as a Parquet file.

    See :func:`sqlfeed.lake.sidecar.positions_file`.
    """

    def positions() -> pa.Array:
        arrays = []
        for entry in entries:
            for referenced, vector in _read_vectors(table, entry.data_file).items():
                if referenced == uri:
                    arrays.extend(pa.chunked_array(vector).cast(pa.int64()).chunks)
        return pa.concat_arrays(arrays) if arrays else pa.array([], pa.int64())

    key = "|".join(
        sorted(
            f"{e.data_file.file_path}@{getattr(e.data_file, 'content_offset', None)}"
            for e in entries
        )
    )
    return positions_file(f"iceberg|{uri}|{key}", positions)

"""The Dask DataFrame of a plan: :func:`dataframe`, its per-partition reader and divisions.

Dask is imported when a frame is built, never when this module is imported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

import numpy as np
import pandas as pd
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dialects.optional import require
from sqlfeed.feed.options import PlanOptions, own_scratch
from sqlfeed.feed.remote import PartitionReader, check_source_url, plan_for_url, reader_for
from sqlfeed.io import DEFAULT_BATCH_ROWS
from sqlfeed.plans import Partition, Plan

__all__ = ["DTYPE_BACKENDS", "PandasReader", "dataframe", "range_divisions"]

DTYPE_BACKENDS = ("numpy_nullable", "pyarrow")
"""How Arrow columns become pandas columns (pandas' own names for the two choices)."""

_NULLABLE: dict[pa.DataType, Any] = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
    pa.float32(): pd.Float32Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.string(): pd.StringDtype(),
    pa.large_string(): pd.StringDtype(),
}
"""``numpy_nullable``: pandas' nullable dtypes, so a NULL never turns an integer into a float."""


def _nullable_dtype(arrow_type: pa.DataType) -> Any:
    """``numpy_nullable``'s dtype for ``arrow_type``.

    Numbers, bools and strings per :data:`_NULLABLE`; timestamps and durations as pandas
    converts them (datetime64, timedelta64); dictionaries as categories; every other type as
    ``pd.ArrowDtype``.

    The other types are those pandas would hold as Python objects (lists, structs, maps,
    bytes, ``datetime.date``, ``datetime.time``, intervals, decimals): Dask turns such an
    object column into text by default (its ``dataframe.convert-string`` setting), so a
    ``text[]`` value became the string ``"['t1' 't1']"`` and a date ``"2020-01-02"``.
    Arrow dtypes keep them lists, dicts, bytes and dates (a decimal column of Python
    ``Decimal`` objects also costs ~25x the conversion time of an Arrow decimal).
    """
    if arrow_type in _NULLABLE:
        return _NULLABLE[arrow_type]
    native = (
        pa.types.is_timestamp(arrow_type)
        or pa.types.is_duration(arrow_type)
        or pa.types.is_dictionary(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
    )
    return None if native else pd.ArrowDtype(arrow_type)


def _dask_dataframe() -> Any:
    return require("dask.dataframe", "Dask DataFrames")


@dataclass(frozen=True)
class PandasReader:
    """Reads one plan partition as a pandas DataFrame, in whatever process calls it.

    Plain, picklable data: Dask ships it to its workers (threads, processes or hosts).

    Attributes:
        reader: the plan's partition reader (URL, schema, read options).
        dtype_backend: ``numpy_nullable`` (nullable pandas dtypes for numbers, bools and
            strings; datetime64 and timedelta64 for timestamps and durations; categories
            for dictionaries; ``pd.ArrowDtype`` for every other type: lists stay lists,
            structs dicts, decimals exact, dates dates, bytes bytes) or
            ``pyarrow`` (``pd.ArrowDtype`` for every column).
        index: the column to make the index, or None (a RangeIndex per partition).
        sort: sort each partition by the index (when the divisions are known).
    """

    reader: PartitionReader
    dtype_backend: str = "numpy_nullable"
    index: str | None = None
    sort: bool = False

    def __call__(self, partition: Partition) -> pd.DataFrame:
        """The rows of ``partition`` (its Arrow buffers released as they are converted)."""
        return self.frame(self.reader.table(partition), release=True)

    def meta(self) -> pd.DataFrame:
        """An empty frame with the columns and dtypes every partition has."""
        return self.frame(self.reader.arrow_schema().empty_table())

    def frame(self, table: pa.Table, *, release: bool = False) -> pd.DataFrame:
        """``table`` as pandas, converted the same way for every partition.

        With ``release``, ``table`` is unusable afterwards: each column's Arrow buffers
        are freed once converted (pyarrow's ``self_destruct``), so a partition is never
        held twice in full.
        """
        mapper: Callable[[pa.DataType], Any] = (
            pd.ArrowDtype if self.dtype_backend == "pyarrow" else _nullable_dtype
        )
        frame: pd.DataFrame = table.to_pandas(
            types_mapper=mapper, split_blocks=release, self_destruct=release
        )
        if self.index is not None:
            frame = frame.set_index(self.index)
            if self.sort:
                frame = frame.sort_index(kind="stable")
        return frame


def dataframe(
    query: str | Plan,
    source_url: str,
    *,
    index: str | None = None,
    dtype_backend: str = "numpy_nullable",
    read_batch_rows: int = DEFAULT_BATCH_ROWS,
    snapshot: str | None = None,
    **plan_options: Unpack[PlanOptions],
) -> Any:
    """A ``dask.dataframe.DataFrame`` of exactly the rows of ``query`` (SQL or a Plan).

    Args:
        query: a SQL SELECT (planned here, on a connection closed before any task runs)
            or a :class:`~sqlfeed.Plan`.
        source_url: the database URL tasks open in their processes (a server's once per
            process, reused by its later tasks)
            (``postgresql+psycopg://...``, ``mysql+pymysql://...``, ``sqlite:///f.db``,
            ``duckdb:///f.duckdb``, opened read-only, ``dataset:///folder``).
        index: an output column to make the index. On a ``range`` plan over that column
            whose key has no NULLs, the divisions are known (:func:`range_divisions`)
            and each partition is sorted by it; otherwise they are unknown.
        dtype_backend: ``numpy_nullable`` (default) or ``pyarrow``; see
            :class:`PandasReader`.
        read_batch_rows: rows per record batch read from the database.
        snapshot: PostgreSQL: a snapshot id every task reads inside.
        **plan_options: for SQL, the options of :func:`sqlfeed.plan`.

    Returns:
        A lazy Dask DataFrame with one partition per plan partition.

    Raises:
        InvalidArgumentError: bad arguments, an unknown index column, a source other
            processes cannot open; raised before any partition is read.
        MissingDependencyError: Dask (``dask[dataframe]``) is not installed.
    """
    dd = _dask_dataframe()  # a missing Dask fails before anything runs on the database
    url = check_source_url(source_url, "Dask")
    if dtype_backend not in DTYPE_BACKENDS:
        raise InvalidArgumentError(
            f"dtype_backend must be one of {', '.join(DTYPE_BACKENDS)}, got {dtype_backend!r}"
        )
    plan = plan_for_url(query, url, plan_options)
    reader = reader_for(plan, url, read_batch_rows, snapshot)
    schema = reader.arrow_schema()
    if index is not None and index not in schema.names:
        raise InvalidArgumentError(
            f"index {index!r} is not an output column (columns: {', '.join(schema.names)})"
        )
    divisions = range_divisions(plan, schema, index)
    read = PandasReader(reader, dtype_backend, index, sort=divisions is not None)
    own_scratch(read, query, plan, url)  # planned here: dropped when the graph holding
    # ``read`` is gone
    return dd.from_map(
        read, list(plan.partitions), meta=read.meta(), divisions=divisions, label="sqlfeed"
    )


def range_divisions(plan: Plan, schema: pa.Schema, index: str | None) -> tuple[Any, ...] | None:
    """The divisions of a ``range`` plan's partitions along ``index``, or None.

    Known when the plan ranges over ``index`` (an integer, float, date or timestamp
    column) and has no NULL partition: the plan's bounds, between the type's lowest and
    highest values (the query's own MIN and MAX are not in the plan). A NULL has no
    place in an ordered index, so a key with NULLs gives unknown divisions.

    >>> parts = (Partition(0, "", description="k < 5"), Partition(1, "", description="k >= 5"))
    >>> plan = Plan("q", "duckdb", "range", "", parts, ("k",), key=("k",))
    >>> range_divisions(plan, pa.schema([("k", pa.int8())]), "k")
    (-128, 5, 127)
    """
    if index is None or plan.strategy != "range" or plan.key != (index,):
        return None
    arrow_type = schema.field(index).type
    ends = _type_ends(arrow_type)
    if ends is None:
        return None
    labels = [p.description for p in plan.partitions]
    bounds = _label_bounds(index, labels)
    if bounds is None:
        return None
    try:
        values = [_bound_value(text, arrow_type) for text in bounds]
    except (ValueError, TypeError, ArithmeticError):
        return None
    if any(not a < b for a, b in zip([ends[0], *values], [*values, ends[1]], strict=True)):
        return None
    return (ends[0], *values, ends[1])


def _label_bounds(key: str, labels: Sequence[str]) -> list[str] | None:
    """The bound texts of a range plan's partition labels (see ``plans.range``).

    None when they are not a chain of ranges without a NULL partition.
    """
    if labels == [f"{key} IS NOT NULL"]:
        return []
    if len(labels) < 2:
        return None
    first, last = f"{key} < ", f"{key} >= "
    if not labels[0].startswith(first) or not labels[-1].startswith(last):
        return None
    bounds = [labels[0][len(first) :]]
    for label in labels[1:-1]:
        prefix = f"{key} in [{bounds[-1]}, "
        if not label.startswith(prefix) or not label.endswith(")"):
            return None
        bounds.append(label[len(prefix) : -1])
    if labels[-1][len(last) :] != bounds[-1]:
        return None
    return bounds


def _type_ends(arrow_type: pa.DataType) -> tuple[Any, Any] | None:
    """The lowest and highest values of a key type, as divisions; None if unsupported."""
    if pa.types.is_integer(arrow_type):
        info = np.iinfo(arrow_type.to_pandas_dtype())
        return int(info.min), int(info.max)
    if pa.types.is_floating(arrow_type):
        return -np.inf, np.inf
    if pa.types.is_date(arrow_type):
        return dt.date.min, dt.date.max
    if pa.types.is_timestamp(arrow_type):
        # Two days inside int64's range, so a time zone's offset cannot overflow.
        margin = 2 * 86_400 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[arrow_type.unit]
        ends = np.iinfo(np.int64).min + margin, np.iinfo(np.int64).max - margin
        stamps = [pd.Timestamp(np.datetime64(v, arrow_type.unit)) for v in ends]
        if arrow_type.tz is not None:
            stamps = [s.tz_localize("UTC").tz_convert(arrow_type.tz) for s in stamps]
        return stamps[0], stamps[1]
    return None


def _bound_value(text: str, arrow_type: pa.DataType) -> Any:
    """A bound as the range planner wrote it, back as a value of the index's type.

    The planner wrote ``str(value)``.
    """
    if pa.types.is_integer(arrow_type):
        return int(text)
    if pa.types.is_floating(arrow_type):
        return float(text)
    if pa.types.is_date(arrow_type):
        return dt.date.fromisoformat(text)
    stamp = pd.Timestamp(text)
    if arrow_type.tz is None:
        return stamp.tz_localize(None) if stamp.tzinfo is not None else stamp
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return stamp.tz_convert(arrow_type.tz)

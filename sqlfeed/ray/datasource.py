"""The Ray Data ``Datasource`` of a plan, and :func:`dataset`.

Ray is imported when a datasource is built (the ``Datasource`` subclass is made then),
never when this module is imported.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import pyarrow as pa

from sqlfeed.dialects.optional import require
from sqlfeed.feed.options import PlanOptions, check_int, own_scratch
from sqlfeed.feed.remote import PartitionReader, check_source_url, plan_for_url, reader_for
from sqlfeed.io import DEFAULT_BATCH_ROWS
from sqlfeed.io.arrow import without_hints
from sqlfeed.plans import Partition, Plan

__all__ = ["dataset", "datasource", "group_partitions"]

_VARIABLE_WIDTH_BYTES = 32
"""The size assumed for a string, binary or nested value when estimating block sizes."""


def _ray_datasource_api() -> tuple[Any, Any, Any]:
    """Ray's ``Datasource``, ``ReadTask`` and ``BlockMetadata``.

    MissingDependencyError without Ray.
    """
    block = require("ray.data.block", "Ray Data datasets")
    datasource = require("ray.data.datasource", "Ray Data datasets")
    return datasource.Datasource, datasource.ReadTask, block.BlockMetadata


@functools.cache
def _datasource_class() -> Any:
    """The ``ray.data.Datasource`` subclass (made once, when Ray is first needed)."""
    base, read_task, block_metadata = _ray_datasource_api()

    class SqlfeedDatasource(base):  # type: ignore[misc, valid-type]
        """A plan's partitions as Ray read tasks (see :func:`datasource`)."""

        def __init__(self, plan: Plan, reader: PartitionReader, num_blocks: int | None) -> None:
            super().__init__()
            self.plan = plan
            self.reader = reader
            self.num_blocks = num_blocks
            self.schema = without_hints(reader.arrow_schema())  # what the batches have
            self.row_bytes = _row_bytes(self.schema)
            # Ray before the schema moved out of BlockMetadata (2.4x) wants it there too.
            names = {f.name for f in dataclasses.fields(block_metadata)}
            self.metadata_extra = {"schema": self.schema} if "schema" in names else {}

        def get_name(self) -> str:
            return "sqlfeed"

        def estimate_inmemory_data_size(self) -> int | None:
            rows = [p.estimated_rows for p in self.plan.partitions]
            if any(r is None for r in rows):
                return None if self.plan.rows is None else self.plan.rows * self.row_bytes
            return sum(r or 0 for r in rows) * self.row_bytes

        def get_read_tasks(
            self,
            parallelism: int,
            per_task_row_limit: int | None = None,
            data_context: Any = None,
        ) -> list[Any]:
            # One task per partition, unless the user asked for fewer blocks: Ray splits a
            # task's output further when it wants more blocks than there are tasks.
            groups = group_partitions(self.plan.partitions, self.num_blocks)
            tasks = []
            for group in groups:
                estimate = [p.estimated_rows for p in group]
                size = None if None in estimate else sum(estimate) * self.row_bytes  # type: ignore[arg-type]
                # num_rows stays unknown: estimates must not become Dataset.count().
                metadata = block_metadata(
                    num_rows=None,
                    size_bytes=size,
                    exec_stats=None,
                    input_files=None,
                    **self.metadata_extra,
                )
                limit = {"per_task_row_limit": per_task_row_limit} if per_task_row_limit else {}
                read = functools.partial(self.reader.tables, group)
                tasks.append(read_task(read, metadata, schema=self.schema, **limit))
            return tasks

    return SqlfeedDatasource


def _row_bytes(schema: pa.Schema) -> int:
    """An estimate of one row's size in Arrow memory."""
    total = 0
    for field in schema:
        try:
            total += max(1, field.type.bit_width // 8)
        except ValueError:  # variable width: strings, binaries, lists
            total += _VARIABLE_WIDTH_BYTES
    return max(total, 1)


def group_partitions(
    partitions: Sequence[Partition], groups: int | None
) -> list[tuple[Partition, ...]]:
    """``partitions`` in ``groups`` read tasks.

    One each when ``groups`` is None or not fewer than the partitions; else balanced by
    estimated rows (largest first onto the lightest group), each group in partition order.

    >>> parts = [Partition(i, "", estimated_rows=r) for i, r in enumerate([5, 1, 4, 2])]
    >>> [[p.index for p in g] for g in group_partitions(parts, 2)]
    [[0, 1], [2, 3]]
    >>> len(group_partitions(parts, None))
    4
    """
    if groups is None or groups >= len(partitions):
        return [(p,) for p in partitions]
    loads = [0] * groups
    members: list[list[Partition]] = [[] for _ in range(groups)]
    largest_first = sorted(partitions, key=lambda p: (-(p.estimated_rows or 0), p.index))
    for partition in largest_first:
        lightest = min(range(groups), key=lambda g: (loads[g], g))
        members[lightest].append(partition)
        loads[lightest] += partition.estimated_rows or 1
    return [tuple(sorted(m, key=lambda p: p.index)) for m in members if m]


def datasource(
    query: str | Plan,
    source_url: str,
    *,
    override_num_blocks: int | None = None,
    read_batch_rows: int = DEFAULT_BATCH_ROWS,
    snapshot: str | None = None,
    **plan_options: Unpack[PlanOptions],
) -> Any:
    """A ``ray.data.Datasource`` reading the plan of ``query`` from ``source_url``.

    For ``ray.data.read_datasource(datasource(...), ...)``; :func:`dataset` does that.
    The arguments are :func:`dataset`'s.
    """
    _ray_datasource_api()  # a missing Ray fails before anything runs on the database
    url = check_source_url(source_url, "Ray Data")
    if override_num_blocks is not None:
        check_int(override_num_blocks, "override_num_blocks", 1)
    plan = plan_for_url(query, url, plan_options)
    reader = reader_for(plan, url, read_batch_rows, snapshot)
    made = _datasource_class()(plan, reader, override_num_blocks)
    own_scratch(made, query, plan, url)  # planned here: an auto-materialized table is ours
    return made


def dataset(
    query: str | Plan,
    source_url: str,
    *,
    override_num_blocks: int | None = None,
    concurrency: int | None = None,
    read_batch_rows: int = DEFAULT_BATCH_ROWS,
    snapshot: str | None = None,
    ray_options: Mapping[str, Any] | None = None,
    **plan_options: Unpack[PlanOptions],
) -> Any:
    """A ``ray.data.Dataset`` of exactly the rows of ``query`` (SQL or a Plan).

    Args:
        query: a SQL SELECT (planned here, on a connection closed before any task runs)
            or a :class:`~sqlfeed.Plan`.
        source_url: the database URL read tasks open in their processes (a server's once
            per Ray worker process, reused by its later tasks):
            ``postgresql+psycopg://...``, ``mysql+pymysql://...``, ``sqlite:///file.db``,
            ``duckdb:///file.duckdb`` (opened read-only: close any connection that has it
            open for writing first), ``dataset:///folder``.
        override_num_blocks: the number of output blocks. Default: one read task and
            one block per partition (Ray may cut a block over its target size). Fewer
            than the partitions: that many tasks, each reading a balanced group of
            partitions. More: Ray splits each task's output.
        concurrency: the most read tasks running at once (Ray's ``concurrency``).
        read_batch_rows: rows per record batch read from the database.
        snapshot: PostgreSQL: a snapshot id (``Source.export_snapshot()``) every task
            reads inside, so all partitions see the same data under concurrent writes;
            keep the holder open until the dataset is consumed.
        ray_options: more arguments for ``ray.data.read_datasource`` (``num_cpus``,
            ``memory``, ``compute``, ``runtime_env``, ...).
        **plan_options: for SQL, the options of :func:`sqlfeed.plan` (``partitions``,
            ``target_rows``, ``strategy``, ``key``, ``scratch``, ...). A ``materialize``
            plan's scratch table outlives the dataset: plan it yourself and drop it with
            :func:`sqlfeed.plans.drop_scratch` when the dataset is consumed.

    Returns:
        A lazy ``ray.data.Dataset`` whose schema is the plan's Arrow schema.

    Raises:
        InvalidArgumentError: bad arguments, a source other processes cannot open, or a
            query sqlfeed refuses; raised before any partition is read.
        MissingDependencyError: Ray Data is not installed.
    """
    source = datasource(
        query,
        source_url,
        override_num_blocks=override_num_blocks,
        read_batch_rows=read_batch_rows,
        snapshot=snapshot,
        **plan_options,
    )
    options = dict(ray_options or {})
    if concurrency is not None:
        check_int(concurrency, "concurrency", 1)
        options["concurrency"] = concurrency
    # Default: one block per read task (Ray would otherwise split small reads into ~200).
    options["override_num_blocks"] = override_num_blocks or len(source.plan.partitions)
    import ray.data

    return ray.data.read_datasource(source, **options)

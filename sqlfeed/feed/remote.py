"""Partitions read in other processes: what Ray read tasks and Dask tasks share.

A plan is planned once, where the job is built; each of its partitions is then read by a
task in some other process, possibly on another host. Nothing live crosses that boundary:
a task receives the source's URL, the plan's Arrow schema and its partitions (plain,
picklable data, :class:`PartitionReader`) and reads on a connection its own process
opened from the URL.

* :func:`check_source_url` refuses what another process cannot open: a connection or
  engine object, an in-memory DuckDB.
* :func:`open_for_reading` opens a URL in a task (a DuckDB file read-only, as
  :func:`sqlfeed.connect` does, so many processes read it at once).
* :func:`reading_source` is what a task reads with: for a database server (PostgreSQL,
  MySQL, ...) one :class:`~sqlfeed.io.Source` per process and URL, kept open and reused by
  every task that process runs (its engine, pool and per-thread reader connections are set
  up once, not per task); a file (DuckDB, SQLite, a dataset) is opened for the task and
  closed after it, so no lock outlives the read. :func:`release_sources` closes the kept ones.
* :func:`plan_for_url` plans a SQL query (or checks a given Plan) for a URL, on a
  connection closed before any task runs.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from sqlfeed.dialects import (
    EngineError,
    InvalidArgumentError,
    UnknownDialectError,
    dialect_for,
    get_dialect,
)
from sqlfeed.feed.options import (
    PlanOptions,
    check_given_plan,
    check_int,
    check_plan_options,
    resolve_plan,
)
from sqlfeed.feed.snapshots import SnapshotWarning, check_snapshot_option, needs_snapshot, unshared
from sqlfeed.io import (
    DEFAULT_BATCH_ROWS,
    MEMORY,
    SnapshotHolder,
    Source,
    connect,
    duckdb_file,
    redact_url,
)
from sqlfeed.plans import Partition, Plan

__all__ = [
    "PartitionReader",
    "check_source_url",
    "open_for_reading",
    "plan_for_url",
    "reader_for",
    "reading_source",
    "release_sources",
]


def check_source_url(source_url: object, what: str) -> str:
    """``source_url`` if every process can open it; else a clear error.

    Args:
        source_url: what the user passed as the source.
        what: the integration, for the message (``Ray Data``, ``Dask``).

    Raises:
        InvalidArgumentError: not a URL string, or a URL only this process can open.
    """
    if not isinstance(source_url, str):
        raise InvalidArgumentError(
            f"{what} reads each partition in its own task and process, which opens its own "
            f"connection: pass the database URL (e.g. 'postgresql+psycopg://user@host/db', "
            f"'duckdb:///data.duckdb'), not a {type(source_url).__name__}"
        )
    url = source_url.strip()
    if _memory_urls(url) and duckdb_file(url) == MEMORY:
        raise InvalidArgumentError(
            f"an in-memory DuckDB ({url!r}) exists in one process only, and {what} reads "
            "in others: write the tables to a file and pass 'duckdb:///path.duckdb'"
        )
    dialect_for(url)  # an unknown kind of URL fails here, before anything runs
    return url


def _memory_urls(url: str) -> bool:
    """Whether the engine of ``url``'s scheme opens an in-memory database for a URL naming no file.

    The database is in this process's memory (DuckDB:
    :attr:`~sqlfeed.dialects.Dialect.MEMORY_URLS`).
    """
    try:
        return get_dialect(url.partition(":")[0]).MEMORY_URLS
    except UnknownDialectError:
        return False


def open_for_reading(url: str) -> Source:
    """A :class:`~sqlfeed.io.Source` for ``url``, opened by this process (in a task).

    :func:`sqlfeed.connect` opens a DuckDB file read-only, so any number of tasks read it
    at once; while another process holds it open for writing, the error says so.
    """
    return connect(url)


_KEPT: dict[tuple[int, str], Source] = {}
_KEPT_LOCK = threading.Lock()


@contextlib.contextmanager
def reading_source(url: str) -> Iterator[Source]:
    """The source a task reads ``url`` with (see the module docstring).

    A database server's source is kept for this process and URL (a forked child opens its
    own); a read that fails drops it, so the next task starts on a fresh one. A file's
    source is opened here and closed when the block ends.
    """
    if dialect_for(url).FILE_DATABASE:  # opened per task: no lock or handle outlives a read
        with open_for_reading(url) as source:
            yield source
        return
    key = (os.getpid(), url)
    with _KEPT_LOCK:
        kept = _KEPT.get(key)
        if kept is None:
            kept = _KEPT[key] = open_for_reading(url)
        source = kept
    try:
        yield source
    except Exception:  # not GeneratorExit: a reader stopped early is no failure
        with _KEPT_LOCK:
            if _KEPT.get(key) is source:
                del _KEPT[key]  # not closed: other threads of this process may be reading
        raise


@atexit.register
def release_sources() -> None:
    """Close the database sources this process keeps for its tasks (their connections)."""
    with _KEPT_LOCK:
        kept = [s for (pid, _), s in _KEPT.items() if pid == os.getpid()]
        _KEPT.clear()
    for source in kept:
        with contextlib.suppress(Exception):  # a broken connection: nothing to release
            source.close()


def plan_for_url(query: str | Plan, url: str, plan_options: PlanOptions) -> Plan:
    """The plan of ``query`` on ``url`` (planned here for SQL), with its Arrow schema.

    A given :class:`Plan` is checked (its dialect must be the URL's; plan options need
    SQL); only a plan without a schema needs a connection here. The connection used to
    plan is closed before this returns, so tasks in other processes can open the source.

    Raises:
        InvalidArgumentError: unknown plan options, plan options with a Plan, a Plan of
            another dialect, a query that is neither SQL nor a Plan.
    """
    check_plan_options(plan_options)
    if isinstance(query, Plan):
        check_given_plan(query, dialect_for(url).name, plan_options, where="the URL")
        if query.schema is not None:
            return query
        with open_for_reading(url) as source:
            schema = source.schema(query.sql)
        return dataclasses.replace(query, schema=schema.serialize().to_pybytes())
    if not isinstance(query, str):
        raise InvalidArgumentError(
            f"expected a SQL query or a sqlfeed Plan, got a {type(query).__name__}"
        )
    with open_for_reading(url) as source:
        return resolve_plan(query, source, **plan_options)


@dataclass(frozen=True)
class PartitionReader:
    """Reads partitions of one plan in any process: the URL, the schema, read options.

    Plain, picklable data (ship it to a task; it opens its own connection there).

    Attributes:
        url: the source's URL.
        schema: the plan's Arrow schema, serialized (IPC).
        batch_rows: rows per record batch read.
        snapshot: a PostgreSQL snapshot id to read inside (see ``Source.export_snapshot``;
            :func:`reader_for` exports one by default, held while this reader is alive).
    """

    url: str
    schema: bytes
    batch_rows: int = DEFAULT_BATCH_ROWS
    snapshot: str | None = None

    def __repr__(self) -> str:
        return f"PartitionReader({redact_url(self.url)!r})"

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema every batch has."""
        return pa.ipc.read_schema(pa.py_buffer(self.schema))

    def batches(self, partitions: Sequence[Partition]) -> Iterator[pa.RecordBatch]:
        """The rows of ``partitions``, one after the other, on this process's source for the URL.

        See :func:`reading_source`: a server's connections are reused across tasks.

        An empty partition yields one empty batch (of the schema).
        """
        schema = self.arrow_schema()
        with reading_source(self.url) as source:
            for partition in partitions:
                yield from source.read(
                    partition.sql,
                    schema=schema,
                    batch_rows=self.batch_rows,
                    ordered=False,
                    snapshot=self.snapshot,
                    rows=partition.estimated_rows,
                )

    def tables(self, partitions: Sequence[Partition]) -> Iterator[pa.Table]:
        """:meth:`batches` as one-batch tables (Ray Data's Arrow blocks)."""
        for batch in self.batches(partitions):
            yield pa.Table.from_batches([batch])

    def table(self, partition: Partition) -> pa.Table:
        """All rows of one partition as a table of the schema."""
        return pa.Table.from_batches(list(self.batches([partition])), schema=self.arrow_schema())


def reader_for(
    plan: Plan, url: str, batch_rows: int, snapshot: str | bool | None
) -> PartitionReader:
    """The :class:`PartitionReader` of ``plan`` on ``url``, with its options checked.

    ``snapshot``: None or True (the default of Ray's and Dask's readers): the plan's
    :attr:`~sqlfeed.plans.model.Plan.snapshot` when it carries one; else on PostgreSQL,
    when the plan's partitions query live tables (:func:`~sqlfeed.feed.snapshots.needs_snapshot`),
    a snapshot is exported here and every task reads inside it: the exporting
    connection stays open in THIS process for as long as the returned reader is alive
    (the dataset or DataFrame holds it), so keep the dataset until its tasks have read
    (when the snapshot cannot be exported, a :class:`SnapshotWarning` says so).
    MySQL/MariaDB and SQLite cannot share a snapshot with other processes: the tasks
    read at different times, which a :class:`SnapshotWarning` says. A string: a
    PostgreSQL snapshot id another session exported and holds. False: none.

    Raises:
        InvalidArgumentError: ``batch_rows`` is not a positive integer, ``snapshot`` is
            an id given for an engine other than PostgreSQL, or the plan has no schema.
    """
    check_int(batch_rows, "read_batch_rows", 1)
    if snapshot in (None, True) and plan.snapshot is not None:
        snapshot = plan.snapshot  # the plan carries one, held by the session that made it
    check_snapshot_option(True if snapshot is None else snapshot, plan.dialect)
    if plan.schema is None:
        raise InvalidArgumentError("the plan has no Arrow schema: plan it with a source")
    if isinstance(snapshot, str):
        return PartitionReader(url, plan.schema, batch_rows, snapshot)
    if snapshot is False or not needs_snapshot(plan):
        return PartitionReader(url, plan.schema, batch_rows)
    if not get_dialect(plan.dialect).EXPORTS_SNAPSHOTS:
        why = f"{plan.dialect} cannot share a snapshot with the tasks' connections"
        warnings.warn(unshared(plan, why), SnapshotWarning, stacklevel=3)
        return PartitionReader(url, plan.schema, batch_rows)
    source = open_for_reading(url)
    try:
        holder = source.export_snapshot()
    except EngineError as err:
        source.close()
        why = f"PostgreSQL exported no snapshot: {err}"
        warnings.warn(unshared(plan, why), SnapshotWarning, stacklevel=3)
        return PartitionReader(url, plan.schema, batch_rows)
    reader = PartitionReader(url, plan.schema, batch_rows, holder.snapshot)
    weakref.finalize(reader, _let_go, holder, source)  # held while the reader is
    return reader


def _let_go(holder: SnapshotHolder, source: Source) -> None:
    """Close an exported snapshot's transaction and its source (the reader is gone)."""
    with contextlib.suppress(Exception):  # a connection lost meanwhile: nothing to end
        holder.close()
    with contextlib.suppress(Exception):
        source.close()

"""The Ray Data ``Datasink`` of a table sink, and :func:`write_table`.

A Ray pipeline's output lands in a database table exactly once per block: the driver
makes the sink (:class:`~sqlfeed.sink.TableSink`: a staging table and a commits table),
each write task attaches to it by its spec and commits its blocks' record batches with
``partition`` = the task's index and ``first_row`` = the batch's row offset among the
task's rows, so a task Ray retries re-commits the same batches and each one committed
before is skipped. When every task is done the driver finishes the sink, checking that
the staging table holds exactly the rows the tasks saw, and puts it in place; a failed
write drops the staging table, leaving the output as it was.

Ray is imported when a datasink is built (the ``Datasink`` subclass is made then), never
when this module is imported.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import Dialect, EngineError, InvalidArgumentError, dialect_for
from sqlfeed.dialects.optional import require
from sqlfeed.feed.options import check_int
from sqlfeed.io.files import MEMORY, url_path
from sqlfeed.sink import TableSink, WriteReport

__all__ = ["datasink", "write_table"]


def _ray_datasink_api() -> tuple[Any, Any]:
    """Ray's ``Datasink`` and ``BlockAccessor`` (MissingDependencyError without Ray)."""
    datasource = require("ray.data.datasource", "Ray Data writes")
    block = require("ray.data.block", "Ray Data writes")
    return datasource.Datasink, block.BlockAccessor


@functools.cache
def _datasink_class() -> Any:
    """The ``ray.data.Datasink`` subclass (made once, when Ray is first needed)."""
    base, _ = _ray_datasink_api()

    class SqlfeedDatasink(base):  # type: ignore[misc, valid-type]
        """Blocks into a database table through a table sink (see :func:`datasink`)."""

        def __init__(
            self, url: str, table: str, schema: pa.Schema, mode: str, key: list[str] | None
        ) -> None:
            super().__init__()
            self.url, self.table, self.schema = url, table, schema
            self.mode, self.key = mode, key
            self.spec: dict[str, Any] | None = None
            self.report: WriteReport | None = None
            self.aborted = False

        def get_name(self) -> str:
            return "sqlfeed"

        def on_write_start(self, schema: Any = None) -> None:
            # The sink's schema is the dataset's (Ray's ``schema`` here is the first input
            # bundle's, which precedes a fused map_batches). Made once.
            if self.spec is None:
                with TableSink.create(
                    self.url, self.table, self.schema, mode=self.mode, key=self.key
                ) as sink:
                    self.spec = dict(sink.spec)

        def write(self, blocks: Iterable[Any], ctx: Any) -> int:
            if self.spec is None:  # a task never makes the tables: the driver does, first
                raise EngineError(
                    "the table sink was not made before the write tasks ran: write with "
                    "sqlfeed.ray.write_table"
                )
            return write_blocks(self.url, self.spec, self.schema, blocks, ctx.task_idx)

        def on_write_complete(self, write_result: Any) -> None:
            rows = sum(int(r or 0) for r in write_result.write_returns)
            with TableSink.attach(self.url, self._spec()) as sink:
                sink.spec["expected_rows"] = rows
                self.report = sink.finish()

        def on_write_failed(self, error: Exception) -> None:
            self.abort()

        def abort(self) -> None:
            """Drop the staging and commits tables (nothing of the write is kept)."""
            if self.spec is not None and not self.aborted:
                with TableSink.attach(self.url, self.spec) as sink:
                    sink.abort()
                self.aborted = True

        def _spec(self) -> dict[str, Any]:
            if self.spec is None:
                self.on_write_start()
            assert self.spec is not None
            return self.spec

    return SqlfeedDatasink


def write_blocks(
    url: str, spec: dict[str, Any], schema: pa.Schema, blocks: Iterable[Any], partition: int
) -> int:
    """Commit ``blocks`` (one write task's) into the sink of ``spec`` as partition ``partition``.

    Each record batch under its row offset among the task's rows, a batch committed before
    (by an earlier attempt at the task) skipped. Returns the task's rows, committed now or
    before.
    """
    _, accessor = _ray_datasink_api()
    rows = 0
    with TableSink.attach(url, spec) as sink:
        for block in blocks:
            table = _conform(accessor.for_block(block).to_arrow(), schema)
            for batch in table.combine_chunks().to_batches():
                sink.commit(partition, rows, batch)
                rows += batch.num_rows
    return rows


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (a block) with the columns and types of the dataset's ``schema``."""
    if set(table.schema.names) != set(schema.names):
        raise InvalidArgumentError(
            f"a block has the columns {table.schema.names}, not the dataset's "
            f"{schema.names}: make every batch of the pipeline return the same columns"
        )
    table = table.select(schema.names)
    if table.schema.equals(schema):
        return table
    return table.cast(schema)


def dataset_schema(dataset: Any) -> pa.Schema:
    """The Arrow schema of a Ray dataset.

    Runs its pipeline on a first block if Ray does not know it.

    Raises:
        InvalidArgumentError: the schema is unknown (an empty dataset) or has a column no
            Arrow type describes.
    """
    found = dataset.schema()
    if found is None:
        raise InvalidArgumentError(
            "the Ray dataset's schema is unknown (is it empty?): give write_table a dataset "
            "with at least one block of rows"
        )
    base = getattr(found, "base_schema", found)
    if isinstance(base, pa.Schema):
        schema = base
    else:
        names, types = list(found.names), list(found.types)
        odd = [n for n, t in zip(names, types, strict=True) if not isinstance(t, pa.DataType)]
        if odd:
            raise InvalidArgumentError(
                f"the Ray dataset's column {odd[0]!r} has no Arrow type (a Python object "
                "column?): return Arrow or NumPy values from the pipeline"
            )
        schema = pa.schema(list(zip(names, types, strict=True)))
    for field in schema:
        if isinstance(field.type, pa.ExtensionType):  # Ray's tensors among them
            raise InvalidArgumentError(
                f"the Ray dataset's column {field.name!r} is {field.type}, which no table "
                "column holds: make it one value per row in the pipeline (or a list)"
            )
    return schema


def _one_writing_process(dialect: Dialect) -> bool:
    """Whether only one process at a time may write the engine's database.

    ``SINK_ONE_PROCESS``: DuckDB, where one process writes a file or many read it.
    """
    return bool(dialect.SINK_ONE_PROCESS)


def check_output_url(url: object) -> str:
    """``url`` if Ray's write tasks, each in a worker process, can all write it.

    Raises:
        InvalidArgumentError: not a URL string, an in-memory database, or an engine whose
            database only one process may write.
    """
    if not isinstance(url, str):
        raise InvalidArgumentError(
            "Ray writes each block in a task of its own process, which opens its own "
            "connection: pass the output database URL (e.g. 'postgresql+psycopg://user@host/"
            f"db', 'sqlite:///out.db'), not a {type(url).__name__}"
        )
    url = url.strip()
    dialect = dialect_for(url)
    if _one_writing_process(dialect):
        raise InvalidArgumentError(
            f"{dialect.TITLE or dialect.name} lets one process write a database, and Ray "
            "writes from many: write into a server database or SQLite, or collect the "
            "dataset here and use sqlfeed.write_table"
        )
    scheme = url.partition(":")[0].lower()
    if dialect.FILE_DATABASE and url_path(url, scheme) == MEMORY:
        raise InvalidArgumentError(
            f"an in-memory database ({url!r}) exists in one process only, and Ray writes "
            "in others: name a file (e.g. 'sqlite:///out.db')"
        )
    return url


def datasink(
    url: str,
    table: str,
    schema: pa.Schema,
    *,
    mode: str = "create",
    key: Sequence[str] | None = None,
) -> Any:
    """A ``ray.data.Datasink`` writing a dataset of ``schema`` into ``table`` of ``url``.

    For ``dataset.write_datasink(...)``; :func:`write_table` does that. After the write,
    its ``report`` is the :class:`~sqlfeed.sink.WriteReport`.
    """
    _ray_datasink_api()
    url = check_output_url(url)
    return _datasink_class()(url, table, schema, mode, list(key) if key else None)


def write_table(
    dataset: Any,
    url: str,
    table: str,
    *,
    mode: str = "create",
    key: Sequence[str] | None = None,
    concurrency: int | None = None,
    ray_options: Mapping[str, Any] | None = None,
) -> WriteReport:
    """Write a Ray dataset into ``table`` of the database ``url``.

    Every row exactly once, all of them or none.

    Each write task commits its blocks' batches in transactions of the output database
    under the table sink's protocol (:class:`~sqlfeed.sink.TableSink`), so a task Ray
    retries (a worker lost, an error with ``retry_exceptions``) skips what it committed
    before. When the dataset is written the rows are checked (those in the staging table
    are those the tasks saw) and put in place: ``create`` makes the table (refused if it
    exists), ``replace`` swaps it in atomically, ``append`` inserts them in one
    transaction. A failed write drops the staging table. Without a ``key`` the output
    gets ``_sqlfeed_partition, _sqlfeed_row`` (the write task and the row's position in
    it).

    Args:
        dataset: a ``ray.data.Dataset`` (its schema is fetched first: Ray runs the
            pipeline on one block when it does not know it).
        url: the output database URL, which each write task opens in its own process:
            ``postgresql+psycopg://...``, ``mysql+pymysql://...``, ``sqlite:///file.db``
            (made if missing). DuckDB is refused: one process at a time may write its file.
        table: ``name`` or ``schema.name``.
        mode: ``create``, ``replace`` or ``append``.
        key: columns identifying a row (not null in the output).
        concurrency: the most write tasks running at once (Ray's ``concurrency``).
        ray_options: more arguments for ``Dataset.write_datasink`` (``ray_remote_args``).

    Returns:
        The :class:`~sqlfeed.sink.WriteReport` (rows written, seconds).

    Raises:
        InvalidArgumentError: bad input, raised before anything is written.
        EngineError: the output failed (the table is as it was).
        MissingDependencyError: Ray Data is not installed.
    """
    start = time.monotonic()
    _ray_datasink_api()
    url = check_output_url(url)
    options = dict(ray_options or {})
    if concurrency is not None:
        check_int(concurrency, "concurrency", 1)
        options["concurrency"] = concurrency
    sink = datasink(url, table, dataset_schema(dataset), mode=mode, key=key)
    sink.on_write_start()  # the tables made before any task runs (an empty dataset too)
    try:
        dataset.write_datasink(sink, **options)
    except BaseException:
        sink.abort()
        raise
    report: WriteReport = sink.report
    report.seconds = time.monotonic() - start
    return report

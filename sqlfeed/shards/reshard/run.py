"""One reshard: :func:`reshard` checks its arguments, and :class:`Run` runs the phases.

:class:`Run` holds a run's state and times its phases; the phases themselves live in
:mod:`~sqlfeed.shards.reshard.inputs` (extract), :mod:`~sqlfeed.shards.reshard.order`
(sort) and :mod:`~sqlfeed.shards.reshard.cutter` (write).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import EngineError, InvalidArgumentError, dialect_for, get_dialect
from sqlfeed.io import DuckDBSource, Source, connect
from sqlfeed.shards.manifest import Manifest, ShardEntry
from sqlfeed.shards.reshard.columns import Columns, check_columns, check_uid, converter
from sqlfeed.shards.reshard.cutter import Cutter, Prefetch, Rows
from sqlfeed.shards.reshard.direct import direct_relation
from sqlfeed.shards.reshard.engine import (
    Monitor,
    ProgressCallback,
    Reporter,
    engine_errors,
    ident,
    render,
    session,
)
from sqlfeed.shards.reshard.inputs import Extractor, TarInput, rows_for, tar_inputs
from sqlfeed.shards.reshard.metrics import ReshardMetrics, spread
from sqlfeed.shards.reshard.options import ReshardOptions, check_options
from sqlfeed.shards.reshard.order import arrow_bytes_per_row, order_sql
from sqlfeed.shards.reshard.workdir import write_aside
from sqlfeed.sql import ParsedQuery, check_stable, parse, schema_sql


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
    options = check_options(
        out=out,
        shuffle=shuffle,
        sort=sort,
        shard_rows=shard_rows,
        shard_size=shard_size,
        group_by=group_by,
        memory_limit=memory_limit,
        threads=threads,
        temp_dir=temp_dir,
        format=format,
        uid=uid,
        overwrite=overwrite,
    )
    parsed, tars = _query(sql, source, tar, allow_unstable)
    return _run_on(source, parsed, options, tars, progress, started)


def _query(
    sql: str | ParsedQuery, source: Any, tar: Mapping[str, str] | None, allow_unstable: bool
) -> tuple[ParsedQuery, list[TarInput]]:
    """The parsed query (checked to be stable) and the tar views it may read."""
    dialect = _dialect_of(source)
    parsed = parse(sql, dialect)
    if not allow_unstable:
        check_stable(parsed)
    tars = tar_inputs(tar)
    if tars and not dialect.READS_FILES:
        raise InvalidArgumentError(
            f"tar views are read through DuckDB; the query runs on {dialect.name}: drop --db "
            "(or give a duckdb:// URL) to reshard tar files"
        )
    return parsed, tars


def _run_on(
    source: Any,
    parsed: ParsedQuery,
    options: ReshardOptions,
    tars: list[TarInput],
    progress: ProgressCallback | None,
    started: float,
) -> ReshardMetrics:
    """The run on ``source`` connected (and closed after if reshard opened it)."""
    owned = not isinstance(source, Source) and (source is None or isinstance(source, str))
    src = connect(source)
    try:
        return Run(parsed, src, owned, options, tars, progress, started).run()
    finally:
        if owned:
            src.close()


def _dialect_of(source: Any) -> Any:
    if isinstance(source, Source):
        return source.dialect
    if source is None:
        return get_dialect("duckdb")
    return dialect_for(source)


@dataclass(frozen=True)
class _Extracted:
    rows: int
    bytes_in: int
    bytes_in_from: str
    bytes: int
    """Size of the work database files."""


class Run:
    """One reshard, from checks to the rename.

    Args:
        parsed: the query.
        source: where it runs.
        owned: reshard opened ``source`` (and closes it).
        options: the checked arguments.
        tars: the tar views the query may read.
        progress: the progress callback.
        started: when the run started (``time.perf_counter()``).
    """

    columns: Columns

    def __init__(
        self,
        parsed: ParsedQuery,
        source: Source,
        owned: bool,
        options: ReshardOptions,
        tars: list[TarInput],
        progress: ProgressCallback | None,
        started: float,
    ) -> None:
        self.parsed, self.source, self.owned = parsed, source, owned
        self.options, self.tars = options, tars
        self.reporter = Reporter(progress)
        self.started = started
        self.phases: dict[str, float] = {}
        self._phase_started = started
        self.alias = f"_sqlfeed_reshard_{uuid.uuid4().hex[:10]}"
        self.work_table = exp.Table(this=ident("rows"), db=ident(self.alias))
        self.table: exp.Expr = self.work_table
        """The rows to order: the work table, or a relation over the query's Parquet files."""

    def run(self) -> ReshardMetrics:
        """Check the columns, write the shardset aside and rename it into place."""
        duck = isinstance(self.source, DuckDBSource)
        engine: duckdb.DuckDBPyConnection | None = None
        if duck:
            assert isinstance(self.source, DuckDBSource)
            engine = self.source.connection.cursor()
        try:
            for view in self.tars:
                assert engine is not None
                engine.register(view.name, view.schema.empty_table())
            self.columns = check_columns(self._describe(engine), self.options)
            return write_aside(
                self.options.out,
                self.options.temp_dir,
                lambda folder, work: self._session(engine, folder, work),
            )
        finally:
            if engine is not None:
                for view in self.tars:
                    with contextlib.suppress(Exception):
                        engine.unregister(view.name)
                engine.close()

    def _describe(self, engine: duckdb.DuckDBPyConnection | None) -> pa.Schema:
        if engine is None:
            return self.source.schema(self.parsed)
        with engine_errors("reading the query's columns"):
            relation = engine.sql(schema_sql(self.parsed))
            table: pa.Table = relation.to_arrow_table()
        return table.schema

    def _session(
        self, borrowed: duckdb.DuckDBPyConnection | None, folder: Path, work: Path
    ) -> ReshardMetrics:
        with session(
            borrowed,
            owned=self.owned,
            options=self.options,
            work=work,
            alias=self.alias,
            reporter=self.reporter,
        ) as (engine, monitor):
            return self._phases(engine, monitor, folder, work)

    def _phases(
        self, engine: duckdb.DuckDBPyConnection, monitor: Monitor, folder: Path, work: Path
    ) -> ReshardMetrics:
        extracted = self._extract(engine, monitor, work)
        batch_rows, prefetch = self._sort(engine, monitor)
        try:
            stream = self._sorted(prefetch, monitor)
            entries, rows = self._write(stream, folder, work, batch_rows, extracted.rows)
        finally:
            prefetch.close()
        if rows != extracted.rows:
            raise EngineError(f"duckdb returned {rows} ordered rows, expected {extracted.rows}")
        bytes_in = extracted.bytes_in
        if extracted.bytes_in_from == "arrow" and not bytes_in:
            bytes_in = stream.read_bytes
        monitor.sample()
        self._done("write")
        metrics = self._metrics(
            entries, bytes_in, extracted.bytes_in_from, extracted.bytes, monitor.peak
        )
        manifest = Manifest(
            name=self.options.out.absolute().name,
            uid=self.columns.uid,
            format=self.options.fmt,
            schema=self.columns.file_schema,
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

    # -- 1. extract -----------------------------------------------------------------------

    def _extract(
        self, engine: duckdb.DuckDBPyConnection, monitor: Monitor, work: Path
    ) -> _Extracted:
        self._phase("extract")
        direct = (
            None
            if self.tars
            else direct_relation(self.parsed, self.source, len(self.columns.schema))
        )
        if direct is not None:  # Parquet files: sorted as they are read, no copy
            self.table, bytes_in = direct
            bytes_in_from = "files"
        else:
            extractor = Extractor(
                self.parsed,
                self.source,
                self.tars,
                self.columns.schema,
                self.work_table,
                self.alias,
                self.reporter,
            )
            bytes_in, bytes_in_from = extractor.run(engine, monitor)
        percent = isinstance(self.source, DuckDBSource) and not self.tars
        with engine_errors("counting the extracted rows"):
            total = int(
                engine.execute(render(exp.select("COUNT(*)").from_(self.table.copy()))).fetchall()[
                    0
                ][0]
            )
        self.reporter.report("extract", *((100, 100) if percent else (total, total)))
        if not self.columns.uid_generated:
            check_uid(engine, self.table, self.columns, self.options.fmt)
        extracted = 0
        if direct is None:
            extracted = sum(p.stat().st_size for p in work.glob("extract.duckdb*") if p.is_file())
        self._done("extract")
        return _Extracted(total, bytes_in, bytes_in_from, extracted)

    # -- 2. sort: DuckDB orders everything before it hands out the first batch -------------

    def _sort(self, engine: duckdb.DuckDBPyConnection, monitor: Monitor) -> tuple[int, Prefetch]:
        """Start the ordered read; the rows per batch and the reader."""
        self._phase("sort")
        monitor.percent_phase = "sort"
        batch_rows = rows_for(arrow_bytes_per_row(engine, self.table, len(self.columns.schema)))
        with engine_errors("sorting"):
            sql = order_sql(self.columns, self.options.seed, self.table)
            reader = engine.sql(sql).to_arrow_reader(batch_rows)
        return batch_rows, Prefetch(reader, engine)

    def _sorted(self, prefetch: Prefetch, monitor: Monitor) -> Rows:
        """The ordered rows, once the first batch is there (the sort is done)."""
        stream = Rows(iter(prefetch), converter(self.columns), self.columns.group_index)
        stream.fill(1)
        monitor.percent_phase = None
        self.reporter.report("sort", 100, 100)
        self._done("sort")
        return stream

    # -- 3. write -------------------------------------------------------------------------

    def _write(
        self, stream: Rows, folder: Path, work: Path, batch_rows: int, total: int
    ) -> tuple[list[ShardEntry], int]:
        """Cut the ordered rows into shards; their entries and the rows written."""
        self._phase("write")
        self.reporter.report("write", 0, total)
        options, columns = self.options, self.columns
        cutter = Cutter(
            folder,
            options.fmt,
            columns.out_schema,
            columns.file_schema,
            columns.uid,
            options.shard_rows,
            options.shard_bytes,
            work,
            2 * batch_rows,
            lambda done: self.reporter.report("write", done, total),
        )
        return cutter.run(stream), cutter.rows

    def _metrics(
        self,
        entries: list[ShardEntry],
        bytes_in: int,
        bytes_in_from: str,
        extracted: int,
        spilled: int,
    ) -> ReshardMetrics:
        options, columns = self.options, self.columns
        sizes = [e.bytes for e in entries]
        counts = [e.rows for e in entries]
        deviation = None
        if len(entries) > 1:
            measured = counts[:-1] if options.shard_rows else sizes[:-1]
            target = options.shard_rows or options.shard_bytes or 1
            deviation = round(max(abs(v - target) / target for v in measured), 4)
        order = "shuffle" if options.seed is not None else "sort" if columns.sort else "query"
        return ReshardMetrics(
            out=str(options.out),
            format=options.fmt,
            rows=sum(counts),
            shards=len(entries),
            uid=columns.uid,
            uid_generated=columns.uid_generated,
            order=order,
            seed=options.seed,
            sort=[f"{k.column} desc" if k.descending else k.column for k in columns.sort] or None,
            group_by=columns.group_by or None,
            target_rows=options.shard_rows,
            target_bytes=options.shard_bytes,
            bytes_in=bytes_in,
            bytes_in_from=bytes_in_from,
            bytes_extracted=extracted,
            bytes_spilled=spilled,
            bytes_out=sum(sizes),
            phase_seconds=dict(self.phases),
            seconds=round(time.perf_counter() - self.started, 3),
            shard_rows=spread(counts),
            shard_bytes=spread(sizes),
            deviation=deviation,
            memory_limit=options.memory_limit,
            threads=options.threads,
            files=[e.file for e in entries],
        )

"""Reshard's input: tar shards as views, and phase 1, the extract into the work database.

The query runs once and its rows go into a table of the DuckDB work database. On DuckDB
(also over files, or the tar views) the engine does it itself; from any other engine the
rows are streamed out through the source's reader and into DuckDB.
"""

from __future__ import annotations

import contextlib
import glob as globlib
import os
import re
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError, ShardsetError
from sqlfeed.io import DuckDBSource, Source
from sqlfeed.shards.reader import TAR_KEY, read_shard
from sqlfeed.shards.reshard.engine import Monitor, Reporter, engine_errors, ident, render
from sqlfeed.sql import ParsedQuery

_BATCH_BYTES = 16 << 20
_MAX_BATCH_ROWS = 65_536
_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE_FUNCTIONS = re.compile(r"^(read_\w+|parquet_scan|\w+_scan)$", re.IGNORECASE)


# -- batches ------------------------------------------------------------------------------


class RowCounter:
    """Rows and Arrow bytes streamed, with a progress report every so often."""

    def __init__(self, report: Callable[[int], None] | None = None) -> None:
        self.rows = 0
        self.bytes = 0
        self._report = report

    def add(self, batch: pa.RecordBatch) -> None:
        """Count ``batch`` (and report the rows so far)."""
        self.rows += batch.num_rows
        self.bytes += batch.nbytes
        if self._report is not None:
            self._report(self.rows)


def batch_rows(table: pa.Table | pa.RecordBatch) -> int:
    """Rows per batch so that one batch holds about 16 MB."""
    if table.num_rows == 0:
        return _MAX_BATCH_ROWS
    return rows_for(table.nbytes / table.num_rows)


def rows_for(bytes_per_row: float) -> int:
    """Rows per batch of about 16 MB at ``bytes_per_row``."""
    return max(1, min(_MAX_BATCH_ROWS, int(_BATCH_BYTES / max(1.0, bytes_per_row))))


# -- tar input ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TarInput:
    """Tar shards read as one view: ``__key__`` plus one binary column per extension."""

    name: str
    files: tuple[Path, ...]
    schema: pa.Schema
    records: int
    bytes: int

    def batches(self, counter: RowCounter) -> Iterator[pa.RecordBatch]:
        """The records, one file at a time, counted by ``counter``."""
        for path in self.files:
            table = read_shard(path, "tar", schema=self.schema)
            for batch in table.to_batches(max_chunksize=max(1, batch_rows(table))):
                counter.add(batch)
                yield batch
            del table


def tar_inputs(tar: Mapping[str, str] | None) -> list[TarInput]:
    """The tar views of ``{"view": "glob"}``, their files scanned for members and records.

    Raises:
        InvalidArgumentError: a view name is not a plain SQL name, or a pattern matches
            no file.
        ShardsetError: a tar file cannot be read, or a member has no extension.
    """
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


def _scan_tar(name: str, files: Sequence[Path]) -> TarInput:
    """The union of member extensions and the record count, from the member headers."""
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
    return TarInput(name, tuple(files), schema, records, size)


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


# -- 1. extract ---------------------------------------------------------------------------


class Extractor:
    """Runs the query into the work table, its columns named ``c0``, ``c1``, ...

    Args:
        parsed: the query.
        source: where it runs.
        tars: the tar views it may read (DuckDB only).
        schema: the query's columns as the engine returns them.
        table: the work table to create.
        alias: the work database's name (a prefix for the helper view).
        reporter: where the rows extracted are reported.
    """

    def __init__(
        self,
        parsed: ParsedQuery,
        source: Source,
        tars: list[TarInput],
        schema: pa.Schema,
        table: exp.Table,
        alias: str,
        reporter: Reporter,
    ) -> None:
        self.parsed, self.source, self.tars = parsed, source, tars
        self.schema, self.table, self.alias = schema, table, alias
        self.reporter = reporter

    def run(self, engine: duckdb.DuckDBPyConnection, monitor: Monitor) -> tuple[int, str]:
        """Run the query into the work table; the input bytes and where they come from."""
        width = len(self.schema)
        alias = exp.TableAlias(
            this=ident("_sqlfeed_q"), columns=[ident(f"c{i}") for i in range(width)]
        )
        if isinstance(self.source, DuckDBSource):
            return self._in_duckdb(engine, monitor, alias)
        return self._streamed(engine, alias)

    def _in_duckdb(
        self, engine: duckdb.DuckDBPyConnection, monitor: Monitor, alias: exp.TableAlias
    ) -> tuple[int, str]:
        """The query runs in DuckDB itself (over files, or the tar views)."""
        query = self.parsed.tree.copy()
        bytes_in, counter = self._input_files(engine), None
        if self.tars:
            records = sum(view.records for view in self.tars)
            counter = RowCounter(lambda rows: self.reporter.report("extract", rows, records))
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

    def _streamed(
        self, engine: duckdb.DuckDBPyConnection, alias: exp.TableAlias
    ) -> tuple[int, str]:
        """The query's rows stream from the source's reader into DuckDB."""
        counter = RowCounter(lambda rows: self.reporter.report("extract", rows, 0))
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
            select = exp.select("*").from_(exp.Table(this=ident(input_view), alias=alias))
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
        with engine_errors("running the query"):
            engine.execute(render(create))

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

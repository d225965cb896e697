"""The table sink: batches written into a database table exactly once, from many workers.

Protocol (``docs/architecture.md``, design section 11):

* :meth:`TableSink.create` checks the output (``create``: the table must not exist;
  ``append``: it must, with the output's columns), then makes a **staging** table and a
  **commits** table, both named like scratch tables (``sqlfeed_<unix time>_<hex>``, so
  ``sqlfeed scratch list|drop`` sees abandoned ones), in the output table's schema. Its
  :attr:`~TableSink.spec` is what other workers :meth:`~TableSink.attach` with.
* :meth:`TableSink.commit` writes one batch in **one transaction of the output database**:
  first the commit record ``(part, first_row, rows)`` under a primary key, then the rows.
  Another attempt at the same batch (a redelivered lease, a worker that stalled past its
  lease and woke up) meets the record and rolls back: exactly one attempt commits. Every
  row has an identity besides: the key, when the SELECT's catalog proves it unique (the
  staging table's primary key), else ``_sqlfeed_partition, _sqlfeed_row`` under a unique
  constraint, so no duplicate can exist even if batches were cut differently.
* :meth:`TableSink.finish` (idempotent, serialised between finishers) checks that the
  rows written are the rows expected (and the key's distinct count), then puts the staging
  table in place: renamed (``create``), swapped in atomically (``replace``: readers see
  the old table or the new one), or inserted in one transaction (``append``); the commits
  table is dropped last.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io import Source
from sqlfeed.io.faults import connection_lost
from sqlfeed.io.privileges import privilege_denied, write_refused
from sqlfeed.io.source import driver_message
from sqlfeed.io.writes import WriteSession, retry_busy
from sqlfeed.plans.materialize import run_table_names
from sqlfeed.sink.columns import (
    IDENTITY,
    beside,
    check_values,
    column_definitions,
    create_table_sql,
    drop_table,
    quoted,
    server_version,
)
from sqlfeed.sink.finish import finish_sink
from sqlfeed.sink.output import connect_output, losses, run_statements, table_columns
from sqlfeed.sink.report import MODES, WriteReport
from sqlfeed.sql.names import table_name

__all__ = ["MODES", "PARTITION_BUSY_SECONDS", "PartitionLost", "TableSink", "WriteReport"]

PARTITION_BUSY_SECONDS = 600.0
"""How long an attempt waits to begin while the output is busy (SQLite: another
process's partition holds the write lock)."""


class PartitionLost(EngineError):
    """The output's connection was lost during an attempt at a partition.

    The attempt was rolled back and the connection is made again at the next
    :meth:`TableSink.open_partition`: the partition must be written again from its first
    row (a job's worker gives its lease back).
    """


class TableSink:
    """Writes batches into one output table under the commit protocol (module docstring).

    Use :meth:`create` (the first worker) or :meth:`attach` (the others), not the
    constructor.
    """

    def __init__(self, source: Source, spec: dict[str, Any], *, owned: bool) -> None:
        self.source = source
        self.spec = spec
        self._owned = owned
        self.dialect = source.dialect
        render = self.dialect.sqlglot_dialect
        self.table = exp.to_table(spec["table"], dialect=render)
        self.staging = beside(self.table, spec["staging"])
        self.commits = beside(self.table, spec["commits"])
        self.columns = [quoted(c).sql(dialect=render) for c in spec["columns"]]
        self._session: WriteSession | None = None
        self._open: list[int] | None = None
        """The partition of the attempt open now, and its rows written so far."""
        self._skip = False
        """The open partition was committed by an earlier attempt: nothing to write."""
        self._losses = losses(source)
        """Lost connections since the last commit, against the reconnect budget."""

    # -- making and joining -------------------------------------------------------------

    @classmethod
    def create(
        cls,
        target: Any,
        table: str,
        schema: pa.Schema,
        *,
        mode: str = "create",
        key: Sequence[str] | None = None,
        unique_key: bool = False,
        expected_rows: int | None = None,
        expected_keys: int | None = None,
        what: dict[str, Any] | None = None,
        first_batch: pa.RecordBatch | None = None,
    ) -> TableSink:
        """Check the output and make the staging and commits tables.

        Args:
            target: the output database (URL or source).
            table: ``name`` or ``schema.name``.
            schema: the Arrow schema of the rows written (without identity columns).
            mode: ``create``, ``replace`` or ``append``.
            key: columns identifying a row. Otherwise rows are identified by
                ``_sqlfeed_partition, _sqlfeed_row``, which :meth:`commit` fills.
            unique_key: ``key`` is proven unique (by the catalog): the output's primary key.
            expected_rows: the rows :meth:`finish` checks (None: not checked).
            expected_keys: the distinct keys :meth:`finish` checks (None: not checked).
            what: what else identifies the job (e.g. the model): part of the spec.
            first_batch: the first rows to be written, when known: their values are
                checked too (:func:`~sqlfeed.sink.columns.check_values`) before anything is
                made.

        Raises:
            InvalidArgumentError: a bad mode, the table exists in ``create`` mode, is
                missing or has other columns in ``append`` mode, a key not among the
                columns, a type the engine cannot hold, a value of ``first_batch`` it
                cannot hold.
        """
        source = connect_output(target, starting=True)
        try:
            if first_batch is not None:
                check_values(first_batch, source.dialect)
            spec = _new_spec(source, table, schema, mode, key, unique_key, what)
            spec |= {"expected_rows": expected_rows, "expected_keys": expected_keys}
            sink = cls(source, spec, owned=not isinstance(target, Source))
            sink._make_tables(schema)
            if mode == "append":
                try:
                    check_append_types(source, sink.table, sink.staging, spec["table"])
                except InvalidArgumentError:
                    sink.abort()
                    raise
        except BaseException:
            if not isinstance(target, Source):
                source.close()
            raise
        return sink

    @classmethod
    def attach(cls, target: Any, spec: dict[str, Any]) -> TableSink:
        """The sink of ``spec`` (made by :meth:`create` in another worker)."""
        source = connect_output(target)
        return cls(source, spec, owned=not isinstance(target, Source))

    def _make_tables(self, schema: pa.Schema) -> None:
        spec = self.spec
        dialect = self.dialect
        key = list(spec["key"] or ())
        version = server_version(self.source)  # MySQL/MariaDB: the text columns' collation
        columns = column_definitions(schema, dialect, not_null=key, version=version)
        if not spec["unique_key"]:
            id_schema = pa.schema([(name, pa.int64()) for name in IDENTITY])
            columns += column_definitions(id_schema, dialect, not_null=IDENTITY)
        unique = not spec["unique_key"]
        identity = list(IDENTITY) if unique else key
        later = dialect.add_key_sql(self.staging, identity, unique) is not None
        staging = create_table_sql(  # the key built when finished, where the engine can
            self.staging, dialect, columns, [] if later else identity, unique=unique
        )
        names = ("part", "first_row", "rows")
        commit_schema = pa.schema([(name, pa.int64()) for name in names])
        commit_columns = column_definitions(commit_schema, dialect, not_null=names)
        commits = create_table_sql(self.commits, dialect, commit_columns, names[:2])
        try:
            run_statements(self.source, [commits, staging])
        except Exception as err:
            if not privilege_denied(err):
                raise
            doing = f"creating the staging table of {spec['table']}"
            raise write_refused(self.source, err, doing, self.staging.db or None) from None

    # -- writing ------------------------------------------------------------------------

    def commit(self, partition: int, first_row: int, batch: pa.RecordBatch) -> bool:
        """Write ``batch`` (rows ``first_row``... of ``partition``) in one transaction.

        It is written with its commit record. False: another attempt committed this batch
        already (nothing written now). For producers whose batches are the same on every
        attempt (one process, a Ray task's blocks); a job's workers commit whole partitions
        (:meth:`open_partition`), whatever order a partition's rows come in.

        A lost connection (the transaction rolled back) is made again, with a read's
        reconnect pauses (:class:`~sqlfeed.io.faults.Reconnect`), and the batch written
        again; its record keeps it once (True also when the lost commit had gone through).

        Raises:
            InvalidArgumentError: a value the engine cannot hold (nothing written).
            EngineError: the output database failed (nothing of the batch committed), or
                its connection was lost and could not be made again.
        """
        check_values(batch, self.dialect)
        if not self.spec["unique_key"]:
            batch = _with_identity(batch, partition, first_row)
        record = self._record(partition, first_row, batch.num_rows)
        while True:
            session = self._writer()
            try:
                done = bool(retry_busy(session, partial(self._attempt, session, record, batch)))
                self._losses.progressed()
                return done
            except Exception as err:
                session.rollback()
                lost = self._lost(err, "writing into")
                if self._committed(partition, first_row):
                    # lost: its commit went through, only the answer was lost; else a
                    # simultaneous attempt's record won (DuckDB: at COMMIT)
                    return lost
                if lost:
                    continue
                self._drop_session()
                raise self._failure(session, err, partition, first_row) from None

    def _attempt(self, session: WriteSession, record: str, batch: pa.RecordBatch) -> bool:
        """One transaction of :meth:`commit`: the record, then the rows; False: a duplicate."""
        session.begin()
        try:
            session.execute(record)
        except Exception as err:
            if not session.duplicate(err):
                raise
            session.rollback()
            return False
        session.insert(self.staging.sql(dialect=self.dialect.sqlglot_dialect), self.columns, batch)
        session.commit()
        return True

    def _failure(
        self, session: WriteSession, err: Exception, partition: int, first_row: int
    ) -> EngineError:
        """The one-line error of a batch that failed (not a lost connection)."""
        if session.duplicate(err):
            return EngineError(
                f"rows of partition {partition} from row {first_row} are in the output "
                "already under other batch boundaries: every worker of a job must batch "
                f"alike ({err})"
            )
        if privilege_denied(err):
            doing = f"writing into {self.spec['table']}"
            return write_refused(self.source, err, doing, self.staging.db or None)
        return EngineError(f"writing into {self.spec['table']}: {err}")

    # -- a partition at once (the jobs' workers) ---------------------------------------

    def open_partition(self, partition: int) -> None:
        """Begin one attempt at ``partition``.

        Its rows go into the staging table in one transaction, committed with the
        partition's record by :meth:`commit_partition` (an attempt open before is rolled
        back).
        """
        self.rollback_partition()
        while True:
            session = self._writer()
            try:
                retry_busy(session, session.begin, PARTITION_BUSY_SECONDS)
                # committed by an earlier attempt (killed before the queue heard of it): skip
                # it; asked inside the transaction, where SQLite's write lock keeps others out
                self._skip = bool(session.rows(self._committed_sql(partition, 0))[0][0])
                break
            except Exception as err:
                session.rollback()
                if self._lost(err, "writing into"):
                    continue  # made again: begin again
                if not self._finished_meanwhile():
                    raise
                self._skip = True  # a late worker (stalled): the run was finished meanwhile
                break
        self._open = [partition, 0]

    def write_rows(self, first_row: int, batch: pa.RecordBatch) -> None:
        """Rows ``first_row``... of the open partition (in this read of it).

        Raises:
            InvalidArgumentError: a value the engine cannot hold (the attempt is rolled
                back).
            PartitionLost: the connection was lost (the attempt is rolled back; write the
                partition again, from :meth:`open_partition`).
            EngineError: the output failed (the attempt is rolled back).
        """
        assert self._open is not None, "open_partition first"
        if self._skip:
            return
        try:
            check_values(batch, self.dialect)
        except InvalidArgumentError:
            self.rollback_partition()
            raise
        if not self.spec["unique_key"]:
            batch = _with_identity(batch, self._open[0], first_row)
        session = self._writer()
        try:
            session.insert(
                self.staging.sql(dialect=self.dialect.sqlglot_dialect), self.columns, batch
            )
        except Exception as err:
            partition = self._open[0]
            self.rollback_partition()
            if self._lost(err, "writing into"):
                raise self._partition_lost(partition) from None
            if self._given_up_to_another(partition):
                self._open, self._skip = [partition, 0], True  # nothing more to write
                return
            raise EngineError(f"writing into {self.spec['table']}: {err}") from None
        self._open[1] += batch.num_rows

    def commit_partition(self) -> bool:
        """Commit the open attempt with the partition's record.

        False: another attempt committed the partition first (this one's rows are rolled
        back).

        Raises:
            PartitionLost: the connection was lost before the commit went through (write
                the partition again); a commit that went through, its answer lost, is True.
            EngineError: the output failed (nothing of the attempt committed).
        """
        assert self._open is not None, "open_partition first"
        partition, rows = self._open
        session = self._writer()
        self._open = None
        if self._skip:
            session.rollback()
            return False
        try:
            session.execute(self._record(partition, 0, rows))
            _commit_when_free(session)
            self._losses.progressed()
            return True
        except Exception as err:
            session.rollback()
            lost = self._lost(err, "committing into")
            if self._finished_meanwhile():
                return False  # a stalled worker woke up after the run was finished
            if self._committed(partition):
                # lost: this attempt's commit went through, only its answer was lost; else
                # another attempt's record: this one lost
                return lost
            if lost:
                raise self._partition_lost(partition) from None
            self._drop_session()
            raise EngineError(f"writing into {self.spec['table']}: {err}") from None

    def _partition_lost(self, partition: int) -> PartitionLost:
        return PartitionLost(
            f"{self.dialect.name} lost the connection writing partition {partition} into "
            f"{self.spec['table']}: write it again from its first row"
        )

    def _lost(self, err: BaseException, doing: str) -> bool:
        """Whether ``err`` is a lost connection.

        If so, the session is let go and the pause before reconnecting waited (the next
        :meth:`_writer` connects again), or the one-line error that gives up raised.
        """
        if not connection_lost(err):
            return False
        self._drop_session()
        why = driver_message(err)
        self._losses.wait(self.dialect.name, f"{doing} {self.spec['table']}", why)
        return True

    def rollback_partition(self) -> None:
        """Give up the open attempt, if any (its rows are never seen)."""
        if self._open is not None:
            self._open = None
            if self._session is not None:
                self._session.rollback()

    def _given_up_to_another(self, partition: int) -> bool:
        """Whether a failed write of ``partition`` lost to another attempt.

        A stalled worker woke up: the run was finished meanwhile, or another attempt
        committed the partition (its rows met this one's on a key a finisher built already).
        """
        return self._finished_meanwhile() or self._committed(partition)

    def _finished_meanwhile(self) -> bool:
        """Whether the run's commits table is gone.

        Another process finished the run while this one (a stalled worker) still held a
        partition.
        """
        return table_columns(self.source, self.commits) is None

    def _committed(self, partition: int, first_row: int = 0) -> bool:
        """Whether the commit record of ``partition`` (its batch at ``first_row``) is there."""
        sql = self._committed_sql(partition, first_row)
        return bool(self.source.rows(sql, what="commit check")[0][0])

    def _committed_sql(self, partition: int, first_row: int) -> str:
        part = exp.column("part", quoted=True).eq(exp.Literal.number(partition))
        row = exp.column("first_row", quoted=True).eq(exp.Literal.number(first_row))
        sql = exp.select("COUNT(*)").from_(self.commits).where(exp.and_(part, row))
        return sql.sql(dialect=self.dialect.sqlglot_dialect)

    def _record(self, partition: int, first_row: int, rows: int) -> str:
        values = exp.tuple_(*(exp.Literal.number(v) for v in (partition, first_row, rows)))
        columns = [quoted("part"), quoted("first_row"), quoted("rows")]
        insert = exp.insert(exp.Values(expressions=[values]), self.commits, columns=columns)
        return insert.sql(dialect=self.dialect.sqlglot_dialect)

    def _writer(self) -> WriteSession:
        while self._session is None:
            try:
                self._session = self.source.write_session()
            except Exception as err:
                if not self._lost(err, "connecting to write into"):
                    raise
        return self._session

    def _drop_session(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            with contextlib.suppress(Exception):
                session.close()

    # -- finishing ----------------------------------------------------------------------

    def committed(self) -> tuple[int, int]:
        """``(batches, rows)`` committed so far.

        (-1, -1) when the commits table is gone (the sink was finished or dropped).
        """
        render = self.dialect.sqlglot_dialect
        sql = (
            exp.select(
                "COUNT(*)",
                exp.func("COALESCE", exp.func("SUM", exp.column("rows", quoted=True)), 0),
            )
            .from_(self.commits)
            .sql(dialect=render)
        )
        try:
            batches, rows = self.source.rows(sql, what="commit count")[0]
        except EngineError:
            if not self._exists(self.commits):
                return -1, -1
            raise
        return int(batches), int(rows)

    def finish(self, keep: bool = True) -> WriteReport:
        """Check the rows written and put them in place (module docstring); idempotent.

        Args:
            keep: when the finish fails, keep the staging table (a job other processes
                may still complete and finish); False: drop it (nothing can resume).

        Raises:
            EngineError: the rows written are not the rows expected, or the output
                failed: nothing is put in place.
        """
        self.rollback_partition()  # an attempt left open would hold locks the finish needs
        if self._session is not None:
            self._session.rollback()
        return finish_sink(self, keep)

    def abort(self) -> None:
        """Drop the staging and commits tables (a run given up).

        An attempt still open is rolled back and the write connection given back first:
        its locks would make the DROP wait on this sink itself.
        """
        self.rollback_partition()
        self._drop_session()
        render = self.dialect.sqlglot_dialect
        run_statements(
            self.source, [drop_table(t).sql(dialect=render) for t in (self.staging, self.commits)]
        )

    def _exists(self, table: exp.Table) -> bool:
        return table_columns(self.source, table) is not None

    def close(self) -> None:
        """Give the write connection back (and the source, if the sink opened it)."""
        self._drop_session()
        if self._owned:
            self.source.close()

    def __enter__(self) -> TableSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _new_spec(
    source: Source,
    table: str,
    schema: pa.Schema,
    mode: str,
    key: Sequence[str] | None,
    unique_key: bool,
    what: dict[str, Any] | None,
) -> dict[str, Any]:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode {mode!r}: give one of {', '.join(MODES)}")
    render = source.dialect.sqlglot_dialect
    target = table_name(table, source.dialect, "table")
    key = list(key or [])
    missing = [k for k in key if k not in schema.names]
    if missing:
        raise InvalidArgumentError(
            f"key column {missing[0]!r} is not among the columns written {schema.names}: "
            "name a key among them, or write that column too"
        )
    clash = [name for name in schema.names if name in IDENTITY]
    if clash and not (key and unique_key):
        raise InvalidArgumentError(
            f"column {clash[0]!r} is sqlfeed's row identity: rename the column written"
        )
    _check_target(source, target, mode, schema, key, unique_key)
    staging, commits = run_table_names()
    columns = list(schema.names) if key and unique_key else [*schema.names, *IDENTITY]
    identity = {
        "table": target.sql(dialect=render),
        "mode": mode,
        "key": key or None,
        "columns": list(schema.names),
        "what": what,
    }
    return {
        "identity": identity,
        "table": target.sql(dialect=render),
        "dialect": source.dialect.name,
        "mode": mode,
        "key": key or None,
        "unique_key": bool(key and unique_key),
        "columns": columns,
        "data_columns": list(schema.names),
        "staging": staging,
        "commits": commits,
        "what": what,
    }


def _check_target(
    source: Source,
    target: exp.Table,
    mode: str,
    schema: pa.Schema,
    key: list[str],
    unique_key: bool,
) -> None:
    name = target.sql(dialect=source.dialect.sqlglot_dialect)
    found = table_columns(source, target)
    if mode == "create" and found is not None:
        raise InvalidArgumentError(
            f"the output table {name} exists: give mode='replace' to replace it or "
            "mode='append' to add rows, or name another table"
        )
    if mode == "append":
        if found is None:
            raise InvalidArgumentError(
                f"the output table {name} does not exist: mode='append' adds rows to a "
                "table; give mode='create' to make it"
            )
        if key and unique_key and any(c in found for c in IDENTITY):
            raise InvalidArgumentError(
                f"the output table {name} identifies its rows by {', '.join(IDENTITY)} (a "
                "run without a key made it): append without a key, or replace it"
            )
        wanted = set(schema.names)
        have = {c for c in found if c not in IDENTITY}
        if have != wanted:
            raise InvalidArgumentError(
                f"the output table {name} has columns {sorted(found)}, but the rows written "
                f"have {sorted(wanted)}: append needs the same columns (or give "
                "mode='replace')"
            )


def check_append_types(source: Source, target: exp.Table, staging: exp.Table, name: str) -> None:
    """Every column of the staging table fits the table's column of that name, value unchanged.

    The staging table holds the rows written, in the engine's types; an INSERT would cast
    1.7 into an integer column as 2, silently. Both read back the same way to compare.

    Raises:
        InvalidArgumentError: a column whose values the table's type would change.
    """
    render = source.dialect.sqlglot_dialect
    ours, theirs = (
        source.schema(exp.select("*").from_(t.copy()).where(exp.false()).sql(dialect=render))
        for t in (staging, target)
    )
    for field in ours:
        if field.name not in theirs.names or field.name in IDENTITY:
            continue
        kept = theirs.field(field.name).type
        if not _holds(kept, field.type):
            raise InvalidArgumentError(
                f"column {field.name!r} of {name} is {kept} but the rows written are "
                f"{field.type}, which appending would change: cast the column written, or "
                "give mode='replace'"
            )


def _holds(kept: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column read back as ``kept`` holds every value of type ``new``."""
    if kept == new or pa.types.is_null(new):
        return True
    if pa.types.is_integer(new) and pa.types.is_integer(kept):
        return bool(kept.bit_width > new.bit_width or kept.bit_width == new.bit_width)
    if pa.types.is_floating(new) and pa.types.is_floating(kept):
        return bool(kept.bit_width >= new.bit_width)
    if pa.types.is_integer(new) and pa.types.is_floating(kept):
        return bool(new.bit_width <= 32 and kept.bit_width == 64)
    if pa.types.is_decimal(new) and pa.types.is_decimal(kept):
        whole = kept.precision - kept.scale >= new.precision - new.scale
        return bool(kept.scale >= new.scale and whole)
    if pa.types.is_integer(new) and pa.types.is_decimal(kept):
        return bool(kept.precision - kept.scale >= 19)
    families = (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_binary, pa.types.is_large_binary),
    )
    for family in families:
        if any(f(kept) for f in family) and any(f(new) for f in family):
            return True
    if pa.types.is_timestamp(new) and pa.types.is_timestamp(kept):
        return bool((kept.tz is None) == (new.tz is None))
    return False


def _commit_when_free(session: WriteSession) -> None:
    """Commit, asking again while the engine answers busy.

    SQLite in rollback-journal mode: the commit waits for other processes' reads to end; the
    transaction stays.
    """
    deadline = time.monotonic() + PARTITION_BUSY_SECONDS
    pause = 0.05
    while True:
        try:
            session.commit()
            return
        except Exception as err:
            if not session.busy(err) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _with_identity(batch: pa.RecordBatch, partition: int, first_row: int) -> pa.RecordBatch:
    rows = batch.num_rows
    arrays = [
        *batch.columns,
        pa.array([partition] * rows, pa.int64()),
        pa.array(range(first_row, first_row + rows), pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, names=[*batch.schema.names, *IDENTITY])

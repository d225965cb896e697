"""A writer's look at whether a table is there reads only "no such table" as absence.

Finishing a run decides what to do from which of its tables are there (staging, commits,
the output). An error of the probe that is not the engine's "no such table" (a refused
privilege, a lock wait cut off, a lost connection that could not be made again) used to
read as a missing table: a table that was there was taken for gone, and a finisher said
"nothing to finish ... the table is gone (dropped?)". Each engine's own errors, for real.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from sqlglot import exp

import sqlfeed
from sqlfeed import EngineError
from sqlfeed.io.faults import table_missing
from sqlfeed.sink import TableSink, finish
from sqlfeed.sink.output import table_columns
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL, Engine

pytestmark = pytest.mark.engine


def _table(engine: Engine, name: str) -> exp.Table:
    schema = None if engine.name in ("duckdb", "sqlite") else engine.schema
    return exp.table_(name, db=schema, quoted=True)


def test_a_table_there_gives_its_columns_and_one_not_there_none(engine: Engine) -> None:
    with engine.source() as source:
        assert table_columns(source, _table(engine, "keyed")) == engine.columns(
            f"SELECT * FROM {engine.qualify('keyed')}"
        )
        assert table_columns(source, _table(engine, f"nope_{uuid.uuid4().hex[:6]}")) is None
        elsewhere = exp.table_("t", db=f"no_schema_{uuid.uuid4().hex[:6]}", quoted=True)
        assert table_columns(source, elsewhere) is None


def test_a_missing_column_is_not_a_missing_table(engine: Engine) -> None:
    with engine.source() as source:
        table = engine.qualify("keyed")
        with pytest.raises(sqlfeed.SqlfeedError) as err:
            source.output_columns(f"SELECT no_such_column FROM {table}")
        assert not table_missing(err.value), str(err.value)


def test_a_missing_function_or_type_is_not_a_missing_table(engine: Engine) -> None:
    """DuckDB raises one CatalogException for a missing table, function or type: only the
    first is a table's absence (a query failing for another reason was read as one)."""
    table = engine.qualify("keyed")
    failing = [f"SELECT no_such_function_x(id) FROM {table}"]
    if engine.name in ("duckdb", "postgres"):  # SQLite takes any type name; MySQL its own few
        failing.append(f"SELECT CAST(id AS no_such_type_x) FROM {table}")
    with engine.source() as source:
        for sql in failing:
            with pytest.raises(sqlfeed.SqlfeedError) as err:
                source.output_columns(sql)
            assert not table_missing(err.value), str(err.value)
        with pytest.raises(sqlfeed.SqlfeedError) as err:
            source.output_columns(f"SELECT id FROM {engine.qualify('no_such_table_x')}")
        assert table_missing(err.value), str(err.value)


@contextlib.contextmanager
def _user_without_select(engine: Engine) -> Any:
    """A URL whose user may connect but may not read the engine's tables."""
    user, password = f"sqlfeed_np_{uuid.uuid4().hex[:8]}", "pw"
    if engine.name == "postgres":
        engine.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'")
        engine.execute(f"GRANT USAGE ON SCHEMA {engine.schema} TO {user}")
        url = urlparse(POSTGRES_URL)
        netloc = f"{user}:{password}@{url.hostname}:{url.port or 5432}"
        try:
            yield f"postgresql+psycopg://{netloc}{url.path}"
        finally:
            engine.execute(f"REVOKE ALL ON SCHEMA {engine.schema} FROM {user}")
            engine.execute(f"DROP ROLE IF EXISTS {user}")
        return
    engine.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    engine.execute(f"GRANT SELECT ON `{engine.schema}`.`people` TO '{user}'@'%'")
    url = urlparse(MYSQL_URL)
    try:
        yield f"mysql+pymysql://{user}:{password}@{url.hostname}:{url.port or 3306}/{engine.schema}"
    finally:
        engine.execute(f"DROP USER IF EXISTS '{user}'@'%'")


@pytest.mark.parametrize("engine", ["postgres", "mysql"], indirect=True)
def test_a_table_the_user_may_not_read_is_an_error_not_gone(engine: Engine) -> None:
    """The output table is there but the writer's user may not read it: the probe raises
    the engine's refusal instead of saying the table is not there."""
    with (
        _user_without_select(engine) as url,
        sqlfeed.connect(url) as source,
        pytest.raises(EngineError, match=r"(?i)denied"),
    ):
        table_columns(source, _table(engine, "keyed"))


@pytest.mark.parametrize("engine", ["postgres", "mysql"], indirect=True)
def test_a_finish_whose_connection_is_killed_at_its_look_puts_the_rows_in_place(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finisher's connection is ended (``pg_terminate_backend``, ``KILL CONNECTION``)
    just as, holding the finishers' lock, it looks whether the staging table is still
    there. The finish reconnects and puts the rows in place; before, it read the failed
    look as "another finisher did it", dropped the staging table and lost the run."""
    out = engine.qualify(f"kout_{uuid.uuid4().hex[:8]}")
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    own_id = "SELECT pg_backend_pid()" if engine.name == "postgres" else "SELECT CONNECTION_ID()"
    kill = "SELECT pg_terminate_backend({})" if engine.name == "postgres" else "KILL CONNECTION {}"
    looked = finish._still_staged
    kills: list[int] = []

    def killed_first(sink: Any, session: Any) -> bool:
        if not kills:
            [(server_id,)] = session.rows(own_id)
            engine.execute(kill.format(server_id))
            kills.append(server_id)
        return looked(sink, session)

    monkeypatch.setattr(finish, "_still_staged", killed_first)
    with engine.source() as source:
        sink = TableSink.create(source, out, batch.schema, expected_rows=3)
        try:
            assert sink.commit(1, 0, batch) is True
            report = sink.finish()
        finally:
            sink.close()
        assert kills, "the finish never looked"
        assert (report.rows, report.finished_by) == (3, "this process")
        assert sorted(r[0] for r in engine.rows(f"SELECT id FROM {out}")) == [1, 2, 3]
        assert table_columns(source, sink.staging) is None
    engine.execute(f"DROP TABLE IF EXISTS {out}")


@pytest.mark.parametrize("engine", ["mysql"], indirect=True)
def test_a_finisher_not_granted_the_lock_puts_nothing_in_place(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL's GET_LOCK answers 0 when its wait ran out: the finisher stops there (nothing
    put in place, the staging table kept) instead of going on unlocked; once the lock is
    free, a finish puts every row in place."""
    out = engine.qualify(f"lout_{uuid.uuid4().hex[:8]}")
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    with engine.source() as source:
        sink = TableSink.create(source, out, batch.schema, expected_rows=3)
        name = sink.spec["staging"]
        monkeypatch.setattr(  # a 1 s wait instead of 60 s
            sink.dialect,
            "finish_lock_sql",
            lambda n: (f"SELECT GET_LOCK('{n}', 1)", f"SELECT RELEASE_LOCK('{n}')"),
        )
        try:
            assert sink.commit(1, 0, batch) is True
            assert engine.rows(f"SELECT GET_LOCK('{name}', 0)") == [(1,)]  # another finisher
            with pytest.raises(EngineError, match=r"lock was not granted.*rows are kept in"):
                sink.finish()
            assert table_columns(source, sink.staging) is not None
            assert table_columns(source, _table(engine, out.split(".")[-1])) is None
            engine.rows(f"SELECT RELEASE_LOCK('{name}')")
            report = sink.finish()
        finally:
            sink.close()
        assert (report.rows, report.finished_by) == (3, "this process")
        assert sorted(r[0] for r in engine.rows(f"SELECT id FROM {out}")) == [1, 2, 3]
    engine.execute(f"DROP TABLE IF EXISTS {out}")


def test_only_the_errors_own_chain_says_a_table_is_missing() -> None:
    """A probe run while another error was handled (a failed count, say) carries that one
    as its context: its words do not make the probe's own failure a missing table, while a
    wrapper's driver error (``raise ... from None``) is read."""
    import sqlite3

    def locked_while_handling_a_missing_table() -> BaseException:
        try:
            try:
                raise sqlite3.OperationalError("no such table: staging")
            except sqlite3.OperationalError:
                raise sqlite3.OperationalError("database is locked")  # noqa: B904
        except sqlite3.OperationalError as err:
            return err

    def wrapped(driver: BaseException) -> BaseException:
        try:
            try:
                raise driver
            except sqlite3.OperationalError:
                raise EngineError(f"sqlite failed running the schema query: {driver}") from None
        except EngineError as err:
            return err

    locked = locked_while_handling_a_missing_table()
    assert not table_missing(locked)
    assert not table_missing(wrapped(locked))
    assert table_missing(wrapped(sqlite3.OperationalError("no such table: t")))

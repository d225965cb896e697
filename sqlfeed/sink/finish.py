"""Finishing a table sink: the rows checked, then put in place once.

States of a run in the output database, and what a finish does in each (so running it
again, or in two processes at once, is safe: finishers take the engine's named lock, or
SQLite's write lock, and look again inside it):

* staging and commits tables there, no ``finished`` record: check the counts, then
  rename (``create``), swap (``replace``) or insert (``append``, with a ``finished``
  record in the commits table in the same transaction), then drop what is left;
* staging gone and commits there (renamed, then interrupted), or a ``finished`` record:
  drop what is left;
* neither there: finished before.

A connection lost on the way is made again (a read's reconnect pauses) and the finish run
again from the top: each state above is looked at anew.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from sqlglot import exp

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.io.faults import Losses, connection_lost, table_missing
from sqlfeed.io.source import driver_message
from sqlfeed.io.writes import WriteSession, retry_busy
from sqlfeed.sink.columns import IDENTITY, beside, drop_table, quoted, same_key
from sqlfeed.sink.output import losses, run_statements, table_columns
from sqlfeed.sink.report import WriteReport

__all__ = ["FINISHED_PART", "finish_sink"]

FINISHED_PART = -1
"""The ``part`` of the commits table's record saying an append was put in place."""


def finish_sink(sink: Any, keep: bool = True) -> WriteReport:
    """:meth:`sqlfeed.sink.TableSink.finish` (see there).

    ``keep``: a finish that fails keeps the staging table (a run others may finish later),
    else drops it.
    """
    try:
        return _finish_reconnecting(sink)
    except EngineError as err:
        if keep:
            where = f"the rows are kept in {sink.spec['staging']}"
        else:
            sink.abort()
            where = "the rows written were dropped"
        raise EngineError(f"{err}; nothing was put in place, {where}") from None


def _finish_reconnecting(sink: Any) -> WriteReport:
    """:func:`_finish`, run again after a lost connection (within the reconnect budget)."""
    lost: Losses | None = None
    while True:
        try:
            return _finish(sink)
        except Exception as err:
            if not connection_lost(err):
                raise
            lost = lost or losses(sink.source)
            doing = f"finishing into {sink.spec['table']}"
            lost.wait(sink.dialect.name, doing, driver_message(err.__context__ or err))


def _finish(sink: Any) -> WriteReport:
    start = time.monotonic()
    spec = sink.spec
    source = sink.source
    by = "before"
    rows = int(spec.get("expected_rows") or 0)
    if table_columns(source, sink.staging) is not None and not _appended(sink):
        try:
            rows = _check_counts(sink)
        except EngineError:
            if table_columns(source, sink.staging) is not None:
                raise
            rows = -1  # another finisher put it in place meanwhile
        if rows >= 0 and _put_in_place(sink):
            by = "this process"
        else:
            rows = _rows_before(sink)
    elif table_columns(source, sink.commits) is None:
        if table_columns(source, sink.table) is None:
            raise EngineError(
                f"nothing to finish into {spec['table']}: the run's staging table "
                f"{spec['staging']} is gone and so is the table (dropped?)"
            )
        return WriteReport(spec["table"], _rows_before(sink), spec["mode"], 0.0, by)
    for table in (sink.staging, sink.commits):
        _drop(source, table)
    return WriteReport(spec["table"], rows, spec["mode"], time.monotonic() - start, by)


def _rows_before(sink: Any) -> int:
    """The rows an earlier finish put in place.

    The expected ones, else (not an append) the table's.
    """
    expected = sink.spec.get("expected_rows")
    if expected is not None or sink.spec["mode"] == "append":
        return int(expected or 0)
    return _scalar(sink, exp.select("COUNT(*)").from_(sink.table), "row count")


def _sql(sink: Any, node: exp.Expr) -> str:
    return node.sql(dialect=sink.dialect.sqlglot_dialect)


def _scalar(sink: Any, node: exp.Expr, what: str) -> int:
    return int(sink.source.rows(_sql(sink, node), what=what)[0][0] or 0)


def _appended(sink: Any) -> bool:
    """Whether an append's ``finished`` record is there (its rows were inserted)."""
    if sink.spec["mode"] != "append" or table_columns(sink.source, sink.commits) is None:
        return False
    part = exp.column("part", quoted=True).eq(exp.Literal.number(FINISHED_PART))
    return _scalar(sink, exp.select("COUNT(*)").from_(sink.commits).where(part), "commit check") > 0


def _check_counts(sink: Any) -> int:
    """The staging table's rows, checked against the commit records and what was expected.

    Raises:
        EngineError: a count differs (nothing is put in place; the staging table stays).
    """
    spec = sink.spec
    staged = _scalar(sink, exp.select("COUNT(*)").from_(sink.staging), "row count")
    _, committed = sink.committed()
    if committed != staged:
        raise EngineError(
            f"the staging table holds {staged:,} rows but its commit records count "
            f"{committed:,}: it was written outside sqlfeed"
        )
    expected = spec.get("expected_rows")
    if expected is not None and staged != expected:
        raise EngineError(
            f"{staged:,} rows were written but the SELECT counts {expected:,}: the job is "
            "not complete (start workers until it is, then finish again) or its rows "
            "changed during the run"
        )
    keys, expected_keys = spec.get("key"), spec.get("expected_keys")
    if keys and expected_keys is not None:
        distinct = exp.select(*(quoted(k) for k in keys)).distinct().from_(sink.staging)
        found = _scalar(sink, exp.select("COUNT(*)").from_(distinct.subquery("k")), "key count")
        if found != expected_keys:
            raise EngineError(
                f"the output has {found:,} distinct keys ({', '.join(keys)}) but the SELECT "
                f"{expected_keys:,}"
            )
    return staged


def _put_in_place(sink: Any) -> bool:
    """Rename, swap or insert under the finishers' lock; False: another finisher did.

    A session's lock (MySQL ``GET_LOCK``) is taken once, and must be granted; a
    transaction's (PostgreSQL's advisory lock) is taken again by every try of the
    transaction (a try rolled back after a deadlock gave it back).
    """
    session: WriteSession = sink.source.write_session()
    lock = sink.dialect.finish_lock_sql(sink.spec["staging"])
    held = lock is not None and bool(lock[0]) and bool(lock[1])
    per_try = lock[0] if lock is not None and lock[0] and not lock[1] else None
    try:
        if held:
            assert lock is not None
            granted = session.rows(lock[0])
            if not granted or granted[0][0] != 1:  # 0: waited in vain; NULL: an error
                raise EngineError(
                    f"finishing into {sink.spec['table']}: the finishers' lock was not granted "
                    "(another finisher held it all the time it waited); finish again"
                )
        return bool(retry_busy(session, lambda: _in_place(sink, session, per_try)))
    except (EngineError, InvalidArgumentError):
        raise
    except Exception as err:
        raise EngineError(f"finishing into {sink.spec['table']}: {err}") from None
    finally:
        if lock is not None and lock[1]:
            with contextlib.suppress(Exception):
                session.execute(lock[1])
        session.close()


def _in_place(sink: Any, session: WriteSession, lock: str | None = None) -> bool:
    transactional = bool(sink.dialect.TRANSACTIONAL_DDL)
    session.begin()
    if lock is not None:  # a transaction's lock: taken again by each try
        session.execute(lock)
    if not _still_staged(sink, session):
        session.rollback()
        return False
    mode = sink.spec["mode"]
    target = table_columns(sink.source, sink.table)
    if mode == "append":
        _append(sink, session, target or [])
        session.commit()
        return True
    if mode == "create" and target is not None:
        session.rollback()
        raise EngineError(
            f"the output table {sink.spec['table']} was made by someone else during the run: "
            "its rows are not replaced"
        )
    name = sink.table.this  # the identifier as written: the engine's case rule kept
    if not transactional:  # built once, in bulk; two rows sharing it fail here
        _add_key(sink, session, sink.staging)
        session.commit()  # DDL commits implicitly: the rename is one atomic statement
    if target is None:
        statements = sink.dialect.rename_sql(sink.staging, name)
    else:
        old = sink.spec["staging"][:-1] + "d"
        statements = sink.dialect.swap_sql(sink.table, sink.staging, old)
        statements.append(_sql(sink, drop_table(beside(sink.table, old))))
    for statement in statements:
        session.execute(statement)
    if transactional:  # named by the engine for the table (PostgreSQL: t_pkey), not staging
        _add_key(sink, session, sink.table)
    session.commit()
    return True


def _add_key(sink: Any, session: WriteSession, table: exp.Table) -> None:
    """The primary key (or row identity's unique constraint) of the rows written, on ``table``.

    Added in the finishing transaction: where DDL is transactional, to the table put in
    place (after the rename, so the engine names the key for the output table, as if made
    under its name; a duplicate rolls the rename back); elsewhere to the staging table,
    then committed (implicitly), so the rename after is one atomic statement.

    Raises:
        EngineError: two rows share the key or the identity (nothing is put in place).
    """
    unique = not sink.spec["unique_key"]
    columns = list(IDENTITY) if unique else list(sink.spec["key"])
    statement = sink.dialect.add_key_sql(table, columns, unique)
    if statement is None:  # made with the table
        return
    try:
        session.execute(statement)
    except Exception as err:
        text = str(err).lower()
        if not sink.dialect.TRANSACTIONAL_DDL and (
            "multiple primary key" in text or "duplicate key name" in text
        ):
            return  # added by a finish killed before its rename (DDL commits at once)
        if not session.duplicate(err) and "duplicate" not in text:
            raise
        raise EngineError(
            f"two rows written share {', '.join(columns)} ({err}): a batch was committed "
            "twice under other batch boundaries"
        ) from None


def _still_staged(sink: Any, session: WriteSession) -> bool:
    """Inside the finisher's lock: the staging table is still there (no one finished).

    Only the engine's "no such table" says it is gone. Any other failure of the probe (a
    killed connection above all) is raised: read as "another finisher did it", the finish
    went on to drop the staging table, and a whole run's rows were lost unplaced.
    """
    probe = exp.select("COUNT(*)").from_(sink.staging).where(exp.false())
    try:
        session.rows(_sql(sink, probe))
    except Exception as err:
        if connection_lost(err) or not table_missing(err):
            raise
        session.rollback()
        session.begin()
        return False
    return True


def _append(sink: Any, session: WriteSession, target: list[str]) -> None:
    """The staging rows into the table, and the ``finished`` record, in one transaction.

    A table with sqlfeed's row identity (made by an earlier run) gets it for the new
    rows too, their partition numbers after its last, so rows stay unique across runs.
    """
    data = list(sink.spec["data_columns"])
    values: list[exp.Expr] = [quoted(c) for c in data]
    columns = list(data)
    if all(c in target for c in IDENTITY) and all(c in sink.spec["columns"] for c in IDENTITY):
        part, row = (exp.column(c, quoted=True) for c in IDENTITY)
        last = exp.select(exp.func("COALESCE", exp.func("MAX", part.copy()), -1)).from_(sink.table)
        values += [
            exp.Add(
                this=part,
                expression=exp.Add(this=last.subquery(), expression=exp.Literal.number(1)),
            ),
            row,
        ]
        columns += list(IDENTITY)
    keys = sink.spec.get("key") or []
    if keys:
        _check_new_keys(sink, session, keys)
    select = exp.select(*values).from_(sink.staging)
    insert = exp.insert(select, sink.table, columns=[quoted(c) for c in columns])
    session.execute(_sql(sink, insert))
    record = exp.Values(
        expressions=[exp.tuple_(*(exp.Literal.number(FINISHED_PART) for _ in range(3)))]
    )
    names = [quoted(c) for c in ("part", "first_row", "rows")]
    session.execute(_sql(sink, exp.insert(record, sink.commits, columns=names)))


def _check_new_keys(sink: Any, session: WriteSession, keys: list[str]) -> None:
    """An append with a key adds no key the table has already.

    Raises:
        EngineError: some keys are in the table (nothing appended).
    """
    old = exp.select("1").from_(exp.alias_(sink.table.copy(), "t", table=True))
    old = old.where(same_key(sink.source, sink.staging, keys, "t", "s"))
    found = exp.select("COUNT(*)").from_(exp.alias_(sink.staging.copy(), "s", table=True))
    count = int(session.rows(_sql(sink, found.where(exp.Exists(this=old))))[0][0] or 0)
    if count:
        raise EngineError(
            f"{count:,} keys ({', '.join(keys)}) of the rows to append are in "
            f"{sink.spec['table']} already"
        )


def _drop(source: Any, table: exp.Table) -> None:
    run_statements(source, [drop_table(table).sql(dialect=source.dialect.sqlglot_dialect)])

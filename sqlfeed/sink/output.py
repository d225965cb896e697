"""The output database: opened for writing, and what its catalog says of a table."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from sqlfeed.dialects import EngineError, SqlfeedError
from sqlfeed.io import Source
from sqlfeed.io import connect_output as open_output
from sqlfeed.io.faults import Losses, Reconnect, connection_lost, table_missing
from sqlfeed.io.source import driver_message
from sqlfeed.io.writes import WriteSession

__all__ = ["connect_output", "losses", "run_statements", "table_columns"]


STARTING = Reconnect(tries=2, seconds=5.0)
"""The reconnect budget of a run's first connection to its output: a session ended as it
started is made again, but an output that cannot be reached is said at once (as a read's
first connection is), not after the minutes a running job's workers wait for it."""


def connect_output(target: Any, *, starting: bool = False) -> Source:
    """:func:`sqlfeed.io.connect_output`, connecting again after a lost connection.

    A session ended as it started (a server restarting, an administrator's kill) is made
    again with a read's reconnect pauses, like every other statement of the sink.

    Args:
        target: the output's URL or source.
        starting: the run's first connection (its sink is being made): at most
            :data:`STARTING`'s budget, and the database's own refusal when it is spent.

    Raises:
        EngineError: the database cannot be reached (after the reconnect budget, where the
            connection was lost).
    """
    lost: Losses | None = None
    while True:
        try:
            return open_output(target)
        except EngineError as err:
            if not connection_lost(err):
                raise
            policy = Reconnect.from_environment()
            if starting:
                tries = min(policy.tries, STARTING.tries)
                policy = Reconnect(tries=tries, seconds=min(policy.seconds, STARTING.seconds))
            lost = lost or Losses(policy)
            engine = str(target).partition(":")[0].partition("+")[0] or "the output"
            try:
                lost.wait(engine, "connecting to the output", driver_message(err))
            except EngineError:
                if starting:  # "cannot connect to URL: ..." as the database said it
                    raise err from None
                raise


def table_columns(source: Source, table: exp.Table) -> list[str] | None:
    """The columns of ``table`` in ``source``; None when there is no such table.

    Raises:
        EngineError: the connection was lost and could not be made again (a lost
            connection never reads as a missing table).
    """
    sql = (
        exp.select("*")
        .from_(table.copy())
        .where(exp.false())
        .sql(dialect=source.dialect.sqlglot_dialect)
    )
    try:
        return source.output_columns(sql)
    except SqlfeedError as err:
        if connection_lost(err) or not table_missing(err):
            raise
        return None


def losses(source: Source) -> Losses:
    """A count of lost connections against ``source``'s reconnect budget (a read's)."""
    return Losses(source.reconnect or Reconnect.from_environment())


def run_statements(source: Source, statements: list[str]) -> None:
    """Run DDL ``statements`` in one transaction of a write session.

    One for each, where DDL commits implicitly. A lost connection reconnects and runs them
    again, so each must be idempotent (``IF [NOT] EXISTS``).

    Raises:
        EngineError: the connection was lost and could not be made again.
    """
    lost: Losses | None = None
    while True:
        try:
            _run(source, statements)
            return
        except Exception as err:
            if not connection_lost(err):
                raise
            lost = lost or losses(source)
            lost.wait(source.dialect.name, "running DDL", driver_message(err))


def _run(source: Source, statements: list[str]) -> None:
    session: WriteSession = source.write_session()
    try:
        session.begin()
        for statement in statements:
            session.execute(statement)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()

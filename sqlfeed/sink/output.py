"""The output database: opened for writing, and what its catalog says of a table."""

from __future__ import annotations

from sqlglot import exp

from dialects import SqlfeedError
from sqlfeed.io import Source, connect_output
from sqlfeed.io.writes import WriteSession

__all__ = ["connect_output", "run_statements", "table_columns"]


def table_columns(source: Source, table: exp.Table) -> list[str] | None:
    """The columns of ``table`` in ``source``; None when there is no such table."""
    sql = (
        exp.select("*")
        .from_(table.copy())
        .where(exp.false())
        .sql(dialect=source.dialect.sqlglot_dialect)
    )
    try:
        return source.output_columns(sql)
    except SqlfeedError:
        return None


def run_statements(source: Source, statements: list[str]) -> None:
    """Run DDL ``statements`` in one transaction of a write session.

    One for each, where DDL commits implicitly.
    """
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

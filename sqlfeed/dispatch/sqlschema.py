"""The tables of a SQL lease queue (:class:`~sqlfeed.dispatch.sqlqueue.SQLQueue`).

What they are, how an opened queue finds them, and how they are made.

``sqlfeed_jobs`` (one row per job: its stored spec), ``sqlfeed_tasks`` (one row per epoch
and partition: state, token, expiry, acknowledged batches), ``sqlfeed_workers`` (what each
worker acknowledged, when it was last seen), ``sqlfeed_shares`` (``even_batches``: the
replicas that delivered their share of an epoch) and ``sqlfeed_ledger`` (what each worker
delivered up to each checkpoint: :class:`~sqlfeed.dispatch.ledger.SQLLedger`).

Job and worker names are compared byte for byte on every engine: their columns take the
dialect's :meth:`~sqlfeed.dialects.Dialect.queue_name_collation` (MySQL/MariaDB's default
collations ignore case and trailing spaces).

A queue is there once its jobs table is. Only :func:`build` changes the database, and
processes that open a queue at once take turns in it: it runs inside one transaction
that first takes the dialect's named lock (:meth:`~sqlfeed.dialects.Dialect.finish_lock_sql`:
PostgreSQL's ``pg_advisory_xact_lock``, MariaDB's ``GET_LOCK``; SQLite's ``BEGIN
IMMEDIATE`` write lock holds the file), then looks again and creates only what is
missing. A queue made by an older sqlfeed is brought up to date there too: tables added
since, name columns given the byte-wise collation (``ALTER TABLE ... MODIFY``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import LONGTEXT

from sqlfeed.dialects import Dialect, EngineError

__all__ = ["JOBS", "LEDGER", "Survey", "build", "name_columns", "queue_tables", "survey"]

JOBS = "sqlfeed_jobs"
"""The table whose presence says a queue is there (it holds the jobs)."""
LEDGER = "sqlfeed_ledger"
"""The job ledger's table."""

_NAME = "sqlfeed_name"
"""The ``info`` key marking a column that holds a job's or a worker's name."""


def queue_tables(name_collation: str | None = None) -> sa.MetaData:
    """The queue's tables and the claim index, as SQLAlchemy metadata to create.

    Args:
        name_collation: the collation of the name columns (None: the engine's default).
    """
    metadata = sa.MetaData()

    def name(column: str, primary_key: bool = False) -> sa.Column[str]:
        kind = sa.String(200, collation=name_collation)
        return sa.Column(column, kind, info={_NAME: True}, primary_key=primary_key)

    sa.Table(
        JOBS,
        metadata,
        name("name", primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        # LONGTEXT on MySQL: TEXT stops at 64 KiB, a plan of ~300 partitions.
        sa.Column("spec", sa.Text().with_variant(LONGTEXT(), "mysql", "mariadb"), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
    )
    tasks = sa.Table(
        "sqlfeed_tasks",
        metadata,
        name("job", primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        name("worker"),
        sa.Column("token", sa.String(32)),
        sa.Column("expires", sa.Double, nullable=False),
        sa.Column("acked", sa.Integer, nullable=False),
        sa.Column("rows_acked", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("completions", sa.Integer, nullable=False),
    )
    sa.Index("sqlfeed_tasks_next", tasks.c.job, tasks.c.epoch, tasks.c.state, tasks.c.position)
    sa.Table(
        "sqlfeed_workers",
        metadata,
        name("job", primary_key=True),
        name("worker", primary_key=True),
        sa.Column("joined", sa.Double, nullable=False),
        sa.Column("seen", sa.Double, nullable=False),
        sa.Column("batches", sa.BigInteger, nullable=False),
        sa.Column("rows_acked", sa.BigInteger, nullable=False),
    )
    sa.Table(
        "sqlfeed_shares",
        metadata,
        name("job", primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        name("worker", primary_key=True),
    )
    sa.Table(
        LEDGER,
        metadata,
        name("job", primary_key=True),
        sa.Column("checkpoint", sa.BigInteger, primary_key=True, autoincrement=False),
        name("worker", primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("start", sa.Integer, nullable=False),
        sa.Column("stop", sa.Integer, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("done", sa.Integer, nullable=False),
    )
    return metadata


def name_columns(metadata: sa.MetaData) -> list[sa.Column[str]]:
    """The columns of ``metadata`` that hold job and worker names."""
    return [
        column
        for table in metadata.sorted_tables
        for column in table.columns
        if column.info.get(_NAME)
    ]


@dataclass(frozen=True)
class Survey:
    """What an opened queue found of its tables."""

    metadata: sa.MetaData
    """The tables as they should be (name columns in the engine's byte-wise collation)."""
    present: frozenset[str]
    """The queue tables in the database."""
    stale: Sequence[sa.Column[str]] = field(default=())
    """Name columns present with another collation (a queue of an older sqlfeed)."""

    @property
    def there(self) -> bool:
        """A queue is there: its jobs table is."""
        return JOBS in self.present

    @property
    def ready(self) -> bool:
        """Every table is there, as it should be."""
        return self.present >= set(self.metadata.tables) and not self.stale


def survey(connection: Any, dialect: Dialect) -> Survey:
    """The queue tables in ``connection``'s database, and their name columns' collation."""
    version = ""
    if dialect.SERVER_VERSION_SQL is not None:
        version = str(connection.exec_driver_sql(dialect.SERVER_VERSION_SQL).scalar())
    collation = dialect.queue_name_collation(version)
    metadata = queue_tables(collation)
    present = frozenset(sa.inspect(connection).get_table_names()) & set(metadata.tables)
    query = dialect.queue_collations_sql(sorted(present)) if present and collation else None
    if query is None:
        return Survey(metadata, present)
    found = {(str(t), str(c)): str(n) for t, c, n in connection.exec_driver_sql(query)}
    stale = [
        column
        for column in name_columns(metadata)
        if found.get((column.table.name, column.name), collation) != collation
    ]
    return Survey(metadata, present, stale)


def build(connection: Any, dialect: Dialect, lock: str) -> Survey:
    """Make the queue's missing tables and fix its stale name columns, under ``lock``.

    ``connection`` is inside a transaction (SQLite: ``BEGIN IMMEDIATE``). Idempotent: the
    tables are surveyed again once the lock is held, so of processes that open a fresh
    queue at once, one creates it and the others find it made.

    Raises:
        EngineError: another process held the lock for a minute (MariaDB).
    """
    take, release = dialect.finish_lock_sql(lock) or ("", "")
    if take and connection.exec_driver_sql(take).scalar() == 0:  # GET_LOCK timed out
        raise EngineError(f"another process held the lock {lock!r} for a minute")
    try:
        found = survey(connection, dialect)
        found.metadata.create_all(connection)  # only the missing tables (checkfirst)
        tables: dict[str, list[sa.Column[str]]] = {}
        for column in found.stale:
            tables.setdefault(column.table.name, []).append(column)
        for table, columns in tables.items():
            definitions = [
                str(sa.schema.CreateColumn(c).compile(dialect=connection.dialect)) for c in columns
            ]
            statement = dialect.modify_columns_sql(table, definitions)
            assert statement is not None  # a dialect that reports collations alters them
            connection.exec_driver_sql(statement)
    finally:
        if release:  # MariaDB's lock is the session's: a pooled session must not keep it
            with contextlib.suppress(sa.exc.DBAPIError):  # a lost session lost its lock
                connection.exec_driver_sql(release)
    return Survey(found.metadata, frozenset(found.metadata.tables))

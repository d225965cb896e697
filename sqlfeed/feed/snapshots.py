"""One state of the data per read of a plan, while its tables are being written.

A plan's partitions are separate queries; read at different times, they can mix states of a
table that changes meanwhile: a PostgreSQL ``ctid`` partition reads a row an UPDATE moved
to a page another partition read before it (the row twice), a transfer between two rows
of different partitions is seen half. So every read of a plan whose partitions query live
tables (``hash``, ``range``, ``ctid``; a ``materialize`` plan reads its own scratch copy,
``fragments`` read files) runs inside one snapshot by default (:func:`consistent_reads`):

* PostgreSQL: a snapshot exported (``pg_export_snapshot``) by a REPEATABLE READ
  transaction held open on a connection of its own for the whole read; every reader
  connection begins ``SET TRANSACTION SNAPSHOT`` (copy, connectorx, ADBC, psycopg alike).
  When it cannot be exported the read goes on without it and says so
  (:class:`SnapshotWarning`); a snapshot whose session ended is an error.
* MySQL/MariaDB, SQLite: no snapshot can be exported, so the read runs its queries on ONE
  connection inside one consistent transaction (:mod:`sqlfeed.io.pinned`), by the driver's
  cursor: one reader instead of several (the trade-off the plan's reason states). A source
  whose ``session_connections`` is N reads on N connections, each begun while a short lock
  holds writers off (``LOCK TABLES ... READ``, else ``FLUSH TABLES WITH READ LOCK``;
  ``BEGIN IMMEDIATE``). ``snapshot=False`` reads by the engine's fast readers (connectorx,
  ADBC), for data that does not change.

Reads in other processes (Ray, Dask tasks; DataLoader workers; ranks) share a PostgreSQL
snapshot by its id, carried in the plan (:attr:`Plan.snapshot
<sqlfeed.plans.model.Plan.snapshot>`) or their read options; the exporting connection must
stay open until every read is done (Ray and Dask datasets export one and hold it in the
process that made them while they live, see :func:`sqlfeed.feed.remote.reader_for`).
MySQL/MariaDB and SQLite cannot share theirs with another process: such reads say so
(:class:`SnapshotWarning`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sqlfeed.dialects import EngineError, InvalidArgumentError, get_dialect
from sqlfeed.errors import SnapshotWarning
from sqlfeed.io import DEFAULT_BATCH_ROWS, Source
from sqlfeed.plans.model import LIVE_STRATEGIES, SNAPSHOT_ENGINES, Plan

__all__ = [
    "ConsistentRead",
    "InSnapshot",
    "SnapshotWarning",
    "check_snapshot_option",
    "consistent_reads",
    "needs_snapshot",
    "unshared",
]


def needs_snapshot(plan: Plan, reads: int | None = None) -> bool:
    """Whether reading ``plan`` by ``reads`` queries could mix states of tables written meanwhile.

    ``reads`` defaults to one query per partition. Several queries over live tables of a
    server or SQLite database could. (DuckDB: a file sqlfeed opens read-only cannot be
    written meanwhile.)
    """
    count = plan.num_partitions if reads is None else reads
    return count > 1 and plan.strategy in LIVE_STRATEGIES and plan.dialect in SNAPSHOT_ENGINES


def check_snapshot_option(snapshot: object, dialect: str) -> None:
    """``snapshot`` is True, False or (PostgreSQL) a snapshot id.

    Raises:
        InvalidArgumentError: anything else, or an id for another engine.
    """
    if isinstance(snapshot, bool):
        return
    if not isinstance(snapshot, str) or not snapshot.strip():
        raise InvalidArgumentError(
            f"snapshot must be True, False or a PostgreSQL snapshot id, got {snapshot!r}"
        )
    if not get_dialect(dialect).EXPORTS_SNAPSHOTS:
        raise InvalidArgumentError(
            f"snapshot={snapshot!r} is a PostgreSQL snapshot id; {dialect} cannot share a "
            "snapshot across connections (snapshot=True reads on one connection)"
        )


@dataclass(frozen=True)
class ConsistentRead:
    """What a read of a plan's partitions runs with.

    Attributes:
        source: the source to read through: every ``read`` on it is inside the snapshot.
        snapshot: the snapshot id or session token, None when the read needs none.
        readers: at most this many reads at once (1 for a single-connection session).
    """

    source: Source
    snapshot: str | None
    readers: int | None = None

    def cap(self, readers: int) -> int:
        """``readers``, at most :attr:`readers`."""
        return readers if self.readers is None else min(readers, self.readers)


@contextlib.contextmanager
def consistent_reads(
    source: Source, plan: Plan, reads: int, snapshot: bool | str = True, readers: int = 1
) -> Iterator[ConsistentRead]:
    """The snapshot the ``reads`` queries of ``plan`` run in, held for the block.

    Args:
        source: the plan's source.
        plan: the plan read.
        reads: how many queries read it (merged partitions count once).
        snapshot: True (default): the plan's own :attr:`~Plan.snapshot` when it carries
            one, else a snapshot when :func:`needs_snapshot`; False: none (each query sees
            the data of its own time); a PostgreSQL snapshot id another session exported
            and holds.
        readers: how many reads the caller runs at once (MySQL/MariaDB, SQLite: how many
            connections a session begins at one state, at most ``reads``).
    """
    if snapshot is True and plan.snapshot is not None:
        snapshot = plan.snapshot  # exported by another session for every read of the plan
    check_snapshot_option(snapshot, plan.dialect)
    if isinstance(snapshot, str):
        yield ConsistentRead(InSnapshot(source, snapshot), snapshot)
        return
    if snapshot is False or not needs_snapshot(plan, reads):
        yield ConsistentRead(source, None)
        return
    if get_dialect(plan.dialect).EXPORTS_SNAPSHOTS:
        try:
            holder = source.export_snapshot()
        except EngineError as err:
            warnings.warn(
                unshared(plan, f"PostgreSQL exported no snapshot: {err}"),
                SnapshotWarning,
                stacklevel=4,
            )
            yield ConsistentRead(source, None)
            return
        with holder:
            yield ConsistentRead(InSnapshot(source, holder.snapshot), holder.snapshot)
        return
    pin = getattr(source, "pin_session", None)
    if pin is None:
        yield ConsistentRead(source, None)
        return
    with pin(max(1, min(readers, reads)), plan.sql) as session:
        yield ConsistentRead(
            InSnapshot(source, session.snapshot), session.snapshot, session.readers
        )


def unshared(plan: Plan, why: str) -> str:
    """The warning of a read of ``plan``'s partitions at different times: why, and the risk."""
    return (
        f"{why}: the {plan.num_partitions} partitions of this {plan.strategy} plan are read "
        "at different times, so rows that concurrent writes change or move may be read "
        "twice or missed (use strategy='materialize' to read one copy of the query)"
    )


class InSnapshot(Source):
    """``source`` with every read inside ``snapshot`` (what the Feeder's readers read)."""

    def __init__(self, source: Source, snapshot: str) -> None:
        self.inner = source
        self.snapshot = snapshot
        self.dialect = source.dialect
        self.label = source.label
        self.parallel_read = source.parallel_read

    def read(
        self,
        sql: str,
        *,
        schema: pa.Schema | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        stop: threading.Event | None = None,
        ordered: bool = False,
        snapshot: str | None = None,
        rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The inner source's read, inside this snapshot."""
        return self.inner.read(
            sql,
            schema=schema,
            batch_rows=batch_rows,
            stop=stop,
            ordered=ordered,
            snapshot=self.snapshot,
            rows=rows,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

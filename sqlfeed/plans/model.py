"""Plans: a query split into partitions. Pure data: frozen, picklable, JSON round-trip.

Built by :func:`sqlfeed.plans.planner.plan`; read by the Feeder and the dispatcher.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError, dialect_names, get_dialect

STRATEGIES = ("auto", "hash", "range", "ctid", "materialize", "fragments")
"""Partitioning strategies: ``auto`` picks one of the others (see the planner)."""

PLAN_FORMAT_VERSION = 1

LIVE_STRATEGIES = frozenset({"hash", "range", "ctid"})
"""Strategies whose partitions query the user's tables while they may change (a
``materialize`` plan reads its own scratch copy, ``fragments`` read files): a read of
their partitions must see one snapshot (see :mod:`sqlfeed.feed.snapshots`)."""

SNAPSHOT_ENGINES = frozenset(
    name for name in dialect_names() if get_dialect(name).WRITTEN_WHILE_READ
)
"""Engines whose tables other sessions write while a plan is read (the dialects'
``WRITTEN_WHILE_READ``: PostgreSQL, MySQL/MariaDB, SQLite)."""


@dataclass(frozen=True)
class Partition:
    """One partition: a query whose rows are a disjoint part of the plan's query."""

    index: int
    sql: str
    estimated_rows: int | None = None
    """The planner's estimate of the partition's rows, None if unknown. Exact for
    row-number materialize plans and for Parquet/ORC fragments (from the footers); an even
    share of the counted or catalog-estimated rows for range plans (their bounds split the
    key's values, which need not hold equal rows); proportional to pages or rowids for
    ctid and rowid plans and to bytes for CSV/JSON byte ranges. Readers use it only to
    choose how to read (one whole read or a stream), never to check a result."""
    description: str = ""
    """What the partition covers, for people: ``hash bucket 3 of 16``, ``id in [10, 20)``."""

    file: str | None = None
    """The file a ``fragments`` partition reads (its main shardset's shard file)."""
    span: tuple[str, int, int] | None = None
    """``(template, start, end)`` when the partition reads positions ``[start, end)`` of
    one ordered sequence (a file's rows or bytes, a table's row ids): its SQL is
    ``template`` with ``start`` and ``end`` filled in, so adjacent spans of one template
    merge into one query (see :mod:`sqlfeed.plans.spans`); None: it merges with none."""


@dataclass(frozen=True)
class Plan:
    """A query, the strategy that split it, and its partitions.

    The partitions' rows add up to exactly the query's result (as a multiset), for
    every strategy, as long as the data does not change while they are read, or they
    are read inside one snapshot, as every static read of a plan is by default (see
    :mod:`sqlfeed.feed.snapshots`).
    """

    sql: str
    """The query as the user gave it."""
    dialect: str
    strategy: str
    reason: str
    """Why the strategy was chosen (``auto``) or that it was asked for."""
    partitions: tuple[Partition, ...]
    columns: tuple[str, ...]
    """The output column names, as the engine reports them."""
    key: tuple[str, ...] | None = None
    rows: int | None = None
    """The query's exact row count when the planner knows it (a ``COUNT(*)``, the files'
    or the scratch table's own counts); None when it did not count (see
    :attr:`estimated_rows`)."""
    count_sql: str = ""
    sample_sql: str = ""
    schema: bytes | None = field(default=None, repr=False)
    """The Arrow schema every partition yields, serialized (IPC); see ``arrow_schema()``."""
    scratch_table: str | None = None
    """The table a ``materialize`` plan wrote, dropped by :func:`sqlfeed.plans.drop_scratch`."""
    cost: float | None = None
    """What reading all the partitions costs, in reads of the whole query (estimated by
    the planner: 1 when each row is read once, M for M hash partitions); not part of the
    fingerprint."""
    estimated_rows: int | None = None
    """The row count M was sized from: :attr:`rows` when counted, else the catalog's
    estimate for the query's one base table (PostgreSQL ``pg_class.reltuples``,
    MySQL/MariaDB ``information_schema.tables.table_rows``, SQLite's rowid span), an upper
    bound when the query filters the table or groups its rows (ranges of a grouping key).
    None when neither is known (``partitions`` given)."""
    snapshot: str | None = None
    """A PostgreSQL snapshot id (``Source.export_snapshot()``) every read of the plan
    reads inside, in whichever process reads it (DataLoader workers, ranks, Ray and Dask
    tasks): the plan carries it; not part of the fingerprint. The session that exported
    it must stay open until every read is done (a read after it closed is an error).
    None: each read takes a snapshot of its own (see :mod:`sqlfeed.feed.snapshots`)."""

    @property
    def rows_estimated(self) -> bool:
        """Whether the plan's row count is only an estimate (:attr:`rows` is None)."""
        return self.rows is None and self.estimated_rows is not None

    @property
    def fingerprint(self) -> str:
        """A digest of what the plan reads: dialect, query, strategy and partition SQL.

        Two plans with the same fingerprint read the same rows the same way; a job
        (``sqlfeed job``) refuses to continue with a plan of another fingerprint.
        """
        digest = hashlib.sha256()
        for part in (self.dialect, self.sql, self.strategy, *(p.sql for p in self.partitions)):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
        return digest.hexdigest()[:16]

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    def arrow_schema(self) -> Any:
        """The Arrow schema (``pyarrow.Schema``) of every partition, or None if unknown."""
        if self.schema is None:
            return None
        return pa.ipc.read_schema(pa.py_buffer(self.schema))

    def share(self, rank: int, world_size: int) -> tuple[Partition, ...]:
        """The partitions of worker ``rank`` of ``world_size`` (static sharding).

        Disjoint across ranks and together all partitions; round-robin by index.
        """
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidArgumentError(
                f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}"
            )
        return self.partitions[rank::world_size]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema as base64)."""
        return {
            "version": PLAN_FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "dialect": self.dialect,
            "strategy": self.strategy,
            "reason": self.reason,
            "sql": self.sql,
            "key": list(self.key) if self.key else None,
            "columns": list(self.columns),
            "rows": self.rows,
            "estimated_rows": self.estimated_rows,
            "count_sql": self.count_sql,
            "sample_sql": self.sample_sql,
            "scratch_table": self.scratch_table,
            "cost": self.cost,
            "snapshot": self.snapshot,
            "schema": base64.b64encode(self.schema).decode() if self.schema else None,
            "partitions": [
                {
                    "index": p.index,
                    "sql": p.sql,
                    "estimated_rows": p.estimated_rows,
                    "description": p.description,
                    **({"file": p.file} if p.file is not None else {}),
                    **({"span": list(p.span)} if p.span is not None else {}),
                }
                for p in self.partitions
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """The plan ``to_dict`` wrote; refuses other format versions."""
        if data.get("version") != PLAN_FORMAT_VERSION:
            raise InvalidArgumentError(
                f"plan format version {data.get('version')!r} is not {PLAN_FORMAT_VERSION}"
            )
        plan = cls(
            sql=data["sql"],
            dialect=data["dialect"],
            strategy=data["strategy"],
            reason=data["reason"],
            key=tuple(data["key"]) if data.get("key") else None,
            columns=tuple(data["columns"]),
            rows=data.get("rows"),
            estimated_rows=data.get("estimated_rows"),
            count_sql=data.get("count_sql", ""),
            sample_sql=data.get("sample_sql", ""),
            scratch_table=data.get("scratch_table"),
            cost=data.get("cost"),
            snapshot=data.get("snapshot"),
            schema=base64.b64decode(data["schema"]) if data.get("schema") else None,
            partitions=tuple(
                Partition(
                    p["index"],
                    p["sql"],
                    p.get("estimated_rows"),
                    p.get("description", ""),
                    p.get("file"),
                    tuple(p["span"]) if p.get("span") else None,  # type: ignore[arg-type]
                )
                for p in data["partitions"]
            ),
        )
        if data.get("fingerprint") not in (None, plan.fingerprint):
            raise InvalidArgumentError("the plan's fingerprint does not match its contents")
        return plan

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))


def fragment_order(
    partitions: tuple[Partition, ...] | list[Partition], window: int, seed: int, epoch: int
) -> list[int]:
    """Positions of ``partitions`` in the order a ``shuffle_window`` reads them.

    * ``0``: storage order (as planned);
    * ``-1``: a seeded shuffle of all partitions;
    * ``k > 0``: the files are shuffled, then the partitions (row groups, stripes, byte
      ranges) in each run of ``k`` consecutive ones of that file order are shuffled, so
      reading starts with whole files and never jumps more than ``k`` places.

    Deterministic for ``(seed, epoch)``; every epoch has its own order.

    >>> parts = [Partition(i, "", file=f"f{i // 2}") for i in range(6)]
    >>> fragment_order(parts, 0, seed=1, epoch=0)
    [0, 1, 2, 3, 4, 5]
    >>> sorted(fragment_order(parts, 2, seed=1, epoch=0))
    [0, 1, 2, 3, 4, 5]
    """
    if not isinstance(window, int) or window < -1:
        raise InvalidArgumentError(
            f"shuffle_window must be 0 (storage order), -1 (global shuffle) or a window "
            f"size > 0, got {window!r}"
        )
    positions = list(range(len(partitions)))
    rng = np.random.default_rng([seed, epoch, 7])
    if window == 0:
        return positions
    if window == -1:
        return [positions[i] for i in rng.permutation(len(positions))]
    files: dict[str, list[int]] = {}
    for position, partition in enumerate(partitions):
        files.setdefault(partition.file or f"#{position}", []).append(position)
    groups = list(files.values())
    flat = [p for g in (groups[i] for i in rng.permutation(len(groups))) for p in g]
    out: list[int] = []
    for start in range(0, len(flat), window):
        chunk = flat[start : start + window]
        out.extend(chunk[i] for i in rng.permutation(len(chunk)))
    return out

"""Epochs over a growing table: each epoch reads the table as it is when the epoch begins.

:class:`FollowFeeder` (``sqlfeed.Feeder(..., follow=True)``) plans every epoch anew:

* over a **lakehouse table** (an ``iceberg:`` or ``delta:`` source), epoch ``k`` reads the
  table's latest snapshot, pinned in its plan (see :mod:`sqlfeed.lake.source`); with
  ``new_only``, only the rows appended since the snapshot epoch ``k - 1`` read (the data
  files added after it: an incremental append scan), so the epochs together read every
  appended row exactly once;
* over any table with a monotone key (``watermark=COLUMN``, e.g. a PostgreSQL or MySQL
  table with an identity key or an insertion time), epoch ``k`` reads the rows whose key is
  above epoch ``k - 1``'s maximum and at most the maximum when epoch ``k`` begins. Rows
  must become visible in key order (a key taken by a transaction that commits after a
  higher key was read is missed: use keys assigned at commit, or a lakehouse table).

The **ledger** (``state_dict()["ledger"]``) records what each epoch read (its snapshot, or
its key bounds), and the state keeps the epoch's plan, so a resume reads the epoch in
progress exactly as it was (the same partitions, however the table grew since), and the
next epochs go on from there.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator, Mapping
from typing import Any

from sqlglot import exp

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.feed.options import PlanOptions
from sqlfeed.io import Source, connect
from sqlfeed.plans.model import Plan
from sqlfeed.sql.partition import literal

__all__ = ["FollowFeeder", "check_follow", "epoch_query", "next_entry"]

_STATE = "sqlfeed.follow/1"


class FollowFeeder:
    """Batches of a query over a growing table, one new plan per epoch (module docstring).

    Args:
        query: the SELECT.
        source: a lakehouse source (``iceberg:``/``delta:`` URL), or with ``watermark``
            any source.
        epochs: how many epochs to read (each plans the table as it is then).
        new_only: a lakehouse table: each epoch after the first reads only the rows
            appended since the previous epoch's snapshot.
        watermark: a monotone output column: each epoch reads the rows above the previous
            epoch's maximum (``new_only`` implied).
        state: resume from :meth:`state_dict`.
        **options: the Feeder's keywords for every epoch's read (``format``,
            ``batch_size``, ``shuffle``, ``seed``, ``readers``, ``partitions``, ...).
    """

    def __init__(
        self,
        query: str,
        source: Any = None,
        *,
        epochs: int = 1,
        new_only: bool = False,
        watermark: str | None = None,
        state: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(query, str):
            raise InvalidArgumentError("follow=True plans every epoch: give the SQL, not a Plan")
        self.query = query
        self.source: Source = connect(source)
        check_follow(self.source, query, watermark)
        self.epochs = epochs
        self.new_only = new_only or watermark is not None
        self.watermark = watermark
        self.options = options
        self.ledger: list[dict[str, Any]] = []
        """What each epoch begun read: ``snapshot``/``since``, or ``low``/``high``."""
        self.feeder: PartitionFeeder | None = None
        """The current epoch's feeder."""
        self._resume: Mapping[str, Any] | None = None
        self._plan: Plan | None = None
        if state is not None:
            self.load_state_dict(state)

    def __iter__(self) -> Iterator[Any]:
        first = len(self.ledger) - 1 if self._resume is not None else len(self.ledger)
        for epoch in range(max(first, 0), self.epochs):
            yield from self.epoch(epoch)

    def epoch(self, epoch: int) -> Iterator[Any]:
        """The batches of ``epoch`` (planned when it begins; recorded in the ledger)."""
        if epoch < len(self.ledger):
            entry = self.ledger[epoch]
        elif epoch == len(self.ledger):
            entry = self._next_entry()
            self.ledger.append(entry)
        else:
            raise InvalidArgumentError(
                f"epoch {epoch} cannot begin before epoch {len(self.ledger)}: epochs follow "
                "the table in order"
            )
        sql = epoch_query(self.source, self.query, entry, self.watermark)
        seed = int(self.options.get("seed", 0)) + 1_000_003 * epoch
        options = {**self.options, "seed": seed, "epochs": 1}
        if self.watermark is not None:
            # hash cuts the epoch's SQL alone: no scratch table that a resume would miss,
            # no bounds of the table's key that move as it grows
            options.setdefault("strategy", "hash")
        query: str | Plan = sql
        if self._resume is not None and self._plan is not None:
            # the epoch's own plan: planned again, its cuts could move with the table
            query = self._plan
            options = {k: v for k, v in options.items() if k not in PlanOptions.__annotations__}
        self.feeder = PartitionFeeder(query, self.source, **options)
        if self._resume is not None:
            self.feeder.load_state_dict(self._resume)
            self._resume, self._plan = None, None
        yield from self.feeder.epoch(0)

    def _next_entry(self) -> dict[str, Any]:
        previous = self.ledger[-1] if self.ledger else None
        return next_entry(
            self.source, self.query, previous, new_only=self.new_only, watermark=self.watermark
        )

    # -- resuming --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the feed stands: the ledger of epochs begun and the position in the last."""
        inner = self.feeder.state_dict() if self.feeder is not None else None
        plan = self.feeder.plan.to_dict() if self.feeder is not None else None
        ledger = [dict(e) for e in self.ledger]
        return {"format": _STATE, "ledger": ledger, "inner": inner, "plan": plan}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``: the epoch in progress is read as it was recorded."""
        if not isinstance(state, Mapping) or state.get("format") != _STATE:
            raise InvalidArgumentError("not a follow feed's state (from FollowFeeder.state_dict)")
        self.ledger = [dict(e) for e in state["ledger"]]
        self._resume = state.get("inner")
        plan = state.get("plan")
        self._plan = Plan.from_dict(plan) if plan is not None else None
        if self._resume is None and self.ledger:
            self.ledger.pop()  # begun, nothing read: it is planned again


def check_follow(source: Source, query: str, watermark: str | None) -> None:
    """Refuse a follow feed ``source`` cannot tell new rows in (before anything is read)."""
    if watermark is None and not callable(getattr(source, "refresh", None)):
        raise InvalidArgumentError(
            f"follow=True needs a lakehouse table (iceberg:/delta: URL) or a "
            f"watermark=COLUMN on {source.dialect.name}: a monotone key that says "
            "which rows are new"
        )
    if watermark is not None:
        columns = source.output_columns(query)
        if watermark not in columns:
            raise InvalidArgumentError(
                f"watermark={watermark!r} is not an output column of the query "
                f"({', '.join(columns)}): select it"
            )


def next_entry(
    source: Source,
    query: str,
    previous: Mapping[str, Any] | None,
    *,
    new_only: bool,
    watermark: str | None,
) -> dict[str, Any]:
    """What the epoch after ``previous`` reads: the table's latest snapshot, or key bounds.

    Args:
        source: the followed source (a lakehouse table, or any with ``watermark``).
        query: the SELECT.
        previous: the previous epoch's entry (None: this is the first epoch).
        new_only: a lakehouse table: only the rows appended since ``previous``'s snapshot.
        watermark: the monotone key column (None: a lakehouse snapshot).

    Returns:
        ``{"snapshot", "since"}`` (lakehouse) or ``{"low", "high"}`` (watermark), as JSON.
    """
    if watermark is None:
        since = previous["snapshot"] if previous is not None and new_only else None
        snapshot = source.refresh(since=since)  # type: ignore[attr-defined]
        return {"snapshot": snapshot, "since": since}
    column = exp.to_identifier(watermark, quoted=True).sql(source.dialect.sqlglot_dialect)
    high = source.scalar(
        f"SELECT MAX({column}) FROM ({query}) AS sqlfeed_follow", what="watermark query"
    )
    low = previous["high"] if previous is not None else None
    if high is None:
        high = low
    return {"low": low, "high": _json_value(high)}


def epoch_query(source: Source, query: str, entry: Mapping[str, Any], watermark: str | None) -> str:
    """The SQL of the epoch ``entry`` describes (a lakehouse source is pinned to its snapshot)."""
    if watermark is None:
        source.at(entry["snapshot"], entry["since"])  # type: ignore[attr-defined]
        return query
    dialect = source.dialect.sqlglot_dialect
    column = exp.to_identifier(watermark, quoted=True).sql(dialect)
    low, high = _python_value(entry["low"]), _python_value(entry["high"])
    if high is None:
        where = "1 = 0"
    else:
        where = f"{column} <= {literal(high).sql(dialect)}"
        if low is not None:
            where = f"{column} > {literal(low).sql(dialect)} AND {where}"
    return f"SELECT * FROM ({query}) AS sqlfeed_follow WHERE {where}"


def _json_value(value: Any) -> Any:
    """A watermark as JSON (dates and times tagged, decimals as text)."""
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    return value


def _python_value(value: Any) -> Any:
    if isinstance(value, dict):
        if "datetime" in value:
            return dt.datetime.fromisoformat(value["datetime"])
        if "date" in value:
            return dt.date.fromisoformat(value["date"])
        return decimal.Decimal(value["decimal"])
    return value

"""Where a static feed stands in its epoch, as a small JSON-able dict, and how to resume it.

A :class:`Position` says how far the consumer got in an epoch (``rows`` delivered) and
where reading must start again to deliver exactly the rest: after ``partitions_done``
partitions of the epoch's (seeded) partition order, ``offset`` rows into the next one.
That point is the first row of the shuffle window the consumer is in (see
:func:`sqlfeed.feed.batches.shuffle_windows`), or the next undelivered row without a
shuffle, so a restore re-reads at most the partitions that window spans (and the head of
the first of them), never the epoch.

A :class:`Cursor` tracks one run of an epoch: where each partition of the order ended in
read order, and how many rows were delivered, so it can tell the position of any row
already read. :func:`feed_state` and :func:`check_state` turn a position into the dict a
Feeder's ``state_dict()`` returns, and check one against the Feeder it is loaded into.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlfeed.dialects import InvalidArgumentError

__all__ = ["STATE_VERSION", "Cursor", "Position", "check_state", "feed_state"]

STATE_VERSION = 1
"""The version of the state dict's layout."""

_POSITION_FIELDS = ("epoch", "rows", "partitions_done", "offset", "start", "partition")


@dataclass(frozen=True)
class Position:
    """How far an epoch got, and where a resumed read starts (see the module docstring)."""

    epoch: int
    rows: int = 0
    """Rows delivered to the consumer in this epoch."""
    partitions_done: int = 0
    """Partitions of the epoch's order wholly before the replay's first row."""
    offset: int = 0
    """Rows of the next partition in the order before the replay's first row."""
    start: int = 0
    """The replay's first row, counted in read order from the epoch's start (<= rows)."""
    partition: int | None = None
    """The plan index of the partition the replay starts in (a check), or None at the end."""


class Cursor:
    """One run of an epoch: where its partitions ended, and the rows delivered.

    Args:
        position: where the run starts (the epoch's start, or a restored position).
        order: the plan indices of the epoch's partitions, in reading order.
        window: the shuffle window in rows (1 without a record shuffle).
    """

    def __init__(self, position: Position, order: Sequence[int], window: int) -> None:
        self.epoch = position.epoch
        self.order = list(order)
        self.window = window
        self.first = position.partitions_done
        self.base = position.start - position.offset
        """The read-order index of the first row of partition ``first``."""
        self.ends: list[int] = []
        """Read-order index just past each read unit (a partition, or adjacent partitions
        read by one merged query) read in full, from ``first`` on."""
        self.counts: list[int] = []
        """Partitions of the order read in full, from ``first`` on, after each unit."""
        self.delivered = position.rows
        self.finished = False

    def partition_read(self, rows: int, partitions: int = 1) -> None:
        """One more unit was read in full.

        ``partitions`` partitions of the order (more than one when adjacent ones were merged
        into one query); ``rows`` read since ``first`` began. A position inside a merged
        unit is told from its first partition: a resumed read merges from there on (the rows
        are the same).
        """
        self.ends.append(self.base + rows)
        self.counts.append((self.counts[-1] if self.counts else 0) + partitions)

    def locate(self, row: int) -> tuple[int, int]:
        """``(partitions_done, offset)`` of the read-order row ``row`` (already read)."""
        done = bisect.bisect_right(self.ends, row)
        begin = self.ends[done - 1] if done else self.base
        return self.first + (self.counts[done - 1] if done else 0), row - begin

    def position(self, rows: int | None = None) -> Position:
        """The position after ``rows`` delivered rows (default: all delivered so far)."""
        if self.finished and rows is None:
            return Position(self.epoch + 1)
        delivered = self.delivered if rows is None else rows
        start = delivered - delivered % self.window
        done, offset = self.locate(start)
        partition = self.order[done] if done < len(self.order) else None
        return Position(self.epoch, delivered, done, offset, start, partition)


def feed_state(identity: Mapping[str, Any], position: Position) -> dict[str, Any]:
    """The state dict: the feed's identity (plan, seed, share, shuffle) and its position."""
    return {"version": STATE_VERSION, **identity, **asdict(position)}


def check_state(state: Mapping[str, Any], identity: Mapping[str, Any], order_of: Any) -> Position:
    """The position of ``state``, once it is checked against the feed it is loaded into.

    Args:
        state: what a Feeder's ``state_dict()`` returned (maybe through JSON).
        identity: the loading feed's plan fingerprint, seed, share and shuffle settings.
        order_of: ``order_of(epoch)``: the plan indices of that epoch's partition order.

    Raises:
        InvalidArgumentError: not a feed state, or one of another plan, seed, share or
            shuffle (the rows after the restore would not be the ones that were due).
    """
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        raise InvalidArgumentError(
            "not a sqlfeed feed state (a dict from Feeder.state_dict(), version "
            f"{STATE_VERSION}): got {str(state)[:80]!r}"
        )
    missing = [k for k in (*identity, *_POSITION_FIELDS) if k not in state]
    if missing:
        raise InvalidArgumentError(f"the feed state lacks {', '.join(missing)}")
    differ = [f"{k}: saved {state[k]!r}, here {v!r}" for k, v in identity.items() if state[k] != v]
    if differ:
        raise InvalidArgumentError(
            f"the feed state belongs to another feed ({'; '.join(differ)}): restore it into a "
            "Feeder of the same plan, seed, share (rank/world_size) and shuffle options"
        )
    position = Position(**{k: state[k] for k in _POSITION_FIELDS})
    numbers = (position.epoch, position.rows, position.partitions_done, position.offset)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in numbers) or not (
        isinstance(position.start, int) and 0 <= position.start <= position.rows
    ):
        raise InvalidArgumentError(f"the feed state's position is corrupt: {asdict(position)}")
    order = order_of(position.epoch)
    expected = order[position.partitions_done] if position.partitions_done < len(order) else None
    if position.rows and expected != position.partition:
        raise InvalidArgumentError(
            f"the feed state resumes epoch {position.epoch} in partition {position.partition}, "
            f"but this feed's order has {expected} there: it is not the same feed"
        )
    return position

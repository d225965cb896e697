"""Spans: partitions that read positions of one ordered sequence, merged into fewer queries.

A strategy whose partitions cut one ordered sequence (a Parquet file's rows, a CSV
file's bytes, ORC stripes; a table's row ids; MySQL/MariaDB primary-key ranges ordered by
the key) gives each partition a span
(:attr:`sqlfeed.plans.model.Partition.span`): the SQL template of the sequence, with the
markers :data:`SPAN_START` and :data:`SPAN_END`, and the positions ``[start, end)`` the
partition reads. Partitions of one template whose spans touch (``a.end == b.start``)
read, together, exactly what one query over ``[a.start, b.end)`` reads, in the same
order: :func:`merge` builds that query. This module is pure (no I/O).

A reader that sees every partition in order and cannot be observed between them (the
static Feeder) can run one query per run of adjacent spans instead of one per partition:
:func:`read_units` cuts an order of partitions into at most ``shares`` consecutive
shares and merges the adjacent spans of each.

>>> t = f"SELECT * FROM t WHERE i >= {SPAN_START} AND i < {SPAN_END}"
>>> parts = [Partition(k, fill(t, 10 * k, 10 * k + 10), 10, span=(t, 10 * k, 10 * k + 10))
...          for k in range(4)]
>>> [(u.partition.sql, u.count) for u in read_units(parts, 2)]
[('SELECT * FROM t WHERE i >= 0 AND i < 20', 2), ('SELECT * FROM t WHERE i >= 20 AND i < 40', 2)]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlfeed.plans.model import Partition

__all__ = ["SPAN_END", "SPAN_START", "ReadUnit", "fill", "merge", "read_units", "template"]

SPAN_START = "sqlfeed_span_start"
"""The marker a span template has where its first position goes."""
SPAN_END = "sqlfeed_span_end"
"""The marker a span template has where its end position (exclusive) goes."""

_PROBE = (9_007_199_254_740_597, 9_007_199_254_740_881)
"""Positions no real piece has, rendered in place and then replaced by the markers."""


@dataclass(frozen=True)
class ReadUnit:
    """One query a reader runs: a partition, or adjacent partitions merged into one."""

    partition: Partition
    """What is read (the first partition's index; its SQL the merged query)."""
    count: int
    """How many partitions of the order it reads."""


def fill(text: str, start: int, end: int) -> str:
    """The SQL of positions ``[start, end)`` of the template ``text``."""
    return text.replace(SPAN_START, str(start)).replace(SPAN_END, str(end))


def template(render: Callable[[int, int], str], start: int, end: int) -> str | None:
    """A span template from ``render(start, end) -> SQL``, or None.

    ``render`` is a strategy's own renderer of the query over positions ``[start, end)``.
    None when markers cannot stand in for the positions: probe positions must appear once
    each in what ``render`` makes, and the template filled with ``start, end`` must be what
    ``render`` makes of them.
    """
    probed = render(*_PROBE)
    first, last = (str(p) for p in _PROBE)
    if probed.count(first) != 1 or probed.count(last) != 1:
        return None
    text = probed.replace(first, SPAN_START).replace(last, SPAN_END)
    return text if fill(text, start, end) == render(start, end) else None


def merge(partitions: Sequence[Partition]) -> Partition:
    """One partition reading what adjacent ``partitions`` read, in the same order.

    They are spans of one template, each starting where the one before ended.

    Raises:
        ValueError: they are not adjacent spans of one template.
    """
    first = partitions[0]
    if len(partitions) == 1:
        return first
    if not all(_adjacent(a, b) for a, b in itertools.pairwise(partitions)):
        raise ValueError("only adjacent spans of one template merge")
    assert first.span is not None
    text, start = first.span[0], first.span[1]
    end = partitions[-1].span[2] if partitions[-1].span else start
    rows = [p.estimated_rows for p in partitions]
    return Partition(
        first.index,
        fill(text, start, end),
        None if None in rows else sum(r or 0 for r in rows),
        f"partitions {first.index}..{partitions[-1].index} merged: [{start}, {end})",
        file=first.file,
        span=(text, start, end),
    )


def read_units(
    order: Sequence[Partition], shares: int, max_rows: int | None = None
) -> list[ReadUnit]:
    """The queries that read ``order`` (in that order, the same rows).

    ``order`` is cut into at most ``shares`` consecutive shares of about as many partitions,
    and in each share every run of adjacent spans is merged into one query, of at most
    ``max_rows`` estimated rows when given (a partition of unknown size is read alone then).

    >>> t = f"SELECT * FROM t WHERE i >= {SPAN_START} AND i < {SPAN_END}"
    >>> parts = [Partition(k, fill(t, 10 * k, 10 * k + 10), 10, span=(t, 10 * k, 10 * k + 10))
    ...          for k in range(6)]
    >>> [u.count for u in read_units(parts, 1, max_rows=20)]
    [2, 2, 2]
    """
    units: list[ReadUnit] = []
    count = len(order)
    shares = max(1, min(shares, count))
    for share in range(shares):
        run: list[Partition] = []
        rows = 0
        for partition in order[share * count // shares : (share + 1) * count // shares]:
            size = partition.estimated_rows
            if run and (
                not _adjacent(run[-1], partition)
                or (max_rows is not None and (size is None or rows + size > max_rows))
            ):
                units.append(ReadUnit(merge(run), len(run)))
                run, rows = [], 0
            run.append(partition)
            rows += size or 0
        if run:
            units.append(ReadUnit(merge(run), len(run)))
    return units


def _adjacent(a: Partition, b: Partition) -> bool:
    return (
        a.span is not None
        and b.span is not None
        and a.span[0] == b.span[0]
        and a.span[2] == b.span[1]
    )

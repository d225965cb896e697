"""The resume contract, one helper for every resumable facade.

A facade (static Feeder, tf + ``FeedCheckpoint`` + ``fit``, torch ``StatefulDataLoader``,
an elastic job with rewind) is driven through an :class:`Adapter`: ``full()`` is the
uninterrupted run over every epoch; ``killed(kill)`` takes ``kill.step`` batches of epoch
``kill.epoch``, saves the state there, drops everything (loader, workers, connections),
builds a new one from the state and runs to the end of the last epoch. :func:`check`
asserts, for every kill, that each epoch of the restored run (what was taken before the
kill plus what came after) is the uninterrupted run's: the same batches in the same order
where the facade promises it (``adapter.ordered``), else the same rows as a multiset; the
epochs after the restore included. Every epoch of the uninterrupted run is the table's
own rows exactly once.

:func:`kill_points` draws the kills across a whole epoch: before the first batch (step
0), the first batch, right before and right after the last batch, between epochs
(:data:`END`), at the batches where a shuffle window or a partition ends, and a few
seeded draws in between.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import duckdb

Batches = list[list[int]]
"""The batches of one epoch, each as the list of its ids."""

END = -1
"""A kill's step: after the epoch ended (the loop over it finished), before the next."""


@dataclass(frozen=True)
class Kill:
    """Save the state after ``step`` batches of epoch ``epoch`` (or :data:`END`)."""

    epoch: int
    step: int

    def __str__(self) -> str:
        return f"e{self.epoch}:{'end' if self.step == END else self.step}"


class Adapter(Protocol):
    """How the contract drives one facade."""

    name: str
    epochs: int
    ordered: bool
    """The facade promises the uninterrupted run's exact batches after a restore."""

    def full(self) -> list[Batches]:
        """The uninterrupted run: the batches of each epoch."""
        ...

    def killed(self, kill: Kill) -> tuple[list[Batches], list[Batches]]:
        """Per epoch: the batches taken before the kill, and those after the restore."""
        ...


def make_table(path: Path, rows: int) -> str:
    """A DuckDB file with table ``t(id, x)``, ids ``0 .. rows - 1``; returns its URL."""
    with duckdb.connect(str(path)) as conn:
        conn.execute(f"CREATE TABLE t AS SELECT range AS id, range * 0.5 AS x FROM range({rows})")
    return f"duckdb:///{path}"


def kill_points(
    batches: int,
    batch_size: int,
    *,
    epochs: int = 2,
    boundaries: Iterable[int] = (),
    drawn: int = 2,
    seed: int = 0,
) -> list[Kill]:
    """Kills across the first epoch of ``batches`` batches (and the start of the next).

    Args:
        batches: the batches of the first epoch in the uninterrupted run.
        batch_size: rows per batch.
        epochs: the run's epochs (a kill at the next epoch's first batch when > 1).
        boundaries: row counts where something ends (a shuffle window, a partition): the
            batches at and right after each.
        drawn: steps drawn at random (seeded) in between.
        seed: for the draws.
    """
    steps = {0, 1, batches - 1, batches, END}
    for rows in boundaries:
        at = rows // batch_size
        steps.update({at, at + 1})
    rng = random.Random(seed)
    steps.update(rng.randrange(2, max(3, batches - 1)) for _ in range(drawn))
    kills = [Kill(0, s) for s in sorted(steps) if s == END or 0 <= s <= batches]
    if epochs > 1:
        kills.append(Kill(1, 1))
    return kills


def flat(batches: Sequence[Sequence[int]]) -> list[int]:
    """The ids of ``batches``, in order."""
    return [i for batch in batches for i in batch]


def check(adapter: Adapter, kills: Sequence[Kill], rows: int) -> int:
    """Run every kill against ``adapter``'s uninterrupted run; returns the cases checked.

    Raises:
        AssertionError: naming the facade, the kill and the epoch that differs.
    """
    full = adapter.full()
    assert len(full) == adapter.epochs, f"{adapter.name}: {len(full)} epochs"
    for epoch, batches in enumerate(full):
        assert Counter(flat(batches)) == Counter(range(rows)), (
            f"{adapter.name}: the uninterrupted epoch {epoch} is not the table's rows once"
        )
    for kill in kills:
        before, after = adapter.killed(kill)
        for epoch in range(adapter.epochs):
            got = before[epoch] + after[epoch]
            where = f"{adapter.name}, kill at {kill}, epoch {epoch}"
            ids = Counter(flat(got))
            assert ids == Counter(range(rows)), (
                f"{where}: {sum(ids.values())} rows, {len(ids)} distinct, of {rows}; "
                f"{sum(n - 1 for n in ids.values() if n > 1)} twice or more"
            )
            if adapter.ordered:
                assert got == full[epoch], f"{where}: not the uninterrupted run's batches"
    return len(kills)

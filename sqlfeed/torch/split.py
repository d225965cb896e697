"""Who reads what: a plan's partitions split across DDP ranks and DataLoader workers.

Owns :func:`shard_of` (the static share of DataLoader worker ``w`` of rank ``r``) and
:func:`even_quotas` (how many batches each of them delivers so that every rank takes the
same number of steps). No torch import: the callers pass rank, world size and worker info.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.plans.model import Plan

__all__ = ["even_quotas", "shard_of"]


def shard_of(rank: int, world_size: int, worker: int, workers: int) -> tuple[int, int]:
    """``(shard, shards)``: worker ``worker`` of ``workers`` in rank ``rank`` of ``world_size``.

    Shard ``rank x workers + worker`` of ``world_size x workers``: the plan's partitions
    ``shard, shard + shards, ...`` (:meth:`sqlfeed.Plan.share`), disjoint and together all.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(
            f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}"
        )
    return rank * workers + worker, world_size * workers


def even_quotas(
    plan: Plan, counts: Mapping[int, int], world_size: int, workers: int, batch_size: int
) -> dict[tuple[int, int], int]:
    """Batches per ``(rank, worker)`` so that every rank delivers the same number.

    Each worker batches its own share (batches never span workers), so it has
    ``rows // batch_size`` full batches; a rank has the sum over its workers, and every
    rank delivers as many as the poorest rank has. A rank's quota is spread over its
    workers as evenly as their shares allow (the richest give up batches first).

    Args:
        plan: the plan.
        counts: the exact row count of each partition, by partition index.
        world_size: the number of ranks.
        workers: DataLoader workers per rank (1 without worker processes).
        batch_size: rows per batch.

    Returns:
        The quota of each ``(rank, worker)``; the rows past it are dropped this epoch.
    """
    available: dict[tuple[int, int], int] = {}
    for rank in range(world_size):
        for worker in range(workers):
            shard, shards = shard_of(rank, world_size, worker, workers)
            rows = sum(counts[p.index] for p in plan.share(shard, shards))
            available[rank, worker] = rows // batch_size
    steps = min(sum(available[r, w] for w in range(workers)) for r in range(world_size))
    quotas: dict[tuple[int, int], int] = {}
    for rank in range(world_size):
        mine = {w: available[rank, w] for w in range(workers)}
        while sum(mine.values()) > steps:
            richest = max(mine, key=lambda w: (mine[w], -w))
            mine[richest] -= 1
        quotas.update({(rank, w): n for w, n in mine.items()})
    return quotas

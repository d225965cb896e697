"""The feed layer: a plan's rows as training batches, exported to files, or summarized.

:class:`Feeder` (:mod:`sqlfeed.feed.feeder`) reads a plan's static share, or the leased
partitions it is handed (:class:`LeasedPartitions`), as Arrow, pandas or numpy batches; its
batch machinery (read-ahead, shuffle buffer, rebatching, format conversion) is in
:mod:`sqlfeed.feed.batches`, shared with the dispatch workers. :func:`export` writes a
plan's rows to files (:mod:`sqlfeed.feed.export`); :func:`compute_stats` computes feature
statistics (:mod:`sqlfeed.feed.statistics`). This layer never imports
:mod:`sqlfeed.dispatch`: the ``job=...`` options live in :class:`sqlfeed.Feeder`.
"""

from __future__ import annotations

from sqlfeed.feed.batches import FORMATS, convert, read_ahead, rebatch, shuffle_rows
from sqlfeed.feed.export import EXPORT_FORMATS, export
from sqlfeed.feed.feeder import (
    Feeder,
    LeasedBatch,
    LeasedPartitions,
    Progress,
    UnequalSharesWarning,
    unequal_shares,
)
from sqlfeed.feed.statistics import STATS_METHODS, compute_stats

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "STATS_METHODS",
    "Feeder",
    "LeasedBatch",
    "LeasedPartitions",
    "Progress",
    "UnequalSharesWarning",
    "compute_stats",
    "convert",
    "export",
    "read_ahead",
    "rebatch",
    "shuffle_rows",
    "unequal_shares",
]

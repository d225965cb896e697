"""The feed layer: a plan's rows as training batches, exported to files, or summarized.

:class:`PartitionFeeder` (:mod:`sqlfeed.feed.feeder`) reads a plan's static share, or the
leased partitions it is handed (:class:`LeasedPartitions`), as Arrow, pandas or numpy
batches (the one public Feeder is :class:`sqlfeed.Feeder`, this class with the ``job=...``
options; ``sqlfeed.feed.Feeder`` is a deprecated name of this one); its options are the
vocabulary every facade shares (:mod:`sqlfeed.feed.options`); its
batch machinery (read-ahead, shuffle buffer, rebatching, format conversion) is in
:mod:`sqlfeed.feed.batches`, shared with the dispatch workers. :func:`export` writes a
plan's rows to files (:mod:`sqlfeed.feed.export`); :func:`compute_stats` computes feature
statistics (:mod:`sqlfeed.feed.statistics`). This layer never imports
:mod:`sqlfeed.dispatch`: the ``job=...`` options are carried here
(:class:`~sqlfeed.feed.options.JobOptions`) and acted on by :class:`sqlfeed.Feeder`.
"""

from __future__ import annotations

import warnings
from typing import Any

from sqlfeed.feed.batches import FORMATS, convert, read_ahead, rebatch, shuffle_rows
from sqlfeed.feed.export import EXPORT_FORMATS, export
from sqlfeed.feed.feeder import (
    LeasedBatch,
    LeasedPartitions,
    PartitionFeeder,
    Progress,
    UnequalSharesWarning,
    unequal_shares,
)
from sqlfeed.feed.options import ColumnOptions, JobOptions, PlanOptions, ReadOptions
from sqlfeed.feed.statistics import STATS_METHODS, compute_stats

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "STATS_METHODS",
    "ColumnOptions",
    "JobOptions",
    "LeasedBatch",
    "LeasedPartitions",
    "PartitionFeeder",
    "PlanOptions",
    "Progress",
    "ReadOptions",
    "UnequalSharesWarning",
    "compute_stats",
    "convert",
    "export",
    "read_ahead",
    "rebatch",
    "shuffle_rows",
    "unequal_shares",
]


def __getattr__(name: str) -> Any:
    """``Feeder``: the deprecated name of :class:`PartitionFeeder` (one release)."""
    if name == "Feeder":
        warnings.warn(
            "sqlfeed.feed.Feeder is now sqlfeed.feed.PartitionFeeder (internal); use "
            "sqlfeed.Feeder, the one public Feeder (static and job mode)",
            DeprecationWarning,
            stacklevel=2,
        )
        return PartitionFeeder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

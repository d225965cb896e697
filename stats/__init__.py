"""Feature statistics: specs, aggregate SQL, accumulators, JSON, Keras layers and a report.

Specs, aggregate SQL per dialect, mergeable accumulators over Arrow, versioned JSON, Keras
preprocessing layers and an HTML report.

Layering: ``stats`` imports ``dialects`` and never ``sqlfeed``; it receives a callable that
runs a query and returns Arrow (see :func:`sqlfeed.stats.pushdown.compute_pushdown`). Users call
:func:`sqlfeed.compute_stats`, which brings the two together.
"""

from __future__ import annotations

from sqlfeed.stats.accumulate import StatsAccumulator, accumulate
from sqlfeed.stats.model import ColumnStats, FeatureStats, StatsSpec
from sqlfeed.stats.pushdown import compute_pushdown

__all__ = [
    "ColumnStats",
    "FeatureStats",
    "StatsAccumulator",
    "StatsSpec",
    "accumulate",
    "compute_pushdown",
]

"""sqlfeed: feed machine-learning training straight from a SQL SELECT.

``import sqlfeed`` is cheap: every public name below is imported on first use (PEP 562),
so a script, the command line or a worker process pays only for what it touches (no
pandas, pyarrow's datasets, Dask, Ray, TensorFlow or PyTorch until they are used). The
names and what they are stay those of ``__all__``; ``sqlfeed.tf``, ``sqlfeed.torch``,
``sqlfeed.ray`` and ``sqlfeed.dask`` are the framework packages, each importing its
framework only when it builds something.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them; at run time: __getattr__
    from sqlfeed import dask as dask
    from sqlfeed import ray as ray
    from sqlfeed import tf as tf
    from sqlfeed import torch as torch
    from sqlfeed.dialects import Dialect, dialect_for, get_dialect
    from sqlfeed.dispatch.feeder import Feeder
    from sqlfeed.errors import (
        CorruptStateError,
        EngineError,
        InvalidArgumentError,
        JobIncompleteError,
        MissingDependencyError,
        NotImplementedYetError,
        ParseError,
        QueryError,
        QueueBusyError,
        ShardsetError,
        SnapshotWarning,
        SqlfeedError,
        UnequalSharesWarning,
        UnknownDialectError,
        UnknownJobError,
        UnsafeQueryError,
        UnstableQueryError,
        UnsupportedError,
    )
    from sqlfeed.feed.feeder import Progress
    from sqlfeed.feed.statistics import compute_stats
    from sqlfeed.io import Source, connect
    from sqlfeed.plans.model import Partition, Plan
    from sqlfeed.plans.planner import plan
    from sqlfeed.shards import Dataset, create_dataset, open_dataset
    from sqlfeed.shards.reshard import ReshardMetrics, reshard
    from sqlfeed.sink import WriteReport, write_table
    from sqlfeed.sql import (
        ParsedQuery,
        count_sql,
        parse,
        partition_sql,
        partition_sqls,
        sample_sql,
        unstable_reasons,
    )
    from sqlfeed.stats.model import ColumnStats, FeatureStats, StatsSpec

__version__ = "0.1.0"

_ERRORS = (
    "CorruptStateError EngineError InvalidArgumentError JobIncompleteError MissingDependencyError "
    "NotImplementedYetError ParseError QueryError QueueBusyError ShardsetError SnapshotWarning "
    "SqlfeedError UnequalSharesWarning UnknownDialectError UnknownJobError UnsafeQueryError "
    "UnstableQueryError UnsupportedError"
).split()
"""The errors and warnings of :mod:`sqlfeed.errors` (its ``__all__``), imported from there."""

_HOMES: dict[str, str] = {
    **dict.fromkeys(_ERRORS, "sqlfeed.errors"),
    **dict.fromkeys(("Dialect", "dialect_for", "get_dialect"), "sqlfeed.dialects"),
    **dict.fromkeys(("dask", "ml", "ray", "tf", "torch"), ""),  # the subpackages themselves
    "Feeder": "sqlfeed.dispatch.feeder",
    "Progress": "sqlfeed.feed.feeder",
    "compute_stats": "sqlfeed.feed.statistics",
    "Source": "sqlfeed.io",
    "connect": "sqlfeed.io",
    "Partition": "sqlfeed.plans.model",
    "Plan": "sqlfeed.plans.model",
    "plan": "sqlfeed.plans.planner",
    **dict.fromkeys(("Dataset", "create_dataset", "open_dataset"), "sqlfeed.shards"),
    **dict.fromkeys(("ReshardMetrics", "reshard"), "sqlfeed.shards.reshard"),
    **dict.fromkeys(("WriteReport", "write_table"), "sqlfeed.sink"),
    "sink": "",
    **dict.fromkeys(
        "ParsedQuery count_sql parse partition_sql partition_sqls sample_sql "
        "unstable_reasons".split(),
        "sqlfeed.sql",
    ),
    **dict.fromkeys(("ColumnStats", "FeatureStats", "StatsSpec"), "sqlfeed.stats.model"),
}
"""Where each public name lives ("": it is the subpackage ``sqlfeed.NAME``)."""

_LIGHT = ("sqlfeed.dialects", "sqlfeed.errors", "sqlfeed.sql", "sqlfeed.stats.model")
"""Homes that read no data: the others may open a ``dataset:`` URL, which the shardset
package registers with :func:`sqlfeed.io.register_scheme` when it is imported."""


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562) and keep it in the module."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sqlfeed' has no attribute {name!r}")
    if home == "":
        value: Any = importlib.import_module(f"sqlfeed.{name}")
    else:
        if home not in _LIGHT:
            importlib.import_module("sqlfeed.shards")  # dataset: URLs open everywhere
            importlib.import_module("sqlfeed.lake")  # and iceberg: and delta: URLs
        value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES, *__all__})


__all__ = [
    "ColumnStats",
    "CorruptStateError",
    "Dataset",
    "Dialect",
    "EngineError",
    "FeatureStats",
    "Feeder",
    "InvalidArgumentError",
    "JobIncompleteError",
    "MissingDependencyError",
    "NotImplementedYetError",
    "ParseError",
    "ParsedQuery",
    "Partition",
    "Plan",
    "Progress",
    "QueryError",
    "QueueBusyError",
    "ReshardMetrics",
    "ShardsetError",
    "SnapshotWarning",
    "Source",
    "SqlfeedError",
    "StatsSpec",
    "UnequalSharesWarning",
    "UnknownDialectError",
    "UnknownJobError",
    "UnsafeQueryError",
    "UnstableQueryError",
    "UnsupportedError",
    "WriteReport",
    "__version__",
    "compute_stats",
    "connect",
    "count_sql",
    "create_dataset",
    "dialect_for",
    "get_dialect",
    "open_dataset",
    "parse",
    "partition_sql",
    "partition_sqls",
    "plan",
    "reshard",
    "sample_sql",
    "unstable_reasons",
    "write_table",
]

"""sqlfeed: feed machine-learning training straight from a SQL SELECT."""

from __future__ import annotations

from dialects import (
    Dialect,
    EngineError,
    InvalidArgumentError,
    MissingDependencyError,
    NotImplementedYetError,
    ParseError,
    QueryError,
    ShardsetError,
    SqlfeedError,
    UnknownDialectError,
    UnsafeQueryError,
    UnstableQueryError,
    UnsupportedError,
    dialect_for,
    get_dialect,
)
from sqlfeed import dask as dask  # sqlfeed.dask.dataframe(...); Dask is imported when used
from sqlfeed import ray as ray  # sqlfeed.ray.dataset(...); Ray is imported when used
from sqlfeed import tf as tf  # sqlfeed.tf.dataset(...); TensorFlow is imported when used
from sqlfeed import torch as torch  # sqlfeed.torch.SQLDataset(...); torch imported when used
from sqlfeed.dispatch.feeder import Feeder
from sqlfeed.feed.feeder import Progress
from sqlfeed.feed.statistics import compute_stats
from sqlfeed.io import Source, connect
from sqlfeed.plans.model import Partition, Plan
from sqlfeed.plans.planner import plan
from sqlfeed.shards import Dataset, create_dataset, open_dataset  # registers dataset: URLs
from sqlfeed.shards.reshard import ReshardMetrics, reshard
from sqlfeed.sql import (
    ParsedQuery,
    count_sql,
    parse,
    partition_sql,
    partition_sqls,
    sample_sql,
    unstable_reasons,
)
from stats.model import ColumnStats, FeatureStats, StatsSpec

__version__ = "0.1.0"

__all__ = [
    "ColumnStats",
    "Dataset",
    "Dialect",
    "EngineError",
    "FeatureStats",
    "Feeder",
    "InvalidArgumentError",
    "MissingDependencyError",
    "NotImplementedYetError",
    "ParseError",
    "ParsedQuery",
    "Partition",
    "Plan",
    "Progress",
    "QueryError",
    "ReshardMetrics",
    "ShardsetError",
    "Source",
    "SqlfeedError",
    "StatsSpec",
    "UnknownDialectError",
    "UnsafeQueryError",
    "UnstableQueryError",
    "UnsupportedError",
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
]

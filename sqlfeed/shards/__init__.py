"""The shards layer: shardsets on disk, datasets of them, and SQL over a dataset.

* :mod:`~sqlfeed.shards.manifest`: a shardset's manifest and shard file names;
  :mod:`~sqlfeed.shards.reader` and :mod:`~sqlfeed.shards.writer` read and write shard
  files; :mod:`~sqlfeed.shards.paths` replaces files and folders atomically.
* :mod:`~sqlfeed.shards.datasets`: a dataset (a folder of shardsets sharing a UID
  column), :mod:`~sqlfeed.shards.shardset` one of its shardsets,
  :mod:`~sqlfeed.shards.validation` the rules, :mod:`~sqlfeed.shards.join` the UID join.
* :mod:`~sqlfeed.shards.source`: a dataset as a DuckDB view, with its ``fragments``;
  :mod:`~sqlfeed.shards.urls`: ``dataset:`` URLs, registered with :mod:`sqlfeed.io` here.
* :mod:`~sqlfeed.shards.reshard`: a query's rows rewritten into a new shardset.
"""

from __future__ import annotations

from sqlfeed.io import register_scheme
from sqlfeed.shards.datasets import DEFAULT_SHARD_ROWS, Dataset, create_dataset, open_dataset
from sqlfeed.shards.join import join_on_uid
from sqlfeed.shards.manifest import FORMATS, MANIFEST_NAME, Manifest, ShardEntry
from sqlfeed.shards.paths import remove_path, replace_path
from sqlfeed.shards.reader import TAR_KEY, read_shard
from sqlfeed.shards.shardset import Shardset
from sqlfeed.shards.source import TRACE_COLUMNS, DatasetSource, Fragment
from sqlfeed.shards.urls import SCHEME, open_dataset_url
from sqlfeed.shards.validation import Problem, ValidationReport, validate
from sqlfeed.shards.writer import ShardWriter

__all__ = [
    "DEFAULT_SHARD_ROWS",
    "FORMATS",
    "MANIFEST_NAME",
    "TAR_KEY",
    "TRACE_COLUMNS",
    "Dataset",
    "DatasetSource",
    "Fragment",
    "Manifest",
    "Problem",
    "ShardEntry",
    "ShardWriter",
    "Shardset",
    "ValidationReport",
    "create_dataset",
    "join_on_uid",
    "open_dataset",
    "open_dataset_url",
    "read_shard",
    "remove_path",
    "replace_path",
    "validate",
]

register_scheme(SCHEME, open_dataset_url)

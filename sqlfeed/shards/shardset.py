"""One shardset of a dataset (its folder and manifest), and a dataset folder's layout.

A dataset is a folder of shardset folders (see :mod:`sqlfeed.shards.manifest`), plus a
``dataset.json`` that records the UID column; :func:`load_layout` reads it without
checking the rules (:mod:`sqlfeed.shards.validation` does that).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sqlfeed.dialects import ShardsetError
from sqlfeed.shards.manifest import MANIFEST_NAME, Manifest, ShardEntry, shard_file_name
from sqlfeed.shards.reader import read_shard

__all__ = ["DATASET_FILE", "Shardset", "load_layout", "oldest_first"]

DATASET_FILE = "dataset.json"
"""The file in a dataset folder that records its UID column."""


@dataclass(frozen=True)
class Shardset:
    """One shardset of a dataset: its folder and manifest."""

    path: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        """The shardset's name (its folder's)."""
        return self.manifest.name

    @property
    def rows(self) -> int:
        """Rows over all its shards."""
        return self.manifest.rows

    @property
    def format(self) -> str:
        """Its shard file format."""
        return self.manifest.format

    @property
    def shard_indices(self) -> list[int]:
        """The indices of its shards, in manifest order."""
        return [shard.index for shard in self.manifest.shards]

    def shard(self, index: int) -> ShardEntry | None:
        """The manifest entry of shard ``index``, None when this shardset has none."""
        for shard in self.manifest.shards:
            if shard.index == index:
                return shard
        return None

    def shard_path(self, index: int) -> Path:
        """The file of shard ``index`` (where it would be when this shardset has none)."""
        entry = self.shard(index)
        return self.path / (entry.file if entry else shard_file_name(index, self.format))

    def read_shard(self, index: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Shard ``index`` as Arrow (typed by the manifest); empty when there is none."""
        schema = self.manifest.schema
        if self.shard(index) is None:
            table = schema.empty_table()
        else:
            table = read_shard(
                self.shard_path(index), self.format, schema=schema, key=self.manifest.uid
            )
        return table.select(list(columns)) if columns is not None else table


def load_layout(folder: Path) -> tuple[Path, str, list[Shardset]]:
    """(dataset folder, UID column, shardsets) of a dataset folder or of a lone shardset folder.

    A lone shardset is a dataset of one shardset. Reads the manifests only.

    Raises:
        ShardsetError: the folder is not a dataset.
    """
    if not folder.is_dir():
        raise ShardsetError(f"{folder} is not a folder (a dataset is a folder of shardsets)")
    if (folder / MANIFEST_NAME).exists():  # a lone shardset
        manifest = Manifest.read(folder)
        return folder.parent, manifest.uid, [Shardset(folder, manifest)]
    uid = None
    marker = folder / DATASET_FILE
    if marker.exists():
        try:
            uid = str(json.loads(marker.read_text())["uid"])
        except (ValueError, KeyError, TypeError):
            raise ShardsetError(f"{marker} is not a valid dataset file") from None
    shardsets = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            if not (entry / MANIFEST_NAME).exists():
                raise ShardsetError(
                    f"{entry} has no {MANIFEST_NAME}: not a shardset (remove it from the "
                    "dataset folder, or recreate it with sqlfeed)"
                )
            shardsets.append(Shardset(entry, Manifest.read(entry)))
    if not shardsets and uid is None:
        raise ShardsetError(f"{folder} holds no shardsets (no sub-folder with a {MANIFEST_NAME})")
    uids = {s.manifest.uid for s in shardsets}
    if uid is None:
        uid = sorted(uids)[0]
    return folder, uid, shardsets


def oldest_first(shardsets: Sequence[Shardset]) -> list[Shardset]:
    """The shardsets by creation time, then by name: a dataset's order."""
    return sorted(shardsets, key=lambda s: (s.manifest.created, s.name))

"""Datasets of shardsets: feature columns split across shardsets, joined by a UID column.

A dataset is a folder of shardsets (see :mod:`sqlfeed.shards.manifest` for one shardset's
layout). Each shardset holds some feature columns of the same samples plus the UID
column, in ``shard.NNNNN.<format>`` files. The rules, checked by
:func:`sqlfeed.shards.validation.validate`:

* every shardset has the UID column, and the same UID column name;
* UIDs are unique within a shardset;
* a sample present in several shardsets is in the same shard index in each;
* shard files exist, are readable and hold what the manifest says (rows, columns);
* a feature column lives in one shardset only.

The *main* shardset is the one with the fewest samples (ties: the oldest, then the
name). Iterating a dataset walks the main shardset shard by shard and joins the other
shardsets' shard of the same index by UID, so at most one shard per shardset is in
memory; a sample missing from any shardset is skipped and counted.

>>> import tempfile, pyarrow as pa
>>> folder = tempfile.mkdtemp() + "/ds"
>>> ds = create_dataset(folder, uid="id")
>>> _ = ds.add_shardset("base", pa.table({"id": [1, 2, 3, 4], "x": [10, 20, 30, 40]}),
...                     shard_rows=2)
>>> _ = ds.add_shardset("extra", pa.table({"id": [4, 2, 1], "y": ["d", "b", "a"]}))
>>> ds = open_dataset(folder)
>>> ds.main.name, ds.main_reason
('extra', 'fewest samples (3)')
>>> ds.read().to_pylist()
[{'id': 2, 'x': 20, 'y': 'b'}, {'id': 1, 'x': 10, 'y': 'a'}, {'id': 4, 'x': 40, 'y': 'd'}]
>>> ds.skipped
1
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects import InvalidArgumentError, ShardsetError
from sqlfeed.io.views import plain, plain_schema
from sqlfeed.shards.join import join_on_uid
from sqlfeed.shards.manifest import FORMATS, Manifest, ShardEntry, shard_file_name
from sqlfeed.shards.paths import remove_path
from sqlfeed.shards.shardset import DATASET_FILE, Shardset, load_layout, oldest_first
from sqlfeed.shards.source import DatasetSource
from sqlfeed.shards.validation import check_shardsets, uid_placements
from sqlfeed.shards.writer import ShardWriter, file_schema

__all__ = ["DEFAULT_SHARD_ROWS", "Dataset", "create_dataset", "open_dataset"]

DEFAULT_SHARD_ROWS = 1_000_000
"""Rows per shard for samples new to a dataset, when ``shard_rows`` is not given."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Dataset:
    """A folder of shardsets sharing a UID column (see the module docstring)."""

    def __init__(self, path: Path, uid: str, shardsets: Sequence[Shardset]) -> None:
        self.path = path
        self.uid = uid
        self.shardsets = oldest_first(shardsets)
        self.skipped = 0
        """Samples the last iteration skipped because a shardset lacked them."""

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self.shardsets)
        return f"Dataset({str(self.path)!r}, uid={self.uid!r}, shardsets=[{names}])"

    # -- structure ------------------------------------------------------------------------

    @property
    def main(self) -> Shardset:
        """The shardset iteration walks: fewest samples, ties to the oldest, then by name."""
        if not self.shardsets:
            raise ShardsetError(f"dataset {self.path} has no shardsets yet; add one first")
        return min(self.shardsets, key=lambda s: (s.rows, s.manifest.created, s.name))

    @property
    def main_reason(self) -> str:
        """Why :attr:`main` is the main shardset, for people."""
        main = self.main
        if len(self.shardsets) == 1:
            return "the only shardset"
        tied = [s for s in self.shardsets if s.rows == main.rows]
        if len(tied) == 1:
            return f"fewest samples ({main.rows})"
        return f"fewest samples ({main.rows}), tied with {len(tied) - 1} other(s); the oldest"

    @property
    def others(self) -> list[Shardset]:
        """The shardsets joined to the main one, oldest first."""
        main = self.main
        return [s for s in self.shardsets if s is not main]

    @property
    def columns(self) -> list[str]:
        """The joined columns: the UID, then each shardset's features, oldest shardset first."""
        columns = [self.uid]
        for shardset in self.shardsets:
            columns.extend(shardset.manifest.features)
        return columns

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the joined rows."""
        fields = [self.main.manifest.schema.field(self.uid)]
        for shardset in self.shardsets:
            fields.extend(f for f in shardset.manifest.schema if f.name != self.uid)
        # As the shards are read: view types plain, no text-encoding marks.
        return plain_schema(pa.schema([f.remove_metadata() for f in fields]))

    @property
    def shard_indices(self) -> list[int]:
        """The main shardset's shard indices (the joined rows exist only there)."""
        return self.main.shard_indices

    def shardset(self, name: str) -> Shardset:
        for shardset in self.shardsets:
            if shardset.name == name:
                return shardset
        known = ", ".join(s.name for s in self.shardsets) or "none"
        raise InvalidArgumentError(f"dataset {self.path} has no shardset {name!r} (it has {known})")

    # -- iteration --------------------------------------------------------------------------

    def iter_shards(
        self,
        columns: Sequence[str] | None = None,
        *,
        on_shard: Callable[[int, int, int], None] | None = None,
    ) -> Iterator[pa.Table]:
        """The joined rows, one table per shard index of the main shardset.

        Reads one shard per shardset at a time and keeps the main shardset's row order.
        Samples missing from any shardset are skipped; :attr:`skipped` counts them (a
        sample counts once, however many shardsets lack it).

        Args:
            columns: the columns to return (default: all); only the shardsets holding
                them are read (the main one always is, it decides which samples exist).
            on_shard: called with (shard index, rows kept, rows skipped) after each shard.
        """
        wanted = self._wanted(columns)
        self.skipped = 0
        main = self.main
        for index in sorted({i for s in self.shardsets for i in s.shard_indices}):
            table = main.read_shard(
                index, [c for c in main.manifest.columns if c in wanted or c == self.uid]
            )
            uids = [table.column(self.uid)]
            for other in self.others:
                needed = [c for c in other.manifest.features if c in wanted]
                right = other.read_shard(index, [self.uid, *needed])
                uids.append(right.column(self.uid))
                table = join_on_uid(table, right, self.uid)
            chunks = [chunk for column in uids for chunk in column.chunks]
            samples = pc.count_distinct(pa.chunked_array(chunks, type=uids[0].type)).as_py()
            skipped = samples - table.num_rows
            self.skipped += skipped
            if on_shard is not None:
                on_shard(index, table.num_rows, skipped)
            if index in main.shard_indices:
                yield table.select(wanted)

    def iter_batches(
        self, columns: Sequence[str] | None = None, *, batch_rows: int = 65_536
    ) -> Iterator[pa.RecordBatch]:
        """:meth:`iter_shards` as record batches of at most ``batch_rows`` rows."""
        for table in self.iter_shards(columns):
            yield from table.to_batches(max_chunksize=batch_rows)

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All joined rows in one table (small datasets; iterate big ones)."""
        tables = list(self.iter_shards(columns))
        if not tables:
            return pa.schema([self.schema.field(c) for c in self._wanted(columns)]).empty_table()
        return pa.concat_tables(tables)

    def _wanted(self, columns: Sequence[str] | None) -> list[str]:
        if columns is None:
            return self.columns
        unknown = [c for c in columns if c not in self.columns]
        if unknown:
            raise InvalidArgumentError(
                f"dataset {self.path} has no column {', '.join(map(repr, unknown))}; "
                f"its columns: {', '.join(self.columns)}"
            )
        return list(columns)

    # -- writing ----------------------------------------------------------------------------

    def add_shardset(
        self,
        name: str,
        data: pa.Table | Mapping[int, pa.Table],
        *,
        format: str = "parquet",
        shard_rows: int | None = None,
        row_group_rows: int | None = None,
        overwrite: bool = False,
    ) -> Shardset:
        """Add a shardset of new feature columns, leaving the others untouched.

        Args:
            name: the shardset's name (its folder), a plain identifier.
            data: the UID column plus the new features. A table is laid out for you: a
                sample already in the dataset goes to the shard index it has there; new
                samples (and all samples of the first shardset) are cut in order into
                shards of ``shard_rows`` rows. A mapping ``{shard index: table}`` gives
                the layout explicitly (it is validated like any other).
            format: parquet, orc, csv, jsonl or tar.
            shard_rows: rows per shard for samples that are new to the dataset.
            row_group_rows: rows per Parquet row group / ORC stripe (the unit a big shard
                is cut into by ``fragments`` plans); default: the writer's.
            overwrite: replace an existing shardset of that name.

        Returns:
            The new shardset; the dataset is re-validated with it and refused (nothing
            left behind) if it breaks a rule.
        """
        self._check_new(name, format, shard_rows, overwrite)
        # View types (string_view, ...) have no take/filter/join kernels: plain forms.
        data = {i: plain(t) for i, t in data.items()} if isinstance(data, Mapping) else plain(data)
        shards = data if isinstance(data, Mapping) else self._layout(data, shard_rows)
        schema = _common_schema(shards, self.uid, name)
        self._check_clash(name, schema)
        written_schema = file_schema(schema, format, self.uid)
        target = self.path / name
        temporary = self.path / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
        temporary.mkdir()
        try:
            entries = _write_shards(
                temporary, shards, format, schema.names, written_schema, self.uid, row_group_rows
            )
            manifest = Manifest(name, self.uid, format, written_schema, tuple(entries))
            manifest.write(temporary)
            shardset = Shardset(target, manifest)
            candidate = Dataset(
                self.path, self.uid, [s for s in self.shardsets if s.name != name] + [shardset]
            )
            report = check_shardsets(
                candidate.path, candidate.uid, candidate.shardsets, overrides={name: temporary}
            )
            report.raise_if_invalid()
            if target.exists():
                remove_path(target)
            os.replace(temporary, target)
        except BaseException:
            remove_path(temporary)
            raise
        self.shardsets = candidate.shardsets
        return shardset

    def _check_new(self, name: str, format: str, shard_rows: int | None, overwrite: bool) -> None:
        """Refuse a bad shardset name, format or shard size, or an existing shardset."""
        if not _NAME.match(name):
            raise InvalidArgumentError(
                f"shardset name {name!r} must be a plain identifier (letters, digits, _)"
            )
        if format not in FORMATS:
            raise InvalidArgumentError(
                f"format must be one of {', '.join(FORMATS)}, not {format!r}"
            )
        if shard_rows is not None and shard_rows < 1:
            raise InvalidArgumentError(f"shard_rows must be >= 1, got {shard_rows}")
        if (self.path / name).exists() and not overwrite:
            raise InvalidArgumentError(
                f"shardset {name!r} exists in {self.path}; pass overwrite=True"
            )

    def _check_clash(self, name: str, schema: pa.Schema) -> None:
        """Refuse features that already live in another shardset."""
        clash = [
            c
            for s in self.shardsets
            if s.name != name
            for c in s.manifest.features
            if c in schema.names
        ]
        if clash:
            raise InvalidArgumentError(
                f"column(s) {', '.join(map(repr, sorted(set(clash))))} already live in another "
                "shardset; a feature belongs to one shardset (rename it)"
            )

    def _layout(self, table: pa.Table, shard_rows: int | None) -> dict[int, pa.Table]:
        """Shard index -> rows: known samples where they are, new ones cut in order."""
        if self.uid not in table.column_names:
            raise InvalidArgumentError(
                f"the new shardset has no uid column {self.uid!r}; its columns: "
                f"{', '.join(table.column_names)}"
            )
        rows = shard_rows or DEFAULT_SHARD_ROWS
        shard_of = np.full(table.num_rows, -1, dtype=np.int64)
        known = self._uid_shards()
        if known is not None:
            keyed = table.select([self.uid]).append_column(
                "_pos", pa.array(np.arange(table.num_rows, dtype=np.int64))
            )
            located = keyed.join(known, self.uid, join_type="inner", use_threads=False)
            shard_of[located.column("_pos").to_numpy()] = located.column("_shard").to_numpy()
        new = shard_of < 0
        start = max((i for s in self.shardsets for i in s.shard_indices), default=-1) + 1
        shard_of[new] = start + np.arange(int(new.sum()), dtype=np.int64) // rows
        column = pa.array(shard_of)
        return {
            int(index): table.filter(pc.equal(column, pa.scalar(int(index), pa.int64())))
            for index in np.unique(shard_of)
        }

    def _uid_shards(self) -> pa.Table | None:
        """(uid, _shard) of every sample already in the dataset."""
        placed = uid_placements(self.uid, self.shardsets)
        if placed.num_rows == 0:
            return None
        grouped = placed.group_by(self.uid, use_threads=False).aggregate([("_shard", "min")])
        return grouped.rename_columns(
            [self.uid if c == self.uid else "_shard" for c in grouped.column_names]
        )

    # -- SQL ----------------------------------------------------------------------------------

    def source(
        self, *, name: str = "dataset", trace: bool = False, connection: Any = None
    ) -> DatasetSource:
        """A DuckDB :class:`~sqlfeed.io.Source` where ``name`` is a view of the joined rows.

        Plans on it can use the ``fragments`` strategy (shard files, row groups, stripes).
        See :class:`sqlfeed.shards.source.DatasetSource`.
        """
        return DatasetSource(self, name=name, trace=trace, connection=connection)


def _write_shards(
    folder: Path,
    shards: Mapping[int, pa.Table],
    fmt: str,
    columns: Sequence[str],
    schema: pa.Schema,
    uid: str,
    row_group_rows: int | None,
) -> list[ShardEntry]:
    """Write each shard's ``columns`` into ``folder`` with the written ``schema``."""
    entries = []
    for index in sorted(shards):
        table = shards[index]
        file = shard_file_name(index, fmt)
        with ShardWriter(
            folder / file, fmt, schema, uid=uid, row_group_rows=row_group_rows
        ) as writer:
            writer.write(table.select(list(columns)))
        size = writer.close()
        entries.append(ShardEntry(index, file, table.num_rows, size, writer.uid_digest))
    return entries


def _common_schema(shards: Mapping[int, pa.Table], uid: str, name: str) -> pa.Schema:
    if not shards:
        raise InvalidArgumentError(f"shardset {name!r} has no rows to write")
    schemas = {index: table.schema for index, table in shards.items()}
    first = next(iter(schemas.values()))
    if uid not in first.names:
        raise InvalidArgumentError(f"shardset {name!r} has no uid column {uid!r}")
    for index, schema in schemas.items():
        if index < 0:
            raise InvalidArgumentError(f"shard indices must be >= 0, got {index}")
        if not schema.equals(first):
            raise InvalidArgumentError(
                f"shardset {name!r}: shard {index} has columns {schema} but another has {first}"
            )
    return pa.schema([first.field(uid), *(f for f in first if f.name != uid)])


# -- opening and creating -------------------------------------------------------------------


def create_dataset(path: str | os.PathLike[str], *, uid: str = "uid") -> Dataset:
    """Create an empty dataset folder (``dataset.json`` records the UID column)."""
    folder = Path(path)
    if folder.exists() and any(folder.iterdir()):
        raise InvalidArgumentError(f"{folder} exists and is not empty; open it with open_dataset")
    if not folder.parent.exists():
        raise InvalidArgumentError(f"the folder {folder.parent} does not exist")
    folder.mkdir(exist_ok=True)
    (folder / DATASET_FILE).write_text(json.dumps({"sqlfeed_dataset": 1, "uid": uid}) + "\n")
    return Dataset(folder, uid, [])


def open_dataset(
    path: str | os.PathLike[str], *, validate: bool = True, deep: bool = False
) -> Dataset:
    """Open a dataset folder (or one shardset folder, as a dataset of one shardset).

    Args:
        path: the dataset folder.
        validate: check the rules first (see :func:`sqlfeed.shards.validation.validate`)
            and refuse a broken dataset.
        deep: also read every shard completely (slower; catches truncated files
            whose footer is intact and duplicate or misplaced UIDs).

    Raises:
        ShardsetError: the folder is not a dataset, or it breaks a rule.
    """
    dataset = Dataset(*load_layout(Path(path)))
    if validate:
        check_shardsets(dataset.path, dataset.uid, dataset.shardsets, deep=deep).raise_if_invalid()
    return dataset

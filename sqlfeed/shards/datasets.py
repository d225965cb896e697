"""Datasets of shardsets: feature columns split across shardsets, joined by a UID column.

A dataset is a folder of shardsets (see :mod:`sqlfeed.shards.files` for one shardset's
layout). Each shardset holds some feature columns of the same samples plus the UID
column, in ``shard.NNNNN.<format>`` files. The rules, checked by :func:`validate`:

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dialects import InvalidArgumentError, ShardsetError
from sqlfeed.shards.files import (
    FORMATS,
    MANIFEST_NAME,
    Manifest,
    ShardEntry,
    ShardWriter,
    iter_shard_files,
    read_shard,
    remove_path,
    shard_file_name,
    shard_index_of,
    tar_schema,
)

__all__ = [
    "Dataset",
    "Problem",
    "Shardset",
    "ValidationReport",
    "create_dataset",
    "open_dataset",
    "validate",
]

DATASET_FILE = "dataset.json"
DEFAULT_SHARD_ROWS = 1_000_000
EXAMPLES = 5
"""Offending UIDs quoted in an error (the count says how many there are)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Shardset:
    """One shardset of a dataset: its folder and manifest."""

    path: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def format(self) -> str:
        return self.manifest.format

    @property
    def shard_indices(self) -> list[int]:
        return [shard.index for shard in self.manifest.shards]

    def shard(self, index: int) -> ShardEntry | None:
        """The manifest entry of shard ``index``, None when this shardset has none."""
        for shard in self.manifest.shards:
            if shard.index == index:
                return shard
        return None

    def shard_path(self, index: int) -> Path:
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


@dataclass(frozen=True)
class Problem:
    """One broken rule: which shardset and shard, and what is wrong."""

    shardset: str
    message: str
    shard: int | None = None

    def __str__(self) -> str:
        where = self.shardset + (f" shard {self.shard}" if self.shard is not None else "")
        return f"{where}: {self.message}"


@dataclass
class ValidationReport:
    """What :func:`validate` found: the problems (none means valid) and what it checked."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    shardsets: int = 0
    shards: int = 0
    rows: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_invalid(self) -> None:
        """Raise :class:`ShardsetError` with the first problem (and how many more)."""
        if self.problems:
            more = len(self.problems) - 1
            tail = (
                f" (and {more} more problem{'s' * (more > 1)}; "
                f"run 'sqlfeed shardset validate {self.path}')"
                if more
                else ""
            )
            raise ShardsetError(f"invalid dataset {self.path}: {self.problems[0]}{tail}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "valid": self.ok,
            "shardsets": self.shardsets,
            "shards": self.shards,
            "rows": self.rows,
            "problems": [
                {"shardset": p.shardset, "shard": p.shard, "message": p.message}
                for p in self.problems
            ],
        }


class Dataset:
    """A folder of shardsets sharing a UID column (see the module docstring)."""

    def __init__(self, path: Path, uid: str, shardsets: Sequence[Shardset]) -> None:
        self.path = path
        self.uid = uid
        self.shardsets = sorted(shardsets, key=lambda s: (s.manifest.created, s.name))
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
        return pa.schema(fields)

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
                table = _join(table, right, self.uid)
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
        target = self.path / name
        if target.exists() and not overwrite:
            raise InvalidArgumentError(
                f"shardset {name!r} exists in {self.path}; pass overwrite=True"
            )
        shards = data if isinstance(data, Mapping) else self._layout(data, shard_rows)
        schema = _common_schema(shards, self.uid, name)
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
        written_schema = tar_schema(schema, self.uid) if format == "tar" else schema
        temporary = self.path / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
        temporary.mkdir()
        try:
            entries = []
            for index in sorted(shards):
                table = shards[index]
                file = shard_file_name(index, format)
                with ShardWriter(
                    temporary / file,
                    format,
                    written_schema,
                    uid=self.uid,
                    row_group_rows=row_group_rows,
                ) as writer:
                    writer.write(table.select(schema.names))
                entries.append(ShardEntry(index, file, table.num_rows, writer.close()))
            manifest = Manifest(name, self.uid, format, written_schema, tuple(entries))
            manifest.write(temporary)
            shardset = Shardset(target, manifest)
            candidate = Dataset(
                self.path, self.uid, [s for s in self.shardsets if s.name != name] + [shardset]
            )
            report = _validate_dataset(candidate, overrides={name: temporary})
            report.raise_if_invalid()
            if target.exists():
                remove_path(target)
            os.replace(temporary, target)
        except BaseException:
            remove_path(temporary)
            raise
        self.shardsets = candidate.shardsets
        return shardset

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
        placed = _placements(self.uid, self.shardsets)
        if placed.num_rows == 0:
            return None
        grouped = placed.group_by(self.uid, use_threads=False).aggregate([("_shard", "min")])
        return grouped.rename_columns(
            [self.uid if c == self.uid else "_shard" for c in grouped.column_names]
        )

    # -- SQL ----------------------------------------------------------------------------------

    def source(self, *, name: str = "dataset", trace: bool = False, connection: Any = None) -> Any:
        """A DuckDB :class:`~sqlfeed.io.sources.Source` where ``name`` is a view of the joined rows.

        Plans on it can use the ``fragments`` strategy (shard files, row groups, stripes).
        See :class:`sqlfeed.shards.source.DatasetSource`.
        """
        from sqlfeed.shards.source import DatasetSource

        return DatasetSource(self, name=name, trace=trace, connection=connection)


def _join(left: pa.Table, right: pa.Table, uid: str) -> pa.Table:
    """Inner join on ``uid`` keeping ``left``'s row order."""
    if left.column(uid).equals(right.column(uid)):  # aligned shards: no join needed
        for name in right.column_names:
            if name != uid:
                left = left.append_column(right.schema.field(name), right.column(name))
        return left
    order = "_sqlfeed_pos"
    numbered = left.append_column(order, pa.array(range(left.num_rows), pa.int64()))
    joined = numbered.join(right, uid, join_type="inner", use_threads=False)
    joined = joined.sort_by(order)
    names = [*left.column_names, *(c for c in right.column_names if c != uid)]
    return joined.select(names)


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
        validate: check the rules first (see :func:`validate`) and refuse a broken dataset.
        deep: also read every shard file completely (slower; catches truncated files
            whose footer is intact and duplicate or misplaced UIDs).

    Raises:
        ShardsetError: the folder is not a dataset, or it breaks a rule.
    """
    dataset = _load(Path(path))
    if validate:
        _validate_dataset(dataset, deep=deep).raise_if_invalid()
    return dataset


def _load(folder: Path) -> Dataset:
    if not folder.is_dir():
        raise ShardsetError(f"{folder} is not a folder (a dataset is a folder of shardsets)")
    if (folder / MANIFEST_NAME).exists():  # a lone shardset
        manifest = Manifest.read(folder)
        return Dataset(folder.parent, manifest.uid, [Shardset(folder, manifest)])
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
    return Dataset(folder, uid, shardsets)


# -- validation -------------------------------------------------------------------------------


def validate(path: str | os.PathLike[str], *, deep: bool = True) -> ValidationReport:
    """Check a dataset folder against every shardset rule; returns all problems found.

    Args:
        path: the dataset (or lone shardset) folder.
        deep: read every shard completely (row counts, UID uniqueness and placement);
            otherwise only manifests, file presence and Parquet/ORC footers are checked.
    """
    try:
        dataset = _load(Path(path))
    except ShardsetError as err:
        report = ValidationReport(str(path))
        report.problems.append(Problem(Path(path).name, str(err)))
        return report
    return _validate_dataset(dataset, deep=deep)


def _validate_dataset(
    dataset: Dataset, *, deep: bool = True, overrides: Mapping[str, Path] | None = None
) -> ValidationReport:
    report = ValidationReport(str(dataset.path), shardsets=len(dataset.shardsets))
    folders = {s.name: (overrides or {}).get(s.name, s.path) for s in dataset.shardsets}
    shardsets = [Shardset(folders[s.name], s.manifest) for s in dataset.shardsets]
    owners: dict[str, str] = {}
    for shardset in shardsets:
        manifest = shardset.manifest
        report.shards += len(manifest.shards)
        report.rows += manifest.rows
        if manifest.uid != dataset.uid:
            report.problems.append(
                Problem(
                    shardset.name,
                    f"its uid column is {manifest.uid!r}, the dataset's is {dataset.uid!r}",
                )
            )
        for column in manifest.features:
            if column in owners:
                report.problems.append(
                    Problem(
                        shardset.name, f"column {column!r} is also in shardset {owners[column]!r}"
                    )
                )
            owners.setdefault(column, shardset.name)
        report.problems.extend(_check_files(shardset, deep))
    if deep and not report.problems:
        report.problems.extend(_check_uids(dataset.uid, shardsets))
    return report


def _check_files(shardset: Shardset, deep: bool) -> list[Problem]:
    problems = []
    manifest = shardset.manifest
    listed = {shard.file for shard in manifest.shards}
    indices = [shard.index for shard in manifest.shards]
    if len(set(indices)) != len(indices):
        problems.append(Problem(shardset.name, "the manifest lists a shard index twice"))
    for index, fmt, file in iter_shard_files(shardset.path):
        if file.name not in listed:
            problems.append(
                Problem(shardset.name, f"{file.name} is not in the manifest (a stray file)", index)
            )
        elif fmt != manifest.format:
            problems.append(Problem(shardset.name, f"{file.name} is not {manifest.format}", index))
    for shard in manifest.shards:
        path = shardset.path / shard.file
        if shard_index_of(shard.file) != (shard.index, manifest.format):
            problems.append(
                Problem(
                    shardset.name,
                    f"manifest file name {shard.file!r} is not "
                    f"{shard_file_name(shard.index, manifest.format)}",
                    shard.index,
                )
            )
            continue
        if not path.exists():
            problems.append(Problem(shardset.name, f"{shard.file} is missing", shard.index))
            continue
        try:
            rows, names = _shard_shape(path, manifest, deep)
        except ShardsetError as err:
            problems.append(Problem(shardset.name, str(err), shard.index))
            continue
        if manifest.uid not in names:
            problems.append(
                Problem(
                    shardset.name, f"{shard.file} has no uid column {manifest.uid!r}", shard.index
                )
            )
        missing = [c for c in manifest.columns if c not in names and manifest.format != "tar"]
        if missing:
            problems.append(
                Problem(
                    shardset.name, f"{shard.file} lacks column(s) {', '.join(missing)}", shard.index
                )
            )
        if rows is not None and rows != shard.rows:
            problems.append(
                Problem(
                    shardset.name,
                    f"{shard.file} has {rows} rows, the manifest says {shard.rows}",
                    shard.index,
                )
            )
    return problems


def _shard_shape(path: Path, manifest: Manifest, deep: bool) -> tuple[int | None, list[str]]:
    """(rows, column names) of a shard file; rows None when not known without reading it."""
    fmt = manifest.format
    rows: int | None = None
    names = manifest.columns
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            rows, names = meta.num_rows, list(meta.schema.to_arrow_schema().names)
        elif fmt == "orc":
            import pyarrow.orc as orc

            orc_file = orc.ORCFile(path)
            rows, names = orc_file.nrows, list(orc_file.schema.names)
    except (OSError, ValueError, pa.ArrowException) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ShardsetError(f"cannot read {path.name}: {first} (truncated or corrupt)") from None
    if deep and all(c in names for c in manifest.columns):
        table = read_shard(path, fmt, schema=manifest.schema, key=manifest.uid)
        return table.num_rows, table.column_names
    return rows, names


def _placements(uid: str, shardsets: Sequence[Shardset]) -> pa.Table:
    """(uid, _shard, _set) for every sample of every shardset: reads only UID columns."""
    parts = []
    for number, shardset in enumerate(shardsets):
        for index in shardset.shard_indices:
            uids = shardset.read_shard(index, [uid]).column(uid)
            parts.append(
                pa.table(
                    {
                        uid: uids,
                        "_shard": pa.array(np.full(len(uids), index, dtype=np.int64)),
                        "_set": pa.array(np.full(len(uids), number, dtype=np.int32)),
                    }
                )
            )
    if not parts:
        return pa.table(
            {
                uid: pa.array([], pa.int64()),
                "_shard": pa.array([], pa.int64()),
                "_set": pa.array([], pa.int32()),
            }
        )
    return pa.concat_tables(parts, promote_options="permissive")


def _check_uids(uid: str, shardsets: Sequence[Shardset]) -> list[Problem]:
    """Unique UIDs within each shardset; the same shard index across shardsets."""
    problems: list[Problem] = []
    placed = _placements(uid, shardsets)
    for number, shardset in enumerate(shardsets):
        table = placed.filter(pc.equal(placed.column("_set"), number))
        nulls = table.column(uid).null_count
        if nulls:
            problems.append(Problem(shardset.name, f"{nulls} sample(s) have a NULL uid"))
        counts = table.group_by(uid, use_threads=False).aggregate(
            [("_shard", "count"), ("_shard", "list")]
        )
        dupes = counts.filter(pc.greater(counts.column("_shard_count"), 1)).sort_by(uid)
        if dupes.num_rows:
            examples = [
                f"{value!r} (shards {', '.join(map(str, sorted(shards)))})"
                for value, shards in zip(
                    dupes.column(uid).to_pylist()[:EXAMPLES],
                    dupes.column("_shard_list").to_pylist()[:EXAMPLES],
                    strict=True,
                )
            ]
            problems.append(
                Problem(
                    shardset.name,
                    f"{dupes.num_rows} uid(s) appear more than once: {', '.join(examples)}",
                )
            )
    if problems or len(shardsets) < 2:
        return problems
    spread = placed.group_by(uid, use_threads=False).aggregate(
        [("_shard", "count_distinct"), ("_shard", "list"), ("_set", "list")]
    )
    moved = spread.filter(pc.greater(spread.column("_shard_count_distinct"), 1)).sort_by(uid)
    if moved.num_rows:
        examples = []
        for value, shards, sets in zip(
            moved.column(uid).to_pylist()[:EXAMPLES],
            moved.column("_shard_list").to_pylist()[:EXAMPLES],
            moved.column("_set_list").to_pylist()[:EXAMPLES],
            strict=True,
        ):
            where = ", ".join(
                f"shard {shard} in {shardsets[number].name}"
                for shard, number in sorted(zip(shards, sets, strict=True), key=lambda p: p[1])
            )
            examples.append(f"{value!r} ({where})")
        problems.append(
            Problem(
                "dataset",
                f"{moved.num_rows} sample(s) sit in different shard indices in different "
                f"shardsets: {'; '.join(examples)}",
            )
        )
    return problems

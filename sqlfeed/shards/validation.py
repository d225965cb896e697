"""The dataset rules, and the checks that find every broken one.

The rules (see :mod:`sqlfeed.shards.datasets`):

* every shardset has the UID column, and the same UID column name;
* UIDs are unique within a shardset;
* a sample present in several shardsets is in the same shard index in each;
* shard files exist, are readable and hold what the manifest says (rows, columns);
* a feature column lives in one shardset only.

:func:`validate` checks a folder and reports all problems; opening a dataset or adding a
shardset refuses a dataset with any (:meth:`ValidationReport.raise_if_invalid`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.orc as orc
import pyarrow.parquet as pq

from sqlfeed.dialects import ShardsetError
from sqlfeed.shards.manifest import (
    Manifest,
    UidDigest,
    iter_shard_files,
    shard_file_name,
    shard_index_of,
)
from sqlfeed.shards.reader import read_shard
from sqlfeed.shards.shardset import Shardset, load_layout, oldest_first

__all__ = [
    "EXAMPLES",
    "Problem",
    "ValidationReport",
    "check_shardsets",
    "uid_placements",
    "validate",
]

EXAMPLES = 5
"""Offending UIDs quoted in an error (the count says how many there are)."""


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


def validate(path: str | os.PathLike[str], *, deep: bool = True) -> ValidationReport:
    """Check a dataset folder against every shardset rule; returns all problems found.

    Args:
        path: the dataset (or lone shardset) folder.
        deep: read every shard completely (row counts, UID uniqueness and placement);
            otherwise only manifests, file presence and Parquet/ORC footers are checked.
    """
    try:
        folder, uid, shardsets = load_layout(Path(path))
    except ShardsetError as err:
        report = ValidationReport(str(path))
        report.problems.append(Problem(Path(path).name, str(err)))
        return report
    return check_shardsets(folder, uid, oldest_first(shardsets), deep=deep)


def check_shardsets(
    path: Path,
    uid: str,
    shardsets: Sequence[Shardset],
    *,
    deep: bool = True,
    overrides: Mapping[str, Path] | None = None,
) -> ValidationReport:
    """Check a dataset's shardsets (oldest first) against every rule.

    Args:
        path: the dataset folder (for the report).
        uid: the dataset's UID column.
        shardsets: its shardsets, oldest first.
        deep: read every shard completely (see :func:`validate`).
        overrides: shardset name -> the folder to check instead of its own (a shardset
            being written in a temporary folder).
    """
    report = ValidationReport(str(path), shardsets=len(shardsets))
    folders = {s.name: (overrides or {}).get(s.name, s.path) for s in shardsets}
    shardsets = [Shardset(folders[s.name], s.manifest) for s in shardsets]
    owners: dict[str, str] = {}
    for shardset in shardsets:
        manifest = shardset.manifest
        report.shards += len(manifest.shards)
        report.rows += manifest.rows
        if manifest.uid != uid:
            report.problems.append(
                Problem(
                    shardset.name,
                    f"its uid column is {manifest.uid!r}, the dataset's is {uid!r}",
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
        report.problems.extend(_check_uids(uid, shardsets))
    if deep and not report.problems:
        report.problems.extend(_check_digests(shardsets))
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


def _check_digests(shardsets: Sequence[Shardset]) -> list[Problem]:
    """Shards whose uids are not the ones, in the order, their manifest's digest says.

    Aligned shards are joined by position: a shard rewritten behind the manifest's back
    would pair the wrong rows.
    """
    problems = []
    for shardset in shardsets:
        uid = shardset.manifest.uid
        for shard in shardset.manifest.shards:
            if not shard.uid_digest:
                continue
            digest = UidDigest()
            digest.update(shardset.read_shard(shard.index, [uid]).column(uid))
            if digest.hexdigest() != shard.uid_digest:
                problems.append(
                    Problem(
                        shardset.name,
                        f"{shard.file} does not hold the uids the manifest's digest says, in "
                        "that order (rewritten outside sqlfeed?): rewrite the shardset",
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
            meta = pq.ParquetFile(path).metadata
            rows, names = meta.num_rows, list(meta.schema.to_arrow_schema().names)
        elif fmt == "orc":
            orc_file = orc.ORCFile(path)
            rows, names = orc_file.nrows, list(orc_file.schema.names)
    except (OSError, ValueError, pa.ArrowException) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ShardsetError(f"cannot read {path.name}: {first} (truncated or corrupt)") from None
    if deep and all(c in names for c in manifest.columns):
        table = read_shard(path, fmt, schema=manifest.schema, key=manifest.uid)
        return table.num_rows, table.column_names
    return rows, names


def uid_placements(uid: str, shardsets: Sequence[Shardset]) -> pa.Table:
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
    placed = uid_placements(uid, shardsets)
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

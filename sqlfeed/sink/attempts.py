"""A job's output folder where each partition is committed by exactly one attempt.

Layout::

    DIR/_job.json                                the job the folder belongs to
    DIR/part-PPPPP-<attempt>-BBBBBB.parquet      batch B of partition P, by one attempt
    DIR/_manifest-PPPPP.json                     partition P committed: its attempt's files
    DIR/.<name>.<hex>                            a file being written (hidden)

An attempt (one lease on a partition) writes all of the partition's batches under its own
names, so attempts never touch each other's files, then commits the partition by making
its manifest with a hard link that fails when a manifest is there: exactly one attempt
commits each partition, whatever order its rows came in; the files of the others are
garbage, removed by :func:`sweep`. :func:`committed` lists the committed files.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError

__all__ = ["Attempt", "check_folder", "committed", "sweep"]


def check_folder(root: Path, identity: dict[str, Any]) -> None:
    """Make ``root`` for the job ``identity`` names, or check it holds that job's files.

    Raises:
        InvalidArgumentError: the folder holds another job's files, or cannot be written.
    """
    marker = root / "_job.json"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if marker.exists():
            found = json.loads(marker.read_text(encoding="utf-8"))
            if found != identity:
                raise InvalidArgumentError(
                    f"--out {root} holds the output of job {found.get('job')!r}, not of this "
                    "one: give each job its own folder"
                )
            return
        _publish(marker, json.dumps(identity) + "\n", replace=True)
    except OSError as err:
        raise InvalidArgumentError(f"--out {root}: {err.strerror or err}") from None


class Attempt:
    """One attempt at one partition: its batch files, then its manifest (or nothing)."""

    def __init__(self, root: Path, partition: int) -> None:
        self.root = root
        self.partition = partition
        self.name = uuid.uuid4().hex[:12]
        self.files: list[dict[str, Any]] = []
        self.superseded = False
        """Another attempt committed the partition and the job's :func:`sweep` removed
        this one's files while it wrote (a late attempt, its lease lost): it writes no more
        and does not commit."""

    def write(self, batch: pa.RecordBatch) -> None:
        """Write the next batch of the partition (nothing, once :attr:`superseded`)."""
        if self.superseded:
            return
        name = f"part-{self.partition:05d}-{self.name}-{len(self.files):06d}.parquet"
        temporary = self.root / f".{name}.{uuid.uuid4().hex[:8]}"
        try:
            pq.write_table(pa.Table.from_batches([batch]), temporary)
            os.replace(temporary, self.root / name)
        except FileNotFoundError:
            if not self._manifest().exists():
                raise
            temporary.unlink(missing_ok=True)
            self.superseded = True
            self.discard()
            return
        self.files.append({"name": name, "rows": batch.num_rows})

    def commit(self) -> bool:
        """Make the partition's manifest.

        False: another attempt made it first (this attempt's files are removed).
        """
        if self.superseded:
            return False
        manifest = {
            "partition": self.partition,
            "attempt": self.name,
            "rows": sum(int(f["rows"]) for f in self.files),
            "files": self.files,
        }
        if _publish(self._manifest(), json.dumps(manifest) + "\n", replace=False):
            return True
        self.discard()
        return False

    def _manifest(self) -> Path:
        return self.root / f"_manifest-{self.partition:05d}.json"

    def discard(self) -> None:
        """Remove this attempt's files (it lost, or gave up)."""
        for item in self.files:
            (self.root / item["name"]).unlink(missing_ok=True)
        self.files = []


def committed(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(partition, file)`` of every committed batch file, in partition and batch order."""
    found: list[tuple[int, Path]] = []
    for manifest in sorted(Path(root).glob("_manifest-*.json")):
        data = json.loads(manifest.read_text(encoding="utf-8"))
        found += [(int(data["partition"]), Path(root) / f["name"]) for f in data["files"]]
    return found


_BATCH_FILE = re.compile(r"(\.)?part-\d{5,}-[0-9a-f]{12}-\d{6,}\.parquet(?(1)\.[0-9a-f]{8})")
"""The name of an attempt's batch file (:meth:`Attempt.write`), or its temporary (hidden)."""


def sweep(root: str | os.PathLike[str]) -> None:
    """Remove the files no manifest lists (lost attempts, temporaries): once the job is complete.

    Only files named as :class:`Attempt` names them: other ``part-*`` files (Spark's) are
    not sqlfeed's to remove.
    """
    keep = {path.name for _, path in committed(root)}
    for path in Path(root).iterdir():
        if _BATCH_FILE.fullmatch(path.name) and path.name not in keep:
            path.unlink(missing_ok=True)


def _publish(path: Path, text: str, *, replace: bool) -> bool:
    """Write ``text`` to ``path`` whole (aside, then linked or renamed into place).

    Without ``replace``, only if ``path`` does not exist (False then).
    """
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        temporary.unlink(missing_ok=True)

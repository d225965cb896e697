"""A job's batches as Parquet files in a folder: what ``sqlfeed worker --out DIR`` writes.

Layout::

    DIR/_job.json                          the job the folder belongs to (name, plan; a
                                           followed job's name, for all its epoch jobs)
    DIR/epoch=E/part-PPPPP-BBBBBB.parquet  batch B of partition P in epoch E
    DIR/epoch=E/_manifest-PPPPP.json       partition P of epoch E is committed: its files
    DIR/epoch=E/.part-PPPPP-BBBBBB.parquet.<hex>   a batch being written (hidden)

Rules that keep the folder true with many workers, dying and stalling:

* A batch file appears at once, complete: it is written under a hidden temporary name,
  then hard-linked to its final name only if no file of that name exists yet, and only
  while the worker's lease is trusted. A late writer (a worker that stalled while writing
  and lost its lease) thus never replaces a file another worker wrote and acknowledged;
  a batch delivered again has the same rows (resuming relies on it), so the file that is
  there stays.
* A manifest is written (aside, then renamed) once every batch of its partition is
  acknowledged, before the partition is completed in the queue. It lists the partition's
  batch files and their row counts: the committed data is exactly the files the manifests
  list. Files without a manifest (a partition still running, or cut short by
  ``even_batches``) are not committed.
* A worker taking a partition removes the temporaries earlier holders left for it (and,
  on the partition's first attempt of a run, files and a manifest an earlier run of the
  job left); once the job is done, a worker removes every temporary left.

:func:`committed_files` lists the committed files.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.dispatch.queue import JobSpec, Lease
from sqlfeed.dispatch.worker import Delivery

__all__ = ["BatchFolder", "committed_files"]

_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


class BatchFolder:
    """Where a worker writes its batches (see the module's docstring).

    Args:
        root: the folder (made if missing).
        spec: the job: a folder holds the batches of one job.

    Raises:
        InvalidArgumentError: ``root`` is not a folder that can be written, or it holds
            another job's batches. Checked here, before the worker takes any lease.
    """

    def __init__(self, root: str | os.PathLike[str], spec: JobSpec) -> None:
        self.root = Path(root)
        self.spec = spec
        identity = {"job": spec.name, "fingerprint": spec.plan.fingerprint}
        self.first_epoch = 0
        """The folder's epoch of the job's epoch 0 (a followed job's epoch ``k`` is ``k``)."""
        if spec.follow is not None:  # one folder for every epoch's job
            identity = {"job": spec.follow["job"], "fingerprint": "follow"}
            self.first_epoch = int(spec.follow["epoch"])
        marker = self.root / "_job.json"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if marker.exists():
                found = json.loads(marker.read_text(encoding="utf-8"))
                if {k: found.get(k) for k in identity} != identity:
                    raise InvalidArgumentError(
                        f"--out {self.root} holds the batches of job {found.get('job')!r} "
                        f"(plan {found.get('fingerprint')}), not of this one: give each job "
                        "its own folder"
                    )
            else:
                _write_atomically(marker, json.dumps(identity) + "\n")
        except InvalidArgumentError:
            raise  # another job's folder: its own advice
        except (OSError, ValueError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise InvalidArgumentError(
                f"--out {self.root}: cannot write batches there ({reason}); give a folder "
                "that can be created and written"
            ) from None

    def epoch_dir(self, epoch: int) -> Path:
        """The folder of one epoch's files."""
        return self.root / f"epoch={self.first_epoch + epoch}"

    def on_lease(self, lease: Lease, trusted: Callable[[], bool]) -> None:
        """A partition was taken: remove what earlier holders (or runs) left for it."""
        directory = self.epoch_dir(lease.epoch)
        if not directory.is_dir() or not trusted():
            return
        stem = f"part-{lease.partition:05d}-"
        leftovers = list(directory.glob(f".{stem}*"))
        if lease.attempt == 1 and lease.offset == 0:  # an earlier run's files are stale
            leftovers += list(directory.glob(f"{stem}*.parquet"))
            leftovers.append(_manifest(directory, lease.partition))
        for path in leftovers:
            path.unlink(missing_ok=True)

    def write(self, delivery: Delivery, trusted: Callable[[], bool]) -> bool:
        """Write one batch; False when it was not put in place (the lease is not ours)."""
        directory = self.epoch_dir(delivery.epoch)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / _batch_name(delivery.partition, delivery.offset)
        temporary = directory / f".{final.name}.{uuid.uuid4().hex[:8]}"
        try:
            pq.write_table(pa.Table.from_batches([delivery.batch]), temporary)
            if not trusted():
                return False
            _link_unless_present(temporary, final)
            return True
        except FileNotFoundError:
            return False  # the next holder removed our temporary: the lease is not ours
        finally:
            temporary.unlink(missing_ok=True)

    def on_partition(self, lease: Lease, batches: int) -> None:
        """Every batch of a partition is acknowledged: write its manifest.

        A batch this folder lacks was written by an earlier holder of the partition into
        its own folder (a worker on another host, with its own ``--out``): the manifest
        lists it with ``"elsewhere": true`` and no row count, and
        :func:`committed_files` finds it in the other folders it is given.

        Raises:
            OSError: the manifest cannot be written; the worker then gives the partition
                back uncompleted.
        """
        directory = self.epoch_dir(lease.epoch)
        files: list[dict[str, Any]] = []
        for offset in range(batches):
            name = _batch_name(lease.partition, offset)
            path = directory / name
            if path.is_file():
                files.append({"name": name, "rows": pq.ParquetFile(path).metadata.num_rows})
            else:
                files.append({"name": name, "rows": None, "elsewhere": True})
        manifest = {
            "job": self.spec.name,
            "fingerprint": self.spec.plan.fingerprint,
            "epoch": self.first_epoch + lease.epoch,
            "partition": lease.partition,
            "batches": batches,
            "rows": sum(int(f["rows"]) for f in files if f["rows"] is not None),
            "files": files,
        }
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(_manifest(directory, lease.partition), json.dumps(manifest) + "\n")

    def finish(self) -> None:
        """The job is done: remove every temporary left (by workers that died writing)."""
        for path in self.root.glob("epoch=*/.part-*"):
            path.unlink(missing_ok=True)


def committed_files(
    root: str | os.PathLike[str],
    epoch: int | None = None,
    *,
    others: Sequence[str | os.PathLike[str]] = (),
) -> list[Path]:
    """The batch files the manifests of ``root`` list (of one ``epoch``, or all).

    In epoch, partition and batch order: exactly the committed data.

    Workers on several hosts, each with its own ``--out`` folder: pass the other folders
    as ``others``; a batch a manifest lists as written elsewhere is looked up there (each
    partition's manifest is in the folder of the worker that completed it).

    Raises:
        FileNotFoundError: a listed batch is in none of the folders.
    """
    folders = [Path(root), *(Path(other) for other in others)]
    pattern = "epoch=*" if epoch is None else f"epoch={epoch}"
    found: list[tuple[int, int, Path]] = []
    for folder in folders:
        for manifest in folder.glob(f"{pattern}/_manifest-*.json"):
            data: dict[str, Any] = json.loads(manifest.read_text(encoding="utf-8"))
            where = (int(data["epoch"]), int(data["partition"]))
            relative = manifest.parent.relative_to(folder)
            found += [(*where, _locate(folders, relative / item["name"])) for item in data["files"]]
    return [path for _, _, path in sorted(found)]


def _locate(folders: list[Path], relative: Path) -> Path:
    for folder in folders:
        if (folder / relative).is_file():
            return folder / relative
    raise FileNotFoundError(f"committed batch {relative} is in none of {[str(f) for f in folders]}")


def _batch_name(partition: int, offset: int) -> str:
    return f"part-{partition:05d}-{offset:06d}.parquet"


def _manifest(directory: Path, partition: int) -> Path:
    return directory / f"_manifest-{partition:05d}.json"


def _link_unless_present(temporary: Path, final: Path) -> None:
    """Give ``temporary``'s file the name ``final`` unless that name exists.

    Atomically where the file system has hard links.
    """
    try:
        os.link(temporary, final)
    except FileExistsError:
        pass  # written by an earlier holder: the same rows
    except OSError as err:
        if err.errno not in _NO_LINKS:
            raise
        if not final.exists():  # no hard links here: a rename, checked first
            os.replace(temporary, final)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)

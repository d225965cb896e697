"""A job's output as a committed Parquet folder, and that folder loaded into a table.

Several processes cannot write one DuckDB file, so a job whose output ends in DuckDB (or
that wants files) writes a folder of Parquet files (:mod:`sqlfeed.sink.attempts`: each
attempt at a partition writes files of its own and commits them with the partition's
manifest, made once): exactly the committed files make the output, whatever order a
partition's rows came in on each attempt. :func:`load_folder` then writes those files
into a table through the table sink (checked against the job's expected rows) in one
process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sqlfeed.dialects import EngineError, InvalidArgumentError
from sqlfeed.dispatch import JobSpec, Worker, open_queue
from sqlfeed.dispatch.queue import Lease, LeaseQueue
from sqlfeed.errors import JobIncompleteError
from sqlfeed.io import Source, connect
from sqlfeed.plans import plan as make_plan
from sqlfeed.sink.attempts import Attempt, check_folder, committed, sweep
from sqlfeed.sink.job import Progress, Transform
from sqlfeed.sink.report import WriteReport
from sqlfeed.sink.table import TableSink

__all__ = ["check_out_folder", "copy_to_folder", "load_folder"]

_BEING_MADE = re.compile(r"\._job\.json\.[0-9a-f]{8}")
"""The ``_job.json`` of a folder another worker is making, before it is renamed into place."""


def check_out_folder(
    out: str | os.PathLike[str], job: str | None = None, *, what: str = "the folder"
) -> None:
    """Refuse a folder that holds files sqlfeed did not write, before anything is written.

    A job's output folder is new, empty or one a job's workers made (its ``_job.json``
    says which job; with ``job``, it must be that job's): sqlfeed writes, and removes, only
    files of its own in it, never beside a user's (Spark's ``part-00000-...snappy.parquet``
    files look like its own), wherever a symbolic link points. ``what`` names the folder
    in the message (``--out``).

    Raises:
        InvalidArgumentError: the folder holds other files, or another job's output (with
            ``job``: or no job's output).
    """
    root = Path(out)
    names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    owner = _owner(root) if "_job.json" in names else None
    if owner is None and [n for n in names if not _BEING_MADE.fullmatch(n)]:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise InvalidArgumentError(
            f"{what} {out} holds files sqlfeed did not write ({shown}): it writes a job's "
            "output into a new or empty folder; give another"
        )
    if job is not None and owner != job:
        held = f"no output of job {job!r}"
        if owner is not None:
            held = f"the output of job {owner!r}, not of {job!r}"
        raise InvalidArgumentError(f"{what} {out} holds {held}: give the folder its workers wrote")


def _owner(root: Path) -> str | None:
    """The job whose output ``root`` holds, by its ``_job.json`` (None: not sqlfeed's)."""
    try:
        found = json.loads((root / "_job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    job = found.get("job") if isinstance(found, dict) else None
    return job if isinstance(job, str) else None


def copy_to_folder(
    query: str,
    source: Any,
    out: str,
    *,
    queue: str | LeaseQueue | None = None,
    job: str | None = None,
    readers: int | None = None,
    partitions: int | None = None,
    batch_size: int | None = None,
    lease_ttl: float = 60.0,
    progress: Progress | None = None,
    transform: Transform | None = None,
) -> WriteReport:
    """Write ``query``'s result (``transform``-ed) into the batch folder ``out`` as a job.

    Processes sharing ``queue`` and ``job`` each work on it. ``out`` is new, empty or
    this job's (:func:`check_out_folder`).

    Returns:
        The rows this process committed, and the folder.

    Raises:
        InvalidArgumentError: ``out`` holds files sqlfeed did not write, or another job's.
    """
    start = time.monotonic()
    check_out_folder(out)
    src = connect(source)
    lease_queue = open_queue(queue if queue is not None else "memory://")
    name = job or f"folder-{uuid.uuid4().hex[:12]}"  # a memory queue is the process's
    spec = _folder_job(
        lease_queue, name, query, src, out, partitions, batch_size, lease_ttl, transform
    )
    threads = readers or (1 if queue is not None else 4)
    rows = _run(lease_queue, spec, src, Path(out), threads, transform, progress)
    return WriteReport(out, rows, "folder", time.monotonic() - start)


def _folder_job(
    lease_queue: LeaseQueue,
    name: str,
    query: str,
    src: Source,
    out: str,
    partitions: int | None,
    batch_size: int | None,
    lease_ttl: float,
    transform: Transform | None,
) -> JobSpec:
    parsed = src.parse(query)
    schema = src.schema(parsed)
    if transform is not None:
        transform.schema(schema)
    what = transform.what if transform is not None else None
    existing = lease_queue.find_job(name)
    if existing is not None:
        theirs = ((existing.sink or {}).get("identity") or {}).get("what")
        if existing.sink is None or "folder" not in existing.sink or theirs != what:
            raise InvalidArgumentError(
                f"the job {name!r} writes something else (another model, table or options): "
                "give its options, or another --job name"
            )
        return existing
    expected = src.count(parsed)
    sink = {"folder": True, "expected_rows": expected, "identity": {"folder": True, "what": what}}
    plan = make_plan(parsed, src, partitions=partitions)
    size = batch_size or 8_192
    return lease_queue.create_job(
        JobSpec(name, plan, lease_ttl=lease_ttl, order="lpt", batch_size=size, sink=sink)
    )


def _run(
    lease_queue: LeaseQueue,
    spec: JobSpec,
    src: Source,
    out: Path,
    threads: int,
    transform: Transform | None,
    progress: Progress | None,
) -> int:
    check_folder(out, {"job": spec.name, "fingerprint": spec.plan.fingerprint})
    errors: list[BaseException] = []
    done = [0]
    lock = threading.Lock()
    expected = (spec.sink or {}).get("expected_rows")
    if progress is not None:
        progress(0, expected)  # the total, before the first partition commits

    def work() -> None:
        worker = Worker(
            lease_queue, spec.name, src, batch_size=spec.batch_size, whole_partitions=True
        )
        current: list[Attempt] = []

        def on_lease(lease: Lease) -> None:
            for stale in current:
                stale.discard()  # a partition given up: its files are garbage
            current[:] = [Attempt(out, lease.partition)]

        def on_partition(lease: Lease, batches: int) -> None:
            attempt = current.pop()
            rows = sum(int(f["rows"]) for f in attempt.files)
            if attempt.commit():
                with lock:
                    done[0] += rows
                    if progress is not None:
                        progress(done[0], expected)

        worker.on_lease, worker.on_partition = on_lease, on_partition
        try:
            for delivery in worker.deliveries():
                batch = transform(delivery.batch) if transform is not None else delivery.batch
                current[-1].write(batch)
        except BaseException as err:
            errors.append(err)
        finally:
            worker.close()
            for stale in current:
                stale.discard()

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    if lease_queue.status(spec.name).complete:
        sweep(out)
    return done[0]


def load_folder(
    queue: str | LeaseQueue, job: str, out: str, url: Any, table: str | None, mode: str = "create"
) -> WriteReport:
    """Check the job's committed folder against its expected rows, and maybe load it into a table.

    With ``table``, its files are written into that table of ``url`` (the table sink: all or
    nothing); a ``_loaded-<job>.json`` file in the folder then says so, and a finish run
    again does nothing.

    Raises:
        InvalidArgumentError: ``out`` is not the job's folder.
        JobIncompleteError: the folder holds fewer rows than expected and the job is not done.
        EngineError: the folder's rows differ from the expected ones although every partition
            is done (the rows changed during the run, or files were added outside sqlfeed).
    """
    start = time.monotonic()
    lease_queue = open_queue(queue)
    spec = lease_queue.job(job)
    if spec.sink is None or "folder" not in spec.sink:
        raise InvalidArgumentError(f"the job {job!r} writes no folder: give the job of --out")
    check_out_folder(out, job)
    files = committed(out)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for _, f in files)
    expected = spec.sink.get("expected_rows")
    if expected is not None and rows != expected:
        held = f"{out} holds {rows:,} committed rows but the SELECT counts {expected:,}"
        done = lease_queue.status(spec.name).complete
        if rows < expected and not done:
            raise JobIncompleteError(
                f"{held}: the job is not complete (start workers until it is), then finish again"
            )
        when = "every partition of the job is done" if done else "more, before the job is done"
        raise EngineError(  # more work cannot make it right
            f"{held} ({when}): the SELECT's rows changed during the run (read data that stays "
            "put, or at one snapshot) or files were put into the folder outside sqlfeed; "
            "nothing was loaded"
        )
    if table is None:
        return WriteReport(out, rows, "folder", time.monotonic() - start)
    with _locked(Path(out) / "_load.lock"):  # loads of one folder take turns
        return _load(Path(out), job, files, rows, url, table, mode, start)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing) while the block runs."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(
    out: Path,
    job: str,
    files: list[tuple[int, Path]],
    rows: int,
    url: Any,
    table: str,
    mode: str,
    start: float,
) -> WriteReport:
    """The folder's committed files into ``table`` unless a ``_loaded`` marker says this was done.

    A crash between the load and its marker loads again: an append then repeats, which the
    table's key refuses where it has one.
    """
    marker = out / f"_loaded-{job}.json"
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")).get("table") == table:
        return WriteReport(table, rows, mode, 0.0, "before")
    if not files:
        raise EngineError(f"{out} holds no committed files: nothing to load")
    schema = pq.read_schema(files[0][1])
    sink = TableSink.create(url, table, schema, mode=mode, expected_rows=rows)
    try:
        offsets: dict[int, int] = {}
        for part, path in files:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                first = offsets.get(part, 0)
                sink.commit(part, first, batch)
                offsets[part] = first + batch.num_rows
        report = sink.finish()
    except BaseException:
        sink.abort()
        raise
    finally:
        sink.close()
    marker.write_text(json.dumps({"table": table, "rows": rows}) + "\n", encoding="utf-8")
    report.seconds = time.monotonic() - start
    return report

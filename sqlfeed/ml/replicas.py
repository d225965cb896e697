"""Training on several synchronous replicas, each fed by its own elastic worker of a job.

With :attr:`sqlfeed.ml.TrainOptions.replicas` > 1, :func:`sqlfeed.ml.train` trains under
``tf.distribute.MirroredStrategy`` over that many devices: GPUs when there are that many,
else the CPU split into logical devices (possible only before TensorFlow is initialised).
The training split becomes a job in sqlfeed's lease queue (a SQLite file in
``checkpoint_dir``, or in a temporary folder), and each replica's input pipeline is one
elastic worker of it (``<worker>/<replica>``) pulling partitions, with even batches: every
replica gets the same number of batches of ``batch_size / replicas`` rows per epoch, and
the rows left over once each has its share are reported by the job (``dropped``).

When TensorFlow was initialised before the CPU could be split (a process that used it
already), the workers' batches alternate into one model instead: the same job, the same
rows, no replicas.

With ``checkpoint_dir``, each checkpoint records every worker's delivered batches in the
job's ledger, and a training run again rewinds the job to the restored checkpoint
(:func:`sqlfeed.tf.FeedCheckpoint` over :class:`ReplicaFeeds`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlfeed.tf as sqlfeed_tf
from sqlfeed.dialects.optional import require
from sqlfeed.dispatch import open_queue
from sqlfeed.dispatch.queue import JobStatus
from sqlfeed.ml.data import TrainingData

__all__ = [
    "JOB",
    "QUEUE_FILE",
    "ReplicaFeeds",
    "ReplicaInput",
    "build_from_spec",
    "job_lines",
    "quiet_stderr",
    "replica_input",
    "tensorflow_devices",
]

JOB = "train"
"""The job's name in its queue."""
QUEUE_FILE = "queue.db"
"""The SQLite lease queue's file (in ``checkpoint_dir`` or a temporary folder)."""
WORKER = "worker"
"""Replica ``i``'s worker is ``worker/i``."""


def tensorflow_devices(
    replicas: int, what: str = "sqlfeed.ml's Keras models"
) -> tuple[Any, list[str], str]:
    """TensorFlow, the devices of ``replicas`` replicas and what they are.

    GPUs when there are at least ``replicas``; else the CPU split into ``replicas``
    logical devices, if TensorFlow is not initialised yet. The list is empty when neither
    is possible (the caller falls back to one model).

    Raises:
        MissingDependencyError: TensorFlow is not installed (the message names ``what``
            needs it, and the ``tf`` extra).
    """
    if "tensorflow" in sys.modules:
        tf = require("tensorflow", what)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with quiet_stderr():  # TensorFlow's C++ start-up lines ignore the log level
            tf = require("tensorflow", what)
    with quiet_stderr():  # and its CUDA probe's, on a machine without a GPU
        gpus = len(tf.config.list_physical_devices("GPU"))
    if gpus >= replicas:
        names = [device.name for device in tf.config.list_logical_devices("GPU")]
        return tf, names[:replicas], "GPUs"
    cpus = tf.config.list_physical_devices("CPU")
    with contextlib.suppress(RuntimeError):  # initialised already: its devices are fixed
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * replicas
        )
    logical = [device.name for device in tf.config.list_logical_devices("CPU")]
    return tf, logical[:replicas] if len(logical) >= replicas else [], "logical CPUs"


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration (C++ writes there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@dataclass
class ReplicaFeeds:
    """The replicas' feeds as one, for :func:`sqlfeed.tf.FeedCheckpoint`.

    A checkpoint records every worker's deliveries in the job's ledger; a restore rewinds
    the job once.
    """

    feeds: list[Any] = field(default_factory=list)
    job: str = JOB

    def checkpoint_job(self, step: int) -> dict[str, Any]:
        """Record checkpoint ``step`` for every worker; the state that rewinds to it."""
        states: list[dict[str, Any]] = [feed.checkpoint_job(step) for feed in self.feeds]
        return states[0]

    def load_state_dict(self, state: Mapping[str, Any], *, rewind: bool = True) -> None:
        """Rewind the job to ``state``'s checkpoint (once: it is the job's, not a worker's)."""
        self.feeds[0].load_state_dict(state, rewind=rewind)


@dataclass
class ReplicaInput:
    """The strategy, the distributed dataset and the job feeding it."""

    strategy: Any
    dataset: Any
    how: str
    """A phrase saying how the replicas are fed (for the progress line)."""
    queue_url: str
    feeds: ReplicaFeeds
    replicated: bool
    """False: the workers' batches alternate into one model (TensorFlow ran already)."""
    spec: Any
    """The element spec of a replica's dataset."""
    folder: Any = None
    """The temporary folder of the queue (None: ``checkpoint_dir``); removed by :meth:`close`."""

    def status(self) -> tuple[JobStatus, int, int]:
        """The job's status, its rows per epoch and its batches per worker per epoch."""
        queue = open_queue(self.queue_url)
        try:
            job = queue.job(JOB)
            return queue.status(JOB), int(job.rows or 0), int(job.share or 0)
        finally:
            queue.close()

    def close(self) -> None:
        for feed in self.feeds.feeds:
            feed.close()
        if self.folder is not None:
            self.folder.cleanup()


def replica_input(
    data: TrainingData,
    make_prepare: Callable[[Any], Callable[..., Any]],
    options: Mapping[str, Any],
    *,
    epochs: int,
) -> ReplicaInput:
    """The replicas' strategy and input: one elastic worker of the job per replica.

    Args:
        data: the training (its plan, source and options: ``replicas``, ``batch_size``,
            ``seed``, ``checkpoint_dir``).
        make_prepare: given TensorFlow (once its devices are set), the input pipeline's
            map of each replica's dataset.
        options: the feed's column options (label, features, masks, dtypes).
        epochs: the job's epochs (those of ``fit``).
    """
    opts = data.options
    replicas = opts.replicas
    tf, devices, kind = tensorflow_devices(replicas)  # before any op initialises TensorFlow
    prepare = make_prepare(tf)
    folder = None
    if opts.checkpoint_dir is None:
        folder = tempfile.TemporaryDirectory(prefix="sqlfeed-train-")
        where = Path(folder.name)
    else:
        where = Path(opts.checkpoint_dir)
        where.mkdir(parents=True, exist_ok=True)
    queue_url = f"sqlite:///{where / QUEUE_FILE}"
    job_options = {
        **options,
        "job": JOB,
        "queue": queue_url,
        "epochs": epochs,
        "even_batches": True,
        "seed": opts.seed,
        "worker_id": WORKER,
    }
    if not devices:
        # One thread takes from every worker in turn, so each prefetches in a thread of
        # its own: a worker's epoch ends only once the others have their share too.
        job_options["prefetch"] = 2
    feeds = ReplicaFeeds()
    specs: list[Any] = []

    def make(context: Any) -> Any:
        size = int(context.get_per_replica_batch_size(opts.batch_size))
        query = data.plan or data.training_sql
        feed = sqlfeed_tf.Feed(
            query, data.source, batch_size=size, input_context=context, **job_options
        )
        feeds.feeds.append(feed)
        dataset = feed.dataset.map(prepare)
        specs.append(dataset.element_spec)
        return dataset

    if devices:
        strategy = tf.distribute.MirroredStrategy(devices)
        train = strategy.distribute_datasets_from_function(
            make,
            options=tf.distribute.InputOptions(
                experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
                experimental_fetch_to_device=False,
            ),
        )
        how = f"MirroredStrategy over {replicas} {kind}, one worker per replica"
    else:
        strategy = tf.distribute.get_strategy()
        pipelines = [
            make(tf.distribute.InputContext(replicas, i, replicas)) for i in range(replicas)
        ]
        train = tf.data.Dataset.choose_from_datasets(
            pipelines, tf.data.Dataset.range(replicas).repeat(), stop_on_empty_dataset=False
        )
        how = (
            f"TensorFlow was initialised before the CPU could be split into {replicas} "
            f"devices: the {replicas} workers' batches alternate into one model"
        )
    return ReplicaInput(strategy, train, how, queue_url, feeds, bool(devices), specs[0], folder)


def build_from_spec(model: Any, replicas: ReplicaInput) -> None:
    """Make ``fit`` build ``model`` from the input's spec, not from its first batch.

    Keras (3, on TensorFlow) builds a model made under a strategy from the first batch of
    the distributed dataset averaged over the replicas, which fails on text and boolean
    columns (and takes a batch of the job out of turn); the element spec gives the same
    shapes and dtypes.
    """
    if not replicas.replicated or not hasattr(model, "_maybe_symbolic_build"):
        return

    def build(iterator: Any = None, data_batch: Any = None) -> None:
        with replicas.strategy.scope():
            model._symbolic_build(data_batch=replicas.spec)

    model._maybe_symbolic_build = build


def job_lines(status: JobStatus, rows: int, epochs: int) -> list[str]:
    """The job after training: partitions per epoch, each worker's share, the rows fed."""
    fed = sum(int(worker["rows"]) for worker in status.workers)
    lines = [
        f"job {status.name!r}: "
        + "; ".join(
            f"epoch {e['epoch'] + 1}: {e['done']} partitions done, {e['dropped']} cut short"
            for e in status.per_epoch
        )
    ]
    for worker in sorted(status.workers, key=lambda w: str(w["worker"])):
        lines.append(f"   {worker['worker']}: {worker['batches']} batches, {worker['rows']:,} rows")
    lines.append(
        f"   {fed:,} of {epochs} x {rows:,} rows fed: even batches leave "
        f"{1 - fed / (epochs * (rows or 1)):.1%} over"
    )
    return lines

"""The Feed: a query's rows as a ``tf.data.Dataset``, and the functions that build one.

Owns :class:`Feed` (the Feeder, the converter and the ``tf.data`` graph around them),
:func:`dataset`, :func:`input_fn` and :func:`distributed_dataset`, and the checks of
their options. TensorFlow is imported when a dataset is built, not before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Unpack

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError, SqlfeedError
from sqlfeed.dialects.optional import require
from sqlfeed.dispatch import Feeder, Worker, default_worker_id
from sqlfeed.dispatch.epochs import JobEpochs
from sqlfeed.feed.converter import Converter
from sqlfeed.feed.options import (
    ColumnOptions,
    JobOptions,
    ReadOptions,
    TensorKeywords,
    check_int,
    own_scratch,
    resolve_plan,
    split_options,
)
from sqlfeed.io import Source, connect
from sqlfeed.plans import Plan
from sqlfeed.tf.types import ColumnMapping, RaggedBuilder, as_names, flat_specs, nest_element

__all__ = [
    "AUTOTUNE",
    "Feed",
    "FeedArguments",
    "dataset",
    "distributed_dataset",
    "input_fn",
]

AUTOTUNE = -1
"""``prefetch=AUTOTUNE`` lets tf.data size the prefetch buffer (``tf.data.AUTOTUNE``)."""


def _tensorflow() -> Any:
    return require("tensorflow", "tf.data pipelines")


class Feed:
    """A query's rows as a ``tf.data.Dataset`` (:attr:`dataset`), and how they map.

    :func:`dataset` returns ``Feed(...).dataset``; keep the Feed to see how each column
    maps (:attr:`mappings`), the :attr:`plan` and :attr:`feeder`, or to :meth:`close` a
    job's worker (give its lease back at once, e.g. on shutdown).

    Args:
        query: a SQL SELECT or a :class:`~sqlfeed.Plan`.
        source: where it runs (anything :func:`sqlfeed.connect` takes).
        batch_size: rows per element (per pipeline: with ``input_context`` this is the
            per-replica batch size; :func:`input_fn` divides a global one).
        prefetch: batches prefetched (``AUTOTUNE``: tf.data decides; 0: none). Default:
            ``AUTOTUNE``, and 0 with ``job``: a job's batch counts as taken when the next
            one is asked for, and a prefetch buffer asks early, so batches an abandoned
            iteration prefetched would be acknowledged without being trained on.
        input_context: a ``tf.distribute.InputContext``: read pipeline
            ``input_pipeline_id``'s static share (or, with ``job``, be worker
            ``<worker_id>/<input_pipeline_id>``, ``replicas`` defaulting to the number of
            pipelines).
        rank: this pipeline's rank in a static share without an InputContext.
        world_size: the number of ranks of that static share.
        state: resume from what :meth:`state_dict` returned (see :meth:`load_state_dict`).
        **options: the option groups every facade shares (:mod:`sqlfeed.feed.options`,
            one default each):

            * columns (:class:`~sqlfeed.feed.options.ColumnOptions`): ``label`` (the
              label column: element ``(features, label)``; a list of them: ``(features,
              {name: label})``; None: element ``features``), ``features``, ``fill``,
              ``fill_nulls``, ``masks``, ``float_dtype``, ``time_unit``;
            * read (:class:`~sqlfeed.feed.options.ReadOptions`): ``shuffle_buffer``,
              ``shuffle``, ``shuffle_window``, ``seed``, ``readers``, ``read_batch_rows``,
              ``drop_remainder`` (static mode), ``merge_reads``, ``snapshot``,
              ``progress``, ``epochs``, as for :class:`~sqlfeed.Feeder`. The k-th
              iteration of the dataset is the Feeder's epoch k (its own order);
            * job (:class:`~sqlfeed.feed.options.JobOptions`): ``job``, ``queue``,
              ``worker_id``, ``lease_ttl``, ``order``, ``even_batches``, ``replicas``:
              pull partitions dynamically from a lease queue, as
              :class:`~sqlfeed.Feeder` does. Each iteration of the dataset is the job's
              next epoch (an iteration stopped early is continued by the next); a batch
              counts as taken (acknowledged) when the next one is asked for;
            * for a SQL query, the :class:`~sqlfeed.feed.options.PlanOptions` of
              :func:`sqlfeed.plan`.

    Raises:
        InvalidArgumentError: bad arguments, unknown columns, unmappable types; raised
            before any partition query runs (a SQL query's schema is read first).
        MissingDependencyError: TensorFlow is not installed.
    """

    def __init__(
        self,
        query: str | Plan,
        source: Any = None,
        *,
        batch_size: int,
        prefetch: int | None = None,
        input_context: Any = None,
        rank: int = 0,
        world_size: int = 1,
        state: Mapping[str, Any] | None = None,
        **options: Unpack[TensorKeywords],
    ) -> None:
        (read, job, columns), plan_options = split_options(
            options, ReadOptions, JobOptions, ColumnOptions, own=_OWN
        )
        read = read.replace(batch_size=batch_size)
        prefetch = _check_modes(prefetch, read, job)
        if input_context is not None:
            rank, world_size, job = _pipeline_share(input_context, rank, world_size, job)
        self.tf = _tensorflow()
        self.source: Source = connect(source)
        if not isinstance(query, Plan):  # check the columns before planning
            columns.mappings(self.source.schema(query))
        self.plan = resolve_plan(
            query, self.source, owner=self, default_workers=world_size, **plan_options
        )  # a plan made here: its auto-materialized table goes with this Feed
        schema = self.plan.arrow_schema() or self.source.schema(self.plan.sql)
        self.mappings: list[ColumnMapping] = columns.mappings(schema)
        self.columns = columns
        """The column options."""
        self.batch_size = batch_size
        self.drop_remainder = read.drop_remainder
        self.prefetch = prefetch
        self.labels = as_names(columns.label, "label")
        self._single_label = columns.single_label
        self._converter = Converter(self.mappings, columns.time_unit)
        self.ragged = any(m.ragged_rank for m in self.mappings)
        # Dense columns are cut into batch_size rows by tf.data's rebatch; ragged ones
        # and a job's batches (acknowledged one by one) are batched here.
        feeder_batch = batch_size if (self.ragged or job.dynamic) else None
        self.feeder = Feeder(
            self.plan,
            self.source,
            format="arrow",
            batch_size=feeder_batch,
            rank=rank,
            world_size=world_size,
            **_feeder_options(read, job),
        )
        self._job = JobEpochs(self.feeder.worker) if job.dynamic else None
        self.job = job.job
        """The job's name in job mode, else None."""
        self._iterations = itertools.count()
        self.anchor: object = None
        """What must live as long as this feed reads (the owner of its scratch table)."""
        self._restored_epoch, self._restored_rows = -1, 0
        self._failure: str | None = None
        """sqlfeed's error that ended the generator of the iteration (see :meth:`_build`)."""
        self.error: SqlfeedError | None = None
        """That error itself, for :func:`_own_errors` to raise."""
        self.dataset: Any = _own_errors(self._build(), self)
        """The ``tf.data.Dataset``: iterated in Python, sqlfeed's own error (a NULL label,
        a value out of range, the database's) is raised as itself, not inside TensorFlow's
        ``InvalidArgumentError`` (inside a ``tf.function``, such as Keras's ``fit``, it is
        TensorFlow's, its message carrying sqlfeed's)."""
        if state is not None:
            self.load_state_dict(state)

    def __repr__(self) -> str:
        return f"Feed({self.feeder!r}, {len(self.mappings)} columns)"

    @property
    def element_spec(self) -> Any:
        """The dataset's ``element_spec``."""
        return self.dataset.element_spec

    def close(self) -> None:
        """Give back a job's lease held now (dynamic mode); nothing otherwise."""
        self.feeder.close()

    # -- building -----------------------------------------------------------------------

    def _batches(self) -> Iterator[pa.RecordBatch]:
        if self._job is not None:
            return self._job.epoch_batches()
        return self.feeder.epoch(next(self._iterations))

    def _failing(self, elements: Callable[[], Iterator[Any]]) -> Callable[[], Iterator[Any]]:
        """``elements`` ending, on sqlfeed's own error, with the error noted instead of raised.

        sqlfeed's own errors: a NULL label, a value out of range, the database's error. The
        error is noted for :meth:`_raise_failure`: tf.data would log the Python traceback of
        an exception raised in the generator twice (at WARNING level) before the iterator
        raises it.
        """

        def run() -> Iterator[Any]:
            self._failure = self.error = None
            try:
                yield from elements()
            except SqlfeedError as err:
                self._failure = f"{type(err).__name__}: {err}"
                self.error = err

        return run

    def _raise_failure(self, ds: Any, signature: Any) -> Any:
        """``ds`` followed by the noted failure, if any, raised by a TensorFlow assertion.

        One line, the error's message: no Python traceback logged.
        """
        tf = self.tf

        def failures() -> Iterator[str]:
            message, self._failure = self._failure, None
            if message is not None:
                yield message

        def fail(message: Any) -> Any:
            with tf.control_dependencies([tf.debugging.Assert(tf.equal(message, ""), [message])]):
                return tf.nest.map_structure(
                    lambda spec: tf.zeros([d or 0 for d in spec.shape.as_list()], spec.dtype),
                    signature,
                )

        failed = tf.data.Dataset.from_generator(
            failures, output_signature=tf.TensorSpec([], tf.string)
        )
        return ds.concatenate(failed.map(fail))

    def state_dict(self, steps: int | None = None) -> dict[str, Any]:
        """Where the feed stands after ``steps`` batches of the epoch being read.

        The model runs behind a prefetching pipeline, so the position is given in steps
        (batches it trained on in this epoch, counted from the restored position after a
        restore); None: as far as the Feeder delivered. Static mode only (see
        :meth:`sqlfeed.Feeder.state_dict`). :class:`sqlfeed.tf.FeedCheckpoint` calls it.
        """
        if steps is None:
            return {"feeder": self.feeder.state_dict()}
        epoch, delivered = self.feeder.reading or (0, 0)
        restored = self._restored_rows if epoch == self._restored_epoch else 0
        rows = min(restored + steps * self.batch_size, delivered)
        return {"feeder": self.feeder.state_at(rows, epoch)}

    def checkpoint_job(self, step: int) -> dict[str, Any]:
        """Job mode: record checkpoint ``step`` in the job's ledger.

        It records the batches the model took: a batch read ahead to find an epoch's end is
        left out. Returns the state that :meth:`load_state_dict` rewinds the job with.
        """
        worker = self.feeder.worker
        if self._job is None or not isinstance(worker, Worker):
            raise InvalidArgumentError("checkpoint_job needs a job's feed (job=...)")
        worker.checkpoint(step, self._job.untaken())
        return {"job": worker.spec.name, "checkpoint": step}

    def load_state_dict(self, state: Mapping[str, Any], *, rewind: bool = True) -> None:
        """Resume: the next iteration of the dataset continues where ``state`` stood.

        A job's state (from :meth:`checkpoint_job`) rewinds the job to its checkpoint
        (:meth:`sqlfeed.dispatch.LeaseQueue.rewind`) unless ``rewind=False`` (several
        training processes: rewind once, with ``sqlfeed job rewind``, before they start).
        """
        worker = self.feeder.worker
        if "job" in state and isinstance(worker, Worker):
            if rewind:
                worker.queue.rewind(state["job"], int(state["checkpoint"]))
            return
        self.feeder.load_state_dict(state["feeder"])
        epoch, rows = int(state["feeder"]["epoch"]), int(state["feeder"]["rows"])
        self._iterations = itertools.count(epoch)
        self._restored_epoch, self._restored_rows = epoch, rows

    def _structure(self, flat: Sequence[Any], ragged: RaggedBuilder | None = None) -> Any:
        return nest_element(
            flat,
            self.mappings,
            labels=self.labels,
            single_label=self._single_label,
            ragged=ragged,
        )

    def _build(self) -> Any:
        tf = self.tf
        convert = self._converter.arrays
        if self.ragged:
            signature = tuple(flat_specs(tf, self.mappings))

            def flat_batches() -> Iterator[tuple[np.ndarray, ...]]:
                for batch in self._batches():
                    if batch.num_rows:
                        yield tuple(convert(batch))

            ds = tf.data.Dataset.from_generator(
                self._failing(flat_batches), output_signature=signature
            )
            ds = self._raise_failure(ds, signature)

            def assemble(*flat: Any) -> Any:
                return self._structure(
                    flat,
                    lambda values, splits: tf.RaggedTensor.from_nested_row_splits(
                        values, splits, validate=False
                    ),
                )

            ds = ds.map(assemble)
        else:
            signature = self._structure(flat_specs(tf, self.mappings))

            def batches() -> Iterator[Any]:
                for batch in self._batches():
                    if batch.num_rows:
                        yield self._structure(convert(batch))

            ds = tf.data.Dataset.from_generator(self._failing(batches), output_signature=signature)
            ds = self._raise_failure(ds, signature)
            if self._job is None:
                # Python once per read batch (64K rows); tf.data cuts the training batches.
                ds = ds.rebatch(self.batch_size, drop_remainder=self.drop_remainder)
        if self.prefetch:
            ds = ds.prefetch(tf.data.AUTOTUNE if self.prefetch == AUTOTUNE else self.prefetch)
        else:  # and no prefetch added behind our back either
            options = tf.data.Options()
            options.experimental_optimization.inject_prefetch = False
            ds = ds.with_options(options)
        return ds


_OWN_ERRORS: dict[type, type] = {}
"""A tf.data class (a dataset's, an iterator's) -> its subclass raising sqlfeed's errors."""


def _own_errors(ds: Any, feed: Feed) -> Any:
    """``ds``, whose Python iterators raise ``feed``'s own error as itself.

    tf.data raises an error of the generator's as an ``InvalidArgumentError`` whose long
    message buries sqlfeed's line; the dataset (and each iterator it makes) becomes an
    instance of a subclass of its own class whose ``__iter__`` (``__next__``) raises
    :attr:`Feed.error` instead. Nothing else changes: the same graph, the same specs.
    """
    ds.__class__ = _subclass(type(ds), "__iter__", _dataset_iter)
    ds._sqlfeed_feed = feed
    return ds


def _subclass(base: type, name: str, method: Callable[..., Any]) -> type:
    if base not in _OWN_ERRORS:
        _OWN_ERRORS[base] = type(base.__name__, (base,), {name: method, "__module__": __name__})
    return _OWN_ERRORS[base]


def _dataset_iter(ds: Any) -> Any:
    iterator = super(type(ds), ds).__iter__()
    iterator.__class__ = _subclass(type(iterator), "__next__", _iterator_next)
    iterator._sqlfeed_feed = ds._sqlfeed_feed
    return iterator


def _iterator_next(iterator: Any) -> Any:
    feed = iterator._sqlfeed_feed
    try:
        return super(type(iterator), iterator).__next__()
    except feed.tf.errors.OpError:
        if feed.error is None:
            raise
    # Raised here, not inside the except block, and never bound to a local of this frame:
    # either would tie the error's traceback back to this frame (or to TensorFlow's error,
    # whose frames hold the iterator) in a reference cycle. The iterator would then live
    # until a garbage collection or the interpreter's shutdown, and freeing it there (its
    # prefetch thread waiting for the GIL Python no longer hands out) hung the process.
    raise _take_error(feed).with_traceback(None)


def _take_error(feed: Feed) -> SqlfeedError:
    error, feed.error = feed.error, None
    assert error is not None
    return error


def _check_modes(prefetch: int | None, read: ReadOptions, job: JobOptions) -> int:
    """Checks the options that depend on the mode (static or job); returns ``prefetch``."""
    if prefetch is None:
        prefetch = AUTOTUNE if not job.dynamic else 0
    check_int(prefetch, "prefetch", AUTOTUNE)
    if not job.dynamic:
        if job.even_batches:
            raise InvalidArgumentError(
                "even_batches needs job=...: a static split cannot even out its shares"
            )
    elif read.drop_remainder:
        raise InvalidArgumentError(
            "drop_remainder works on the whole epoch; with job=..., batches end with their "
            "partition: use even_batches=True for equal batch counts"
        )
    return prefetch


def _pipeline_share(
    input_context: Any, rank: int, world_size: int, job: JobOptions
) -> tuple[int, int, JobOptions]:
    """``(rank, world_size, job options)`` of an InputContext's pipeline.

    Statically, pipeline ``i`` of ``n`` is rank ``i`` of ``n``; with a job it is worker
    ``<worker_id>/<i>``, and ``even_batches`` counts the pipelines as the replicas.
    """
    if rank != 0 or world_size != 1:
        raise InvalidArgumentError("give input_context or rank/world_size, not both")
    pipelines = int(input_context.num_input_pipelines)
    pipeline = int(input_context.input_pipeline_id)
    if not job.dynamic:
        return pipeline, pipelines, job
    replicas = pipelines if job.even_batches and job.replicas is None else job.replicas
    worker_id = f"{job.worker_id or default_worker_id()}/{pipeline}"
    return rank, world_size, job.replace(worker_id=worker_id, replicas=replicas)


def _feeder_options(read: ReadOptions, job: JobOptions) -> dict[str, Any]:
    """The Feeder's keywords of ``read`` and ``job`` (``batch_size`` is the Feed's own)."""
    names = [n for n in ReadOptions.names() if n != "batch_size"]
    return {n: getattr(read, n) for n in names} | {n: getattr(job, n) for n in job.names()}


class FeedArguments(TensorKeywords, total=False):
    """Every keyword of :class:`Feed` but ``batch_size``.

    What :func:`dataset`, :func:`input_fn` and :func:`distributed_dataset` forward.
    """

    prefetch: int | None
    input_context: Any
    rank: int
    world_size: int
    state: Mapping[str, Any] | None


_OWN = ("batch_size", *FeedArguments.__annotations__)
"""The Feed's keywords, for the "did you mean" hint of an unknown one."""
_FEED_OWN = ("prefetch", "input_context", "rank", "world_size", "state")


def dataset(
    query: str | Plan, source: Any = None, *, batch_size: int, **options: Unpack[FeedArguments]
) -> Any:
    """A ``tf.data.Dataset`` of the query's rows: ``Feed(query, source, ...).dataset``.

    See :class:`Feed` for the options and the module docstring for the type mapping.

    >>> ds = dataset("SELECT * FROM t", source, label="y", batch_size=1024)  # doctest: +SKIP
    >>> model.fit(ds, epochs=3)  # doctest: +SKIP
    """
    return Feed(query, source, batch_size=batch_size, **options).dataset


def input_fn(
    query: str | Plan, source: Any = None, *, batch_size: int, **options: Unpack[FeedArguments]
) -> Callable[..., Any]:
    """An ``input_fn``: a function of an optional ``tf.distribute.InputContext``.

    The query is planned and checked now, once; each call builds a dataset. Without a
    context it reads everything in batches of ``batch_size``; with one (as
    ``strategy.distribute_datasets_from_function`` passes) ``batch_size`` is the *global*
    batch size and the pipeline reads its share in batches of
    ``input_context.get_per_replica_batch_size(batch_size)``.

    >>> train = input_fn("SELECT * FROM t", source, label="y", batch_size=256)  # doctest: +SKIP
    >>> model.fit(train(), epochs=2)  # doctest: +SKIP
    """
    check_int(batch_size, "batch_size", 1)
    shared = {k: v for k, v in options.items() if k not in _FEED_OWN}
    (_, _, columns), plan_options = split_options(
        shared, ReadOptions, JobOptions, ColumnOptions, own=_OWN
    )
    _tensorflow()
    src = connect(source)
    if not isinstance(query, Plan):  # check the columns before planning
        columns.mappings(src.schema(query))
    plan = resolve_plan(query, src, **plan_options)
    columns.mappings(plan.arrow_schema() or src.schema(plan.sql))
    feed_options: dict[str, Any] = {k: v for k, v in options.items() if k not in plan_options}

    def make(input_context: Any = None) -> Any:
        size = batch_size
        if input_context is not None:
            replicas = int(input_context.num_replicas_in_sync)
            if batch_size % replicas:
                raise InvalidArgumentError(
                    f"the global batch_size {batch_size} is not divisible by the "
                    f"{replicas} replicas in sync"
                )
            size = int(input_context.get_per_replica_batch_size(batch_size))
        feed = Feed(plan, src, batch_size=size, input_context=input_context, **feed_options)
        feed.anchor = make  # what it reads lives while it does (the table is make's)
        return feed.dataset

    own_scratch(make, query, plan, src)  # an auto-materialized table planned here is make's
    return make


def distributed_dataset(
    strategy: Any,
    query: str | Plan,
    source: Any = None,
    *,
    global_batch_size: int,
    per_replica: bool = False,
    **options: Any,  # FeedArguments but the plan's strategy (plan first, pass the Plan)
) -> Any:
    """``strategy.distribute_datasets_from_function`` over per-pipeline sqlfeed datasets.

    Args:
        strategy: a ``tf.distribute.Strategy``.
        query: as for :func:`dataset`.
        source: as for :func:`dataset`.
        global_batch_size: rows per step over all replicas (divisible by their number).
        per_replica: one input pipeline per replica (``InputReplicationMode.PER_REPLICA``,
            MirroredStrategy only) instead of one per worker host. With ``job=...`` each
            pipeline is an elastic worker of the job; ``even_batches=True`` keeps them in
            lockstep, and elements are not prefetched to the devices (one per worker
            host prefetches a batch per device, which a job counts as taken).
        **options: as for :func:`dataset` (``label``, ``job``, ``even_batches``, ...).
    """
    tf = _tensorflow()
    check_int(global_batch_size, "global_batch_size", 1)
    replicas = int(strategy.num_replicas_in_sync)
    if global_batch_size % replicas:
        raise InvalidArgumentError(
            f"global_batch_size {global_batch_size} is not divisible by the {replicas} replicas"
        )
    make = input_fn(query, source, batch_size=global_batch_size, **options)
    mode = (
        tf.distribute.InputReplicationMode.PER_REPLICA
        if per_replica
        else tf.distribute.InputReplicationMode.PER_WORKER
    )
    # A job's batch is taken when the next is asked for: no device prefetch ahead of it
    # (per replica, the pipeline's own iterator is used then).
    fetch = not (per_replica and options.get("job") is not None)
    return strategy.distribute_datasets_from_function(
        make,
        options=tf.distribute.InputOptions(
            experimental_replication_mode=mode, experimental_fetch_to_device=fetch
        ),
    )

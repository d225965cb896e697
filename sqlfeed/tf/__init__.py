"""tf.data input pipelines from a SELECT, for Keras ``fit`` and ``tf.distribute``.

>>> import sqlfeed.tf  # doctest: +SKIP
>>> ds = sqlfeed.tf.dataset("SELECT * FROM t", source, label="y", batch_size=1024)  # doctest: +SKIP
>>> model.fit(ds, epochs=3)  # doctest: +SKIP

Every element is ``(features, label)`` (or ``features`` alone without a label), where
``features`` is a dict of column name to a tensor whose first dimension is the batch.
Its ``element_spec`` comes from the plan's Arrow schema, one rule per Arrow type:

=========================================  ==========================================  =====
Arrow type                                 tensor                                      NULL
=========================================  ==========================================  =====
int8 ... int64, uint8 ... uint64           ``tf.int64``                                0
float16, float32, float64                  ``tf.float32`` (``float_dtype="float64"``)  0.0
bool                                       ``tf.bool``                                 False
string, large_string, string_view          ``tf.string`` (UTF-8 bytes)                 ""
binary, large_binary, fixed_size_binary    ``tf.string`` (the bytes)                   b""
decimal128, decimal256                     ``tf.float64``, the nearest double          0.0
date32, date64                             ``tf.int64``, days since 1970-01-01         0
timestamp (any unit, with or without tz)   ``tf.int64``, ``time_unit`` (default        0
                                           ``"us"``) since 1970-01-01 00:00 UTC
time32, time64                             ``tf.int64``, ``time_unit`` since midnight  0
duration                                   ``tf.int64``, in ``time_unit``              0
dictionary (DuckDB ENUM)                   as its value type                           as it
list, large_list, fixed_size_list of the   ``tf.RaggedTensor``, one ragged dimension   []
above, nested too                          per list level (NULL elements: as above)
struct, map, interval, list_view, union    refused: select scalar columns instead
=========================================  ==========================================  =====

Scalar columns are rank-1 tensors ``[batch]`` (Keras ``Input(shape=(1,))`` takes them).
NULLs are replaced by the default above, or by ``fill={"col": value}`` (a value of the
tensor's type: an int in ``time_unit`` for a timestamp, days for a date; a
``datetime``/``date`` is converted); ``masks=["col"]`` adds a ``col_is_null`` boolean
feature. A NULL in a label, or anywhere with ``fill_nulls=False``, is an error unless its
column has a ``fill``: sqlfeed never trains on a made-up label. Conversions are exact or
refused: a ``uint64`` above 2**63 - 1, a float64 beyond float32's range, or a timestamp
that does not fit ``time_unit`` exactly raises instead of wrapping or rounding.

How it runs: the Feeder's reader threads stream Arrow record batches (the database and
Arrow work outside the GIL); each batch is converted column by column in Arrow (casts,
NULL fills) and handed to NumPy without a copy where the type allows; a generator at
*batch* granularity feeds ``tf.data.Dataset.from_generator`` with an explicit
``output_signature``, and ``rebatch`` cuts the large read batches into ``batch_size``
rows inside TensorFlow, so Python runs once per read batch (64K rows), not per training
batch. Datasets with list columns, and a job's batches (acknowledged one by one), are
batched in Arrow instead. ``prefetch`` is on by default, except with a job.

Three ways to split the work:

* one dataset over the whole plan (the default), or a static share of it:
  ``input_context=`` (``tf.distribute.InputContext``: pipeline ``i`` of ``n`` reads the
  partitions ``i, i + n, ...``) or ``rank=``/``world_size=``;
* a dynamic share: ``job=`` pulls partitions from a lease queue (see
  :mod:`sqlfeed.dispatch.worker`), so elastic workers share the plan; each iteration of the
  dataset (a Keras epoch) is the job's next epoch, and ``even_batches=True`` makes every
  one of ``replicas`` workers deliver the same number of batches per epoch, so
  synchronous replicas stay in lockstep;
* :func:`distributed_dataset` calls ``strategy.distribute_datasets_from_function`` with a
  per-pipeline dataset built by :func:`input_fn`.

Resuming: :func:`FeedCheckpoint` is a Keras callback that saves the feed's position with
each model checkpoint (beside :func:`BackupAndRestore`, Keras's callback with the epoch of
a checkpoint counted right after a restore) and restores it on
``fit``, so a restarted training sees exactly the rows it had not (static mode; a job's
feed records a checkpoint of the job instead, see :meth:`sqlfeed.dispatch.Worker.checkpoint`).

Package layout: :mod:`sqlfeed.tf.types` (the element structure; the type mapping itself is
framework-neutral, in :mod:`sqlfeed.feed.tensors`, shared with :mod:`sqlfeed.torch`,
and so is the record batch -> NumPy conversion, :mod:`sqlfeed.feed.converter`),
:mod:`sqlfeed.tf.feed` (:class:`Feed` and the dataset functions; its options are the
vocabulary every facade shares, :mod:`sqlfeed.feed.options`); a job's epochs are cut by
:class:`sqlfeed.dispatch.epochs.JobEpochs`, shared with :mod:`sqlfeed.torch` (and
re-exported by :mod:`sqlfeed.tf.job`).

TensorFlow is imported only when a dataset is built; without it,
:class:`~sqlfeed.dialects.MissingDependencyError` names the extra (``pip install 'sqlfeed[tf]'``).
"""

from __future__ import annotations

from sqlfeed.tf.checkpoint import BackupAndRestore, FeedCheckpoint
from sqlfeed.tf.feed import AUTOTUNE, Feed, dataset, distributed_dataset, input_fn
from sqlfeed.tf.types import FLOAT_DTYPES, MASK_SUFFIX, TIME_UNITS, ColumnMapping, column_mappings

__all__ = [
    "AUTOTUNE",
    "FLOAT_DTYPES",
    "MASK_SUFFIX",
    "TIME_UNITS",
    "BackupAndRestore",
    "ColumnMapping",
    "Feed",
    "FeedCheckpoint",
    "column_mappings",
    "dataset",
    "distributed_dataset",
    "input_fn",
]

"""``sqlfeed.ml.predict``: a model's predictions for a SELECT's rows, written back once.

This module is ``scoring``, so the function keeps its name on the package.

Prediction is a job like any other (:func:`sqlfeed.sink.copy_into`): the SELECT's
partitions are leased to workers (threads of this process, or processes on several
machines sharing a queue URL and a job name); each worker loads the model once
(:class:`Scorer`), checks the SELECT's schema against the model's manifest, and commits
each batch's output rows under the table sink's protocol, so every input row has exactly
one output row under kills, redelivery and workers that stalled past their lease.

Output columns: the ``key`` columns, the ``keep`` columns (``keep_all``: every column of
the SELECT), ``predicted_<label>`` (the class, or the value), for binary tasks
``predicted_<label>_prob`` (the probability of the second class), and with ``proba``
``predicted_<label>_prob_<class>`` for every class.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.ml.artifact import Model, load
from sqlfeed.ml.write import fingerprint
from sqlfeed.sink import WriteReport, copy_into, finish_job
from sqlfeed.sink.folder import copy_to_folder, load_folder
from sqlfeed.sink.job import Progress

__all__ = ["RowsMeter", "Scorer", "finish", "predict"]


class Scorer:
    """A model turning input batches into output rows (a :class:`sqlfeed.sink.Transform`).

    Args:
        model: the loaded model.
        key: columns passed through that identify a row.
        keep: other input columns passed through; ``keep_all``: every input column.
        proba: classification: a probability column per class.
        name: the prediction column's name (default ``predicted_<label>``); the
            probability columns are named after it.
        on_rows: called with the number of rows of each batch scored (from the workers'
            threads).
    """

    def __init__(
        self,
        model: Model,
        *,
        key: Sequence[str] = (),
        keep: Sequence[str] = (),
        keep_all: bool = False,
        proba: bool = False,
        name: str | None = None,
        on_rows: Callable[[int], None] | None = None,
    ) -> None:
        if proba and model.task == "regression":
            raise InvalidArgumentError("--proba needs a classification model; this one regresses")
        self.model = model
        self.key = list(key)
        self.keep = list(keep)
        self.keep_all = keep_all
        self.proba = proba
        self.on_rows = on_rows
        self.passed: list[str] = []
        self.name = name or f"predicted_{model.label}"
        self.classes = pa.array(model.classes) if model.classes is not None else None
        self.what: dict[str, Any] | None = {
            "model": model_fingerprint(model),
            "keep": self.keep,
            "keep_all": keep_all,
            "proba": proba,
            "name": self.name,
        }

    def schema(self, schema: pa.Schema) -> pa.Schema:
        """The output schema for a SELECT of ``schema`` (the model's features checked).

        Raises:
            InvalidArgumentError: a missing feature or passed-through column, a name clash.
        """
        self.model.check_schema(schema)
        wanted = list(schema.names) if self.keep_all else [*self.key, *self.keep]
        passed = list(dict.fromkeys(wanted))
        for name in passed:
            if name not in schema.names:
                raise InvalidArgumentError(
                    f"column {name!r} (--key/--keep) is not in the SELECT, which returns "
                    f"{', '.join(schema.names)}: select it"
                )
        self.passed = passed
        fields = [schema.field(name) for name in passed]
        for field in self._prediction_fields():
            if field.name in passed:
                raise InvalidArgumentError(
                    f"the SELECT has a column {field.name!r}, which predict writes: rename it"
                )
            fields.append(field)
        return pa.schema(fields)

    def _prediction_fields(self) -> list[pa.Field]:
        name = self.name
        if self.classes is None:
            return [pa.field(name, pa.float64())]
        fields = [pa.field(name, self.classes.type)]
        if self.model.task == "binary":
            fields.append(pa.field(f"{name}_prob", pa.float64()))
        if self.proba:
            fields += [pa.field(f"{name}_prob_{c}", pa.float64()) for c in self.classes.to_pylist()]
        return fields

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The output rows of ``batch``, in its order."""
        scores = np.asarray(self.model.predict_batch(batch), dtype=np.float64)
        arrays = [batch.column(batch.schema.get_field_index(name)) for name in self.passed]
        arrays += self._predictions(scores, batch.num_rows)
        names = [*self.passed, *(f.name for f in self._prediction_fields())]
        if self.on_rows is not None:
            self.on_rows(batch.num_rows)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _predictions(self, scores: np.ndarray, rows: int) -> list[pa.Array]:
        if self.classes is None:
            return [pa.array(scores.reshape(rows), pa.float64())]
        if self.model.task == "binary":
            second = scores.reshape(rows)
            probabilities = np.stack([1.0 - second, second], axis=1)
        else:
            probabilities = scores.reshape(rows, len(self.classes))
        chosen = self.classes.take(pa.array(np.argmax(probabilities, axis=1)))
        out = [chosen]
        if self.model.task == "binary":
            out.append(pa.array(probabilities[:, 1], pa.float64()))
        if self.proba:
            out += [pa.array(probabilities[:, i], pa.float64()) for i in range(len(self.classes))]
        return out


class RowsMeter:
    """A prediction run's progress: the rows scored as each batch is, against the rows expected.

    The sink reports rows when a whole partition commits (a few times a run: no rate, no
    time left to show); this reports every scored batch, as ``progress(rows, expected)``,
    counting rows committed once known (a partition read again after a lost lease is
    scored twice, so the count is kept within the rows expected).

    Args:
        progress: called with the rows scored (or committed) by this process, and the
            rows expected once the sink counted them (None before).
    """

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.scored = 0
        self.committed = 0
        self.expected: int | None = None
        self._lock = threading.Lock()

    @property
    def rows(self) -> int:
        """The rows shown: scored (within the rows expected), or committed if more."""
        scored = self.scored if self.expected is None else min(self.scored, self.expected)
        return max(scored, self.committed)

    def scored_rows(self, rows: int) -> None:
        """A batch of ``rows`` rows was scored."""
        with self._lock:
            self.scored += rows
            self.progress(self.rows, self.expected)

    def __call__(self, rows: int, expected: int | None) -> None:
        """The sink's report: ``rows`` committed by this process, ``expected`` in all."""
        with self._lock:
            self.committed, self.expected = rows, expected
            self.progress(self.rows, expected)


def model_fingerprint(model: Model) -> str:
    """A digest of the model's manifest: the same model wherever its folder lies."""
    return fingerprint(json.dumps(model.manifest, sort_keys=True, default=str))


def predict(
    query: str,
    source: Any,
    model: str | Path | Model,
    *,
    into: str | None = None,
    into_db: Any = None,
    out: str | None = None,
    mode: str = "create",
    key: Sequence[str] | None = None,
    keep: Sequence[str] = (),
    keep_all: bool = False,
    proba: bool = False,
    name: str | None = None,
    queue: str | None = None,
    job: str | None = None,
    readers: int | None = None,
    batch_size: int | None = None,
    partitions: int | None = None,
    lease_ttl: float = 60.0,
    finish: bool = True,
    progress: Progress | None = None,
) -> WriteReport | None:
    """Write ``model``'s predictions for ``query``'s rows into the table ``into``.

    Args:
        query: the SELECT (it must return the model's features).
        source: where it runs (URL or source).
        model: the model folder (or a loaded :class:`Model`).
        into: the output table (``name`` or ``schema.name``).
        into_db: the output table's database (default: ``source``).
        out: instead of a table, a folder of Parquet files (:mod:`sqlfeed.sink.folder`:
            what several processes write for a DuckDB file); load it into a table with
            :func:`finish` (``into``).
        mode: ``create`` (refused if the table exists), ``replace`` (swapped in
            atomically at the end), ``append``.
        key: columns identifying a row: passed through, the output's primary key when
            the catalog proves them unique (else checked by distinct count).
        keep: see :class:`Scorer`.
        keep_all: see :class:`Scorer`.
        proba: see :class:`Scorer`.
        name: see :class:`Scorer`.
        queue: a lease queue URL every process of the run shares.
        job: the job name every process of the run shares.
        readers: worker threads here.
        batch_size: rows per committed batch.
        partitions: the plan's partitions.
        lease_ttl: a lease's life without heartbeat.
        finish: finish once the job is complete (see :func:`sqlfeed.sink.copy_into`).
        progress: called with the rows this process has scored (as each batch is; the
            rows committed when more) and the rows expected (None until counted): see
            :class:`RowsMeter`.

    Returns:
        The report of the finish (None: ``finish`` False); with ``out``, the rows this
        process wrote.
    """
    output = into_db if into_db is not None else source
    if (
        out is None  # a folder's workers write files; they only read the database
        and queue is not None
        and isinstance(output, str)
        and dialect_for(output).SINK_ONE_PROCESS
    ):
        raise InvalidArgumentError(
            f"several processes cannot write one {dialect_for(output).name} file: give the "
            "workers --out DIR, then load it with predict --finish --out DIR --into TABLE "
            "--into-db URL"
        )
    loaded = model if isinstance(model, Model) else load(model)
    meter = RowsMeter(progress) if progress is not None else None
    scorer = Scorer(
        loaded,
        key=key or (),
        keep=keep,
        keep_all=keep_all,
        proba=proba,
        name=name,
        on_rows=meter.scored_rows if meter is not None else None,
    )
    common: dict[str, Any] = {
        "queue": queue,
        "job": job,
        "readers": readers,
        "partitions": partitions,
    }
    if out is not None:  # Parquet files: the mode and key do not apply to a folder
        return copy_to_folder(
            query,
            source,
            out,
            **common,
            batch_size=batch_size,
            lease_ttl=lease_ttl,
            progress=meter,
            transform=scorer,
        )
    if into is None:
        raise InvalidArgumentError("give the output: into=TABLE, or out=DIR for Parquet files")
    return copy_into(
        query,
        source,
        into_db,
        into,
        mode=mode,
        key=key,
        **common,
        batch_size=batch_size,
        lease_ttl=lease_ttl,
        finish=finish,
        progress=meter,
        transform=scorer,
    )


def finish(
    queue: str,
    job: str,
    *,
    into: str | None = None,
    into_db: Any = None,
    out: str | None = None,
    mode: str = "create",
) -> WriteReport:
    """Finish the output of the prediction job ``job`` (idempotent).

    Its table's rows checked and put in place; with ``out``, its folder checked (and with
    ``into``, loaded into that table of ``into_db`` in one process).
    """
    if out is not None:
        return load_folder(queue, job, out, into_db, into, mode)
    return finish_job(queue, job, into_db, into)

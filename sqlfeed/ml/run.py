"""One call of :func:`sqlfeed.ml.train`: the scratch tables it makes, and how it resumes.

On PostgreSQL and MySQL/MariaDB the planner may run the training split (or the validation
split, a statistics pass...) once into a scratch table (``materialize``). A training run
owns every table its plans make (:func:`sqlfeed.plans.materialize.owned_scratch`): each is
named ``train --out <folder>`` in its comment, and dropped when the run ends, finished or
failed or interrupted. A run killed outright leaves its tables; the next run with the same
``--out`` drops them (``sqlfeed scratch list`` shows them as that model's meanwhile).

With ``checkpoint_dir`` (a Keras family), the run records in that folder
(:data:`RUN_FILE`) what it is (the SELECT, the label, the options) and the plan of its
training split. A run interrupted once a checkpoint exists keeps that plan's scratch
table; the same training run again reuses the plan as it was, so the feed's position in
the checkpoint names the same rows, and drops the table when it finishes. A checkpoint
folder of another training run is refused in one line, before any query.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlglot import exp

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.io import Source
from sqlfeed.ml.options import TrainOptions
from sqlfeed.plans.materialize import (
    DEFAULT_SCRATCH,
    drop_orphaned_scratch,
    drop_scratch_tables,
    list_scratch,
    owned_scratch,
)
from sqlfeed.plans.model import Plan
from sqlfeed.plans.planner import plan as make_plan
from sqlfeed.tf.checkpoint import STATE_FILE

__all__ = ["RUN_FILE", "TrainingRun"]

RUN_FILE = "sqlfeed_training_run.json"
"""The record of a checkpointed training run in its ``checkpoint_dir``."""
RUN_VERSION = 1
_KERAS_METADATA = "training_metadata.json"
_NOT_IDENTITY = ("overwrite", "report", "checkpoint_dir")
"""Options that do not change what a training run reads or fits."""


class TrainingRun:
    """A training run's scratch tables and, with checkpoints, its record.

    Args:
        query: the user's SELECT.
        source: where it runs.
        label: the label column.
        out: the model folder the run writes (it names the run's scratch tables).
        options: the training options.

    Raises:
        InvalidArgumentError: ``checkpoint_dir`` holds checkpoints of another training
            run, or checkpoints without a record of their run.
    """

    def __init__(
        self, query: str, source: Source, label: str, out: Path, options: TrainOptions
    ) -> None:
        self.source = source
        self.what = f"train --out {out.resolve()}"
        self.identity = _identity(query, source, label, options)
        folder = options.checkpoint_dir
        keeps = folder is not None and options.family != "gbdt"  # gbdt has no checkpoints
        self.folder = Path(folder) if keeps and folder is not None else None
        self.saved: Plan | None = self._resumed_plan()
        self.plan: Plan | None = None
        self._reused: list[str] = []

    @contextlib.contextmanager
    def scope(self) -> Iterator[TrainingRun]:
        """Inside: the run. Tables a killed run of the same ``--out`` left are dropped first.

        On the way out every scratch table the run made is dropped, except its training
        plan's when it can resume from a checkpoint (interrupted after one was saved).
        """
        schema = self._scratch_schema()
        if schema is not None:
            keep = (self._table(self.saved)[1],) if self.saved and self.saved.scratch_table else ()
            drop_orphaned_scratch(self.source, schema, self.what, keep)
        with owned_scratch(self.what) as owned:
            try:
                yield self
            finally:
                self._end([*self._reused, *owned.tables])

    def training_plan(self, training_sql: str, partitions: int | None) -> Plan:
        """The plan of the training split: the interrupted run's, or a new one recorded."""
        if self.saved is not None:
            if self.saved.scratch_table:
                schema, name = self._table(self.saved)
                if name not in {t.name for t in list_scratch(self.source, schema)}:
                    raise InvalidArgumentError(
                        f"{self.folder} resumes a training run that read its training split "
                        f"from the scratch table {self.saved.scratch_table}, which is gone "
                        "(dropped by hand?): remove that folder to train from the start"
                    )
                self._reused.append(self.saved.scratch_table)
            self.plan = self.saved
            return self.saved
        self.plan = make_plan(training_sql, self.source, partitions=partitions)
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            record = {"version": RUN_VERSION, "run": self.identity, "plan": self.plan.to_dict()}
            aside = self.folder / f"{RUN_FILE}.tmp"
            aside.write_text(json.dumps(record, indent=1), encoding="utf-8")
            os.replace(aside, self.folder / RUN_FILE)
        return self.plan

    # -- inside ----------------------------------------------------------------------------

    def _resumed_plan(self) -> Plan | None:
        """The plan to resume with: the record's, when the folder holds checkpoints of it.

        Raises:
            InvalidArgumentError: checkpoints of another run, or of no recorded run.
        """
        if self.folder is None or not _checkpointed(self.folder):
            return None
        path = self.folder / RUN_FILE
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            saved = record["run"]
            plan = Plan.from_dict(record["plan"])
        except (OSError, ValueError, KeyError, TypeError, InvalidArgumentError):
            raise InvalidArgumentError(
                f"{self.folder} holds checkpoints without a readable record of their "
                f"training run ({RUN_FILE}): remove that folder, or give another checkpoint "
                "folder, to train from the start"
            ) from None
        differ = [
            f"{name} {_shown(saved.get(name))} there, {_shown(value)} here"
            for name, value in self.identity.items()
            if saved.get(name) != value
        ]
        if differ:
            raise InvalidArgumentError(
                f"{self.folder} holds the checkpoints of another training run "
                f"({'; '.join(differ)}): run that training again to resume it, or remove "
                "the folder, or give another checkpoint folder, to train from the start"
            )
        return plan

    def _scratch_schema(self) -> str | None:
        """Where this engine's training runs materialize (None: nowhere by default)."""
        return DEFAULT_SCRATCH if self.source.dialect.CREATES_SCRATCH_SCHEMA else None

    def _table(self, plan: Plan) -> tuple[str, str]:
        assert plan.scratch_table is not None
        table = exp.to_table(plan.scratch_table, dialect=self.source.dialect.sqlglot_dialect)
        return table.db, table.name

    def _end(self, tables: list[str]) -> None:
        """Drop the run's tables, but the one a checkpoint resumes from; the record with them."""
        resumable = self.folder is not None and _checkpointed(self.folder)
        kept = self.plan.scratch_table if resumable and self.plan is not None else None
        if self.folder is not None and not resumable:  # nothing to resume: no record either
            with contextlib.suppress(OSError):
                (self.folder / RUN_FILE).unlink()
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # when empty (made by this run)
        by_schema: dict[str, list[str]] = {}
        for spelled in dict.fromkeys(tables):
            if spelled != kept:
                table = exp.to_table(spelled, dialect=self.source.dialect.sqlglot_dialect)
                by_schema.setdefault(table.db, []).append(table.name)
        for schema, names in by_schema.items():
            try:
                drop_scratch_tables(self.source, schema, names)
            except Exception as err:  # the run's own outcome stands; the user is told
                warnings.warn(
                    f"the training's scratch tables {', '.join(names)} in {schema} were not "
                    f"dropped ({err}): drop them with sqlfeed scratch drop --schema {schema} "
                    "NAME...",
                    stacklevel=2,
                )


def _checkpointed(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint a training resumes from."""
    return (folder / STATE_FILE).is_file() or (folder / _KERAS_METADATA).is_file()


def _identity(query: str, source: Source, label: str, options: TrainOptions) -> dict[str, Any]:
    """What a training run is: a checkpoint resumes only the same."""
    chosen = {k: v for k, v in options.to_dict().items() if k not in _NOT_IDENTITY}
    return {"SELECT": query.strip(), "engine": source.dialect.name, "label": label, **chosen}


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."

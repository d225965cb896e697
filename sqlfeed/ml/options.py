"""The options of a training: :class:`TrainOptions`, checked when made."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlfeed.errors import InvalidArgumentError

__all__ = ["FAMILIES", "TASKS", "TrainOptions"]

TASKS = ("auto", "binary", "multiclass", "regression", "classification")
"""``auto``: chosen from the label's values (see :func:`sqlfeed.ml.train`);
``classification``: binary or multiclass by the number of label values, never regression
(SQLFlow's ``...Classifier`` models)."""
FAMILIES = ("linear", "dnn", "wide_deep", "gbdt")
"""Keras 3 models (``linear``, ``dnn``, ``wide_deep``) and XGBoost's boosted trees."""
DEFAULT_LEARNING_RATE = {"linear": 0.01, "dnn": 0.003, "wide_deep": 0.003, "gbdt": 0.1}
"""Adam's learning rate of the Keras families; XGBoost's ``eta`` of ``gbdt``."""


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"{what} must be a list of column names, not {value!r}")
    return tuple(value)


def _positive(value: Any, what: str, *, number: type = int) -> None:
    ok = isinstance(value, (int, float) if number is float else int) and not isinstance(value, bool)
    if not ok or value <= 0:
        kind = "a number" if number is float else "an integer"
        raise InvalidArgumentError(f"{what} must be {kind} > 0, not {value!r}")


@dataclass(frozen=True)
class TrainOptions:
    """How :func:`sqlfeed.ml.train` trains.

    Attributes:
        task: ``auto`` (text and booleans, and integers of at most 20 values, are classes;
            other numbers a regression), ``binary``, ``multiclass``, ``regression`` or
            ``classification`` (binary or multiclass, never a regression).
        family: ``linear``, ``dnn`` (default), ``wide_deep`` or ``gbdt`` (XGBoost, the
            ``ml`` extra).
        hidden_units: the hidden layers of ``dnn`` and of the deep part of ``wide_deep``.
        dropout: the share of units dropped after each hidden layer while training (0:
            none).
        epochs: passes over the training split; None: enough for about 2,000 steps,
            between 3 and 200 (small tables get more passes), and ``dnn``/``wide_deep`` on a
            training split of up to 200,000 rows stop early: a fifth of the split (by the
            same hash) is kept out and scored every epoch, the best epoch's weights kept.
        batch_size: rows per step.
        learning_rate: Adam's (Keras families) or XGBoost's ``eta``; None: the family's
            default (:data:`DEFAULT_LEARNING_RATE`).
        class_weight: None, ``"balanced"`` (weights inverse to the training split's class
            counts) or a mapping of label value to weight.
        seed: the seed of the weights' initialisation, the shuffle and XGBoost.
        key: the column the train/validation split hashes (an integer or text column; it is
            not a feature); None: the whole row.
        validation: the validation share of the split, in (0, 1).
        features: the feature columns; None: every column but the label, the key and
            ``skip``.
        skip: columns that are not features.
        top_k: the vocabulary size of a categorical feature (the rest share one
            out-of-vocabulary index).
        buckets: quantile buckets of a numeric feature in the wide part of ``wide_deep``.
        trees: boosting rounds of ``gbdt``.
        max_depth: the depth of a ``gbdt`` tree.
        partitions: partitions of each read (None: the planner's choice).
        replicas: synchronous replicas of a Keras family (``MirroredStrategy``): GPUs if
            there are that many, else the CPU split into logical devices (when TensorFlow
            is not initialised yet; else the replicas' batches alternate into one model).
            Each replica is fed by its own elastic worker of a job in sqlfeed's lease
            queue (a SQLite file in ``checkpoint_dir``, else in a temporary folder), with
            even batches: ``batch_size`` is the global batch (divisible by ``replicas``),
            and the rows left over once every replica has its share are not trained on
            in that epoch.
        checkpoint_dir: where a training keeps its checkpoints; a training killed and run
            again with the same folder resumes where it stopped.
        overwrite: replace an existing model folder.
        report: write the statistics' HTML report (``sqlfeed.stats.html``, a few seconds per 30
            columns) into the folder beside ``sqlfeed.stats.json``.
    """

    task: str = "auto"
    family: str = "dnn"
    hidden_units: tuple[int, ...] = (64, 32)
    dropout: float = 0.2
    epochs: int | None = None
    batch_size: int = 256
    learning_rate: float | None = None
    class_weight: str | Mapping[Any, float] | None = None
    seed: int = 0
    key: str | None = None
    validation: float = 0.2
    features: tuple[str, ...] | None = None
    skip: tuple[str, ...] = field(default=())
    top_k: int = 100
    buckets: int = 10
    trees: int = 100
    max_depth: int = 6
    partitions: int | None = None
    replicas: int = 1
    checkpoint_dir: str | None = None
    overwrite: bool = False
    report: bool = True

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InvalidArgumentError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.family not in FAMILIES:
            raise InvalidArgumentError(
                f"family must be one of {', '.join(FAMILIES)}, not {self.family!r}"
            )
        units = self.hidden_units
        if isinstance(units, int) and not isinstance(units, bool):
            units = (units,)
        if not isinstance(units, Sequence) or not units:
            raise InvalidArgumentError(f"hidden_units must be a list of integers, not {units!r}")
        for unit in units:
            _positive(unit, "each of hidden_units")
        object.__setattr__(self, "hidden_units", tuple(units))
        for name in ("batch_size", "top_k", "trees", "max_depth", "replicas"):
            _positive(getattr(self, name), name)
        self._check_replicas()
        for name in ("epochs", "partitions"):
            if getattr(self, name) is not None:
                _positive(getattr(self, name), name)
        if self.learning_rate is not None:
            _positive(self.learning_rate, "learning_rate", number=float)
        if isinstance(self.buckets, bool) or not isinstance(self.buckets, int) or self.buckets < 2:
            raise InvalidArgumentError(f"buckets must be an integer >= 2, not {self.buckets!r}")
        drop = self.dropout
        if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not 0 <= drop < 1:
            raise InvalidArgumentError(f"dropout must be a share in [0, 1), not {drop!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InvalidArgumentError(f"seed must be an integer, not {self.seed!r}")
        valid = self.validation
        if isinstance(valid, bool) or not isinstance(valid, (int, float)) or not 0 < valid < 1:
            raise InvalidArgumentError(
                f"validation must be a share between 0 and 1 (0.2: a fifth), not {valid!r}"
            )
        weight = self.class_weight
        if not (weight is None or weight == "balanced" or isinstance(weight, Mapping)):
            raise InvalidArgumentError(
                f"class_weight must be 'balanced' or a mapping of label value to weight, "
                f"not {weight!r}"
            )
        if self.features is not None:
            object.__setattr__(self, "features", _names(self.features, "features"))
        object.__setattr__(self, "skip", _names(self.skip, "skip"))

    def _check_replicas(self) -> None:
        if self.replicas == 1:
            return
        if self.family == "gbdt":
            raise InvalidArgumentError(
                "replicas applies to the Keras families (linear, dnn, wide_deep), not gbdt: "
                "leave replicas at 1"
            )
        if self.batch_size % self.replicas:
            raise InvalidArgumentError(
                f"batch_size {self.batch_size} is not divisible by the {self.replicas} "
                "replicas: give a multiple of replicas (the global batch is split evenly)"
            )

    @property
    def rate(self) -> float:
        """The learning rate: the given one or the family's default."""
        return self.learning_rate or DEFAULT_LEARNING_RATE[self.family]

    @classmethod
    def from_kwargs(cls, base: TrainOptions | None, fields: Mapping[str, Any]) -> TrainOptions:
        """``base`` (or the defaults) with ``fields`` replaced.

        An unknown name is refused with the closest known one.
        """
        known = [f.name for f in dataclasses.fields(cls)]
        for name in fields:
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise InvalidArgumentError(f"unknown training option {name!r}{hint}")
        return dataclasses.replace(base or cls(), **fields)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (for the manifest)."""
        data = dataclasses.asdict(self)
        if isinstance(self.class_weight, Mapping):
            data["class_weight"] = {str(k): v for k, v in self.class_weight.items()}
        for name in ("hidden_units", "features", "skip"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

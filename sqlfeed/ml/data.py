"""What :func:`sqlfeed.ml.train` decided before the model: :class:`TrainingData`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sqlfeed.errors import InvalidArgumentError
from sqlfeed.io import Source
from sqlfeed.ml.features import Feature
from sqlfeed.ml.options import TrainOptions
from sqlfeed.ml.split import Split
from sqlfeed.plans.model import Plan
from sqlfeed.stats.model import FeatureStats

__all__ = ["TrainingData", "class_weights"]


@dataclass
class TrainingData:
    """What the steps before the model decided: the SQL, the label, the features."""

    query: str
    source: Source
    label: str
    options: TrainOptions
    split: Split
    training_sql: str
    validation_sql: str
    schema: pa.Schema
    task: str = ""
    classes: list[Any] | None = None
    class_counts: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    label_scale: tuple[float, float] = (0.0, 1.0)
    stats: FeatureStats | None = None
    features: list[Feature] = field(default_factory=list)
    fed: dict[str, str] = field(default_factory=dict)
    """Each feature's fed dtype (what the model's input takes)."""
    notes: list[str] = field(default_factory=list)
    plan: Plan | None = None
    """The training split's plan (its fingerprint goes to the manifest)."""
    fit_sql: str | None = None
    """With early stopping: the part of the training split the model is fitted on."""
    stop_sql: str | None = None
    """With early stopping: the part of the training split kept out of fitting, scored
    every epoch; the best epoch's weights are kept."""
    stop_rows: int = 0

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]


def class_weights(data: TrainingData) -> dict[int, float] | None:
    """The Keras/XGBoost class weights by class index, from ``options.class_weight``."""
    weight = data.options.class_weight
    if weight is None or data.classes is None:
        return None
    if weight == "balanced":
        total = sum(data.class_counts.values())
        k = len(data.classes)
        return {i: total / (k * data.class_counts[str(c)]) for i, c in enumerate(data.classes)}
    assert isinstance(weight, Mapping)
    given = {str(k): float(v) for k, v in weight.items()}
    unknown = [k for k in given if k not in {str(c) for c in data.classes}]
    if unknown:
        raise InvalidArgumentError(
            f"class_weight names {unknown[0]!r}, which is not a label value "
            f"({', '.join(map(repr, data.classes))})"
        )
    return {i: given.get(str(c), 1.0) for i, c in enumerate(data.classes)}

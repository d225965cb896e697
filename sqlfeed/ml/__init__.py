"""SELECT-driven training: a model from a SELECT, its preprocessing saved inside it.

``sqlfeed.ml.train(query, source, label=..., out=...)`` splits the query's rows into a
training and a validation split by a hash of a key (the same on every engine and run),
computes exact statistics of the training split in the engine, builds a Keras 3 model
(``linear``, ``dnn``, ``wide_deep``) with its preprocessing layers inside, or XGBoost's
boosted trees (``gbdt``), trains it from sqlfeed's feed, and writes one folder: the model,
a JSON manifest (task, features and their transforms, both SQL texts, metrics, versions),
the statistics and their HTML report. :func:`evaluate` scores a model on its validation
split or on any SELECT; :func:`evaluate_table` a table of predictions, in its engine;
:func:`predict` writes a model's predictions for a SELECT into a table, exactly once;
:func:`load` opens a model folder.

Importing this package is cheap: TensorFlow and XGBoost are imported when a model is
built or loaded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlfeed.ml.artifact import Model, load
    from sqlfeed.ml.evaluation import evaluate
    from sqlfeed.ml.options import TrainOptions
    from sqlfeed.ml.scoring import predict
    from sqlfeed.ml.split import Split
    from sqlfeed.ml.sqlflow import parse_statement
    from sqlfeed.ml.tablemetrics import evaluate_table
    from sqlfeed.ml.trainer import train

__all__ = [
    "Model",
    "Split",
    "TrainOptions",
    "evaluate",
    "evaluate_table",
    "load",
    "parse_statement",
    "predict",
    "train",
]

_HOMES = {
    "Model": "sqlfeed.ml.artifact",
    "load": "sqlfeed.ml.artifact",
    "evaluate": "sqlfeed.ml.evaluation",
    "TrainOptions": "sqlfeed.ml.options",
    "Split": "sqlfeed.ml.split",
    "parse_statement": "sqlfeed.ml.sqlflow",
    "predict": "sqlfeed.ml.scoring",
    "evaluate_table": "sqlfeed.ml.tablemetrics",
    "train": "sqlfeed.ml.trainer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sqlfeed.ml' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

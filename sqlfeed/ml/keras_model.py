"""The Keras 3 families (``linear``, ``dnn``, ``wide_deep``) with their preprocessing inside.

A model built here takes the raw columns as :mod:`sqlfeed.tf` feeds them, each with its
``<name>_is_null`` mask, and gives predictions: every transform of :mod:`sqlfeed.ml.features`
is a layer of the model, saved in its ``.keras`` file, so a model scores any SELECT that
returns its feature columns without deriving anything again.

* numeric and time: ``Scaled`` -- ``(x - mean) / std`` computed in float64 (a timestamp's
  microseconds keep their precision), a NULL (or NaN) becomes 0 (the training mean), and
  the mask is a feature beside it;
* categorical: ``StringLookup``/``IntegerLookup`` over the vocabulary (index 0: every
  other value), ``MaskedIndex`` sends NULL to index 0, then one-hot (``linear``, and
  vocabularies up to :data:`ONE_HOT_MAX` values) or an embedding;
* ``wide_deep``: the wide part is linear over the one-hot quantile buckets of the numerics
  (``Bucketized``, NULL its own bucket), the categoricals, and the crosses of pairs of
  them (``Crossed``, hashed into at most :data:`CROSS_BINS` bins); the deep part is the
  ``dnn`` tower; their logits add up;
* regression: the output layer is ``Rescaled`` by the training label's standard deviation
  and mean, so the network learns a standardized label and predicts in the label's unit.

The layer classes (:mod:`sqlfeed.ml.layers`) are registered Keras serializables (package
``sqlfeed``): :func:`sqlfeed.ml.load` registers them before it opens a saved model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlfeed.dialects.optional import require
from sqlfeed.feed.tensors import MASK_SUFFIX
from sqlfeed.ml.features import Feature
from sqlfeed.ml.layers import layer_classes
from sqlfeed.ml.options import TrainOptions

__all__ = ["CROSS_BINS", "ONE_HOT_MAX", "build_model", "input_dtypes"]

OOV_TOKEN = "[sqlfeed:OOV]"
"""The out-of-vocabulary token of a text lookup (Keras's ``[UNK]`` is a value a column may
hold: a vocabulary starting with it would be taken as already holding the token)."""
ONE_HOT_MAX = 64
"""Vocabularies up to this size are one-hot in ``dnn``; larger ones an embedding."""
CROSS_BINS = 1024
"""Bins of a crossed pair of ``wide_deep`` (a pair with more combinations is hashed)."""
MAX_CROSSED = 8
"""Only the first this many wide features are crossed pairwise (28 pairs)."""


def input_dtypes(features: Sequence[Feature], fed: Mapping[str, str]) -> dict[str, str]:
    """The model's input names and dtypes: each feature as fed, and its bool mask."""
    dtypes = {}
    for feature in features:
        dtypes[feature.name] = fed[feature.name]
        dtypes[feature.name + MASK_SUFFIX] = "bool"
    return dtypes


def build_model(
    features: Sequence[Feature],
    fed: Mapping[str, str],
    *,
    task: str,
    classes: int,
    label_scale: tuple[float, float],
    options: TrainOptions,
) -> Any:
    """The compiled Keras model of ``options.family`` over ``features``.

    Args:
        features: the features and their transforms.
        fed: each feature's fed dtype (``float32``, ``int64``, ``string``, ...).
        task: ``binary``, ``multiclass`` or ``regression``.
        classes: the number of classes (multiclass).
        label_scale: the training label's mean and standard deviation (regression).
        options: the family, hidden units, learning rate and seed.
    """
    keras = require("keras", "sqlfeed.ml's Keras models")
    keras.utils.set_random_seed(options.seed)
    custom = layer_classes()
    inputs = {
        name: keras.Input(shape=(), name=name, dtype=dtype)
        for name, dtype in input_dtypes(features, fed).items()
    }
    dense_parts, wide_indices = [], []
    for feature in features:
        value, is_null = inputs[feature.name], inputs[feature.name + MASK_SUFFIX]
        t = feature.transform
        if feature.family == "categorical":
            index = _lookup(keras, feature)(value)
            index = custom["MaskedIndex"](name=f"{feature.name}_index")([index, is_null])
            depth = len(t["vocabulary"]) + 1
            dense_parts.append(_encode(keras, custom, feature.name, index, depth, options))
            wide_indices.append((feature.name, index, depth))
        else:
            scaled = custom["Scaled"](t["mean"], t["std"], name=f"{feature.name}_scaled")
            dense_parts.append(scaled([value, is_null]))
            if options.family == "wide_deep":
                bounds = t.get("boundaries", [])
                bucket = custom["Bucketized"](bounds, name=f"{feature.name}_bucket")
                wide_indices.append((feature.name, bucket([value, is_null]), len(bounds) + 2))
    merged = dense_parts[0] if len(dense_parts) == 1 else keras.layers.Concatenate()(dense_parts)
    units = 1 if task != "multiclass" else classes
    if options.family == "linear":
        logits = keras.layers.Dense(units, name="logits")(merged)
    else:
        logits = keras.layers.Dense(units, name="deep_logits")(_tower(keras, merged, options))
        if options.family == "wide_deep":
            wide = _wide(keras, custom, wide_indices)
            logits = keras.layers.Add(name="logits")(
                [logits, keras.layers.Dense(units, name="wide_logits")(wide)]
            )
    output = _head(keras, custom, logits, task, label_scale)
    model = keras.Model(inputs, output, name=f"sqlfeed_{options.family}")
    _compile(keras, model, task, options)
    return model


def _lookup(keras: Any, feature: Feature) -> Any:
    vocabulary = feature.transform["vocabulary"]
    name = f"{feature.name}_lookup"
    if feature.transform["dtype"] == "string":
        oov = OOV_TOKEN
        while oov in vocabulary:  # a value spelled as the token must stay a value
            oov += "_"
        return keras.layers.StringLookup(
            vocabulary=list(vocabulary), num_oov_indices=1, oov_token=oov, name=name
        )
    return keras.layers.IntegerLookup(
        vocabulary=[int(v) for v in vocabulary], num_oov_indices=1, mask_token=None, name=name
    )


def _encode(
    keras: Any, custom: dict[str, type], name: str, index: Any, depth: int, options: TrainOptions
) -> Any:
    if options.family == "linear" or depth <= ONE_HOT_MAX:
        return custom["OneHot"](depth, name=f"{name}_one_hot")(index)
    dim = max(4, min(32, round(1.6 * depth**0.56)))
    return keras.layers.Embedding(depth, dim, name=f"{name}_embedding")(index)


def _tower(keras: Any, x: Any, options: TrainOptions) -> Any:
    for i, units in enumerate(options.hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
        if options.dropout:
            x = keras.layers.Dropout(options.dropout, seed=options.seed, name=f"dropout_{i}")(x)
    return x


def _wide(keras: Any, custom: dict[str, type], indices: list[tuple[str, Any, int]]) -> Any:
    parts = [custom["OneHot"](d, name=f"{n}_wide")(i) for n, i, d in indices]
    crossed = indices[:MAX_CROSSED]
    for (na, a, _), (nb, b, db) in itertools.combinations(crossed, 2):
        da = next(d for n, _, d in crossed if n == na)
        bins = min(da * db, CROSS_BINS)
        pair = custom["Crossed"](db, bins, name=f"{na}_x_{nb}")([a, b])
        parts.append(custom["OneHot"](bins, name=f"{na}_x_{nb}_one_hot")(pair))
    return parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="wide")(parts)


def _head(
    keras: Any, custom: dict[str, type], logits: Any, task: str, scale: tuple[float, float]
) -> Any:
    if task == "binary":
        return keras.layers.Activation("sigmoid", name="probability")(
            keras.layers.Reshape(())(logits)
        )
    if task == "multiclass":
        return keras.layers.Activation("softmax", name="probabilities")(logits)
    mean, std = scale
    flat = keras.layers.Reshape(())(logits)
    return custom["Rescaled"](mean, std if std > 0 and math.isfinite(std) else 1.0, name="value")(
        flat
    )


def _compile(keras: Any, model: Any, task: str, options: TrainOptions) -> None:
    loss: Any
    if task == "binary":
        loss = "binary_crossentropy"
        metrics = [keras.metrics.BinaryAccuracy(name="accuracy"), keras.metrics.AUC(name="auc")]
    elif task == "multiclass":
        loss = "sparse_categorical_crossentropy"
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss, metrics = "mean_squared_error", [keras.metrics.RootMeanSquaredError(name="rmse")]
    model.compile(optimizer=keras.optimizers.Adam(options.rate), loss=loss, metrics=metrics)

"""The custom Keras layers of sqlfeed.ml's models (registered serializables, package ``sqlfeed``).

Defined on first use, so that importing this module imports no Keras.

See :mod:`sqlfeed.ml.keras_model` for what each does in a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlfeed.dialects.optional import require

__all__ = ["layer_classes"]

_LAYERS: dict[str, type] = {}


def layer_classes() -> dict[str, type]:
    """The custom layers by name, defined and registered with Keras on first use."""
    if not _LAYERS:
        keras = require("keras", "sqlfeed.ml's Keras models")
        for define in (_scaled, _masked_index, _bucketized, _one_hot, _crossed, _rescaled):
            cls = define(keras.layers.Layer, keras.ops)
            _LAYERS[cls.__name__] = keras.saving.register_keras_serializable(package="sqlfeed")(cls)
    return _LAYERS


def _scaled(base: Any, ops: Any) -> type:
    class Scaled(base):  # type: ignore[misc,valid-type]
        """``[value, is_null]`` to ``(n, 2)``: the standardized value and the mask as a float.

        The standardized value is 0 for NULL, NaN and infinities.
        """

        def __init__(self, mean: float, std: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.mean, self.std = float(mean), float(std)

        def call(self, inputs: Any) -> Any:
            value, is_null = inputs
            x = (ops.cast(value, "float64") - self.mean) / self.std
            bad = ops.logical_or(is_null, ops.logical_not(ops.isfinite(x)))
            x = ops.cast(ops.where(bad, ops.zeros_like(x), x), "float32")
            return ops.stack([x, ops.cast(is_null, "float32")], axis=-1)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "mean": self.mean, "std": self.std}

    return Scaled


def _masked_index(base: Any, ops: Any) -> type:
    class MaskedIndex(base):  # type: ignore[misc,valid-type]
        """``[index, is_null]`` to the index, 0 (out of vocabulary) for NULL."""

        def call(self, inputs: Any) -> Any:
            index, is_null = inputs
            index = ops.cast(index, "int64")
            return ops.where(is_null, ops.zeros_like(index), index)

    return MaskedIndex


def _bucketized(base: Any, ops: Any) -> type:
    class Bucketized(base):  # type: ignore[misc,valid-type]
        """``[value, is_null]`` to its quantile bucket; NULL is bucket ``len(boundaries)+1``."""

        def __init__(self, boundaries: Sequence[float], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.boundaries = [float(b) for b in boundaries]

        def call(self, inputs: Any) -> Any:
            value, is_null = inputs
            x = ops.cast(value, "float64")
            bucket = ops.cast(ops.digitize(x, self.boundaries), "int64")
            null = ops.full_like(bucket, len(self.boundaries) + 1)
            return ops.where(is_null, null, bucket)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "boundaries": self.boundaries}

    return Bucketized


def _one_hot(base: Any, ops: Any) -> type:
    class OneHot(base):  # type: ignore[misc,valid-type]
        """An index to its one-hot float vector of ``depth``."""

        def __init__(self, depth: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.depth = int(depth)

        def call(self, index: Any) -> Any:
            return ops.one_hot(ops.cast(index, "int64"), self.depth, dtype="float32")

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "depth": self.depth}

    return OneHot


def _crossed(base: Any, ops: Any) -> type:
    class Crossed(base):  # type: ignore[misc,valid-type]
        """``[a, b]`` (indices) to the index of the pair, folded into ``bins``."""

        def __init__(self, depth_b: int, bins: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.depth_b, self.bins = int(depth_b), int(bins)

        def call(self, inputs: Any) -> Any:
            a, b = (ops.cast(i, "int64") for i in inputs)
            return ops.mod(a * self.depth_b + b, self.bins)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "depth_b": self.depth_b, "bins": self.bins}

    return Crossed


def _rescaled(base: Any, ops: Any) -> type:
    class Rescaled(base):  # type: ignore[misc,valid-type]
        """A standardized prediction back in the label's unit: ``x * std + mean``."""

        def __init__(self, mean: float, std: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.mean, self.std = float(mean), float(std)

        def call(self, x: Any) -> Any:
            return x * self.std + self.mean

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "mean": self.mean, "std": self.std}

    return Rescaled

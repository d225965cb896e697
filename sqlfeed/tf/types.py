"""The element structure of a tf.data dataset: its TensorSpecs and its nesting.

The type mapping itself (Arrow -> tensor, framework-neutral) lives in
:mod:`sqlfeed.feed.tensors` and is re-exported here. No TensorFlow import:
:func:`flat_specs` takes the module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlfeed.feed.tensors import (
    FLOAT32_MAX,
    FLOAT_DTYPES,
    MASK_SUFFIX,
    TIME_UNITS,
    ColumnMapping,
    as_names,
    check_options,
    column_mappings,
)

__all__ = [
    "FLOAT32_MAX",
    "FLOAT_DTYPES",
    "MASK_SUFFIX",
    "TIME_UNITS",
    "ColumnMapping",
    "as_names",
    "check_options",
    "column_mappings",
    "flat_specs",
    "nest_element",
]


# -- the element structure --------------------------------------------------------------

RaggedBuilder = Callable[[Any, list[Any]], Any]
"""Builds a ragged value from its flat values and its row splits (one per list level)."""


def flat_specs(tf: Any, mappings: Sequence[ColumnMapping]) -> list[Any]:
    """The ``tf.TensorSpec`` of each flat component, in the converter's order.

    Per column: its values, one int64 row-splits vector per list level, and its mask.

    Args:
        tf: the ``tensorflow`` module.
        mappings: the columns, as :func:`column_mappings` returns them.
    """
    specs = []
    for m in mappings:
        specs.append(tf.TensorSpec([None], tf.as_dtype(m.dtype)))
        specs.extend(tf.TensorSpec([None], tf.int64) for _ in range(m.ragged_rank))
        if m.mask:
            specs.append(tf.TensorSpec([None], tf.bool))
    return specs


def nest_element(
    flat: Sequence[Any],
    mappings: Sequence[ColumnMapping],
    *,
    labels: Sequence[str],
    single_label: bool,
    ragged: RaggedBuilder | None = None,
) -> Any:
    """The dataset element from its flat components (specs or tensors alike).

    Args:
        flat: the components, in :func:`flat_specs`' order.
        mappings: the columns.
        labels: the label columns' names, in order.
        single_label: the label was given as one name: the element is
            ``(features, label)``, not ``(features, {name: label})``.
        ragged: assembles a list column's values and row splits (needed only when a
            column has list levels).

    Returns:
        ``features`` (a dict of name to value), ``(features, label)`` or
        ``(features, {name: label})``.
    """
    features: dict[str, Any] = {}
    by_label: dict[str, Any] = {}
    at = 0
    for m in mappings:
        value = flat[at]
        if m.ragged_rank:
            if ragged is None:  # pragma: no cover - callers pass one for list columns
                raise AssertionError("no list columns here")
            value = ragged(value, list(flat[at + 1 : at + 1 + m.ragged_rank]))
        at += 1 + m.ragged_rank
        (by_label if m.label else features)[m.name] = value
        if m.mask:
            features[m.name + MASK_SUFFIX] = flat[at]
            at += 1
    if not labels:
        return features
    if single_label:
        return features, by_label[labels[0]]
    return features, by_label

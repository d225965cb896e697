"""A label column's values as class indices, the same on every engine.

Engines type one label differently: a boolean is a boolean in DuckDB and PostgreSQL and an
integer in SQLite and MariaDB; an integer label may come back as a decimal (PostgreSQL's
``numeric``) or a double. A class is therefore matched by its value, not its type: the
numbers (booleans as 0 and 1, decimals and doubles by their value) against the model's
numeric classes, text against its text classes.

>>> import pyarrow as pa
>>> class_indices(pa.array([1, 0, 1]), [False, True], "y").tolist()
[1, 0, 1]
>>> class_indices(pa.array(["b", "a"]), ["a", "b"], "y").tolist()
[1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.errors import InvalidArgumentError

__all__ = ["class_indices", "is_number_class", "null_label_message"]


def is_number_class(value: Any) -> bool:
    """Whether a class (as the manifest keeps it) is a number (a boolean is 0 or 1)."""
    return isinstance(value, (bool, int, float))


def null_label_message(label: str, count: int, quoted: str | None = None) -> str:
    """The one line refusing NULL labels."""
    return (
        f"the label {label!r} is NULL in {count:,} rows: filter them in the SELECT "
        f"(WHERE {quoted or label} IS NOT NULL)"
    )


def _numeric_type(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_decimal(arrow_type)
    )


def class_indices(
    column: pa.Array | pa.ChunkedArray, classes: Sequence[Any], label: str
) -> np.ndarray:
    """The index in ``classes`` of each value of ``column`` (int64).

    Raises:
        InvalidArgumentError: a NULL label, a value that is none of the classes (shown as
            the engine gave it), or a column of another kind (text for numeric classes).
    """
    if column.null_count:
        raise InvalidArgumentError(null_label_message(label, column.null_count))
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    shown = ", ".join(map(repr, classes))
    if all(is_number_class(c) for c in classes) and _numeric_type(column.type):
        values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
        keys = np.array([float(c) for c in classes], dtype=np.float64)
        order = np.argsort(keys, kind="stable")
        position = np.clip(np.searchsorted(keys[order], values), 0, len(keys) - 1)
        found = keys[order][position] == values
        if not found.all():
            bad = column[int(np.flatnonzero(~found)[0])].as_py()
            raise InvalidArgumentError(
                f"the label {label!r} holds {bad!r}, which is not one of the model's classes "
                f"({shown}): filter it out in the SELECT"
            )
        return np.asarray(order[position], dtype=np.int64)
    if all(isinstance(c, str) for c in classes) and (
        pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    ):
        found = pc.index_in(column, value_set=pa.array(list(classes), type=column.type))
        if found.null_count:
            bad = column.filter(pc.is_null(found))[0].as_py()
            raise InvalidArgumentError(
                f"the label {label!r} holds {bad!r}, which is not one of the model's classes "
                f"({shown}): filter it out in the SELECT"
            )
        return np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
    raise InvalidArgumentError(
        f"the label {label!r} is {column.type} here, and the model's classes are {shown}: "
        "cast it in the SELECT to the type it was trained on"
    )

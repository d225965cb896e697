"""Validation of the arguments the query builders share: key columns, counts, indices.

Each check raises :class:`sqlfeed.dialects.InvalidArgumentError` with the value it got.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlfeed.dialects import InvalidArgumentError

__all__ = [
    "MAX_PARTITIONS",
    "check_partition_count",
    "check_partition_index",
    "check_positive_int",
    "normalize_key",
]

MAX_PARTITIONS = 100_000
"""The most partitions one plan may have: beyond it a plan (its JSON, its lease table, the
per-partition start-up cost) outweighs what finer partitions could bring."""


def normalize_key(key: str | Sequence[str] | None) -> list[str] | None:
    """A key given as one column name or several, as a list (None: no key).

    Raises:
        InvalidArgumentError: the key is empty or not made of non-blank strings.
    """
    if key is None:
        return None
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or any(not isinstance(k, str) or not k.strip() for k in keys):
        raise InvalidArgumentError(f"key must be a column name or a list of them, not {key!r}")
    return keys


def check_positive_int(value: object, what: str, allow_zero: bool = False) -> None:
    """Refuse anything but an integer >= 1 (>= 0 with ``allow_zero``); ``what`` names it.

    Raises:
        InvalidArgumentError: ``value`` is not such an integer (a bool is not one).
    """
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InvalidArgumentError(f"{what} must be an integer >= {lowest}, got {value!r}")


def check_partition_count(m: object, what: str = "the number of partitions M") -> None:
    """Refuse a partition count that is not an integer in [1, :data:`MAX_PARTITIONS`].

    Raises:
        InvalidArgumentError: naming ``what`` (``--partitions`` in the CLI) and the limit.
    """
    check_positive_int(m, what)
    assert isinstance(m, int)
    if m > MAX_PARTITIONS:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_PARTITIONS}, got {m}: partitions of a few "
            "thousand rows or more are enough to balance any number of workers"
        )


def check_partition_index(k: object, m: int) -> None:
    """Refuse a partition index outside [0, m).

    Raises:
        InvalidArgumentError: ``k`` is not an integer in [0, m).
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < m:
        raise InvalidArgumentError(f"partition index must be in [0, {m}), got {k!r}")

"""The Arrow -> torch mapping: the tf.data table's rules (:mod:`sqlfeed.feed.tensors`), as torch.

Owns the torch-side options (``lists``, ``tokenizer``) and their checks, and the names of
the extra keys a batch carries (``<col>_is_null``, ``<col>_lengths``). The kinds, NULL
fills, masks and the refusals of lossy conversions are the tf.data table's, shared through
:func:`sqlfeed.feed.tensors.column_mappings`. No torch import here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.tensors import MASK_SUFFIX, ColumnMapping

__all__ = [
    "LENGTHS_SUFFIX",
    "LIST_MODES",
    "MASK_SUFFIX",
    "Tokenizer",
    "check_torch_options",
    "output_keys",
    "tokenizer_of",
]

LIST_MODES = ("padded", "nested")
"""How list columns arrive: a dense tensor padded with the fill, with its lengths; or a
``torch.nested`` jagged tensor (one list level of numbers only)."""

LENGTHS_SUFFIX = "_lengths"
"""A padded list column ``col`` comes with ``col_lengths`` (and ``col_lengths_1``, ... for
the deeper levels of nested lists)."""

Tokenizer = Callable[[list[str]], Any]
"""Turns a batch's strings into tensors (a tensor, or a dict of them as Hugging Face's)."""


def check_torch_options(lists: Any, tokenizer: Any, mappings: Sequence[ColumnMapping]) -> None:
    """Checks ``lists`` and ``tokenizer`` against the columns.

    Raises:
        InvalidArgumentError: an unknown list mode, a tokenizer that is not callable or
            that names a column that is not a string column, a nested list mode for a
            list of strings or a list deeper than one level.
    """
    if lists not in LIST_MODES:
        raise InvalidArgumentError(f"lists must be one of {', '.join(LIST_MODES)}, not {lists!r}")
    if tokenizer is not None and not callable(tokenizer):
        if not isinstance(tokenizer, Mapping) or not all(callable(t) for t in tokenizer.values()):
            raise InvalidArgumentError(
                "tokenizer must be a callable (for every string column) or a dict of column "
                "name to callable"
            )
        strings = {m.name for m in mappings if m.kind == "string" and not m.ragged_rank}
        for name in tokenizer:
            if name not in strings:
                raise InvalidArgumentError(
                    f"tokenizer names {name!r}, which is not a string column "
                    f"(string columns: {', '.join(sorted(strings)) or 'none'})"
                )
    if lists == "nested":
        for m in mappings:
            if m.ragged_rank > 1 or (m.ragged_rank and m.kind in ("string", "binary")):
                raise InvalidArgumentError(
                    f"column {m.name!r} is a list of {'lists' if m.ragged_rank > 1 else m.kind}"
                    "s, which torch.nested cannot hold: use lists='padded' (numbers) or "
                    "select it as text"
                )


def tokenizer_of(tokenizer: Any, mapping: ColumnMapping) -> Tokenizer | None:
    """The tokenizer of a string column, or None (its strings arrive as a list of str)."""
    if tokenizer is None or mapping.kind != "string" or mapping.ragged_rank:
        return None
    if isinstance(tokenizer, Mapping):
        found: Tokenizer | None = tokenizer.get(mapping.name)
        return found
    return tokenizer  # type: ignore[no-any-return]


def output_keys(mapping: ColumnMapping, lists: str) -> list[str]:
    """The keys a column fills in a batch: its name, its lengths and its mask."""
    keys = [mapping.name]
    padded = mapping.ragged_rank and lists == "padded" and mapping.kind not in ("string", "binary")
    if padded:
        keys.append(mapping.name + LENGTHS_SUFFIX)
        keys += [f"{mapping.name}{LENGTHS_SUFFIX}_{k}" for k in range(1, mapping.ragged_rank)]
    if mapping.mask:
        keys.append(mapping.name + MASK_SUFFIX)
    return keys

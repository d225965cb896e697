"""PyTorch input pipelines from a SELECT: an ``IterableDataset`` of ready-made batches.

>>> import sqlfeed.torch  # doctest: +SKIP
>>> ds = sqlfeed.torch.SQLDataset("SELECT * FROM t", "postgresql+psycopg://...",
...     batch_size=1024, label="y", shuffle_buffer=50_000)  # doctest: +SKIP
>>> loader = sqlfeed.torch.dataloader(ds, num_workers=2, pin_memory=True)  # doctest: +SKIP
>>> for features, label in loader: ...  # doctest: +SKIP

Each item is a whole batch (``batch_size=None`` in the DataLoader: nothing is collated),
``{column: tensor}`` or ``(features, label)``, converted by the tf.data table's rules
(:mod:`sqlfeed.tf`):

=========================================  ==========================================  =====
Arrow type                                 torch                                       NULL
=========================================  ==========================================  =====
int8 ... int64, uint8 ... uint64           ``torch.int64``                             0
float16, float32, float64                  ``torch.float32`` (``float_dtype="float64"``)  0.0
bool                                       ``torch.bool``                              False
string, large_string, string_view          ``list[str]``, or the ``tokenizer``'s output  ""
binary, large_binary, fixed_size_binary    ``list[bytes]``                             b""
decimal128, decimal256                     ``torch.float64``, the nearest double       0.0
date32, date64                             ``torch.int64``, days since 1970-01-01      0
timestamp, time, duration                  ``torch.int64`` in ``time_unit`` (``us``)   0
dictionary (DuckDB ENUM)                   as its value type                           as it
list, large_list, fixed_size_list          ``lists="padded"``: a dense tensor padded   []
                                           with the NULL default, and ``<col>_lengths``
                                           (int64; deeper levels ``<col>_lengths_1``,
                                           ...); ``lists="nested"``: a ``torch.nested``
                                           jagged tensor. Lists of strings: nested
                                           Python lists
=========================================  ==========================================  =====

NULLs become the default above or ``fill={"col": value}``; ``masks=["col"]`` adds a
``col_is_null`` bool tensor; a NULL label (or any NULL with ``fill_nulls=False``) is an
error. Tensors own their memory (``pin_memory=True`` works on them); they are views of
one buffer (:func:`sqlfeed.torch.convert.pack`) per batch, or per chunk of consecutive
batches (:data:`sqlfeed.torch.dataset.CHUNK_ROWS`), which a DataLoader worker process
hands over through one shared-memory segment.

Splitting: the partitions are shared out across DDP ranks (``torch.distributed``, or
``rank=``/``world_size=``) and, within a rank, across the DataLoader's worker processes
(``get_worker_info``); ``even_batches=True`` gives every rank the same number of batches.
``job=...`` makes every DataLoader worker an elastic worker of a lease queue's job;
``dataset.checkpoint(step)`` records in the job's ledger what the training loop took
(with worker processes, through the loader of :func:`dataloader`), for ``sqlfeed job
rewind``.
``state_dict()``/``load_state_dict()`` follow ``torchdata``'s ``StatefulDataLoader``
protocol: a restored loader delivers exactly the batches the uninterrupted one would
have, in the same order (static mode), from any point of the epoch; the loader of
:func:`dataloader` refuses a state of another ``num_workers``, world size or rank
(:mod:`sqlfeed.torch.loader`). A DataLoader that batches the items again is refused.

Package layout: :mod:`sqlfeed.torch.types` (options and key names), :mod:`sqlfeed.torch.split`
(who reads what), :mod:`sqlfeed.torch.convert` (record batch -> tensors),
:mod:`sqlfeed.torch.dataset` (:class:`SQLDataset`) and :mod:`sqlfeed.torch.loader`
(:func:`dataloader`). torch is imported
when :class:`SQLDataset` or :func:`dataloader` is first used, never by ``import sqlfeed``;
without it, :class:`~sqlfeed.dialects.MissingDependencyError` names the extra
(``pip install 'sqlfeed[torch]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlfeed.dialects.optional import require
from sqlfeed.torch.types import LENGTHS_SUFFIX, LIST_MODES, MASK_SUFFIX

if TYPE_CHECKING:
    from sqlfeed.torch.dataset import SQLDataset
    from sqlfeed.torch.loader import dataloader

__all__ = ["LENGTHS_SUFFIX", "LIST_MODES", "MASK_SUFFIX", "SQLDataset", "dataloader"]

_LAZY = {"SQLDataset": "sqlfeed.torch.dataset", "dataloader": "sqlfeed.torch.loader"}


def __getattr__(name: str) -> Any:
    """``SQLDataset`` and ``dataloader``, importing torch on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(require(_LAZY[name], "PyTorch datasets"), name)

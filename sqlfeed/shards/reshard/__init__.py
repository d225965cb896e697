"""Reshard: a query's rows into a new shardset, globally shuffled or sorted, out of core.

The map-reduce step that prepares training data, in three phases:

1. **extract**: the query runs once and its rows go into a table of a DuckDB database
   file in a work folder. On DuckDB (the default, also over files: ``read_parquet(...)``,
   or tar shards registered with ``tar=``) the engine does it itself; from any other
   engine the rows are streamed out through sqlfeed's reader and into DuckDB. Each row
   gets a stable identity: its position in the query's result.
2. **sort**: DuckDB orders the table (out of core: it spills to its temp directory rather
   than fail when the rows do not fit ``memory_limit``): by a seeded hash (``shuffle``)
   of the uid column, or of the row identity when the uid is generated (of the group key
   with ``group_by``), by columns (``sort``), or in the query's order. Ties are broken by
   the identity, so the same input and seed give byte-identical shards; with a uid
   column, the same rows give the same order whatever order the engine returned them in.
3. **write**: the ordered rows stream out in record batches and are cut into shards of
   ``shard_rows`` rows or about ``shard_size`` bytes (within ±10 %; the last one may be
   smaller). For a byte target the bytes per row are measured on a sample encoded in the
   output format and on the shard being written, so each shard is closed near the target.
   With ``group_by``, rows sharing the key sit next to each other and a shard is only cut
   between two groups (at the group boundary nearest the target). The ±10 % holds when a
   row (tar: a record) and a group are small next to a shard; tar files also grow in
   10 KiB blocks, so byte targets below ~200 kB are coarse.

The output is a shardset (see :mod:`sqlfeed.shards.manifest`): ``shard.NNNNN.<format>`` files
and a ``manifest.json`` written last. It appears atomically: everything is written into
``.<name>.tmp-<random>`` beside the output and renamed into place at the end; a failed
or interrupted run removes that folder, and a later run removes those of dead runs (a
live run holds a lock on its folder).

Memory stays bounded: DuckDB works within ``memory_limit``, Python holds a few record
batches (and, for tar input, one input tar file at a time).

The modules: :mod:`.options` (the arguments), :mod:`.inputs` (tar views and the extract),
:mod:`.order` (the sort), :mod:`.cutter` (the write), :mod:`.columns` (the query's
columns and the uid), :mod:`.engine` (the DuckDB session and its monitor), :mod:`.workdir`
(work folders and the atomic output), :mod:`.metrics` and :mod:`.run` (:func:`reshard`).
"""

from __future__ import annotations

from sqlfeed.shards.reshard.columns import GENERATED_UID
from sqlfeed.shards.reshard.engine import ProgressCallback
from sqlfeed.shards.reshard.metrics import ReshardMetrics
from sqlfeed.shards.reshard.options import RESHARD_FORMATS, TOLERANCE, parse_size
from sqlfeed.shards.reshard.run import reshard

__all__ = [
    "GENERATED_UID",
    "RESHARD_FORMATS",
    "TOLERANCE",
    "ProgressCallback",
    "ReshardMetrics",
    "parse_size",
    "reshard",
]

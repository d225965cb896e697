"""Lakehouse tables (Iceberg, Delta Lake) as SQL sources, pinned to a snapshot.

* :mod:`~sqlfeed.lake.model`: a table at a snapshot: data files and the deletes that apply;
  :mod:`~sqlfeed.lake.iceberg` and :mod:`~sqlfeed.lake.delta` fill it from the table's
  metadata (pyiceberg, deltalake: the ``lakehouse`` extra, imported when a table is opened);
* :mod:`~sqlfeed.lake.pieces`: DuckDB SQL of pieces of data files, deletes applied;
* :mod:`~sqlfeed.lake.source`: :class:`LakeSource`, the table as a snapshot-pinned view
  with ``fragments`` partitions; :mod:`~sqlfeed.lake.urls`: ``iceberg:`` and ``delta:``
  URLs, registered with :mod:`sqlfeed.io` here.
"""

from __future__ import annotations

from sqlfeed.io import register_scheme
from sqlfeed.lake.model import Column, DataFile, EqualityDeletes, TableSnapshot
from sqlfeed.lake.source import LakeSource, LakeTable, pin, pinned_name
from sqlfeed.lake.urls import at_snapshot, open_delta_url, open_iceberg_url, parse_time

__all__ = [
    "Column",
    "DataFile",
    "EqualityDeletes",
    "LakeSource",
    "LakeTable",
    "TableSnapshot",
    "at_snapshot",
    "open_delta_url",
    "open_iceberg_url",
    "parse_time",
    "pin",
    "pinned_name",
]

register_scheme("iceberg", open_iceberg_url)
register_scheme("delta", open_delta_url)

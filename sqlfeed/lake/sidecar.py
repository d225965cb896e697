"""Deleted row positions written to a Parquet file once, for piece SQL to read.

A deletion vector (Iceberg v3 in a Puffin file, Delta's in its own format) is decoded by
the table's library when planning; the positions it removes go to a Parquet file of one
``pos`` column in sqlfeed's cache (``$SQLFEED_CACHE``, default ``~/.cache/sqlfeed``), named
by a digest of what the vector is, so every process and every plan of the same snapshot
finds the same file (workers on other machines need that folder shared, or their own
cache made by planning once there).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["positions_file"]


def positions_file(key: str, positions: Callable[[], pa.Array]) -> str:
    """The cache file of the positions ``key`` names, made from ``positions()`` if missing."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    folder = os.path.join(
        os.environ.get("SQLFEED_CACHE", os.path.expanduser("~/.cache/sqlfeed")), "lake-dv"
    )
    path = os.path.join(folder, f"{digest}.parquet")
    if os.path.exists(path):
        return path
    values = positions().cast(pa.int64())
    os.makedirs(folder, exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    pq.write_table(pa.table({"pos": values}), partial)
    os.replace(partial, path)
    return path

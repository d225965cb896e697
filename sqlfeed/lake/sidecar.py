"""Deleted row positions written to a Parquet file once, for piece SQL to read.

A deletion vector (Iceberg v3 in a Puffin file, Delta's in its own format) is decoded by
the table's library when planning; the positions it removes go to a Parquet file of one
``pos`` column in sqlfeed's cache (``$SQLFEED_CACHE``, default ``~/.cache/sqlfeed``), named
by a digest of what the vector is, so every process and every plan of the same snapshot
finds the same file. A partition's SQL names the file in the planning machine's cache: a
source reading it elsewhere loads the snapshot its marker names (which writes the missing
files to its own cache) and reads them there (:func:`local_sidecars`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["positions_file"]


SIDECAR = re.compile(r"'[^']*/lake-dv/([0-9a-f]{24})\.parquet'")
"""A sidecar file in SQL (any machine's cache folder): its digest."""


def cache_folder() -> str:
    """This process's folder of sidecar files."""
    root = os.environ.get("SQLFEED_CACHE", os.path.expanduser("~/.cache/sqlfeed"))
    return os.path.join(root, "lake-dv")


def local_sidecars(sql: str) -> str:
    """``sql`` with its sidecar files in this process's cache folder.

    A plan made on another machine names that machine's.
    """
    folder = cache_folder()
    return SIDECAR.sub(lambda m: "'" + os.path.join(folder, f"{m.group(1)}.parquet") + "'", sql)


def positions_file(key: str, positions: Callable[[], pa.Array]) -> str:
    """The cache file of the positions ``key`` names, made from ``positions()`` if missing."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    folder = cache_folder()
    path = os.path.join(folder, f"{digest}.parquet")
    if os.path.exists(path):
        return path
    values = positions().cast(pa.int64())
    os.makedirs(folder, exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    pq.write_table(pa.table({"pos": values}), partial)
    os.replace(partial, path)
    return path

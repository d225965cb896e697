"""The UID join of two shardsets' shards, in Arrow, keeping the left side's row order.

Dataset iteration (:mod:`sqlfeed.shards.datasets`) and the DuckDB view over non-Parquet
datasets (:mod:`sqlfeed.shards.source`) both join the main shardset's rows to the others
with it.

>>> import pyarrow as pa
>>> left = pa.table({"id": [3, 1, 2], "x": [30, 10, 20]})
>>> right = pa.table({"id": [1, 3], "y": ["a", "c"]})
>>> join_on_uid(left, right, "id").to_pylist()
[{'id': 3, 'x': 30, 'y': 'c'}, {'id': 1, 'x': 10, 'y': 'a'}]
"""

from __future__ import annotations

import pyarrow as pa

from sqlfeed.io.views import plain

__all__ = ["join_on_uid"]


def join_on_uid(left: pa.Table, right: pa.Table, uid: str) -> pa.Table:
    """Inner join on ``uid`` keeping ``left``'s row order (view types become plain)."""
    left, right = plain(left), plain(right)
    if left.column(uid).equals(right.column(uid)):  # aligned shards: no join needed
        for name in right.column_names:
            if name != uid:
                left = left.append_column(right.schema.field(name), right.column(name))
        return left
    # Join the uids with row positions only, then take the rows: Arrow's hash join cannot
    # carry list, struct or map columns, ``take`` carries every type.
    keys = pa.table({uid: left.column(uid), "_l": pa.array(range(left.num_rows), pa.int64())})
    other = pa.table({uid: right.column(uid), "_r": pa.array(range(right.num_rows), pa.int64())})
    pairs = keys.join(other, uid, join_type="inner", use_threads=False).sort_by("_l")
    joined = left.take(pairs.column("_l"))
    taken = right.take(pairs.column("_r"))
    for name in right.column_names:
        if name != uid:
            joined = joined.append_column(right.schema.field(name), taken.column(name))
    return joined

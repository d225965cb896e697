"""Ray Data from a plan: a query's exact partitions as a ``ray.data.Dataset``.

>>> import sqlfeed.ray  # doctest: +SKIP
>>> url = "postgresql+psycopg://user@host/db"
>>> ds = sqlfeed.ray.dataset("SELECT * FROM events", url)  # doctest: +SKIP
>>> for batch in ds.iter_batches(batch_format="pyarrow"):  # doctest: +SKIP
...     ...

:func:`dataset` plans the query once (or takes a :class:`~sqlfeed.Plan`) and reads it
through a Ray Data ``Datasource`` (:func:`datasource`) with one read task per partition
(``override_num_blocks`` below the partition count groups them). Each task reads its
partitions as Arrow record batches of the plan's schema (one zero-copy block per batch)
on a connection of the Ray worker process that runs it, opened from the URL (no
connection object is shipped): a database server's is opened once per worker process and
reused by its later tasks, a file's is opened per task
(:func:`~sqlfeed.feed.remote.reading_source`). The dataset's schema is the plan's. The
partitions add up to exactly the query's rows on every strategy (hash, range, ctid,
materialize, fragments), NULL keys included.

Ray is imported when a dataset is built: ``import sqlfeed`` never imports it; without
it, :class:`~sqlfeed.dialects.MissingDependencyError` names the extra (``pip install
'sqlfeed[ray]'``).
"""

from __future__ import annotations

from sqlfeed.ray.datasource import dataset, datasource, group_partitions
from sqlfeed.ray.sink import write_table

__all__ = ["dataset", "datasource", "group_partitions", "write_table"]

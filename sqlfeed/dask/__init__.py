"""Dask DataFrames from a plan: a query's exact partitions as a ``dask.dataframe``.

>>> import sqlfeed.dask  # doctest: +SKIP
>>> url = "postgresql+psycopg://user@host/db"
>>> df = sqlfeed.dask.dataframe("SELECT * FROM events", url)  # doctest: +SKIP
>>> df.groupby("country").spend.mean().compute()  # doctest: +SKIP

:func:`dataframe` plans the query once (or takes a :class:`~sqlfeed.Plan`) and builds the
frame with ``dask.dataframe.from_map``: one Dask partition per plan partition, each read
by its task in whatever process or host runs it, on a connection that process opened
from the URL (a database server's once per process, reused by its later tasks).
``meta`` comes from the plan's Arrow schema, converted as every partition is
(``dtype_backend``), so integers with NULLs stay exact (``Int64``, never float). With
``index=KEY`` on a ``range`` plan over KEY, the divisions are known (the plan's range
bounds). The partitions add up to exactly the query's rows on every strategy.

Dask is imported when a frame is built: ``import sqlfeed`` never imports it; without it,
:class:`~sqlfeed.dialects.MissingDependencyError` names the extra (``pip install 'sqlfeed[dask]'``).
"""

from __future__ import annotations

from sqlfeed.dask.frame import DTYPE_BACKENDS, PandasReader, dataframe, range_divisions

__all__ = ["DTYPE_BACKENDS", "PandasReader", "dataframe", "range_divisions"]

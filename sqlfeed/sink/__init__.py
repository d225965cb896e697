"""Writing rows into database tables exactly once: the table sink and its jobs.

:class:`TableSink` is the commit protocol (a batch's rows and its commit record in one
transaction of the output database, a staging table put in place when finished);
:func:`copy_into` runs a SELECT's partitions into it as an elastic job (``sqlfeed export
--into``, ``sqlfeed predict``); :func:`write_table` writes batches a program has.
"""

from __future__ import annotations

from sqlfeed.sink.job import Transform, copy_into, finish_job
from sqlfeed.sink.report import MODES, WriteReport
from sqlfeed.sink.table import TableSink
from sqlfeed.sink.write import write_table

__all__ = [
    "MODES",
    "TableSink",
    "Transform",
    "WriteReport",
    "copy_into",
    "finish_job",
    "write_table",
]

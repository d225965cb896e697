"""The tables of a SQL lease queue (:class:`~sqlfeed.dispatch.sqlqueue.SQLQueue`).

``sqlfeed_jobs`` (one row per job: its stored spec), ``sqlfeed_tasks`` (one row per epoch
and partition: state, token, expiry, acknowledged batches), ``sqlfeed_workers`` (what each
worker acknowledged, when it was last seen) and ``sqlfeed_shares`` (``even_batches``: the
replicas that delivered their share of an epoch).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import LONGTEXT

__all__ = ["queue_tables"]


def queue_tables() -> sa.MetaData:
    """The queue's tables and the claim index, as SQLAlchemy metadata to create."""
    metadata = sa.MetaData()
    name = sa.String(200)
    sa.Table(
        "sqlfeed_jobs",
        metadata,
        sa.Column("name", name, primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        # LONGTEXT on MySQL: TEXT stops at 64 KiB, a plan of ~300 partitions.
        sa.Column("spec", sa.Text().with_variant(LONGTEXT(), "mysql", "mariadb"), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
    )
    tasks = sa.Table(
        "sqlfeed_tasks",
        metadata,
        sa.Column("job", name, primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("part", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("worker", name),
        sa.Column("token", sa.String(32)),
        sa.Column("expires", sa.Double, nullable=False),
        sa.Column("acked", sa.Integer, nullable=False),
        sa.Column("rows_acked", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("completions", sa.Integer, nullable=False),
    )
    sa.Index("sqlfeed_tasks_next", tasks.c.job, tasks.c.epoch, tasks.c.state, tasks.c.position)
    sa.Table(
        "sqlfeed_workers",
        metadata,
        sa.Column("job", name, primary_key=True),
        sa.Column("worker", name, primary_key=True),
        sa.Column("joined", sa.Double, nullable=False),
        sa.Column("seen", sa.Double, nullable=False),
        sa.Column("batches", sa.BigInteger, nullable=False),
        sa.Column("rows_acked", sa.BigInteger, nullable=False),
    )
    sa.Table(
        "sqlfeed_shares",
        metadata,
        sa.Column("job", name, primary_key=True),
        sa.Column("epoch", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("worker", name, primary_key=True),
    )
    return metadata

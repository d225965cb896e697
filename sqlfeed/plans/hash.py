"""The ``hash`` strategy: ``bucket(key or all output columns) = k`` for k in 0..M-1.

It splits any stable query, but every partition re-runs the query, so M partitions cost
up to M times one run. It is the auto choice when nothing cheaper applies.
"""

from __future__ import annotations

from sqlfeed.plans.context import Built, PlanContext, expensive
from sqlfeed.plans.model import Partition
from sqlfeed.sql import partition_sqls

__all__ = ["build", "problem", "reason"]


def problem(ctx: PlanContext, auto: bool = False) -> str | None:
    """None: hash partitions split every (stable) query."""
    return None


def reason(ctx: PlanContext, auto: bool = False) -> str:
    """What the partitions hash, and with ``auto`` how to avoid re-running a costly query."""
    over = f"key {', '.join(ctx.keys)}" if ctx.keys else "all output columns"
    what = f"hash partitions over {over}"
    if not auto:
        return what
    costly = expensive(ctx.parsed)
    return what + (f" ({costly}: pass scratch=SCHEMA to run it only once)" if costly else "")


def build(ctx: PlanContext, m: int, allow_unstable: bool) -> Built:
    """One partition per hash bucket."""
    sqls = partition_sqls(
        ctx.parsed,
        m,
        key=ctx.keys,
        columns=ctx.columns,
        text_columns=ctx.text_columns,
        allow_unstable=allow_unstable,
        strict=ctx.strict,
        table_keys=ctx.table_keys,
    )
    return [Partition(k, sql, None, f"hash bucket {k} of {m}") for k, sql in enumerate(sqls)], None

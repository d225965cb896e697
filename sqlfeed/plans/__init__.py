"""The plans layer: a query split into partitions, and the planner that splits it.

:mod:`sqlfeed.plans.model` holds the pure data (:class:`Plan`, :class:`Partition`);
:mod:`sqlfeed.plans.planner` sizes a query and chooses a strategy; each strategy is its
own module behind one small interface (:class:`~sqlfeed.plans.context.Strategy`):
:mod:`~sqlfeed.plans.hash`, :mod:`~sqlfeed.plans.range`, :mod:`~sqlfeed.plans.physical`
(ctid / rowid), :mod:`~sqlfeed.plans.materialize` and :mod:`~sqlfeed.plans.fragments`.
Plans run their queries through the :class:`~sqlfeed.io.Source` they are given
and know nothing of the layers above (a shardset dataset offers its fragments through
the :class:`~sqlfeed.plans.fragments.FragmentSource` capability).
"""

from __future__ import annotations

from sqlfeed.plans.context import PlanContext, Strategy
from sqlfeed.plans.fragments import FragmentInfo, FragmentSource, fragment_problem
from sqlfeed.plans.materialize import drop_expired_scratch, drop_scratch, drop_scratch_with
from sqlfeed.plans.model import PLAN_FORMAT_VERSION, STRATEGIES, Partition, Plan, fragment_order
from sqlfeed.plans.planner import AUTO_ORDER, DEFAULT_TARGET_ROWS, plan

__all__ = [
    "AUTO_ORDER",
    "DEFAULT_TARGET_ROWS",
    "PLAN_FORMAT_VERSION",
    "STRATEGIES",
    "FragmentInfo",
    "FragmentSource",
    "Partition",
    "Plan",
    "PlanContext",
    "Strategy",
    "drop_expired_scratch",
    "drop_scratch",
    "drop_scratch_with",
    "fragment_order",
    "fragment_problem",
    "plan",
]

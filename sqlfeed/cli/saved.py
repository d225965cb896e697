"""``--plan FILE``: a plan saved by ``sqlfeed plan --db URL > plan.json``.

Used instead of planning again (``sqlfeed plan``, ``export`` and ``job create``), or checked
against a job's plan (``sqlfeed worker``).

A saved plan is validated before anything runs: it is a plan of this format whose
fingerprint matches its contents, for the ``--db`` URL's engine, and its query and every
partition query are one read-only SELECT each (sqlfeed's own checks, as for the SQL
argument). Once connected, the query's output columns must still be the plan's. The
planning options (``--strategy``, ``--partitions``, ``--key``...) are refused with it:
the plan fixes them. A saved plan's scratch table (``--strategy materialize``) stays the
user's: no command that reads the plan drops it (``sqlfeed scratch drop`` does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from sqlfeed.cli.parsers import add_plan_file as add_plan_file
from sqlfeed.dialects import Dialect, InvalidArgumentError, SqlfeedError
from sqlfeed.io import Source
from sqlfeed.plans import Plan
from sqlfeed.sql import ParsedQuery, parse

__all__ = ["PLANNING_DEFAULTS", "add_plan_file", "check_saved_plan", "load_plan", "saved_plan"]

PLANNING_DEFAULTS: dict[str, tuple[str, Any]] = {
    "partitions": ("--partitions", None),
    "target_rows": ("--target-rows", None),
    "workers": ("--workers", 1),
    "strategy": ("--strategy", "auto"),
    "scratch": ("--scratch", None),
    "key": ("--key", None),
    "allow_unstable": ("--allow-unstable", False),
    "strict": ("--strict", False),
}
"""The planning options a saved plan fixes: their flag and the value when not given."""


def load_plan(path: str, engine: Dialect, *, allow_side_effects: bool = False) -> Plan:
    """The plan saved in ``path``, validated for ``engine`` without connecting.

    Its queries are validated as a query given on the command line is (functions with
    side effects refused unless ``allow_side_effects``: ``--allow-side-effects`` again).

    Raises:
        InvalidArgumentError: the file cannot be read, is no plan of this format, was
            edited (fingerprint), is for another engine, or a query in it is not one
            read-only SELECT.
    """
    where = f"--plan {path}"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InvalidArgumentError(f"{where}: cannot read it ({err.strerror or err})") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise InvalidArgumentError(f"{where}: not JSON ({err})") from None
    if not isinstance(data, dict) or "version" not in data or "partitions" not in data:
        raise InvalidArgumentError(
            f"{where}: not a saved plan; save one with sqlfeed plan --db URL --format json "
            "> FILE (a plan made without --db is a sketch of hash partitions only)"
        )
    try:
        plan = Plan.from_dict(data)
    except SqlfeedError as err:
        edited = (
            " (it was edited after it was saved: plan again)" if "fingerprint" in str(err) else ""
        )
        raise InvalidArgumentError(f"{where}: {err}{edited}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidArgumentError(
            f"{where}: not a valid plan ({type(err).__name__}: {err})"
        ) from None
    if plan.dialect != engine.name:
        raise InvalidArgumentError(
            f"{where} is a plan for {plan.dialect}, but --db is a {engine.name} URL: give "
            f"the {plan.dialect} database the plan was made on"
        )
    for what, sql in [
        ("query", plan.sql),
        *((f"partition {p.index}", p.sql) for p in plan.partitions),
    ]:
        try:
            parse(sql, engine, allow_side_effects=allow_side_effects)
        except SqlfeedError as err:
            raise InvalidArgumentError(f"{where}: its {what} is refused: {err}") from None
    return plan


def saved_plan(args: argparse.Namespace, engine: Dialect) -> ParsedQuery | None:
    """With ``--plan``: load it into ``args.saved_plan`` and return its parsed query.

    None without ``--plan`` (the SQL argument is then required).

    Raises:
        InvalidArgumentError: no SQL and no plan, both, a planning option beside the
            plan, no ``--db``, or a plan :func:`load_plan` refuses.
    """
    args.saved_plan = None
    path = getattr(args, "plan", None)
    if path is None:
        if args.sql is None:
            raise InvalidArgumentError(
                "the SQL argument is required (or --plan FILE, a saved plan)"
            )
        return None
    if args.sql is not None:
        raise InvalidArgumentError(
            "give the SQL or --plan FILE, not both: the saved plan carries its query"
        )
    given = [
        flag
        for dest, (flag, default) in PLANNING_DEFAULTS.items()
        if getattr(args, dest, default) not in (default, [])
    ]
    if given:
        raise InvalidArgumentError(
            f"--plan {path} fixes the partitions: drop {', '.join(given)} (or plan again "
            "without --plan)"
        )
    if not getattr(args, "db", None):
        raise InvalidArgumentError(f"--plan {path} needs --db URL, the database it reads")
    allowed = bool(getattr(args, "allow_side_effects", False))
    args.saved_plan = load_plan(path, engine, allow_side_effects=allowed)
    return parse(args.saved_plan.sql, engine, allow_side_effects=allowed)


def check_saved_plan(plan: Plan, parsed: ParsedQuery, source: Source, path: str) -> Plan:
    """The saved ``plan`` once connected: its query still returns the plan's columns.

    Returned with its Arrow schema (a saved plan may lack it) and without its scratch
    table's name (no command drops a saved plan's table).

    Raises:
        InvalidArgumentError: the columns differ (the tables changed: plan again).
    """
    columns = tuple(source.output_columns(parsed))
    if columns != plan.columns:
        raise InvalidArgumentError(
            f"--plan {path}: the query now returns the columns {', '.join(columns)}, not the "
            f"plan's {', '.join(plan.columns)}: the tables changed; plan again"
        )
    schema = plan.schema or source.schema(parsed).serialize().to_pybytes()
    return dataclasses.replace(plan, schema=schema, scratch_table=None)

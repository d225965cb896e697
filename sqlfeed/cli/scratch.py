"""The ``sqlfeed scratch list|drop`` commands.

The scratch tables of ``materialize`` plans and the staging and commits tables of the table
sink (``predict``, ``export --into``).

``--strategy materialize`` runs the query once into a table named
``sqlfeed_<unix time>_<hex>`` in the ``--scratch`` schema. ``export`` drops its table when
done and ``job delete`` drops its job's; ``train`` drops its own when it ends (a
checkpointed training interrupted keeps the one it resumes from), and its next run with the
same ``--out`` drops what a killed one left; a plan printed by ``sqlfeed plan`` keeps its
table for the partitions to read, and a killed run may leave one behind: these commands
list them (with their age, their rows, counted, their size where the engine tells, and the
run that owns them: ``train --out DIR``, with its process) and drop them by name, all at
once, or those older than a duration. Nothing but sqlfeed's own scratch tables is ever
dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import re
import time
from typing import Any, TextIO

from sqlglot import exp

from sqlfeed import connect
from sqlfeed.cli.common import (
    write_json,
)
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.errors import EngineError
from sqlfeed.io.faults import table_missing
from sqlfeed.plans.materialize import (
    SCRATCH_PREFIX,
    ScratchOwner,
    ScratchTable,
    drop_scratch_tables,
    list_scratch,
    scratch_created,
    write_back_table,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, flag: str = "--older-than") -> float:
    """Seconds of ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or a plain number of seconds.

    Raises:
        InvalidArgumentError: it is not such a duration.
    """
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a duration: give a number and a unit, like 90s, 30m, "
            "12h, 7d or 2w"
        )
    return float(match.group(1)) * _SECONDS[match.group(2).lower()]


def _check_schema(args: argparse.Namespace) -> None:
    if not args.schema.strip():
        raise InvalidArgumentError("--schema needs the name of the --scratch schema")
    dialect_for(args.db)  # an unknown URL scheme is refused before connecting


def _cmd_list(args: argparse.Namespace, out: TextIO) -> None:
    _check_schema(args)
    with connect(args.db) as source:
        counted = [_counted(source, t) for t in list_scratch(source, args.schema)]
    tables = [t for t in counted if t is not None]
    now = time.time()
    if args.format == "json":
        write_json(out, [_as_dict(t, now) for t in tables], indent=2)
        return
    if not tables:
        out.write(f"no sqlfeed scratch tables in {args.schema}\n")
        return
    header = ("table", "created (UTC)", "age", "rows", "size", "owner")
    rows = [
        (
            t.name,
            _utc(t.created),
            _age(t.age(now)),
            "" if t.rows is None else str(t.rows),
            "" if t.bytes is None else _size(t.bytes),
            _whose(t),
        )
        for t in tables
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            c.ljust(w) if i in (0, 1, 2, 5) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.write("  ".join(cells).rstrip() + "\n")
    out.write(f"{len(tables)} scratch table(s) in {args.schema}\n")


def _cmd_drop(args: argparse.Namespace, out: TextIO) -> None:
    _check_schema(args)
    chosen = sum((bool(args.names), args.all, args.older_than is not None))
    if chosen != 1:
        raise InvalidArgumentError(
            "say which scratch tables to drop: their names, --all, or --older-than DURATION "
            "(exactly one of them)"
        )
    for name in args.names:
        if scratch_created(name) is None:
            raise InvalidArgumentError(
                f"{name!r} is not a sqlfeed scratch table name ({SCRATCH_PREFIX}<unix time>"
                "_<hex>; 'sqlfeed scratch list' shows them): only those are dropped"
            )
    older = parse_duration(args.older_than) if args.older_than is not None else None
    with connect(args.db) as source:
        tables = list_scratch(source, args.schema)
        if args.names:
            present = {t.name for t in tables}
            missing = [n for n in args.names if n not in present]
            if missing:
                raise InvalidArgumentError(
                    f"no scratch table {missing[0]} in {args.schema} ('sqlfeed scratch list "
                    "--db URL --schema SCHEMA' shows them)"
                )
            doomed = list(dict.fromkeys(args.names))
        elif older is not None:
            now = time.time()
            doomed = [t.name for t in tables if t.age(now) > older]
        else:
            doomed = [t.name for t in tables]
        drop_scratch_tables(source, args.schema, doomed)
    if args.format == "json":
        write_json(out, {"schema": args.schema, "dropped": doomed})
    elif doomed:
        out.write(
            f"dropped {len(doomed)} scratch table(s) from {args.schema}: {', '.join(doomed)}\n"
        )
    else:
        out.write(f"no scratch table to drop in {args.schema}\n")


def _counted(source: Any, table: ScratchTable) -> ScratchTable | None:
    """``table`` with its rows counted; None where it was dropped since it was listed.

    A catalog's estimate is stale (PostgreSQL's ``reltuples`` is unknown until the table is
    analyzed, InnoDB's is a guess), and a scratch table is read in one scan. Other runs drop
    their tables at any time (a training that ends, an expiry sweep): one gone between the
    listing and its count is no longer there to list, not a failure of the command.
    """
    name = exp.table_(exp.to_identifier(table.name), db=exp.to_identifier(table.schema))
    sql = f"SELECT COUNT(*) FROM {source.dialect.sql(name)}"
    try:
        rows = int(source.scalar(sql, what="scratch table count"))
    except EngineError as err:
        if table_missing(err):
            return None
        raise
    return dataclasses.replace(table, rows=rows)


def _as_dict(table: ScratchTable, now: float) -> dict[str, Any]:
    return {
        "schema": table.schema,
        "table": table.name,
        "created": _utc(table.created),
        "age_seconds": round(table.age(now)),
        "rows": table.rows,
        "bytes": table.bytes,
        "owner": None if table.owner is None else _owner(table.owner),
        "write_back": write_back_table(table.name),
    }


def _whose(table: ScratchTable) -> str:
    """The owner column: the run's owner, or what kind of write-back table it is."""
    if table.owner is None and write_back_table(table.name):
        role = {"0": "staging", "c": "commits", "d": "replaced"}[table.name[-1]]
        return f"a write-back run's {role} table"
    return _owner(table.owner)


def _owner(owner: ScratchOwner | None) -> str:
    """Whose table it is: ``train --out /m (pid 12 on host, ended)``; empty: no run's."""
    if owner is None:
        return ""
    ended = ", ended" if owner.gone() else ""
    return f"{owner.what} (pid {owner.pid} on {owner.host}{ended})"


def _utc(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: float) -> str:
    days, rest = divmod(max(0, int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _size(value: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"

"""What the ``sqlfeed`` commands share.

The argument parser class and the exit codes, the ``--db``/``--dialect`` and planning
options, the SQL argument (itself, ``-`` for stdin, ``@file.sql``), the checks a query
passes before any I/O, the warnings shown once a command succeeds, and the JSON and
table printers (NULL is ``NULL`` in a table, empty in CSV, ``null`` in JSON). Output
paths and the wording of errors in terms of the flags are in :mod:`sqlfeed.cli.checks`.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import math
from collections.abc import Callable
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.csv as pacsv

from sqlfeed import ParsedQuery, Plan, connect, plan
from sqlfeed.cli.messages import drop_warnings as drop_warnings
from sqlfeed.cli.messages import flush_warnings as flush_warnings
from sqlfeed.cli.messages import warn as warn
from sqlfeed.cli.parsers import add_allow_side_effects as add_allow_side_effects
from sqlfeed.cli.parsers import add_as_of as add_as_of
from sqlfeed.cli.parsers import add_plan_options as add_plan_options
from sqlfeed.cli.parsers import add_sql as add_sql
from sqlfeed.cli.parsers import add_target as add_target
from sqlfeed.cli.parsers import column_list as column_list
from sqlfeed.cli.parsing import CommandParser as CommandParser  # for the command modules
from sqlfeed.cli.prechecks import read_sql as read_sql  # for the command modules
from sqlfeed.cli.saved import check_saved_plan, saved_plan
from sqlfeed.dialects import Dialect, InvalidArgumentError, dialect_for
from sqlfeed.io import Source
from sqlfeed.plans.materialize import DEFAULT_SCRATCH
from sqlfeed.plans.planner import REREAD_WARNING
from sqlfeed.sql import check_partition_count, check_stable, parse

Handler = Callable[[argparse.Namespace, TextIO], None]
"""A command's handler: its parsed arguments and where to print."""


def flag_column_list(text: str, flag: str) -> list[str]:
    """:func:`column_list` for a handler (after parsing): the error names ``flag``.

    Raises:
        InvalidArgumentError: a name is empty.
    """
    try:
        return column_list(text)
    except argparse.ArgumentTypeError as err:
        raise InvalidArgumentError(f"{flag}: {err}") from None


def flatten_keys(groups: list[list[str]] | None) -> list[str] | None:
    """The names of repeated :func:`column_list` values in one list (None if there are none)."""
    return [name for names in groups for name in names] if groups else None


DEFAULT_SCRATCH_ON = ("postgres", "mysql", None)
"""Where ``--strategy materialize`` needs no ``--scratch``: the engines whose scratch
schema defaults to ``sqlfeed_scratch`` (None: no --db, refused by the command itself)."""

INT64_MAX = 2**63 - 1
"""The largest count or seed a command takes (every engine holds it in a BIGINT)."""


def positive(value: int, flag: str, zero: bool = False, most: int = INT64_MAX) -> None:
    """Check that ``flag``'s ``value`` is at least 1 (at least 0 if ``zero``) and at most ``most``.

    Raises:
        InvalidArgumentError: it is not.
    """
    if value < (0 if zero else 1):
        raise InvalidArgumentError(f"{flag} must be {'>= 0' if zero else '>= 1'}, got {value}")
    if value > most:
        raise InvalidArgumentError(f"{flag} must be at most {most}, got {value}")


def validated_query(args: argparse.Namespace, engine: Dialect) -> ParsedQuery:
    """The command's SQL, parsed and checked, and its plan options checked: before any I/O.

    Flattens ``args.key`` (see :func:`flatten_keys`) in place.

    Raises:
        SqlfeedError: bad SQL, an unstable query without ``--allow-unstable``, or a bad option.
    """
    saved = saved_plan(args, engine)  # --plan FILE: its query, validated
    if saved is not None:
        return saved
    sql = read_sql(args.sql)
    args.key = flatten_keys(args.key)
    _check_plan_sizes(args)
    parsed = parse(sql, engine, allow_side_effects=args.allow_side_effects)
    if not args.allow_unstable:
        # Volatile functions now; ORDER BYs that may tie once the output columns and the
        # catalog's keys are known (completed with tie-breakers, or refused with --strict).
        check_stable(parsed, orders=False)
    return parsed


def _check_plan_sizes(args: argparse.Namespace) -> None:
    positive(args.workers, "--workers")
    positive(args.sample_rows, "--sample-rows", zero=True)
    if getattr(args, "seed", None) is not None:
        positive(args.seed, "--seed", zero=True)
    if args.partitions is not None:
        positive(args.partitions, "--partitions")
        check_partition_count(args.partitions, "--partitions")
    if args.target_rows is not None:
        positive(args.target_rows, "--target-rows")
        if not args.db:
            raise InvalidArgumentError("--target-rows needs --db to count the rows; or give -m")
    engine = dialect_for(args.db).name if args.db else None
    if args.strategy == "materialize" and not args.scratch and engine not in DEFAULT_SCRATCH_ON:
        raise InvalidArgumentError(
            f"--strategy materialize needs --scratch SCHEMA on {engine}, a schema sqlfeed may "
            f"create a table in (PostgreSQL and MySQL default to {DEFAULT_SCRATCH})"
        )
    if args.scratch is not None and not args.scratch.strip():
        raise InvalidArgumentError("--scratch needs a schema name")


def names_known(parsed: ParsedQuery) -> bool:
    """Whether the SQL text names every output column, each once.

    No ``*``, no unnamed expression, no repeated name: then nothing needs the names the
    engine gives them.
    """
    names = parsed.output_names
    if names is None or any(name is None for name in names):
        return False
    folded = [str(name).casefold() for name in names]
    return len(set(folded)) == len(folded)


def engine_columns(source: Source, parsed: ParsedQuery) -> list[str] | None:
    """The output column names from the engine (a LIMIT 0 query), as the Python API does.

    When the text does not give them all (see :func:`names_known`); else None.
    """
    return None if names_known(parsed) else source.output_columns(parsed)


def plan_on_db(args: argparse.Namespace, parsed: ParsedQuery, source: Source | None = None) -> Plan:
    """Plan ``parsed`` on ``source`` (default ``--db``) with the planning options.

    See :func:`add_plan_options`; one warning line on stderr when an auto plan re-reads the
    query many times. With ``--plan FILE``: the saved plan, checked on the database.
    """
    saved: Plan | None = getattr(args, "saved_plan", None)
    if saved is not None:
        if source is not None:
            return check_saved_plan(saved, parsed, source, args.plan)
        with connect(args.db) as own:
            return check_saved_plan(saved, parsed, own, args.plan)
    planned = plan(
        parsed,
        args.db if source is None else source,
        partitions=args.partitions,
        target_rows=args.target_rows or 100_000,
        strategy=args.strategy,
        key=args.key,
        workers=args.workers,
        scratch=args.scratch,
        allow_unstable=args.allow_unstable,
        sample_rows=args.sample_rows,
        strict=args.strict,
    )
    if args.strategy == "auto" and (planned.cost or 0) > REREAD_WARNING:
        what = "the whole query" if planned.strategy == "hash" else "the bytes of its files"
        warn(
            f"this plan reads {what} about {planned.cost:g} times "
            f"({planned.strategy} partitions); {reread_advice(args)}"
        )
    return planned


def reread_advice(args: argparse.Namespace) -> str:
    """How to read the rows once instead: only what the command line did not try yet."""
    ways = [] if args.key else ["--key COLUMN (range partitions of a numeric or date column)"]
    if args.scratch:  # auto judged the query cheap to re-run: materializing is still asked for
        ways.append(f"--strategy materialize (one run into --scratch {args.scratch})")
    else:
        ways.append("--scratch SCHEMA (materialize: one run into a scratch table)")
    ways.append("read the rows from a shardset dataset (sqlfeed reshard)")
    return f"to read the rows once, give {', '.join(ways[:-1])}, or {ways[-1]}"


def write_json(out: TextIO, value: Any, *, indent: int | None = None) -> None:
    """Print ``value`` as JSON and a newline."""
    json.dump(value, out, indent=indent)
    out.write("\n")


def write_table(table: pa.Table, fmt: str, out: TextIO) -> None:
    """Print an Arrow table as ``json`` (a list of rows), ``csv``, or else an aligned table.

    NULL is ``null`` in JSON, an empty field in CSV and ``NULL`` in the table; a float NaN
    or infinity (a value, not a NULL) is ``NaN``/``Infinity`` (a string in JSON).
    """
    if fmt == "json":
        rows = [{k: _json_value(v) for k, v in row.items()} for row in table.to_pylist()]
        json.dump(rows, out, default=str, indent=1)
        out.write("\n")
    elif fmt == "csv":
        buffer = io.BytesIO()
        pacsv.write_csv(table, buffer)
        out.write(buffer.getvalue().decode("utf-8"))
    else:
        _write_text_table(table, out)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return _float_text(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (list, dict)):
        return json.dumps(_json_value(value), default=str)
    return " ".join(str(value).splitlines()) if isinstance(value, str) else str(value)


def _write_text_table(table: pa.Table, out: TextIO) -> None:
    """Columns aligned under their names: numbers to the right, the rest to the left."""
    names = [str(name) for name in table.column_names]
    columns = [[_cell(v) for v in table.column(i).to_pylist()] for i in range(len(names))]
    right = [
        pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
        for f in table.schema
    ]
    widths = [max([len(n), *map(len, c)]) for n, c in zip(names, columns, strict=True)]

    def line(cells: list[str]) -> str:
        parts = [
            cell.rjust(width) if ok else cell.ljust(width)
            for cell, width, ok in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip() + "\n"

    out.write(line(names))
    for row in zip(*columns, strict=True) if columns else ():
        out.write(line(list(row)))

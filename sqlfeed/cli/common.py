"""What the ``sqlfeed`` commands share.

The argument parser class and the exit codes, the ``--db``/``--dialect`` and planning
options, the SQL argument (itself, ``-`` for stdin, ``@file.sql``), the checks a query
passes before any I/O, and the JSON and table printers.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO

import pyarrow as pa
import pyarrow.csv as pacsv

from dialects import Dialect, InvalidArgumentError, dialect_names
from sqlfeed import ParsedQuery, Plan, plan
from sqlfeed.plans import STRATEGIES
from sqlfeed.sql import check_stable, parse

EXIT_OK = 0
"""The command succeeded."""
EXIT_ENGINE = 1
"""The engine failed."""
EXIT_BAD_INPUT = 2
"""Bad input: one line on stderr, nothing run on the database."""

Handler = Callable[[argparse.Namespace, TextIO], None]
"""A command's handler: its parsed arguments and where to print."""


class CommandParser(argparse.ArgumentParser):
    """argparse with sqlfeed's one-line error format (exit code 2 as well)."""

    def error(self, message: str) -> NoReturn:
        """Print ``sqlfeed: error: MESSAGE (see 'PROG --help')`` and exit with 2."""
        self.exit(EXIT_BAD_INPUT, f"sqlfeed: error: {message} (see '{self.prog} --help')\n")


def add_target(parser: argparse.ArgumentParser, *, dialect: bool) -> None:
    """Add ``--db URL`` (required), or ``--db`` or ``--dialect NAME`` if ``dialect``."""
    if dialect:
        where = parser.add_mutually_exclusive_group()
        where.add_argument(
            "--db", metavar="URL", help="database URL (SQLAlchemy form, or duckdb:///file.duckdb)"
        )
        where.add_argument(
            "--dialect",
            metavar="NAME",
            help=f"rewrite without a database, for one of: "
            f"{', '.join(dialect_names())} (default duckdb)",
        )
    else:
        parser.add_argument(
            "--db",
            metavar="URL",
            required=True,
            help="database URL (SQLAlchemy form, or duckdb:///file.duckdb)",
        )


def add_sql(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``SQL`` argument (see :func:`read_sql`)."""
    parser.add_argument(
        "sql", metavar="SQL", help="the SELECT; '-' reads it from stdin, '@file.sql' from a file"
    )


def column_list(text: str) -> list[str]:
    """The column names of one ``--key``/``--sort``/``--group-by`` value, split at commas.

    Raises:
        argparse.ArgumentTypeError: a name is empty.
    """
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty column name in {text!r}")
    return names


def flatten_keys(groups: list[list[str]] | None) -> list[str] | None:
    """The names of repeated :func:`column_list` values in one list (None if there are none)."""
    return [name for names in groups for name in names] if groups else None


def add_plan_options(parser: argparse.ArgumentParser, sample_rows: int | None = None) -> None:
    """Add the planning options that plan, export and job create share.

    Args:
        parser: the command's parser.
        sample_rows: the default of ``--sample-rows``; None: no such option (0 rows).
    """
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--partitions",
        "-m",
        type=int,
        metavar="M",
        help="number of partitions (default: from --target-rows, else 16)",
    )
    size.add_argument(
        "--target-rows",
        type=int,
        metavar="N",
        help="rows per partition: M = ceil(COUNT / N), at least 4 x --workers (needs --db)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="W",
        help="expected number of workers: at least 4 x W partitions (default 1)",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="auto",
        help="hash: any query; range: ranges of --key; ctid: physical row ranges of one table "
        "(PostgreSQL ctid, DuckDB rowid); materialize: run once into --scratch; fragments: "
        "the shard files, row groups and stripes of --db dataset:///DIR; auto: the "
        "cheapest that applies (all but hash need --db)",
    )
    parser.add_argument(
        "--scratch",
        metavar="SCHEMA",
        help="a schema sqlfeed may create a table in, for --strategy materialize",
    )
    parser.add_argument(
        "--key",
        action="append",
        type=column_list,
        metavar="COL",
        help="output column to hash (or to range on); repeat or separate with "
        "commas for several (default: all output columns)",
    )
    if sample_rows is None:
        parser.set_defaults(sample_rows=0)
    else:
        parser.add_argument(
            "--sample-rows",
            type=int,
            default=sample_rows,
            metavar="N",
            help=f"rows in the sample query (default {sample_rows})",
        )
    parser.add_argument(
        "--allow-unstable",
        action="store_true",
        help="partition a query whose result may change between runs anyway",
    )


def positive(value: int, flag: str, zero: bool = False) -> None:
    """Check that ``flag``'s ``value`` is at least 1 (at least 0 if ``zero``).

    Raises:
        InvalidArgumentError: it is not.
    """
    if value < (0 if zero else 1):
        raise InvalidArgumentError(f"{flag} must be {'>= 0' if zero else '>= 1'}, got {value}")


def read_sql(argument: str, stdin: TextIO | None = None) -> str:
    """The SQL text of a command-line argument: itself, ``-`` for stdin, ``@path`` for a file.

    Raises:
        InvalidArgumentError: the file cannot be read, or is not UTF-8 text.
    """
    if argument == "-":
        return (stdin or sys.stdin).read()
    if argument.startswith("@"):
        path = Path(argument[1:])
        try:
            return path.read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidArgumentError(f"cannot read SQL from {path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"cannot read SQL from {path}: not UTF-8 text") from None
    return argument


def validated_query(args: argparse.Namespace, engine: Dialect) -> ParsedQuery:
    """The command's SQL, parsed and checked, and its plan options checked: before any I/O.

    Flattens ``args.key`` (see :func:`flatten_keys`) in place.

    Raises:
        SqlfeedError: bad SQL, an unstable query without ``--allow-unstable``, or a bad option.
    """
    sql = read_sql(args.sql)
    args.key = flatten_keys(args.key)
    _check_plan_sizes(args)
    parsed = parse(sql, engine)
    if not args.allow_unstable:
        check_stable(parsed)
    return parsed


def _check_plan_sizes(args: argparse.Namespace) -> None:
    positive(args.workers, "--workers")
    positive(args.sample_rows, "--sample-rows", zero=True)
    if args.partitions is not None:
        positive(args.partitions, "--partitions")
    if args.target_rows is not None:
        positive(args.target_rows, "--target-rows")
        if not args.db:
            raise InvalidArgumentError("--target-rows needs --db to count the rows; or give -m")


def plan_on_db(args: argparse.Namespace, parsed: ParsedQuery) -> Plan:
    """Plan ``parsed`` on ``--db`` with the planning options (see :func:`add_plan_options`)."""
    return plan(
        parsed,
        args.db,
        partitions=args.partitions,
        target_rows=args.target_rows or 100_000,
        strategy=args.strategy,
        key=args.key,
        workers=args.workers,
        scratch=args.scratch,
        allow_unstable=args.allow_unstable,
        sample_rows=args.sample_rows,
    )


def write_json(out: TextIO, value: Any, *, indent: int | None = None) -> None:
    """Print ``value`` as JSON and a newline."""
    json.dump(value, out, indent=indent)
    out.write("\n")


def write_table(table: pa.Table, fmt: str, out: TextIO) -> None:
    """Print an Arrow table as ``json`` (a list of rows), ``csv``, or else an aligned table."""
    if fmt == "json":
        json.dump(table.to_pylist(), out, default=str, indent=1)
        out.write("\n")
    elif fmt == "csv":
        buffer = io.BytesIO()
        pacsv.write_csv(table, buffer)
        out.write(buffer.getvalue().decode("utf-8"))
    else:
        out.write(table.to_pandas().to_string(index=False) + "\n")

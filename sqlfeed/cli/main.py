"""The ``sqlfeed`` command line: the top-level parser, dispatch, and exit codes.

Exit codes: 0 success, 2 bad input (one line on stderr, nothing run on the database),
1 the engine failed. Machine-readable output with ``--format json``. No traceback reaches
the user: a missing driver, a file that cannot be written and, as a last resort, any
other failure are one line too (``SQLFEED_DEBUG=1`` shows the traceback of the last).

Each command group has its parsers in :mod:`sqlfeed.cli.parsers` (``register``), which
name their handler in the group's module: :mod:`~sqlfeed.cli.query` (plan, count,
sample), :mod:`~sqlfeed.cli.export`, :mod:`~sqlfeed.cli.statistics` (stats),
:mod:`~sqlfeed.cli.jobs` (job, worker), :mod:`~sqlfeed.cli.scratch` (scratch),
:mod:`~sqlfeed.cli.shardsets` (reshard, shardset), :mod:`~sqlfeed.cli.ml` (train,
evaluate, model), :mod:`~sqlfeed.cli.predict`, :mod:`~sqlfeed.cli.sqlflow` (sql) and
:mod:`~sqlfeed.cli.demo`; what they share is in :mod:`~sqlfeed.cli.common` and
:mod:`~sqlfeed.cli.checks`; running a handler (its input checked first, its errors as
one line) is :mod:`~sqlfeed.cli.run`.

Start-up is cheap: this module imports only :mod:`argparse` and
:mod:`~sqlfeed.cli.parsing`, and a parser module only argparse. ``sqlfeed --version``,
``sqlfeed --help`` and an unknown command import no parser module; ``sqlfeed export
--help`` imports export's parsers alone, and no command module (nor the drivers, Arrow and
sqlglot they import): a handler's module is imported when its command runs, after its
input was checked. The other commands get a parser that only carries their help line
(:data:`COMMANDS`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from sqlfeed import __version__
from sqlfeed.cli.native import filter_native_stderr, set_terminal
from sqlfeed.cli.parsing import EXIT_BAD_INPUT, EXIT_ENGINE, EXIT_OK, CommandParser

__all__ = [
    "COMMANDS",
    "EXIT_BAD_INPUT",
    "EXIT_ENGINE",
    "EXIT_OK",
    "build_parser",
    "entry_point",
    "main",
]

COMMANDS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "query",
        (
            ("plan", "split a SELECT into partition queries (count, sample, partitions)"),
            ("count", "count the rows a SELECT returns"),
            ("sample", "print a sample of a SELECT's rows"),
        ),
    ),
    (
        "export",
        (
            (
                "export",
                "write a SELECT's rows to Parquet, CSV or JSONL, or into a table, in parallel",
            ),
        ),
    ),
    (
        "statistics",
        (("stats", "feature statistics of a SELECT's columns, as JSON and/or an HTML report"),),
    ),
    (
        "jobs",
        (
            ("job", "create, inspect or reset a job: a plan handed out to elastic workers"),
            ("worker", "pull a job's partitions and read them (joins and leaves at any time)"),
        ),
    ),
    (
        "scratch",
        (
            (
                "scratch",
                "list or drop scratch tables: --strategy materialize's, the write-back's staging",
            ),
        ),
    ),
    (
        "shardsets",
        (
            (
                "reshard",
                "shuffle or sort a query's rows into a new shardset of a target shard size",
            ),
            ("shardset", "validate or describe a dataset of shardsets"),
        ),
    ),
    (
        "ml",
        (
            ("train", "train a model on a SELECT's rows: one folder with its preprocessing inside"),
            (
                "evaluate",
                "a model's metrics on its validation split or on a SELECT, beside a baseline",
            ),
            (
                "model",
                "show what a model folder holds: task, features and transforms, metrics, SQL",
            ),
        ),
    ),
    (
        "predict",
        (
            (
                "predict",
                "write a model's predictions for a SELECT into a table, exactly once, on "
                "elastic workers",
            ),
        ),
    ),
    (
        "sqlflow",
        (
            (
                "sql",
                "train, evaluate or predict from SQLFlow's SELECT ... TO TRAIN / TO EVALUATE / "
                "TO PREDICT",
            ),
        ),
    ),
    ("demo", (("demo", "run the main job end to end on an embedded DuckDB"),)),
)
"""Each command module of :mod:`sqlfeed.cli` and its commands with their help lines, in
the order ``sqlfeed --help`` lists them (a test checks them against the modules' own)."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``sqlfeed`` command.

    Args:
        argv: the command line it will parse: only the module of the command it names is
            imported (the other commands get a parser that only carries their help line).
            None: every command's real parser.
    """
    parser = CommandParser(
        prog="sqlfeed",
        description="Feed machine-learning training straight from a SQL SELECT.",
    )
    parser.add_argument("--version", action="version", version=f"sqlfeed {__version__}")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="draw no progress bars, even on a terminal (results and errors still print)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    commands.required = True
    named = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for module, names in COMMANDS:
        if named is None or any(name == named for name, _ in names):
            importlib.import_module(f"sqlfeed.cli.parsers.{module}").register(commands)
        else:
            for name, helptext in names:
                commands.add_parser(name, help=helptext, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    if args.quiet:
        set_terminal(None)  # the bars draw where the terminal is: nowhere
    runner = importlib.import_module("sqlfeed.cli.run")
    code: int = runner.run_command(args, out or sys.stdout)
    return code


def entry_point() -> None:
    """The console script (native libraries' panic reports kept off stderr).

    Whether stderr is a terminal is decided before the filter puts a pipe there: the
    progress bars draw on the terminal itself (see :func:`~sqlfeed.cli.native.set_terminal`).
    """
    set_terminal(filter_native_stderr())
    sys.exit(main())

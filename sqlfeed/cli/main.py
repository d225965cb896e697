"""The ``sqlfeed`` command line: the top-level parser, dispatch, and exit codes.

Exit codes: 0 success, 2 bad input (one line on stderr, nothing run on the database),
1 the engine failed. Machine-readable output with ``--format json``.

Each command group lives in its own module, which adds its parsers (``register``) with
their handler: :mod:`~sqlfeed.cli.query` (plan, count, sample), :mod:`~sqlfeed.cli.export`,
:mod:`~sqlfeed.cli.statistics` (stats), :mod:`~sqlfeed.cli.jobs` (job, worker),
:mod:`~sqlfeed.cli.shardsets` (reshard, shardset) and :mod:`~sqlfeed.cli.demo`; what they
share is in :mod:`~sqlfeed.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from dialects import EngineError, SqlfeedError
from sqlfeed import __version__
from sqlfeed.cli import demo, export, jobs, query, shardsets, statistics
from sqlfeed.cli.common import EXIT_BAD_INPUT, EXIT_ENGINE, EXIT_OK, CommandParser

__all__ = ["EXIT_BAD_INPUT", "EXIT_ENGINE", "EXIT_OK", "build_parser", "entry_point", "main"]

COMMAND_MODULES = (query, export, statistics, jobs, shardsets, demo)
"""The command modules, in the order ``sqlfeed --help`` lists their commands."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sqlfeed`` command."""
    parser = CommandParser(
        prog="sqlfeed",
        description="Feed machine-learning training straight from a SQL SELECT.",
    )
    parser.add_argument("--version", action="version", version=f"sqlfeed {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    commands.required = True
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    try:
        args.handler(args, stream)
    except EngineError as err:
        print(f"sqlfeed: engine error: {err}", file=sys.stderr)
        return EXIT_ENGINE
    except SqlfeedError as err:
        print(f"sqlfeed: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("sqlfeed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


def entry_point() -> None:
    """The console script."""
    sys.exit(main())

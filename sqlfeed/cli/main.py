"""The ``sqlfeed`` command line: the top-level parser, dispatch, and exit codes.

Exit codes: 0 success, 2 bad input (one line on stderr, nothing run on the database),
1 the engine failed. Machine-readable output with ``--format json``. No traceback reaches
the user: a missing driver, a file that cannot be written and, as a last resort, any
other failure are one line too (``SQLFEED_DEBUG=1`` shows the traceback of the last).

Each command group lives in its own module, which adds its parsers (``register``) with
their handler: :mod:`~sqlfeed.cli.query` (plan, count, sample), :mod:`~sqlfeed.cli.export`,
:mod:`~sqlfeed.cli.statistics` (stats), :mod:`~sqlfeed.cli.jobs` (job, worker),
:mod:`~sqlfeed.cli.scratch` (scratch), :mod:`~sqlfeed.cli.shardsets` (reshard, shardset)
and :mod:`~sqlfeed.cli.demo`; what they share is in :mod:`~sqlfeed.cli.common` and
:mod:`~sqlfeed.cli.checks`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from dialects import EngineError, SqlfeedError
from sqlfeed import __version__
from sqlfeed.cli import demo, export, jobs, query, scratch, shardsets, statistics
from sqlfeed.cli.checks import (
    cli_wording,
    missing_module_hint,
)
from sqlfeed.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_ENGINE,
    EXIT_OK,
    CommandParser,
    drop_warnings,
    flush_warnings,
)
from sqlfeed.cli.native import filter_native_stderr

__all__ = ["EXIT_BAD_INPUT", "EXIT_ENGINE", "EXIT_OK", "build_parser", "entry_point", "main"]

COMMAND_MODULES = (query, export, statistics, jobs, scratch, shardsets, demo)
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
    drop_warnings()
    code = _run(args, stream)
    if code == EXIT_OK:
        flush_warnings()
    else:
        drop_warnings()  # a failed command prints its one error line alone
    return code


def _run(args: argparse.Namespace, stream: TextIO) -> int:
    """Run the command's handler: its exit code, every error turned into one stderr line."""
    try:
        args.handler(args, stream)
    except EngineError as err:
        _say(f"sqlfeed: engine error: {_one_line(err)}")
        return EXIT_ENGINE
    except SqlfeedError as err:
        _say(f"sqlfeed: error: {cli_wording(_one_line(err), getattr(args, 'flag_names', {}))}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("sqlfeed: interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except ImportError as err:  # a driver or extra the command needs is not installed
        _say(f"sqlfeed: error: {missing_module_hint(err)}")
        return EXIT_BAD_INPUT
    except OSError as err:  # a local file or folder that cannot be read or written
        where = f"{err.filename}: " if err.filename else ""
        _say(f"sqlfeed: error: {where}{err.strerror or _one_line(err)}")
        return EXIT_ENGINE
    except Exception as err:  # a bug: still one line, unless SQLFEED_DEBUG asks for more
        if os.environ.get("SQLFEED_DEBUG"):
            raise
        _say(
            f"sqlfeed: internal error: {type(err).__name__}: {_one_line(err)} "
            "(a bug: please report it; SQLFEED_DEBUG=1 shows the traceback)"
        )
        return EXIT_ENGINE
    return EXIT_OK


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _one_line(err: BaseException) -> str:
    """The error's message on one line (drivers' messages may span several)."""
    return " ".join(str(err).split()) or type(err).__name__


def entry_point() -> None:
    """The console script (native libraries' panic reports kept off stderr)."""
    filter_native_stderr()
    sys.exit(main())

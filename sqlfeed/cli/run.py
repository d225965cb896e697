"""Running a parsed command: its handler, and every way it can fail as one stderr line.

Imported by :mod:`sqlfeed.cli.main` once a command was parsed (``--version``, ``--help``
and usage errors never load it, nor what it imports). Check first, import late: the names
the command takes and its SELECT are checked (:mod:`sqlfeed.cli.names`,
:mod:`sqlfeed.cli.prechecks`) before the handler's module, with the drivers, Arrow and a
model's framework, is imported (the handler is a :class:`~sqlfeed.cli.parsers.Later`): bad
input is refused in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TextIO

from sqlfeed.cli.messages import cli_wording, drop_warnings, flush_warnings, missing_module_hint
from sqlfeed.cli.names import check_names
from sqlfeed.cli.parsers import later
from sqlfeed.cli.parsing import EXIT_BAD_INPUT, EXIT_ENGINE, EXIT_OK
from sqlfeed.cli.prechecks import precheck
from sqlfeed.dialects import EngineError, SqlfeedError

__all__ = ["run_command"]

_AT_SNAPSHOT = later("sqlfeed.lake.urls:at_snapshot")
""":func:`sqlfeed.lake.urls.at_snapshot` (``--as-of``), imported when a command has one."""


def run_command(args: argparse.Namespace, stream: TextIO) -> int:
    """Run the command's handler; its exit code.

    The warnings gathered meanwhile are printed when it succeeds; a failed command prints
    its one error line alone.
    """
    drop_warnings()
    code = _run(args, stream)
    if code == EXIT_OK:
        flush_warnings()
    else:
        drop_warnings()
    return code


def _run(args: argparse.Namespace, stream: TextIO) -> int:
    """Run the command's handler: its exit code, every error turned into one stderr line."""
    try:
        check_names(args)  # before the handler: nothing has connected yet
        precheck(args)  # the SELECT, before the handler loads a model or connects
        if getattr(args, "as_of", None) is not None:
            args.db = _AT_SNAPSHOT(args.db, args.as_of)
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
        carried = _carried_by_tensorflow(err)
        if carried is not None:  # sqlfeed's own error, raised inside a tf.data pipeline
            name, message = carried
            if name == "EngineError":
                _say(f"sqlfeed: engine error: {message}")
                return EXIT_ENGINE
            _say(f"sqlfeed: error: {message}")
            return EXIT_BAD_INPUT
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


_TF_CARRIED = re.compile(r"assertion failed: \[(\w+Error): (.*?)\]\s*\[\[")
"""How ``sqlfeed.tf`` raises a feed's own error: a TensorFlow assertion whose message is
``"<ErrorClass>: <message>"`` (see ``sqlfeed.tf.feed.Feed._raise_failure``)."""


def _carried_by_tensorflow(err: BaseException) -> tuple[str, str] | None:
    """The class name and message of a sqlfeed error that a TensorFlow error carries."""
    if type(err).__module__.split(".")[0] != "tensorflow":
        return None
    match = _TF_CARRIED.search(_one_line(err))
    return (match.group(1), match.group(2).replace("\\'", "'")) if match else None

"""What the top of the command line needs before it knows the command: cheap to import.

The exit codes and the parser class (``sqlfeed --version``, ``--help`` and a usage error
import nothing but this, :mod:`argparse` and the package's version; see
:mod:`sqlfeed.cli.main`). :mod:`sqlfeed.cli.common` re-exports them for the commands.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

EXIT_OK = 0
"""The command succeeded."""
EXIT_ENGINE = 1
"""The engine failed."""
EXIT_BAD_INPUT = 2
"""Bad input: one line on stderr, nothing run on the database."""


class CommandParser(argparse.ArgumentParser):
    """argparse with sqlfeed's one-line error format (exit code 2 as well).

    An option the command does not have is refused first, with the closest one it has
    (``unknown option --lable; did you mean --label?``): argparse would first complain of
    the required option the typo was meant to be, and never say which word was wrong.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``sqlfeed: error: MESSAGE (see 'PROG --help')`` and exit with 2."""
        self.exit(EXIT_BAD_INPUT, f"sqlfeed: error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, after :meth:`check_options` (a subcommand's parser is called so too)."""
        args = list(sys.argv[1:] if args is None else args)
        self.check_options(args)
        return super().parse_known_args(args, namespace)

    def check_options(self, args: Sequence[str]) -> None:
        """Refuse the first word of ``args`` that argparse would read as an unknown option.

        A parser with subcommands checks the words before the subcommand (whose own parser
        checks the rest); words after ``--`` are not options.
        """
        for arg in args:
            if arg == "--":
                return
            if self._unknown_option(arg):
                self.error(unknown_option(arg, self._option_string_actions))
            if self._subparsers is not None and not arg.startswith(tuple(self.prefix_chars)):
                return

    def _unknown_option(self, arg: str) -> bool:
        """Whether argparse would take ``arg`` for an option this parser does not have.

        As argparse tells them apart: a word is an option when it starts with ``-`` and is
        not ``-`` alone, a negative number (the parser having no option like one) or a
        word with a space; it is known as written, before an ``=``, as the unambiguous
        start of a long option, or as a short option with its value attached (``-m8``).
        """
        if len(arg) < 2 or arg[0] not in self.prefix_chars:
            return False
        known = self._option_string_actions
        name = arg.split("=", 1)[0]
        if arg in known or name in known or arg[:2] in known:
            return False
        if any(option.startswith(name) for option in known if len(option) > 2):
            return False  # an abbreviation: argparse takes it (or says it is ambiguous)
        if self._negative_number_matcher.match(arg) and not self._has_negative_number_optionals:
            return False
        return " " not in arg


def unknown_option(arg: str, known: Sequence[str] | dict[str, Any]) -> str:
    """``unknown option --lable; did you mean --label?``: the closest of the ``known`` ones.

    >>> unknown_option("--lable=y", ["--label", "--db", "-h"])
    'unknown option --lable; did you mean --label?'
    >>> unknown_option("--zzz", ["--label"])
    'unknown option --zzz'
    """
    name = arg.split("=", 1)[0]
    options = [option for option in known if option.startswith("--")]
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f"unknown option {name}" + (f"; did you mean {close[0]}?" if close else "")

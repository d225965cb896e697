"""What the top of the command line needs before it knows the command: cheap to import.

The exit codes and the parser class (``sqlfeed --version``, ``--help`` and a usage error
import nothing but this, :mod:`argparse` and the package's version; see
:mod:`sqlfeed.cli.main`). :mod:`sqlfeed.cli.common` re-exports them for the commands.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_OK = 0
"""The command succeeded."""
EXIT_ENGINE = 1
"""The engine failed."""
EXIT_BAD_INPUT = 2
"""Bad input: one line on stderr, nothing run on the database."""


class CommandParser(argparse.ArgumentParser):
    """argparse with sqlfeed's one-line error format (exit code 2 as well)."""

    def error(self, message: str) -> NoReturn:
        """Print ``sqlfeed: error: MESSAGE (see 'PROG --help')`` and exit with 2."""
        self.exit(EXIT_BAD_INPUT, f"sqlfeed: error: {message} (see '{self.prog} --help')\n")

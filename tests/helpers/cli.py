"""Run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from sqlfeed.cli.main import main


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(args: Sequence[str], stdin: str | None = None) -> Run:
    """``sqlfeed ARGS`` in-process; its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args), out=out)
            except SystemExit as exit_:  # argparse: --help, --version, usage errors
                code = int(exit_.code or 0)
    finally:
        sys.stdin = saved_stdin
    return Run(code, out.getvalue(), err.getvalue())

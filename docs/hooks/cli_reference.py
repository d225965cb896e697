"""MkDocs hook: the CLI reference pages, generated from ``sqlfeed``'s own argparse parser.

Each command's page is its ``--help`` text as :func:`sqlfeed.cli.main.build_parser` makes
it at build time, so the reference and ``sqlfeed COMMAND --help`` cannot disagree. The
pages are added to the site's files (``reference/cli/*.md``) and never stored in docs/.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from mkdocs.structure.files import File, Files

from sqlfeed.cli.main import build_parser

WIDTH = "100"
"""The help text's width (argparse reads ``COLUMNS``): the same on every machine."""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """The parser's subcommands: (name, help line, parser), in the order --help lists them."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _page(name: str, helpline: str, parser: argparse.ArgumentParser) -> str:
    """One command's page: its help line, its --help text and its subcommands' too."""
    lines = [f"# sqlfeed {name}", "", helpline[:1].upper() + helpline[1:] + ".", ""]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    for sub, subhelp, subparser in _subcommands(parser):
        lines += [f"## sqlfeed {name} {sub}", "", subhelp, ""]
        lines += ["```text", subparser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def _index(commands: list[tuple[str, str, argparse.ArgumentParser]], top: str) -> str:
    lines = [
        "# Command line",
        "",
        "Generated at build time from the parser `sqlfeed` itself uses "
        "(`sqlfeed.cli.main.build_parser`), so these pages are what `--help` prints. "
        "What the commands share (SQL arguments, exit codes, saved plans, progress bars) "
        "is in [Using the command line](../../guides/cli.md).",
        "",
        "```text",
        top.rstrip(),
        "```",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`sqlfeed {name}`]({name}.md) | {helpline} |" for name, helpline, _ in commands]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: Any) -> Files:
    """Add ``reference/cli/index.md`` and one page per command to the site."""
    os.environ["COLUMNS"] = WIDTH
    parser = build_parser()
    parser.prog = "sqlfeed"
    commands = _subcommands(parser)
    files.append(
        File.generated(
            config, "reference/cli/index.md", content=_index(commands, parser.format_help())
        )
    )
    for name, helpline, sub in commands:
        files.append(
            File.generated(config, f"reference/cli/{name}.md", content=_page(name, helpline, sub))
        )
    return files

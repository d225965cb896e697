"""The parsers of ``sqlfeed scratch list|drop`` (handlers in :mod:`sqlfeed.cli.scratch`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import SCRATCH_PREFIX, add_target, later, name_flags
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``scratch`` command (list, drop)."""
    scratch = commands.add_parser(
        "scratch",
        help="list or drop scratch tables: --strategy materialize's, the write-back's staging",
        description=(
            "--strategy materialize runs the query once into a table named "
            f"{SCRATCH_PREFIX}<unix time>_<hex> in the --scratch schema. export and job "
            "delete drop theirs, and train its own (a training's tables name it as their owner: "
            "train --out DIR); a plan keeps its table for its partitions. predict and "
            "export --into write into a staging and a commits table named the same way in "
            "the output table's schema, put in place or dropped when finished; a run given "
            "up leaves them (list them with --scratch set to that schema). List them with "
            "their age, rows (counted) and size (where the engine tells), drop them by name, all, "
            "or those older than a duration. Only sqlfeed's own tables are ever dropped."
        ),
    )
    actions = scratch.add_subparsers(
        dest="scratch_command", metavar="ACTION", parser_class=CommandParser
    )
    actions.required = True
    listing = actions.add_parser("list", help="the scratch tables in a schema, oldest first")
    _add_schema(listing)
    listing.add_argument("--format", choices=("text", "json"), default="text")
    listing.set_defaults(handler=later("scratch:_cmd_list"))
    name_flags(listing)

    drop = actions.add_parser(
        "drop",
        help="drop scratch tables: by name, --all, or --older-than DURATION",
        description="Drop sqlfeed scratch tables of a schema: those named, all of them "
        "(--all), or those older than a duration (--older-than 2h; s, m, h, d, w).",
    )
    _add_schema(drop)
    which = drop.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every scratch table of the schema")
    which.add_argument(
        "--older-than",
        metavar="DURATION",
        help="those created more than DURATION ago: 90s, 30m, 12h, 7d, 2w (a number: seconds)",
    )
    drop.add_argument("--format", choices=("text", "json"), default="text")
    drop.add_argument("names", nargs="*", metavar="TABLE", help="scratch table names")
    drop.set_defaults(handler=later("scratch:_cmd_drop"))
    name_flags(drop)


def _add_schema(parser: argparse.ArgumentParser) -> None:
    add_target(parser, dialect=False)
    parser.add_argument(
        "--schema",
        "--scratch",
        dest="schema",
        required=True,
        metavar="SCHEMA",
        help="the schema given to --scratch (DuckDB: main; SQLite: main)",
    )

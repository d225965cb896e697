"""The parsers of ``sqlfeed export`` (handlers in :mod:`sqlfeed.cli.export`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import (
    EXPORT_FORMATS,
    SINK_MODES,
    add_plan_options,
    add_sql,
    add_target,
    db_url,
    later,
    name_flags,
)
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``export`` command."""
    parser = commands.add_parser(
        "export",
        help="write a SELECT's rows to Parquet, CSV or JSONL, or into a table, in parallel",
        description=(
            "Plan the query, read its partitions in parallel and write them to --out: a "
            "file (.parquet, .csv, .jsonl) or a folder of part files, one per partition "
            "(a name without an extension; other extensions are refused unless --as is "
            "given). The output appears atomically: written aside, renamed into place when "
            "done. A --strategy materialize scratch table is dropped when the export ends. "
            "Repeated column names (SELECT * over a join) are made unique as DuckDB does "
            "(id, id_1). CSV and JSONL show durations as ISO 8601 text (P1DT2H), binary "
            "values as \\x and hex digits, and CSV lists, structs and maps as JSON text. "
            "With --into TABLE instead, the rows go into a table of --into-db (default "
            "--db), exactly once: each batch is committed with a record of it into a "
            "staging table, put in place when every row is there (--mode create renames "
            "it, replace swaps it in atomically, append inserts it in one transaction). "
            "Without a unique --key the table gets the columns _sqlfeed_partition and "
            "_sqlfeed_row (each row's place in the query). With --queue URL --job NAME "
            "the same command started on several machines shares the work (the first "
            "creates the job and the staging table, the others join; whoever sees the job "
            "complete puts the table in place, or --finish does it by hand)."
        ),
    )
    add_target(parser, dialect=False)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="PATH", help="output file or folder (or --into)")
    where.add_argument(
        "--into",
        metavar="TABLE",
        help="output table, name or schema.name, of --into-db (or --out)",
    )
    parser.add_argument(
        "--as",
        dest="file_format",
        choices=EXPORT_FORMATS,
        help="file format of --out (default: from the file name, else parquet)",
    )
    _add_into_options(parser)
    add_plan_options(parser)
    parser._option_string_actions["--key"].help = (
        "output column to hash (or to range on); with --into: the columns identifying a "
        "row (the table's primary key when the source's catalog proves them unique, else "
        "their distinct count is checked); repeat or separate with commas for several"
    )
    parser.add_argument(
        "--readers",
        type=int,
        metavar="N",
        help="partitions read at once (default 2; with --into: 4, or 1 with --queue)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="how to print the summary"
    )
    add_sql(parser)
    parser.set_defaults(handler=later("export:_cmd_export"), precheck="stable_unless_allowed")
    name_flags(parser, format="--as", file_format="--as", url="--into-db", table="--into")


def _add_into_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--into-db",
        metavar="URL",
        type=db_url,
        help="the database of --into (default: --db)",
    )
    parser.add_argument(
        "--mode",
        choices=SINK_MODES,
        help="--into: create the table (refused if it exists; the default), replace it "
        "atomically, or append to it (it must have the same columns)",
    )
    parser.add_argument(
        "--queue",
        metavar="URL",
        type=db_url,
        help="--into: a lease queue shared by the processes writing (sqlite:///file.db, "
        "or a PostgreSQL or MySQL URL); needs --job",
    )
    parser.add_argument(
        "--job", metavar="NAME", help="--into: the job's name in --queue (the first creates it)"
    )
    parser.add_argument(
        "--finish",
        action="store_true",
        help="--into with --queue and --job: only put the job's table in place (checks "
        "that every row was written; idempotent); no SQL",
    )

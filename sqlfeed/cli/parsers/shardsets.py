"""The parsers of ``sqlfeed reshard`` and ``sqlfeed shardset validate|info``.

Their handlers are in :mod:`sqlfeed.cli.shardsets`.
"""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import RESHARD_FORMATS, add_db, later, name_flags
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

DEFAULT_SHARD_SIZE = "256MB"
"""The shard size of ``sqlfeed reshard`` without ``--shard-rows`` or ``--shard-size``."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``reshard`` and ``shardset`` (validate, info) commands."""
    _register_reshard(commands)
    shardset = commands.add_parser(
        "shardset",
        help="validate or describe a dataset of shardsets",
        description=(
            "A dataset is a folder of shardsets (feature columns in shard.NNNNN.<format> "
            "files plus a UID column, with a manifest.json); query it with "
            "--db dataset:///DIR."
        ),
    )
    actions = shardset.add_subparsers(
        dest="shardset_command", metavar="ACTION", parser_class=CommandParser
    )
    actions.required = True
    check = actions.add_parser(
        "validate",
        help="check every shardset rule; exit 2 and list the problems if one is broken",
        description=(
            "Check a dataset: the UID column is in every shardset, UIDs are unique within "
            "a shardset, a sample present in several shardsets is in the same shard index "
            "in each, shard files are readable and match the manifest, and a feature lives "
            "in one shardset. Prints every problem (shardset, shard, a few UIDs and the "
            "count); exits 2 when there is one."
        ),
    )
    check.add_argument("dir", metavar="DIR", help="the dataset (or one shardset) folder")
    check.add_argument(
        "--shallow",
        action="store_true",
        help="check manifests, file presence and Parquet/ORC footers only (do not read "
        "every file: no UID checks)",
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.set_defaults(handler=later("shardsets:_cmd_shardset_validate"))
    info = actions.add_parser(
        "info",
        help="show shardsets, columns, shard and row counts, and which is main and why",
        description=(
            "Describe a dataset from its manifests: each shardset's format, shards, rows, "
            "bytes, creation time and columns; the main shardset (fewest samples, ties to "
            "the oldest) and why; the joined columns."
        ),
    )
    info.add_argument("dir", metavar="DIR", help="the dataset (or one shardset) folder")
    info.add_argument("--format", choices=("text", "json"), default="text")
    info.set_defaults(handler=later("shardsets:_cmd_shardset_info"))


def _register_reshard(commands: argparse._SubParsersAction[CommandParser]) -> None:
    parser = commands.add_parser(
        "reshard",
        help="shuffle or sort a query's rows into a new shardset of a target shard size",
        description=(
            "Run the query once (DuckDB by default: it may read files, e.g. "
            "read_parquet('in/*.parquet'), or tar shards registered with --tar), shuffle "
            "(seeded, global) or sort its rows in DuckDB, out of core (spilling to disk "
            "beyond --memory-limit), and cut them into shards of --shard-rows rows or "
            "about --shard-size bytes (within 10%; the last may be smaller; default "
            f"{DEFAULT_SHARD_SIZE}). The output is "
            "a shardset (shard files and manifest.json) that appears atomically."
        ),
    )
    add_db(
        parser,
        help="where the query runs (without: an in-memory DuckDB); rows from other "
        "engines are streamed into DuckDB for the shuffle or sort",
        required=False,
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the shardset to create")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--shuffle", type=int, metavar="SEED", help="global seeded shuffle")
    order.add_argument(
        "--sort",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="sort by these columns ('col' or 'col desc'; several, or comma-separated); "
        "ties keep the query's order",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--shard-rows", type=int, metavar="N", help="rows per shard")
    size.add_argument(
        "--shard-size",
        metavar="SIZE",
        help="bytes per shard: 256MB, 1GB (powers of 1000) or 512MiB (powers of 1024); "
        f"the default, without --shard-rows, is {DEFAULT_SHARD_SIZE}",
    )
    parser.add_argument(
        "--group-by",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="rows with equal values of these columns are never split across shards",
    )
    _add_reshard_output_options(parser)
    parser.set_defaults(handler=later("shardsets:_cmd_reshard"))
    name_flags(
        parser,
        format="--as",
        shard_format="--as",
        **{
            "shard rows": "--shard-rows",
            "shard size": "--shard-size",
            "memory limit": "--memory-limit",
            "the shuffle seed": "--shuffle",
            "the temp folder": "--temp-dir",
            "the output": "--out",
            "sort": "--sort",
            "uid": "--uid",
        },
    )


def _add_reshard_output_options(parser: argparse.ArgumentParser) -> None:
    """Reshard's DuckDB resources, output format, uid, tar views, flags and the SQL."""
    parser.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB's memory limit (2GB, or 60%% of the RAM); beyond it DuckDB spills to disk",
    )
    parser.add_argument("--threads", type=int, metavar="N", help="DuckDB's threads")
    parser.add_argument(
        "--temp-dir",
        metavar="PATH",
        help="where DuckDB spills and the extracted rows go (default: beside --out)",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=(*RESHARD_FORMATS, "text", "json"),
        default=[],
        help="the shard format (parquet, default; csv, jsonl, or tar: WebDataset-style "
        "records) and/or how to print the metrics (text, default; json); give it twice for "
        "both, e.g. --format tar --format json",
    )
    parser.add_argument(
        "--as",
        dest="shard_format",
        choices=RESHARD_FORMATS,
        help="the shard format (the same as --format parquet|csv|jsonl|tar)",
    )
    parser.add_argument(
        "--uid",
        metavar="COL",
        help="the uid column (unique, not NULL); default: uid, else __key__, else a new "
        "BIGINT column uid numbering the output rows 0..n-1",
    )
    parser.add_argument(
        "--tar",
        action="append",
        default=[],
        metavar="NAME=GLOB",
        help="register view NAME over tar shards (one row per record: __key__ plus a binary "
        "column per member extension), e.g. --tar images='raw/*.tar' (repeatable)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--allow-unstable",
        action="store_true",
        help="reshard a query whose result may change between runs anyway",
    )
    parser.add_argument(
        "sql",
        nargs="?",
        metavar="SQL",
        help="the SELECT; '-' reads it from stdin, '@file.sql' from a file (it may also "
        "directly follow --sort or --group-by keys)",
    )

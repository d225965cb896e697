"""The shardset commands: ``sqlfeed reshard`` and ``sqlfeed shardset validate|info``."""

from __future__ import annotations

import argparse
import re
from typing import Any, TextIO

from dialects import InvalidArgumentError, ShardsetError
from sqlfeed import open_dataset, reshard
from sqlfeed.cli.checks import db_url, name_flags
from sqlfeed.cli.common import (
    CommandParser,
    flag_column_list,
    flatten_keys,
    positive,
    read_sql,
    write_json,
)
from sqlfeed.cli.progress import PercentBar, ProgressBar
from sqlfeed.shards import validate
from sqlfeed.shards.reshard import RESHARD_FORMATS

MAX_THREADS = 1024
"""The most DuckDB threads ``sqlfeed reshard --threads`` asks for."""
DEFAULT_SHARD_SIZE = "256MB"
"""The shard size of ``sqlfeed reshard`` without ``--shard-rows`` or ``--shard-size``."""
_PHASE_WORDS = {"extract": "extracted", "sort": "sorted", "write": "written"}
_LOOKS_LIKE_SQL = re.compile(r"^\s*(select|with|values|from|table|\()\b", re.IGNORECASE)


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
    check.set_defaults(handler=_cmd_shardset_validate)
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
    info.set_defaults(handler=_cmd_shardset_info)


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
    parser.add_argument(
        "--db",
        metavar="URL",
        type=db_url,
        help="where the query runs (default: an in-memory DuckDB); rows from other "
        "engines are streamed into DuckDB for the shuffle or sort",
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
    parser.set_defaults(handler=_cmd_reshard)
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


def _reshard_sql(args: argparse.Namespace) -> None:
    """Take the SQL back from ``--sort a b SQL`` or ``--group-by k SQL`` (nargs='+')."""
    for name in ("group_by", "sort"):
        keys = getattr(args, name)
        if args.sql is None and keys:
            last = keys[-1]
            if last == "-" or last.startswith("@") or _LOOKS_LIKE_SQL.match(last):
                args.sql = keys.pop()
    if args.sql is None:
        raise InvalidArgumentError("give the SELECT to reshard (or '-' for stdin, '@file.sql')")
    for name, flag in (("sort", "--sort"), ("group_by", "--group-by")):
        if getattr(args, name) == []:
            raise InvalidArgumentError(f"{flag} needs at least one column")


def _reshard_formats(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The shard formats and the output formats that ``--format`` and ``--as`` name."""
    shard_formats = [f for f in args.format if f in RESHARD_FORMATS]
    shown = [f for f in args.format if f not in RESHARD_FORMATS]
    if args.shard_format and {args.shard_format} != set(shard_formats or [args.shard_format]):
        raise InvalidArgumentError(
            f"--as {args.shard_format} and --format {shard_formats[0]} name different shard "
            "formats: give one of them"
        )
    if args.shard_format:
        shard_formats.append(args.shard_format)
    if len(set(shard_formats)) > 1:
        raise InvalidArgumentError(
            f"--format names two shard formats ({', '.join(dict.fromkeys(shard_formats))}): "
            "give one (parquet, csv, jsonl or tar)"
        )
    if len(set(shown)) > 1:
        raise InvalidArgumentError("--format names two output formats (text, json): give one")
    return shard_formats, shown


def _tar_views(items: list[str]) -> dict[str, str]:
    """The ``--tar NAME=GLOB`` values as a dict."""
    tar: dict[str, str] = {}
    for item in items:
        name, sep, pattern = item.partition("=")
        if not sep or not name or not pattern:
            raise InvalidArgumentError(
                f"--tar takes NAME=GLOB, like images='raw/*.tar', not {item!r}"
            )
        if name in tar:
            raise InvalidArgumentError(f"--tar {name} is given twice")
        tar[name] = pattern
    return tar


class _PhaseBars:
    """Reshard's progress callback: a bar for each phase, closed when the next one starts."""

    def __init__(self) -> None:
        self.bars: dict[str, ProgressBar] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        bar = self.bars.get(phase)
        if bar is None:  # a new phase: one bar each
            self.close()
            self.bars.clear()
            if total == 100 and phase != "write":
                bar = PercentBar(100, what=phase)
            else:
                what = f"rows {_PHASE_WORDS.get(phase, phase)}"
                bar = ProgressBar(total, what=what, show_rows=False)
            self.bars[phase] = bar
        if isinstance(bar, PercentBar):
            bar.update(100 * done // total if total else 0, 0)
        else:
            bar.total = total
            bar.update(done, done)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _cmd_reshard(args: argparse.Namespace, out: TextIO) -> None:
    _reshard_sql(args)
    if args.threads is not None:
        positive(args.threads, "--threads", most=MAX_THREADS)
    if args.shard_rows is not None:
        positive(args.shard_rows, "--shard-rows")
    shard_formats, shown = _reshard_formats(args)
    tar = _tar_views(args.tar)
    sort = flatten_keys([flag_column_list(key, "--sort") for key in args.sort or []])
    group_by = flatten_keys([flag_column_list(key, "--group-by") for key in args.group_by or []])
    if args.shard_rows is None and args.shard_size is None:
        args.shard_size = DEFAULT_SHARD_SIZE
    progress = _PhaseBars()
    try:
        metrics = reshard(
            read_sql(args.sql),
            args.db,
            out=args.out,
            shuffle=args.shuffle,
            sort=sort,
            shard_rows=args.shard_rows,
            shard_size=args.shard_size,
            group_by=group_by,
            memory_limit=args.memory_limit,
            threads=args.threads,
            temp_dir=args.temp_dir,
            format=shard_formats[0] if shard_formats else "parquet",
            uid=args.uid,
            tar=tar or None,
            overwrite=args.overwrite,
            allow_unstable=args.allow_unstable,
            progress=progress,
        )
    finally:
        progress.close()
    if shown and shown[0] == "json":
        write_json(out, metrics.to_dict())
    else:
        out.write(metrics.summary() + "\n")


def _cmd_shardset_validate(args: argparse.Namespace, out: TextIO) -> None:
    report = validate(args.dir, deep=not args.shallow)
    if args.format == "json":
        write_json(out, report.to_dict(), indent=2)
    elif report.ok:
        out.write(
            f"{args.dir}: valid ({report.shardsets} shardsets, {report.shards} shards, "
            f"{report.rows} rows{', shallow check' if args.shallow else ''})\n"
        )
    else:
        for problem in report.problems:
            out.write(f"{problem}\n")
    if not report.ok:
        count = len(report.problems)
        raise ShardsetError(f"{args.dir}: {count} problem{'s' * (count > 1)} found")


def _cmd_shardset_info(args: argparse.Namespace, out: TextIO) -> None:
    dataset = open_dataset(args.dir, validate=False)
    main = dataset.main
    shardsets: list[dict[str, Any]] = [
        {
            "name": s.name,
            "format": s.format,
            "shards": len(s.manifest.shards),
            "rows": s.rows,
            "bytes": s.manifest.bytes,
            "created": s.manifest.created,
            "columns": s.manifest.features,
            "main": s is main,
        }
        for s in dataset.shardsets
    ]
    if args.format == "json":
        info = {
            "path": str(dataset.path),
            "uid": dataset.uid,
            "main": main.name,
            "main_reason": dataset.main_reason,
            "columns": dataset.columns,
            "shardsets": shardsets,
        }
        write_json(out, info, indent=2)
        return
    out.write(f"dataset {dataset.path} (uid column: {dataset.uid})\n")
    out.write(f"main shardset: {main.name} ({dataset.main_reason})\n\n")
    _write_shardset_table(shardsets, out)
    out.write(f"\njoined columns: {', '.join(dataset.columns)}\n")


def _write_shardset_table(shardsets: list[dict[str, Any]], out: TextIO) -> None:
    """One aligned line per shardset, the main one starred."""
    header = ("shardset", "format", "shards", "rows", "bytes", "created", "columns")
    rows = [
        (
            ("* " if s["main"] else "  ") + str(s["name"]),
            str(s["format"]),
            str(s["shards"]),
            str(s["rows"]),
            str(s["bytes"]),
            str(s["created"])[:19],
            ", ".join(s["columns"]),
        )
        for s in shardsets
    ]
    widths = [max(len(r[i]) for r in [("  " + header[0], *header[1:]), *rows]) for i in range(7)]
    for row in [("  " + header[0], *header[1:]), *rows]:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )

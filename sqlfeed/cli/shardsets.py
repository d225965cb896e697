"""The shardset commands: ``sqlfeed reshard`` and ``sqlfeed shardset validate|info``."""

from __future__ import annotations

import argparse
import re
from typing import Any, TextIO

from sqlfeed import open_dataset, reshard
from sqlfeed.cli.common import (
    flag_column_list,
    flatten_keys,
    positive,
    read_sql,
    write_json,
)
from sqlfeed.cli.parsers.shardsets import DEFAULT_SHARD_SIZE
from sqlfeed.cli.progress import PercentBar, ProgressBar
from sqlfeed.dialects import InvalidArgumentError, ShardsetError
from sqlfeed.shards import validate
from sqlfeed.shards.reshard import RESHARD_FORMATS

MAX_THREADS = 1024
"""The most DuckDB threads ``sqlfeed reshard --threads`` asks for."""
_PHASE_WORDS = {"extract": "extracted", "sort": "sorted", "write": "written"}
_LOOKS_LIKE_SQL = re.compile(r"^\s*(select|with|values|from|table|\()\b", re.IGNORECASE)


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

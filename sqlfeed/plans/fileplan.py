"""Fragment plans over plain files: list the files, size them, cut them into pieces.

For a row-by-row query over one file table (:mod:`sqlfeed.plans.files`), the planner
asks the source (a :class:`FileSource`: DuckDB) for the files the table reads, exactly as
DuckDB expands its globs, and reads the files' own metadata
(:mod:`sqlfeed.plans.filemeta`): Parquet footers, ORC footers, text file sizes. No scan
of the rows. A file of more than the target rows is cut into runs of row groups,
stripes or line-aligned byte ranges; smaller files are gathered whole. What stays whole
and why (a CSV with quoted newlines, options a byte range cannot keep) is said in the
plan's reason.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

import pyarrow.parquet as pq
from sqlglot import exp

from sqlfeed.dialects import SqlfeedError
from sqlfeed.io import range_url
from sqlfeed.plans.context import PlanContext
from sqlfeed.plans.filemeta import (
    data_start,
    even_runs,
    first_line_is_object,
    line_cuts,
    orc_open,
    orc_stripes,
    parquet_row_groups,
    quoted_newlines,
    text_rows_estimate,
)
from sqlfeed.plans.files import (
    FilePart,
    FileTable,
    PartSql,
    file_tables,
    named_arguments_sql,
    reader_call,
    table_problem,
)
from sqlfeed.plans.model import Partition
from sqlfeed.plans.spans import template
from sqlfeed.sql import ParsedQuery

__all__ = [
    "MIN_RANGE_BYTES",
    "FileLayout",
    "FileSource",
    "WholeReads",
    "build",
    "chosen_table",
    "layout",
    "notes",
    "problem",
    "reads_besides",
    "size_text",
    "stored_rows",
    "table_bytes",
    "whole_reads",
]

_MEMO = "files"
_MULTI_FILE_OPTIONS = ("filename", "hive_partitioning", "union_by_name", "file_row_number")
_COMPRESSED = (".gz", ".zst", ".bz2", ".xz", ".lz4", ".snappy", ".zip")
MIN_RANGE_BYTES = 4 << 20
"""The smallest byte range a text file is cut into: every partition query costs DuckDB a
few milliseconds to set up, so smaller ranges would cost more than they spread (as
Parquet row groups bound Parquet pieces)."""
_SERIAL_BYTES = 8 << 20
"""CSV ranges smaller than this are read by DuckDB's serial CSV scan."""


@runtime_checkable
class FileSource(Protocol):
    """A source that reads local files by SQL (DuckDB) and answers questions about them."""

    def expand_files(self, patterns: Sequence[str]) -> list[str]:
        """The files ``patterns`` name, as the engine expands its globs."""

    def describe_columns(self, sql: str) -> list[tuple[str, str]]:
        """``(name, type)`` of the output columns of ``sql``."""

    def sniff_csv(self, file: str, options: str) -> str:
        """The reader call, every CSV option explicit, the engine finds for ``file``."""


@dataclass
class FileLayout:
    """The files a file table reads, with their row counts."""

    table: FileTable
    files: list[str]
    rows: list[int]
    """Rows per file: from footers (Parquet, ORC), estimated from sizes (CSV, JSON)."""
    source: FileSource
    notes: list[str] = field(default_factory=list)
    """What stayed whole and why, filled in by :func:`build`."""

    @cached_property
    def columns(self) -> list[tuple[str, str]]:
        """The table's columns and types as the engine reads all its files.

        Asked once, when a text file is cut: for CSV and JSON it costs the engine a sniff.
        """
        call = reader_call(self.table).sql("duckdb")
        return self.source.describe_columns(f"SELECT * FROM {call}")

    @property
    def multi(self) -> bool:
        """Whether the table reads more than one file."""
        return len(self.files) > 1


def chosen_table(
    parsed: ParsedQuery, size: Callable[[FileTable], int] | None = None
) -> tuple[FileTable | None, str]:
    """The file table partitions can cut, or None and why none can be cut.

    With ``size`` (a table's bytes), the largest that can be cut; else the first.
    """
    found = file_tables(parsed)
    if not found:
        return None, (
            "the query reads no shardset dataset and no file (read_parquet, read_csv, "
            "read_json, read_orc or FROM 'file.parquet')"
        )
    problems = [why for _table, why in _cuttable(parsed)]
    can = [table for table, why in _cuttable(parsed) if why is None]
    if not can:
        return None, str(problems[0])
    if size is None:
        return can[0], ""
    return max(can, key=size), ""  # the first of equal sizes


def _cuttable(parsed: ParsedQuery) -> list[tuple[FileTable, str | None]]:
    """Every file table of the query, and why partitions cannot cut it (None: they can)."""
    out: list[tuple[FileTable, str | None]] = []
    for node, table in file_tables(parsed):
        if not table.local:
            out.append((table, f"{table.patterns[0]} is not a local file"))
        else:
            out.append((table, table_problem(parsed, node)))
    return out


def problem(ctx: PlanContext) -> str | None:
    """Why the query cannot be cut into pieces of files (None: it can)."""
    if not ctx.engine.READS_FILES or not isinstance(ctx.source, FileSource):
        return (
            f"fragments read a shardset dataset (dataset:///DIR) or files on DuckDB "
            f"(read_parquet, read_csv, ...), not a {ctx.engine.name} query"
        )
    if _MEMO in ctx.memo or _MEMO + ":table" in ctx.memo:
        return None
    table, why = chosen_table(ctx.parsed, lambda t: table_bytes(ctx, t))
    if table is None:
        return why
    ctx.memo[_MEMO + ":table"] = table
    return None


def table_bytes(ctx: PlanContext, table: FileTable) -> int:
    """The bytes of the local files a file table reads (0 for remote files)."""
    key = f"{_MEMO}:bytes:{table.position}"
    if key not in ctx.memo:
        source = ctx.source
        assert isinstance(source, FileSource)
        files = source.expand_files(list(table.patterns)) if table.local else []
        ctx.memo[key] = sum(os.path.getsize(f) for f in files)
    size: int = ctx.memo[key]
    return size


@dataclass(frozen=True)
class WholeReads:
    """What every partition of a file plan reads besides its own piece: the other tables."""

    cut: int
    """Bytes of the files of the table the partitions cut."""
    files: list[tuple[str, int]]
    """Every other file table: its name as written and its bytes (0: remote, unknown)."""
    tables: list[str]
    """Tables that are not files (their bytes unknown): read whole too."""
    larger: str
    """Why a larger file table than the one cut could not be cut ("": none was larger)."""

    def cost(self, partitions: int) -> float:
        """Reads of the files' bytes all ``partitions`` make, in reads of every file once."""
        whole = sum(size for _name, size in self.files)
        if self.cut + whole <= 0:
            return 1.0
        return round((self.cut + partitions * whole) / (self.cut + whole), 2)

    def text(self) -> str:
        """What every partition also reads, for ``plan.reason`` ("" when nothing)."""
        named = [f"{name} ({size_text(size)})" if size else name for name, size in self.files]
        named += self.tables
        if not named:
            return ""
        unknown = " (of unknown size: plan.cost counts local files only)" if self.tables else ""
        return f"; every partition also reads {', '.join(named)} whole{unknown}{self.larger}"


def whole_reads(ctx: PlanContext) -> WholeReads:
    """The tables every partition reads whole besides its piece of the chosen table."""
    chosen: FileTable = ctx.memo[_MEMO + ":table"]
    return reads_besides(ctx, chosen.position, table_bytes(ctx, chosen), "")


def reads_besides(ctx: PlanContext, cut: int, cut_bytes: int, cut_instead: str) -> WholeReads:
    """The tables every partition reads whole besides its piece of the cut table reference.

    The partitions cut the table reference at position ``cut`` (of ``cut_bytes`` bytes).
    ``cut_instead``: why a larger file table that can be cut is not (empty: it would be, see
    :func:`chosen_table`).
    """
    files, larger = [], ""
    for table, why in _cuttable(ctx.parsed):
        if table.position == cut:
            continue
        size = table_bytes(ctx, table)
        files.append((_name(table), size))
        if size > cut_bytes and not larger and why is not None:
            larger = f"; the larger table {_name(table)} cannot be cut: {why}"
        elif size > cut_bytes and not larger and cut_instead:
            larger = f"; the larger table {_name(table)} is read whole: {cut_instead}"
    ctes = {cte.alias_or_name for cte in ctx.parsed.tree.find_all(exp.CTE)}
    positions = {t.position for t, _why in _cuttable(ctx.parsed)} | {cut}
    tables = [
        ".".join(part for part in (node.catalog, node.db, node.name) if part)
        for position, node in enumerate(ctx.parsed.tree.find_all(exp.Table))
        if position not in positions
        and isinstance(node.this, exp.Identifier)  # a table, not a table function
        and not (not node.db and node.name in ctes)
    ]
    return WholeReads(cut_bytes, files, tables, larger)


def _name(table: FileTable) -> str:
    first = table.patterns[0]
    return first if len(table.patterns) == 1 else f"{first} (and {len(table.patterns) - 1} more)"


def size_text(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def layout(ctx: PlanContext) -> FileLayout:
    """The files of the chosen table and their rows (from metadata), looked up once."""
    if _MEMO not in ctx.memo:
        table = ctx.memo[_MEMO + ":table"]
        source = ctx.source
        assert isinstance(source, FileSource)
        files = source.expand_files(list(table.patterns))
        ctx.memo[_MEMO] = FileLayout(table, files, [_file_rows(table, f) for f in files], source)
    found: FileLayout = ctx.memo[_MEMO]
    return found


def stored_rows(ctx: PlanContext) -> int:
    """Rows in the table's files, from footers and sizes."""
    return sum(layout(ctx).rows)


def notes(ctx: PlanContext) -> str:
    """What stayed whole, and why, once :func:`build` ran (empty when nothing did)."""
    found = layout(ctx).notes
    if not found:
        return ""
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; " + "; ".join(found[:3]) + more


def _file_rows(table: FileTable, file: str) -> int:
    if table.fmt == "parquet":
        return int(pq.ParquetFile(file).metadata.num_rows)
    if table.fmt == "orc":
        return int(orc_open(file).nrows)
    return text_rows_estimate(file)


# -- pieces ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    part: FilePart
    rows: int
    label: str
    merged: Callable[[int, int], FilePart] | None = None
    """The part that reads positions ``[start, end)`` of this piece's sequence (the
    file's rows, stripes or bytes), for the partition's span; None: no span."""


def build(ctx: PlanContext, m: int) -> list[Partition]:
    """About ``m`` partitions over pieces of the table's files, in file order.

    A file of more than ``rows / m`` rows is cut, smaller consecutive files are gathered
    whole.
    """
    found = layout(ctx)
    total = max(sum(found.rows), 1)
    target = max(1, -(-total // m))
    pieces: list[_Piece] = []
    whole: list[tuple[str, int]] = []
    bucket, row = -1, 0
    for file, rows in zip(found.files, found.rows, strict=True):
        cut = _cut(ctx, found, file, rows, target) if rows > target else None
        here = (2 * row + rows) * m // (2 * total)  # the bucket of the file's middle row
        row += rows
        if cut is None and (not whole or here == bucket):
            whole.append((file, rows))
            bucket = here
            continue
        _gather(whole, pieces)
        if cut is None:
            whole.append((file, rows))
            bucket = here
        else:
            pieces.extend(cut)
    _gather(whole, pieces)
    if len(pieces) < m:
        found.notes.insert(0, _bound(found.table.fmt))
    out = []
    sqls = PartSql(ctx.parsed, found.table, multi=found.multi)
    templates: dict[tuple[str, ...], str | None] = {}
    for index, piece in enumerate(pieces):
        sql = sqls.sql(piece.part)
        single = piece.part.files[0] if len(piece.part.files) == 1 else None
        span = _span(sqls, piece, templates)
        out.append(Partition(index, sql, piece.rows, piece.label, file=single, span=span))
    return out


def _span(
    sqls: PartSql, piece: _Piece, templates: dict[tuple[str, ...], str | None]
) -> tuple[str, int, int] | None:
    """The partition's span: the template of its file's positions, and the positions it reads.

    The template is made once per file and kind.
    """
    merged, part = piece.merged, piece.part
    if merged is None:
        return None
    key = (part.kind, *part.files)
    if key not in templates:
        templates[key] = template(lambda s, e: sqls.sql(merged(s, e)), part.start, part.end)
    text = templates[key]
    return None if text is None else (text, part.start, part.end)


def _bound(fmt: str) -> str:
    """Why a file table has fewer pieces than asked for."""
    unit = {
        "parquet": "whole row groups (a smaller piece would re-read its row group)",
        "orc": "whole stripes",
        "csv": f"byte ranges of at least {MIN_RANGE_BYTES >> 20} MiB (a smaller range "
        "costs more to set up than it spreads)",
    }
    text = unit.get(fmt, unit["csv"])
    return f"a partition reads whole small files, or {text}"


def _gather(whole: list[tuple[str, int]], pieces: list[_Piece]) -> None:
    """Move the whole files gathered so far into one piece."""
    if not whole:
        return
    files = tuple(file for file, _rows in whole)
    label = files[0] if len(files) == 1 else f"{len(files)} files {files[0]} .. {files[-1]}"
    pieces.append(_Piece(FilePart("files", files), sum(rows for _f, rows in whole), label))
    whole.clear()


def _cut(
    ctx: PlanContext, found: FileLayout, file: str, rows: int, target: int
) -> list[_Piece] | None:
    """The pieces of one big file, or None (with a note) when it is read whole."""
    table = found.table
    if table.fmt == "parquet":
        if "file_row_number" in pq.ParquetFile(file).schema_arrow.names:
            found.notes.append(f"{file} is read whole: it has a column named file_row_number")
            return None
        runs = even_runs(file, "rows", parquet_row_groups(file), target, by_rows=True)
        rows_of = _merged("rows", file)
        return [
            _Piece(rows_of(p.start, p.end), p.rows, f"{file} rows [{p.start}, {p.end})", rows_of)
            for p in runs
            if p.kind == "rows"
        ] or None
    if table.fmt == "orc":
        runs = even_runs(file, "stripes", orc_stripes(file), target, by_rows=False)
        stripes_of = _merged("stripes", file)
        return [
            _Piece(
                stripes_of(p.start, p.end),
                p.rows,
                f"{file} stripes [{p.start}, {p.end})",
                stripes_of,
            )
            for p in runs
            if p.kind == "stripes"
        ] or None
    return _cut_text(ctx, found, file, rows, target)


def _cut_text(
    ctx: PlanContext, found: FileLayout, file: str, rows: int, target: int
) -> list[_Piece] | None:
    """Line-aligned byte ranges of a CSV / JSON-lines file, or None (a note says why)."""
    table = found.table
    wanted = min(-(-rows // target), max(1, os.path.getsize(file) // max(1, MIN_RANGE_BYTES)))
    if wanted < 2:
        return None
    cuts: list[int] = []
    spec = _text_spec(ctx, found, file, wanted, cuts)
    if isinstance(spec, str):
        found.notes.append(f"{file} is read whole: {spec}")
        return None
    call, prefix = spec
    marker = f"sqlfeed_url_{uuid.uuid4().hex}"
    templates = [_with_path(call, marker).sql("duckdb").split(marker)]
    if table.fmt == "csv" and table.option("parallel") is None:  # small ranges: serial scans
        serial = _with_path(call, marker)
        serial.append("expressions", exp.EQ(this=exp.column("parallel"), expression=exp.false()))
        templates.append(serial.sql("duckdb").split(marker))

    def ranged(start: int, end: int, serial: bool = False) -> FilePart:
        url = range_url(file, prefix, start, end).replace("'", "''")  # in a SQL string
        before, after = templates[-1] if serial else templates[0]
        return FilePart("bytes", (file,), start, end, before + url + after)

    pieces = []
    for start, end in itertools.pairwise(cuts):
        share = round(rows * (end - start) / max(1, cuts[-1] - cuts[0]))
        part = ranged(start, end, serial=end - start < _SERIAL_BYTES)
        pieces.append(_Piece(part, share, f"{file} bytes [{start}, {end})", ranged))
    return pieces if len(pieces) > 1 else None


def _merged(kind: str, file: str) -> Callable[[int, int], FilePart]:
    """The part of ``file`` that reads ``kind`` (rows, stripes) ``[start, end)``."""
    return lambda start, end: FilePart(kind, (file,), start, end)


# -- byte ranges of text files: the reader call that reads a range as the whole read does --


def _text_spec(
    ctx: PlanContext, found: FileLayout, file: str, pieces: int, cuts: list[int]
) -> tuple[exp.Expr, int] | str:
    """The reader call and the header every range repeats, or why the file must be read whole.

    The reader call's path is to be replaced; the header is the bytes before the first row.
    ``cuts`` gets the line-aligned boundaries of about ``pieces`` ranges.
    """
    table = found.table
    blocked = [name for name in _MULTI_FILE_OPTIONS if table.option(name) is not None]
    if blocked:
        return f"a byte range cannot keep its {blocked[0]} option"
    if file.lower().endswith(_COMPRESSED) or table.option("compression") is not None:
        return "it is compressed"
    source = ctx.source
    assert isinstance(source, FileSource)
    spec = _csv_spec(source, table, file) if table.fmt == "csv" else _json_spec(found, file)
    if isinstance(spec, str):
        return spec
    call, prefix = spec
    cuts.extend(line_cuts(file, prefix, pieces))
    # The range reader must read the file as the whole read does: same columns, same rows
    # (one CSV file: the sniffer's call is DuckDB's own reading of it; its first row tells
    # that the header was skipped right).
    whole = _with_path(call, range_url(file, prefix, prefix, cuts[-1])).sql("duckdb")
    try:
        checked = found.multi or table.fmt != "csv"
        if checked and source.describe_columns(f"SELECT * FROM {whole}") != found.columns:
            return "read by byte ranges its columns would differ from the whole read's"
        head = _with_path(call, range_url(file, prefix, cuts[0], cuts[1]))
        # CSV: the sniffer's explicit call (its own reading of the user's options); JSON:
        # the user's call, whose types the range call forces.
        whole_call = _with_path(call, file) if table.fmt == "csv" else reader_call(table, [file])
        first = exp.select("*").from_(exp.Table(this=whole_call)).limit(1)
        ranged = exp.select("*").from_(exp.Table(this=head)).limit(1)
        if ctx.source.rows(first.sql("duckdb")) != ctx.source.rows(ranged.sql("duckdb")):
            return "read by byte ranges its first row would differ from the whole read's"
    except SqlfeedError as err:
        return f"reading a byte range failed ({str(err).splitlines()[0]})"
    return call, prefix


def _csv_spec(source: FileSource, table: FileTable, file: str) -> tuple[exp.Expr, int] | str:
    try:
        prompt = source.sniff_csv(file, named_arguments_sql(table))
    except SqlfeedError as err:
        return f"DuckDB's CSV sniffer refused it ({str(err).splitlines()[0]})"
    parsed: exp.Expr = exp.maybe_parse(f"SELECT * FROM {prompt}", dialect="duckdb")
    call = parsed.find(exp.Table)
    assert call is not None
    options = {
        name: value
        for name, value in (_option(a) for a in call.this.expressions)
        if name  # the positional path has no name
    }
    if options.get("comment"):
        return "it may have comment lines"
    if options.get("new_line", "\\n") not in ("\\n", "\\r\\n"):
        return "its lines do not end with a newline character"
    quote, escape = options.get("quote", '"'), options.get("escape", "")
    if quoted_newlines(file, str(quote), str(escape)):
        return "it has quoted newlines (or escapes), so its lines are not its rows"
    header = str(options.get("header", "false")).lower() == "true"
    prefix = data_start(file, int(options.get("skip", 0) or 0) + int(header))
    return call.this, prefix


def _json_spec(found: FileLayout, file: str) -> tuple[exp.Expr, int] | str:
    table = found.table
    fmt = table.option("format")
    if table.fmt == "json" and fmt is not None and fmt.name not in ("auto", "newline_delimited"):
        return f"format={fmt.name} is not one JSON value per line"
    if not first_line_is_object(file):
        return "it is not JSON lines of objects (its first line is not one JSON object)"
    extra: list[tuple[str, exp.Expr]] = []
    if table.fmt == "json":
        extra.append(("format", exp.Literal.string("newline_delimited")))
    if table.option("columns") is None:
        struct = exp.Struct(
            expressions=[
                exp.PropertyEQ(this=exp.Literal.string(name), expression=exp.Literal.string(kind))
                for name, kind in found.columns
            ]
        )
        extra.append(("columns", struct))
    return reader_call(table, [file], extra=extra), 0


def _option(argument: exp.Expr) -> tuple[str, str]:
    if isinstance(argument, exp.EQ | exp.PropertyEQ):
        value = argument.expression
        text = value.name if isinstance(value, exp.Literal) else value.sql("duckdb")
        return argument.this.name.lower(), text
    return "", ""


def _with_path(call: exp.Expr, path: str) -> exp.Expr:
    """``call`` (a reader call) reading ``path`` instead of its first argument."""
    copy = call.copy()
    if isinstance(copy.this, exp.Expr):
        copy.set("this", exp.Literal.string(path))
    else:
        copy.expressions[0].replace(exp.Literal.string(path))
    return copy

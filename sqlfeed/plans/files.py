"""Queries over plain files (DuckDB): which table reads files, and its partition SQL.

A query such as ``SELECT a, b FROM read_parquet('data/*.parquet') WHERE c > 0`` reads
files that describe themselves (footers, sizes). When it is row by row over one file
table (:func:`sqlfeed.plans.fragments.table_problem`), its result is the union of the
query over pieces of those files, so partitions can read pieces instead of re-running
the whole query: the table is replaced, in each partition, by a read of its own piece.

The readers recognized (:data:`READERS`) are DuckDB's ``read_parquet`` / ``parquet_scan``,
``read_csv(_auto)``, ``read_json(_auto)``, ``read_ndjson(_auto)``, sqlfeed's ``read_orc``
(pyarrow, see :mod:`sqlfeed.io.ranges`) and file paths in FROM (``FROM 'x.parquet'``).
This module is pure: it reads the query, and builds partition SQL for pieces that
:mod:`sqlfeed.plans.fileplan` chose from the files' metadata.

Partition SQL keeps the table's own call (paths, globs, options: hive partitioning and
``union_by_name`` mean the same in every partition) and adds what picks the piece:

* whole files: ``filename`` in the piece's files (DuckDB skips the other files);
* a run of Parquet row groups: a ``file_row_number`` range (DuckDB skips the other row
  groups);
* a byte range of a CSV / JSON-lines file: the same reader over a
  ``sqlfeedrange://`` file with every parsing option explicit (the types and dialect the
  whole read found);
* ORC stripes: ``read_orc(..., files := [...], stripes := [a, b])``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from sqlfeed.dialects import UnsupportedError
from sqlfeed.sql import ParsedQuery, function_name, rendering_problem
from sqlfeed.sql.render import checked_render

__all__ = [
    "FILE_COLUMN",
    "READERS",
    "FilePart",
    "FileTable",
    "PartSql",
    "around_table",
    "file_tables",
    "named_arguments_sql",
    "piece_select",
    "reader_call",
    "table_problem",
]

READERS = {
    "read_parquet": "parquet",
    "parquet_scan": "parquet",
    "read_csv": "csv",
    "read_csv_auto": "csv",
    "read_json": "json",
    "read_json_auto": "json",
    "read_ndjson": "ndjson",
    "read_ndjson_auto": "ndjson",
    "read_orc": "orc",
}
"""Table functions that read files, and the format each reads."""

_EXTENSIONS = {
    ".parquet": "read_parquet",
    ".csv": "read_csv_auto",
    ".tsv": "read_csv_auto",
    ".json": "read_json_auto",
    ".jsonl": "read_json_auto",
    ".ndjson": "read_json_auto",
    ".orc": "read_orc",
}

FILE_COLUMN = "_sqlfeed_file"
"""The file-name column partition SQL adds (and removes) to pick its files."""

DUCKDB = "duckdb"


@dataclass(frozen=True)
class FileTable:
    """A table reference of the query that reads files."""

    position: int
    """Its index among the query tree's table references (to find it in a copy)."""
    alias: str
    """The name the query knows it by."""
    function: str
    """The reader (``read_parquet``, ..., ``read_orc``; a FROM path becomes its reader)."""
    fmt: str
    """``parquet``, ``csv``, ``json``, ``ndjson`` or ``orc``."""
    patterns: tuple[str, ...]
    """The paths and globs it reads, as written."""
    options: tuple[tuple[str, exp.Expr], ...]
    """Its named options, lower-case name and value, as written."""

    def option(self, name: str) -> exp.Expr | None:
        """The value of option ``name`` (None when not given)."""
        for key, value in self.options:
            if key == name:
                return value
        return None

    @property
    def local(self) -> bool:
        """Whether every pattern is a local path (no ``s3://``, ``https://``...)."""
        return all("://" not in pattern for pattern in self.patterns)


@dataclass(frozen=True)
class FilePart:
    """What one partition reads of a file table.

    ``kind`` is ``files`` (the whole files of ``files``), ``rows`` (rows ``[start, end)``
    of ``files[0]``), ``stripes`` (ORC stripes ``[start, end)`` of ``files[0]``) or
    ``bytes`` (a byte range of ``files[0]``, read by ``call``).
    """

    kind: str
    files: tuple[str, ...]
    start: int = 0
    end: int = 0
    call: str = ""
    """For ``bytes``: the reader call over the byte-range file (DuckDB SQL)."""


def file_tables(parsed: ParsedQuery) -> list[tuple[exp.Table, FileTable]]:
    """The query's table references that read files (in tree order)."""
    out = []
    for position, table in enumerate(parsed.tree.find_all(exp.Table)):
        found = _file_table(table, position)
        if found is not None:
            out.append((table, found))
    return out


def table_problem(parsed: ParsedQuery, table: exp.Table) -> str | None:
    """Why the query's result is not the union of the query over pieces of ``table``'s rows.

    None: it is. ``table`` is one table reference of the query's tree.

    It is when ``table`` is in the top-level FROM or an inner join, and the query computes
    each output row from one row of it: no aggregates, DISTINCT, window functions, GROUP
    BY, LIMIT, set operations or outer joins that keep unmatched rows of another table.
    Other tables (a small dimension table) are read whole by every partition. And, since
    a piece replaces the table inside the query, which is then rendered from its tree:
    sqlglot must render the query without changing it
    (:func:`sqlfeed.sql.rendering_problem`); else the query is read whole, as written.
    """
    why = _shape_problem(parsed, table)
    if why is None and (unfaithful := rendering_problem(parsed)) is not None:
        why = f"a piece must replace the table inside the query, and {unfaithful}"
    return why


def _shape_problem(parsed: ParsedQuery, table: exp.Table) -> str | None:
    """:func:`table_problem` for the query's shape."""
    tree = parsed.tree
    if not isinstance(tree, exp.Select):
        return "the query is not a plain SELECT (set operations mix fragments)"
    for arg in ("group", "having", "qualify", "distinct", "limit", "offset", "fetch", "windows"):
        if tree.args.get(arg):
            return f"the query has {arg.upper()}, which needs rows from several fragments"
    for item in tree.expressions:
        for node in item.walk():
            if isinstance(node, exp.AggFunc | exp.Window) and node.parent_select is tree:
                return "the query computes aggregates or window functions across rows"
    parent = table.parent
    joins = tree.args.get("joins") or []
    if any(str(j.args.get("method") or "").upper() == "POSITIONAL" for j in joins):
        return "a POSITIONAL JOIN pairs rows by their place in the whole tables"
    if isinstance(parent, exp.From) and parent.parent is tree:
        for join in joins:
            if join.side in ("RIGHT", "FULL"):
                return f"a {join.side} JOIN keeps rows of another table in every fragment"
        return None
    if isinstance(parent, exp.Join) and parent.parent is tree:
        if parent.side or any(j.side for j in joins):
            return "the table is on the outer side of an outer join"
        kind = str(parent.kind or parent.args.get("method") or "").upper()
        if kind in ("SEMI", "ANTI", "ASOF"):
            return f"the table is the right side of the {kind} JOIN, which needs all its rows"
        return None
    return "the table is read inside a subquery or CTE"


def _file_table(table: exp.Table, position: int) -> FileTable | None:
    call = table.this
    alias = table.alias
    if isinstance(call, exp.Identifier):
        if not call.quoted or table.args.get("db"):
            return None
        path = call.name
        function = next((f for ext, f in _EXTENSIONS.items() if path.lower().endswith(ext)), "")
        if not function:
            return None
        stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
        return FileTable(position, alias or stem, function, READERS[function], (path,), ())
    name = function_name(call)
    if name not in READERS:
        return None
    arguments = _call_arguments(call)
    if not arguments:
        return None
    first, named = arguments[0], arguments[1:]
    values = first.expressions if isinstance(first, exp.Array) else [first]
    if not values or not all(isinstance(v, exp.Literal) and v.is_string for v in values):
        return None
    options = []
    for argument in named:
        if not isinstance(argument, exp.EQ | exp.PropertyEQ):
            return None
        options.append((argument.this.name.lower(), argument.expression))
    patterns = tuple(str(v.this) for v in values)
    return FileTable(position, alias or name, name, READERS[name], patterns, tuple(options))


def _call_arguments(call: exp.Expr) -> list[exp.Expr]:
    first = call.this if isinstance(call.this, exp.Expr) else None
    return [*([first] if first is not None else []), *call.expressions]


def named_arguments_sql(table: FileTable, *, without: Sequence[str] = ()) -> str:
    """The table's named options as DuckDB SQL (``a = 1, b = 'x'``), minus ``without``."""
    return ", ".join(
        f"{name} = {value.sql(dialect=DUCKDB)}"
        for name, value in table.options
        if name not in without
    )


def reader_call(
    table: FileTable,
    paths: Sequence[str] | None = None,
    *,
    extra: Sequence[tuple[str, exp.Expr]] = (),
    without: Sequence[str] = (),
) -> exp.Expr:
    """The table's reader call, with its options minus ``without`` plus ``extra``.

    Over ``paths``, else over its own patterns.
    """
    given = paths if paths is not None else table.patterns
    literals = [exp.Literal.string(p) for p in given]
    first: exp.Expr = literals[0] if len(literals) == 1 else exp.Array(expressions=literals)
    options = [(n, v) for n, v in table.options if n not in without and n not in dict(extra)]
    arguments: list[exp.Expr] = [first]
    for name, value in [*options, *extra]:
        arguments.append(exp.EQ(this=exp.column(name), expression=value.copy()))
    return exp.Anonymous(this=table.function, expressions=arguments)


class PartSql:
    """Partition SQL for the parts of one file table.

    The query is rendered once, around a placeholder, and each part's read is put in its
    place.

    Args:
        parsed: the query.
        table: its file table.
        multi: whether the table reads more than one file (a part then names its files
            by the ``filename`` column).
    """

    def __init__(self, parsed: ParsedQuery, table: FileTable, *, multi: bool) -> None:
        self.table, self.multi = table, multi
        tree = parsed.tree.copy()
        node = list(tree.find_all(exp.Table))[table.position]
        alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.alias))
        token = f"sqlfeed_part_{uuid.uuid4().hex}"
        node.replace(exp.Table(this=exp.to_identifier(token), alias=alias))
        self._before, self._after = around_table(parsed, tree, token)

    def sql(self, part: FilePart) -> str:
        """The query with the table replaced by a read of ``part`` (DuckDB SQL)."""
        table = self.table
        if part.kind == "bytes":
            read = part.call
        elif table.fmt == "orc":
            extra: list[tuple[str, exp.Expr]] = []
            if self.multi:
                extra.append(("files", _strings(part.files)))
            if part.kind == "stripes":
                extra.append(("stripes", _numbers([part.start, part.end])))
            read = reader_call(table, extra=extra).sql(dialect=DUCKDB)
        else:
            read = f"({piece_select(table, part, self.multi).sql(dialect=DUCKDB)})"
        return self._before + read + self._after


def around_table(parsed: ParsedQuery, tree: exp.Expr, token: str) -> tuple[str, str]:
    """The query's SQL before and after the table ``tree`` names ``token``.

    ``tree`` is the query's tree with one table replaced. The SQL is rendered once and
    checked to read back as that tree, with no function or keyword the user did not write.

    Raises:
        UnsupportedError: sqlglot would change the query (see
            :func:`sqlfeed.sql.render.render_problem`).
    """
    rendered, problem = checked_render(parsed.dialect, tree, parsed.sql)
    if problem is not None:
        raise UnsupportedError(
            f"strategy fragments: a piece must replace a table inside the query, and "
            f"{problem}; use strategy hash (it embeds the query as written)"
        )
    before, _, after = rendered.partition(token)
    if token in after or not _:
        raise AssertionError("the replaced table is not in the rendered query once")
    return before, after


def piece_select(table: FileTable, part: FilePart, multi: bool) -> exp.Select:
    """The rows of a whole-file or row-range ``part`` read by DuckDB's own reader.

    That is:
    ``SELECT * EXCLUDE (added) FROM reader(..., filename, file_row_number) WHERE piece``.
    """
    extra: list[tuple[str, exp.Expr]] = []
    added: list[str] = []
    conditions: list[exp.Expr] = []
    if multi:
        column = _filename_column(table)
        if column is None:
            column = FILE_COLUMN
            extra.append(("filename", exp.Literal.string(FILE_COLUMN)))
            added.append(FILE_COLUMN)
        files = _strings(part.files).expressions
        name = exp.column(column, quoted=True)
        conditions.append(
            exp.EQ(this=name, expression=files[0])
            if len(files) == 1
            else exp.In(this=name, expressions=files)
        )
    if part.kind == "rows":
        if not _is_true(table.option("file_row_number")):
            extra.append(("file_row_number", exp.true()))
            added.append("file_row_number")
        row = exp.column("file_row_number")
        conditions += [
            exp.GTE(this=row, expression=exp.Literal.number(part.start)),
            exp.LT(this=row.copy(), expression=exp.Literal.number(part.end)),
        ]
    star: exp.Expr = exp.Star()
    if added:
        star = exp.Star(except_=[exp.column(name, quoted=True) for name in added])
    select = exp.select(star).from_(exp.Table(this=reader_call(table, extra=extra)))
    return select.where(exp.and_(*conditions)) if conditions else select


def _filename_column(table: FileTable) -> str | None:
    """The file-name column the query already asks for (``filename = true`` or a name)."""
    value = table.option("filename")
    if value is None:
        return None
    if isinstance(value, exp.Literal) and value.is_string:
        return str(value.this)
    return "filename" if _is_true(value) else None


def _is_true(value: exp.Expr | None) -> bool:
    return isinstance(value, exp.Boolean) and bool(value.this)


def _strings(values: Sequence[str]) -> exp.Array:
    return exp.Array(expressions=[exp.Literal.string(v) for v in values])


def _numbers(values: Sequence[int]) -> exp.Array:
    return exp.Array(expressions=[exp.Literal.number(v) for v in values])

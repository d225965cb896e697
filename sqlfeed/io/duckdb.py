"""DuckDB: :class:`DuckDBSource` (native Arrow, a cursor per thread), opening ``duckdb:`` URLs.

Beside plain DuckDB SQL, a query may name the pieces of local files that partitions read
(:mod:`sqlfeed.io.ranges`): ``sqlfeedrange://`` byte ranges (served by a file system
registered on the connection when a query names one) and ``read_orc(...)`` (ORC through
pyarrow, registered as an Arrow stream on the cursor that runs the query). The planner
asks the source about files through :meth:`DuckDBSource.expand_files`,
:meth:`~DuckDBSource.describe_columns` and :meth:`~DuckDBSource.sniff_csv`.

A DuckDB file is opened **read-only**, so any number of processes can read it at once
(DuckDB lets either one process write a file or many read it). sqlfeed writes to a file
only for a ``materialize`` plan's scratch table: :meth:`DuckDBSource.execute` reopens the
file read-write for that statement and read-only again after it, so the file is locked
for writing only while the statement runs (it fails, saying so, while another process
has the file open). A process that already has the file open read-write (a connection
of its own) shares that database. Every DuckDB connection sqlfeed opened is closed at
interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from sqlfeed.dialects import EngineError, InvalidArgumentError, get_dialect
from sqlfeed.io.files import MEMORY, require_file, url_path
from sqlfeed.io.ranges import RANGE_PROTOCOL, orc_reader
from sqlfeed.io.readers import Reader, ReadRequest
from sqlfeed.io.source import Source, driver_message
from sqlfeed.io.writes import WriteSession
from sqlfeed.sql import function_name

_ORC = re.compile(r"read_orc\s*\(|\.orc['\"]", re.IGNORECASE)
_CSV = re.compile(r"read_csv|\.[ct]sv['\"]", re.IGNORECASE)
_WHOLE_RANGE = re.compile(r"'sqlfeedrange://(\d+)-(\d+)-(\d+)/((?:[^']|'')+)'")
"""A byte-range file literal in SQL (see :func:`sqlfeed.io.ranges.range_url`)."""
_SNIFFABLE = frozenset(
    (
        "delim",
        "sep",
        "quote",
        "escape",
        "header",
        "skip",
        "new_line",
        "dateformat",
        "timestampformat",
        "decimal_separator",
        "sample_size",
        "all_varchar",
    )
)
"""The ``read_csv`` options a sniffed call keeps (the sniffer takes them, its call says
them): a call with others is not replaced by its sniffed call."""
_SNIFFED: dict[tuple[str, int, int, str], str] = {}
"""The sniffed ``read_csv`` call of each CSV file (path, size, modification time and the
options given): DuckDB sniffs a CSV file again for every query that reads it."""
_REGISTER_LOCK = threading.Lock()

__all__ = [
    "READER_TABLE",
    "DuckDBReader",
    "DuckDBSource",
    "duckdb_file",
    "is_duckdb_connection",
    "open_duckdb",
]

_OPEN: weakref.WeakSet[DuckDBSource] = weakref.WeakSet()
"""The sources whose connection sqlfeed opened, closed at exit (see :func:`_close_all`)."""


class DuckDBSource(Source):
    """DuckDB through its own Python API: native Arrow, a cursor per thread.

    Args:
        connection: the DuckDB connection to read through.
        owned: close it with the source (and at interpreter exit).
        label: how messages and ``repr`` name the source.
        path: the database file, when sqlfeed opened it read-only and reopens it
            read-write for a statement (see :meth:`execute`); None otherwise.
    """

    parallel_read = True  # DuckDB runs one query on all its threads

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        *,
        owned: bool,
        label: str,
        path: str | None = None,
    ) -> None:
        self.dialect = get_dialect("duckdb")
        self.connection = connection
        self._owned = owned
        self.label = label
        self.path = path
        self._swap = threading.RLock()
        self._read_write = False
        self._readers = {kind.name: kind(self) for kind in READER_TABLE}
        self.readers = tuple(self._readers)
        if owned:
            _configure(connection)
            _OPEN.add(self)

    def close(self) -> None:
        if self._owned:
            with self._swap:
                self.connection.close()
            _OPEN.discard(self)

    def _cursor(self, sql: str = "") -> duckdb.DuckDBPyConnection:
        """A cursor (its own DuckDB connection) to run ``sql`` on."""
        with self._swap:
            return self.connection.cursor()

    @contextlib.contextmanager
    def _writable(self) -> Iterator[None]:
        """The file reopened read-write for a statement, then read-only again."""
        if self.path is None or self._read_write:  # in memory, not ours, or writing now
            yield
            return
        with self._swap:
            self.connection.close()
            try:
                self.connection = _connect(self.path, read_only=False)
            except EngineError:
                self.connection = _connect(self.path, read_only=True)
                _configure(self.connection)
                raise
            _configure(self.connection)
            try:
                yield
            finally:
                self.connection.close()
                self.connection = _connect(self.path, read_only=True)
                _configure(self.connection)

    def write_session(self) -> DuckDBSession:
        """A session writing into this database: a cursor of a read-write connection.

        A file sqlfeed opened read-only is reopened read-write, and stays so. One process
        only, as DuckDB allows one writing process per file.
        """
        if self.path is not None and not self._read_write:
            same = [s for s in list(_OPEN) if s.path == self.path and not s._read_write]
            for source in {id(s): s for s in [self, *same]}.values():  # one instance per file
                with source._swap:
                    source.connection.close()
            for source in {id(s): s for s in [self, *same]}.values():
                with source._swap:
                    source.connection = _connect(source.path or "", read_only=False)
                    _configure(source.connection)
                    source._read_write = True
        with self._swap:
            return DuckDBSession(self.connection.cursor(), self.dialect)

    def _local_sql(self, cursor: duckdb.DuckDBPyConnection, sql: str) -> str:
        """``sql`` as DuckDB runs it on ``cursor``.

        Byte-range files made readable, ``read_orc`` calls replaced by Arrow streams
        registered on the cursor.
        """
        if RANGE_PROTOCOL in sql:
            sql = _WHOLE_RANGE.sub(_whole_file, sql)
        if RANGE_PROTOCOL in sql:
            with _REGISTER_LOCK:
                if not self.connection.filesystem_is_registered(RANGE_PROTOCOL):
                    from sqlfeed.io.rangefs import RangeFileSystem  # fsspec: only for ranges

                    self.connection.register_filesystem(RangeFileSystem())
        if not _ORC.search(sql):
            return sql
        tree: exp.Expr = exp.maybe_parse(sql, dialect="duckdb")
        spliced: list[tuple[exp.Expr, str]] = []  # each call, and the text in its place
        for table in list(tree.find_all(exp.Table)):
            call = table.this
            if isinstance(call, exp.Identifier) and call.quoted and call.name.endswith(".orc"):
                patterns: list[str] = [call.name]
                options: dict[str, Any] = {}
            elif function_name(call) == "read_orc":
                patterns, options = _orc_arguments(call)
            else:
                continue
            files = self.expand_files(patterns, cursor=cursor)
            only = options.get("files")
            stripes = options.get("stripes")
            name = f"sqlfeed_orc_{uuid.uuid4().hex[:12]}"
            cursor.register(
                name, orc_reader(files, only=only, stripes=tuple(stripes) if stripes else None)
            )
            alias = table.args.get("alias") or exp.TableAlias(
                this=exp.to_identifier("read_orc" if isinstance(call, exp.Func) else "orc")
            )
            spliced.append((call, name if table.alias else f"{name} AS {alias.sql('duckdb')}"))
            table.replace(exp.Table(this=exp.to_identifier(name), alias=alias))
        # The query's own text with only the calls replaced: sqlglot's rendering of the
        # whole statement could change it (log2(x) becomes LOG(2, x), another rounding).
        text = _spliced(sql, spliced)
        return text if text is not None else tree.sql(dialect="duckdb")

    # -- what the planner asks about files (sqlfeed.plans.files.FileSource) ---------------

    def expand_files(
        self, patterns: Sequence[str], *, cursor: duckdb.DuckDBPyConnection | None = None
    ) -> list[str]:
        """The files ``patterns`` (paths or globs) name, expanded as DuckDB expands them.

        Raises:
            InvalidArgumentError: a pattern matches no file.
        """
        files: list[str] = []
        own = cursor is None
        run = cursor if cursor is not None else self.connection.cursor()
        try:
            for pattern in patterns:
                found = [
                    str(r[0]) for r in run.execute("SELECT file FROM glob(?)", [pattern]).fetchall()
                ]
                if not found:
                    raise InvalidArgumentError(f"no file matches {pattern!r}")
                files.extend(found)
        except duckdb.Error as err:
            raise EngineError(f"duckdb failed listing {patterns}: {driver_message(err)}") from None
        finally:
            if own:
                run.close()
        return files

    def describe_columns(self, sql: str) -> list[tuple[str, str]]:
        """``(name, DuckDB type)`` of every output column of the query ``sql``."""
        rows = self.rows(f"DESCRIBE {sql}", what="schema query")
        return [(str(r[0]), str(r[1])) for r in rows]

    def sniff_csv(self, file: str, options: str) -> str:
        """The ``read_csv(...)`` call DuckDB's sniffer finds for ``file``: every option explicit.

        ``file`` is read with the ``read_csv`` ``options`` (SQL, may be empty). Remembered for
        the file's size and modification time.
        """
        try:
            stat = os.stat(file)
        except OSError:
            stat = None
        key = (file, stat.st_size, stat.st_mtime_ns, options) if stat is not None else None
        if key is not None and key in _SNIFFED:
            return _SNIFFED[key]
        extra = f", {options}" if options else ""
        literal = exp.Literal.string(file).sql(dialect="duckdb")
        prompt = str(
            self.scalar(f"SELECT prompt FROM sniff_csv({literal}{extra})", what="csv sniff")
        )
        call = prompt.strip().removeprefix("FROM").strip().rstrip(";").strip()
        if key is not None:
            _SNIFFED[key] = call
        return call

    def _sniffed_sql(self, sql: str) -> str:
        """``sql`` with each ``read_csv`` of one local file replaced by its sniffed call.

        Each ``FROM 'x.csv'`` too (see :meth:`sniff_csv`): the same columns and types, read
        without sniffing again. For the planner's schema probes; ``sql`` unchanged when it
        reads no such file, or a sniff fails.
        """
        if not _CSV.search(sql):
            return sql
        try:
            tree: exp.Expr = exp.maybe_parse(sql, dialect="duckdb")
            for table in list(tree.find_all(exp.Table)):
                found = _csv_call(table)
                if found is None:
                    continue
                path, options, alias = found
                sniffed: exp.Table | None = exp.maybe_parse(
                    f"SELECT * FROM {self.sniff_csv(path, options)}", dialect="duckdb"
                ).find(exp.Table)
                if sniffed is None:
                    return sql
                name = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(alias))
                table.replace(exp.Table(this=sniffed.this, alias=name))
            return tree.sql(dialect="duckdb")
        except Exception:  # a probe that cannot use a sniff runs as written
            return sql

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self._cursor(sql) as cursor:
            return cursor.execute(self._local_sql(cursor, sql)).fetchall()

    def _execute(self, sql: str) -> None:
        with self._writable(), self._cursor(sql) as cursor:
            cursor.execute(self._local_sql(cursor, sql))

    def _arrow(self, sql: str) -> pa.Table:
        with self._cursor(sql) as cursor:
            relation = cursor.sql(self._local_sql(cursor, sql))
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table: pa.Table = to_table()
        return table

    def _describe(self, sql: str) -> tuple[list[str], pa.Schema | None]:
        sql = self._sniffed_sql(sql)  # CSV files: sniffed once, not for every probe
        with self._cursor(sql) as cursor:
            relation = cursor.sql(self._local_sql(cursor, sql))
            # DuckDB 2 renamed arrow() / fetch_record_batch() to to_arrow_table/_reader().
            to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
            table = to_table()
        return list(table.column_names), table.schema

    def reader_table(self) -> dict[str, Reader]:
        return self._readers


class DuckDBReader(Reader):
    """DuckDB's own Arrow stream, on a cursor of the source's connection: its one reader."""

    name = "duckdb"
    source: DuckDBSource

    def carries(self, request: ReadRequest) -> bool:
        return True

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        # DuckDB preserves insertion order by default: reads are ordered already.
        source = self.source
        with source._cursor(request.sql) as cursor:
            relation = cursor.sql(source._local_sql(cursor, request.sql))
            to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
            reader = to_reader(request.batch_rows)
            while not request.stopped:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as err:
                    # DuckDB's errors surface through the Arrow stream as OSError.
                    raise EngineError(
                        f"duckdb failed running the partition query: {driver_message(err)}"
                    ) from None
                yield batch


READER_TABLE: tuple[type[Reader], ...] = (DuckDBReader,)
"""DuckDB's readers: its own Arrow stream."""


def _whole_file(match: re.Match[str]) -> str:
    """A byte-range file literal as its plain path when the range is the whole file as it is now.

    That is, the header prefix, then every byte after it: DuckDB reads the file itself,
    without the Python file system in between; else the literal unchanged.
    """
    prefix, start, end = (int(match.group(i)) for i in (1, 2, 3))
    path = match.group(4).replace("''", "'")
    try:
        size = os.path.getsize(path)
    except OSError:
        return match.group(0)  # the range's own read reports it
    if prefix != start or end != size:
        return match.group(0)
    return "'" + path.replace("'", "''") + "'"


def _csv_call(table: exp.Table) -> tuple[str, str, str] | None:
    """``(path, options SQL, default alias)`` of a table that reads one local CSV file.

    By ``read_csv(_auto)`` (sniffable options only) or ``FROM 'x.csv'``; None otherwise.
    """
    call = table.this
    if isinstance(call, exp.Identifier):
        path = call.name
        if not call.quoted or table.args.get("db") or not path.lower().endswith((".csv", ".tsv")):
            return None
        options, alias = "", path.rsplit("/", 1)[-1].split(".", 1)[0]
    elif function_name(call) in ("read_csv", "read_csv_auto"):
        first = call.this if isinstance(call.this, exp.Expr) else None
        arguments = [*([first] if first is not None else []), *call.expressions]
        if not arguments or not (isinstance(arguments[0], exp.Literal) and arguments[0].is_string):
            return None
        named = arguments[1:]
        if not all(
            isinstance(a, exp.EQ | exp.PropertyEQ) and a.this.name.lower() in _SNIFFABLE
            for a in named
        ):
            return None
        path, alias = str(arguments[0].this), function_name(call)
        options = ", ".join(f"{a.this.name} = {a.expression.sql('duckdb')}" for a in named)
    else:
        return None
    if "://" in path or any(c in path for c in "*?[{") or not os.path.isfile(path):
        return None
    return path, options, alias


def _spliced(sql: str, calls: list[tuple[exp.Expr, str]]) -> str | None:
    """``sql`` with each call's text replaced; None when a call's place in the text is not known.

    A call's text: a function name to its closing parenthesis, or a quoted file name.
    """
    tokens = list(sqlglot.Dialect.get_or_raise("duckdb").tokenize(sql))
    spans = []
    for call, text in calls:
        start, end = call.meta.get("start"), call.meta.get("end")
        if start is None or end is None:
            return None
        if isinstance(call, exp.Func):  # to the parenthesis that closes the arguments
            after = [t for t in tokens if t.start > call.meta["end"]]
            if not after or after[0].token_type != TokenType.L_PAREN:
                return None
            depth, end = 0, None
            for token in after:
                depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
                if depth == 0:
                    end = token.end
                    break
            if end is None:
                return None
        spans.append((int(start), int(end), text))
    for start, end, text in sorted(spans, reverse=True):
        sql = sql[:start] + text + sql[end + 1 :]
    return sql


def _orc_arguments(call: exp.Expr) -> tuple[list[str], dict[str, Any]]:
    """The patterns and named options (``files``, ``stripes``) of a ``read_orc(...)`` call."""
    patterns: list[str] = []
    options: dict[str, Any] = {}
    arguments = [call.this] if not isinstance(call, exp.Anonymous) and call.this else []
    for argument in [*arguments, *call.expressions]:
        if isinstance(argument, exp.EQ | exp.PropertyEQ):
            options[argument.this.name.lower()] = _literal(argument.expression)
        elif not patterns:
            value = _literal(argument)
            patterns = value if isinstance(value, list) else [value]
        else:
            raise InvalidArgumentError(
                "read_orc takes one path, glob or list of them, and the options files and stripes"
            )
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise InvalidArgumentError("read_orc needs a path, a glob or a list of them (strings)")
    unknown = set(options) - {"files", "stripes"}
    if unknown:
        raise InvalidArgumentError(f"read_orc has no option {', '.join(sorted(unknown))}")
    return patterns, options


def _literal(node: exp.Expr) -> Any:
    if isinstance(node, exp.Array):
        return [_literal(item) for item in node.expressions]
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else int(node.this)
    raise InvalidArgumentError(f"read_orc arguments must be literals, not {node.sql()}")


def open_duckdb(url: str) -> DuckDBSource:
    """Open a DuckDB database named by a URL, owned by the returned source.

    Args:
        url: ``duckdb://`` (in memory), ``duckdb:///relative.duckdb``,
            ``duckdb:////absolute/path.duckdb``, or a bare path (``path.duckdb``,
            ``:memory:``); a ``?query`` part is ignored. A file is opened read-only (see
            the module's description).

    Raises:
        InvalidArgumentError: a malformed ``duckdb:`` URL, or no database file at its path
            (reading never creates one).
        EngineError: DuckDB cannot open the database.
    """
    path = duckdb_file(url)
    if path == MEMORY:
        try:
            conn = duckdb.connect(MEMORY)
        except duckdb.Error as err:
            raise EngineError(f"cannot open an in-memory DuckDB: {driver_message(err)}") from None
        return DuckDBSource(conn, owned=True, label="duckdb:memory")
    require_file(path, url, "DuckDB database")
    return DuckDBSource(
        _connect(path, read_only=True), owned=True, label=f"duckdb:{path}", path=path
    )


def make_duckdb_file(url: str) -> None:
    """Make the DuckDB database file ``url`` names, when it does not exist yet."""
    path = duckdb_file(url)
    if path != MEMORY and not os.path.exists(path):
        try:
            duckdb.connect(path).close()
        except duckdb.Error as err:
            raise EngineError(
                f"cannot make the DuckDB database {path}: {driver_message(err)}"
            ) from None


def is_duckdb_connection(target: Any) -> bool:
    """Whether ``target`` is a DuckDB connection.

    Such a connection is read through as it is by :func:`connect <sqlfeed.io.connect>`.
    """
    module = type(target).__module__ or ""
    return module.split(".")[0] in ("duckdb", "_duckdb")


def duckdb_file(url: str) -> str:
    """The database file a DuckDB URL or bare path names (``:memory:`` for none).

    Raises:
        InvalidArgumentError: a ``duckdb:`` URL not of the form ``duckdb://[/path][?...]``.
    """
    if url.partition(":")[0].lower() == "duckdb":
        return url_path(url, "duckdb")
    return url.split("?", 1)[0] or MEMORY


def _configure(connection: duckdb.DuckDBPyConnection) -> None:
    """Settings of a connection sqlfeed opened.

    Parquet footers are parsed once per file and kept (DuckDB checks the file's modification
    time before it uses a kept footer), not once per query; a plan's partitions read the
    same footer over and over (5 ms of CPU a query on TPC-H lineitem, 53 row groups, against
    1 ms kept).
    """
    connection.execute("SET GLOBAL parquet_metadata_cache = true")  # a plain SET skips cursors


def _connect(path: str, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the file ``path``.

    Read-only, unless this process has it open read-write already (DuckDB shares one
    database per file and process).
    """
    try:
        return duckdb.connect(path, read_only=read_only)
    except duckdb.ConnectionException as err:
        if read_only and "different configuration" in str(err):
            return _connect(path, read_only=False)
        message = driver_message(err)
    except duckdb.Error as err:
        message = driver_message(err)
    if "lock" in message.lower() and read_only:
        raise EngineError(
            f"cannot read DuckDB database {path!r}: another process has it open for writing "
            f"({message}); read it once that process is done"
        ) from None
    if "lock" in message.lower() or "different configuration" in message:
        raise EngineError(
            f"cannot write the scratch table into DuckDB database {path!r}: another process "
            f"or connection has it open ({message}); plan it while nothing else reads the file"
        ) from None
    raise EngineError(f"cannot open DuckDB database {path!r}: {message}") from None


@atexit.register
def _close_all() -> None:
    """Close every connection sqlfeed opened before the interpreter tears DuckDB down.

    A connection still alive then makes DuckDB print "nanobind: leaked N instances".
    """
    for source in list(_OPEN):
        with contextlib.suppress(Exception):
            source.close()


class DuckDBSession(WriteSession):
    """A DuckDB cursor writing in explicit transactions.

    A batch is inserted by a scan of the Arrow batch itself (no conversion of values).
    """

    def __init__(self, cursor: duckdb.DuckDBPyConnection, dialect: Any) -> None:
        self.cursor = cursor
        self.dialect = dialect
        self.open = False

    def begin(self) -> None:
        self.cursor.execute("BEGIN TRANSACTION")
        self.open = True

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        self.cursor.execute(sql, list(params) if params is not None else None)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.cursor.execute(sql).fetchall()]

    def insert(self, table: str, columns: Sequence[str], batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        name = f"sqlfeed_batch_{uuid.uuid4().hex[:8]}"
        self.cursor.register(name, pa.Table.from_batches([batch]))
        try:
            self.cursor.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM {name}")
        except duckdb.Error:
            self.rollback()  # an aborted transaction refuses even the unregister below
            with contextlib.suppress(duckdb.Error):
                self.cursor.unregister(name)
            raise
        self.cursor.unregister(name)

    def commit(self) -> None:
        self.cursor.execute("COMMIT")
        self.open = False

    def rollback(self) -> None:
        if self.open:
            self.open = False
            with contextlib.suppress(duckdb.Error):
                self.cursor.execute("ROLLBACK")

    def close(self) -> None:
        self.rollback()
        self.cursor.close()

    def duplicate(self, err: BaseException) -> bool:
        return isinstance(err, duckdb.ConstraintException) or "duplicate key" in str(err).lower()

    def busy(self, err: BaseException) -> bool:
        return isinstance(err, duckdb.TransactionException) and "conflict" in str(err).lower()

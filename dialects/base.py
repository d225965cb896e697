"""The dialect base class, its registry, and look-up by name, URL or connection object.

A dialect is a small class of declarative capability flags plus a few hooks that build
sqlglot expressions. Subclasses register themselves when they are defined.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ErrorLevel
from sqlglot.errors import UnsupportedError as SqlglotUnsupportedError

from sqlfeed.dialects import effects
from sqlfeed.dialects.catalog import Extent, SqlRunner
from sqlfeed.dialects.errors import InvalidArgumentError, UnknownDialectError, UnsupportedError

_REGISTRY: dict[str, type[Dialect]] = {}
"""Every name and URL scheme a dialect answers to, lower-cased, mapped to its class."""

MICROSECONDS = {"HOUR": 3_600_000_000, "MINUTE": 60_000_000, "SECOND": 1_000_000}
"""Microseconds in an hour, a minute and a second (durations summed from their parts)."""


@dataclass(frozen=True)
class QueueBounds:
    """How long a queue session may wait or idle before the server ends the wait."""

    lock_wait_s: int
    """The longest a statement waits for a row lock."""
    idle_transaction_s: int
    """A session idle this long inside a transaction is ended by the server."""
    silent_session_s: int
    """Where no idle-transaction time-out exists (MySQL): a silent session's end."""
    busy_ms: int
    """Where a database file is locked by a process (SQLite): its busy timeout per try."""
    socket_s: int = 90
    """The longest a queue connection waits on its socket for the server (MySQL drivers'
    read and write timeouts): past it the connection counts as lost and the call is tried
    again, instead of a worker waiting for ever on a connection that died silently. Above
    the longest wait a queue statement may make (a queue's schema lock: 60 s)."""


class Dialect:
    """Engine knowledge the rewriter needs: hashing, counting, sampling, capabilities.

    Subclasses set ``name`` (and optionally ``aliases``) and are registered automatically.
    """

    name: ClassVar[str] = ""
    """The canonical name, as used by ``--dialect`` and in plans."""

    aliases: ClassVar[tuple[str, ...]] = ()
    """Other names and SQLAlchemy URL backends that mean this engine."""

    sqlglot_dialect: ClassVar[str] = ""
    """The sqlglot dialect used to parse and render SQL for this engine."""

    HASH_IS_UNSIGNED: ClassVar[bool] = False
    """Whether the hash expression is never negative, so ``h % M`` is already in [0, M)."""

    HASH_FUNCTION: ClassVar[str] = ""
    """The engine function the hash expression is built on (documentation and tests)."""

    COUNT_FUNCTION: ClassVar[str] = "COUNT"
    """The aggregate that counts rows without overflowing the engine's integer type."""

    TABLESAMPLE_BERNOULLI: ClassVar[bool] = False
    """Whether the engine samples rows independently (TABLESAMPLE BERNOULLI or alike)."""

    TABLESAMPLE_SEED: ClassVar[bool] = False
    """Whether a row sample can be given a seed (REPEATABLE / SEED), so it can be replayed."""

    SAMPLE_DERIVED_TABLES: ClassVar[bool] = False
    """Whether TABLESAMPLE may be applied to a derived table, not only to a base table."""

    DERIVED_COLUMN_LIST: ClassVar[bool] = False
    """Whether a derived table may rename its columns: ``(SELECT ...) AS t(c0, c1)``."""

    CTE_COLUMN_LIST: ClassVar[bool] = True
    """Whether a CTE may rename its columns: ``WITH t(c0, c1) AS (SELECT ...)``."""

    WHOLE_ROW_HASH: ClassVar[bool] = False
    """Whether a whole row can be hashed through its table alias, without naming columns.

    Where it can (:meth:`whole_row_hash`: DuckDB ``hash(q)``, PostgreSQL
    ``hash_record_extended(q, 0)``), a query whose output columns are hidden behind ``*``,
    unnamed or repeated is partitioned by hashing the whole row of the wrapped query, and
    an ORDER BY over such a query is completed with the row's hash; elsewhere sqlfeed
    needs the output column names (a source, ``columns=``) or a key.
    """

    ORDER_BY_IN_DERIVED_TABLE: ClassVar[bool] = True
    """Whether a derived table may keep an ORDER BY that has no LIMIT (T-SQL refuses it)."""

    GROUPING_SETS: ClassVar[bool] = False
    """Whether ``GROUP BY GROUPING SETS ((a), (b))`` groups the rows by each set in one
    query (the statistics' value counts; elsewhere they emulate it with a cross join)."""

    STATS_SETTINGS: ClassVar[tuple[str, ...]] = ()
    """Statements run in the transaction of each statistics query, before it (PostgreSQL:
    ``SET LOCAL work_mem``, so that the per-column hash aggregations stay in memory)."""

    TITLE: ClassVar[str] = ""
    """The engine as messages name it (``PostgreSQL``, ``MySQL/MariaDB``)."""

    # -- capabilities the planner, the feeds and the queue ask about ----------------------

    PHYSICAL_ADDRESS: ClassVar[bool] = False
    """Whether a base table's rows have a physical address that ranges can cut
    (PostgreSQL's ctid pages, DuckDB's and SQLite's rowids): :meth:`physical_extent`."""

    ROW_GROUP_ROWS: ClassVar[int | None] = None
    """Rows in one of the engine's row groups, where a rowid range across one decompresses
    it twice (DuckDB): physical ranges are cut at multiples of it."""

    ROWS_FROM_EXTENT: ClassVar[bool] = False
    """Whether the planner takes a table's row estimate from its :meth:`physical_extent`
    (PostgreSQL's ``reltuples``, SQLite's rowid span) instead of counting (DuckDB counts a
    table for free); elsewhere from :meth:`catalog_row_estimate`."""

    KEY_BOUNDS_FROM_INDEX: ClassVar[bool] = False
    """Whether MIN and MAX of an integer primary key are read off its index with the
    catalog's row estimate, without counting (PostgreSQL, MySQL/MariaDB)."""

    CLUSTERED_PRIMARY_KEY: ClassVar[bool] = False
    """Whether a table's rows are stored in primary-key order (InnoDB's clustered index), so
    ranges of the leading key column ordered by the key are read in that order."""

    FILE_DATABASE: ClassVar[bool] = False
    """Whether a database is a local file (DuckDB, SQLite), not a server: a task opens it
    per read (no lock or handle outlives one), a queue's file is made by ``job create``
    only, and no pooled connection needs a ping."""

    READS_FILES: ClassVar[bool] = False
    """Whether queries read files in the process (DuckDB's ``read_parquet``, ``read_csv``,
    tar views): fragments of files and tar inputs need it."""

    MEMORY_URLS: ClassVar[bool] = False
    """Whether a URL of the engine naming no file (``duckdb://``) opens a database in this
    process's memory, which the tasks of other processes cannot open."""

    WRITTEN_WHILE_READ: ClassVar[bool] = False
    """Whether other sessions may write a plan's tables while sqlfeed reads it, so a read of
    its partitions by several queries must be one snapshot (PostgreSQL, MySQL/MariaDB,
    SQLite; a DuckDB file sqlfeed opens read-only cannot be written meanwhile; engines
    sqlfeed reads only through SQLAlchemy make no snapshot)."""

    EXPORTS_SNAPSHOTS: ClassVar[bool] = False
    """Whether one session can export a snapshot that the connections of others read in
    (PostgreSQL's ``pg_export_snapshot``); elsewhere a consistent read is one session."""

    PINNED_DRIVER: ClassVar[str] = ""
    """The driver of the sessions a consistent read runs on where snapshots cannot be
    shared (``pymysql``, ``sqlite3``), for ``plan.reason``."""

    SNAPSHOT_SYNC: ClassVar[str] = ""
    """Where snapshots cannot be shared: the short lock under which several sessions begin
    their transactions at one state, for ``plan.reason`` (``""``: one session reads)."""

    CREATES_SCRATCH_SCHEMA: ClassVar[bool] = False
    """Whether ``materialize`` may create its default scratch schema when none is given
    (PostgreSQL and MySQL/MariaDB, where the user may): :meth:`prepare_scratch_schema`."""

    SCRATCH_BY_PAGES: ClassVar[bool] = False
    """Whether a scratch table is read by ranges of its pages (PostgreSQL's TID range scans:
    no row number, no index) instead of ranges of a row number it stores."""

    SCRATCH_ROW_NUMBER_INDEX: ClassVar[bool] = True
    """Whether a scratch table's row number is indexed for its ranges (not on DuckDB, which
    prunes with its zone maps, nor where :attr:`SCRATCH_BY_PAGES`)."""

    FLOAT_NAN: ClassVar[bool] = True
    """Whether a float column can hold NaN (MySQL/MariaDB cannot; SQLite stores NULL)."""

    FLOAT_INFINITY: ClassVar[bool] = True
    """Whether a float column can hold the infinities (MySQL/MariaDB cannot)."""

    FLOAT_UNDERFLOW_RAISES: ClassVar[bool] = False
    """Whether a float product that rounds to zero is an error (PostgreSQL's "value out of
    range: underflow") rather than zero."""

    EXACT_SUMS: ClassVar[bool] = False
    """``SUM`` of integers and decimals is exact at any size: no overflow, no rounding
    (PostgreSQL's numeric, MySQL's DECIMAL, DuckDB's HUGEINT); statistics then give exact
    means of integer, decimal, date and timestamp columns."""

    OUTER_MODIFIERS: ClassVar[frozenset[str]] = frozenset()
    """SELECT modifiers the engine takes only in the outermost SELECT and that change no row
    (MySQL's ``SQL_NO_CACHE``...): a derived table embedding the query leaves them out."""

    GROUPED_PUSHDOWN_FENCE: ClassVar[bool] = False
    """Whether a WHERE around a grouped derived table must be fenced off with a LIMIT (MariaDB
    pushes it into the HAVING, where ``JSON_ARRAYAGG(... ORDER BY ...)`` compares wrongly)."""

    ORDERED_AGGREGATES_SINCE: ClassVar[str] = ""
    """The engine release that first takes an ORDER BY inside an aggregate, where older ones
    are still met (``SQLite 3.44``); empty when every supported release does."""

    EMBEDS_QUERY_TEXT: ClassVar[bool] = False
    """Whether a wrap embeds the user's own query text and sqlfeed's renderings are checked
    to read back as the user's query (vetted by the SQL corpus on the engine); elsewhere the
    query is rendered from its tree as sqlglot writes it for the engine, unchecked."""

    FETCH_WITH_TIES: ClassVar[bool] = True
    """Whether ``FETCH ... WITH TIES`` keeps the tied rows (DuckDB has none, and sqlglot
    would write it as a plain LIMIT, which drops them: refused)."""

    SIDE_EFFECT_FUNCTIONS: ClassVar[effects.SideEffects] = effects.GENERIC
    """The functions a read refuses unless the user allows side effects: they write, or
    reach outside the database (name or ``family*`` -> what they do; see
    :mod:`sqlfeed.dialects.effects`)."""

    RENDERED_SYNONYMS: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({})
    """A word sqlglot writes for this engine -> the user's words it is the engine's synonym
    of (MySQL's ``COALESCE`` for ``IFNULL``), so a rendering with it changes nothing."""

    QUEUE_NOW: ClassVar[str | None] = None
    """The SQL of the current unix time in seconds with a fraction, for the lease queue;
    None: no lease queue lives in this engine."""

    QUEUE_LOCK_CLAUSE: ClassVar[str] = ""
    """What a queue's claim appends to its SELECT so that claims skip each other's rows
    (`` FOR UPDATE SKIP LOCKED``); empty where a write lock covers the database (SQLite)."""

    QUEUE_CAVEAT: ClassVar[str | None] = None
    """What a lease queue in this engine cannot guarantee (``job create`` says it)."""

    QUEUE_ISOLATION: ClassVar[str | None] = None
    """The isolation level of queue sessions (MySQL/MariaDB: READ COMMITTED, so a claim's
    ``SKIP LOCKED`` scan keeps no lock on the rows it passes over); None: the default."""

    QUEUE_WRITE_BEGIN: ClassVar[str | None] = None
    """The statement that begins a queue transaction that writes, where the queue begins
    transactions itself (SQLite: ``BEGIN IMMEDIATE``, reads a deferred ``BEGIN``); None:
    the driver begins them."""

    SERVER_VERSION_SQL: ClassVar[str | None] = None
    """The query a queue session and the table sink read the server's version with, for
    :meth:`queue_session_sql`, :meth:`queue_name_collation` and :meth:`sink_type` (MySQL
    or MariaDB); None: not needed."""

    TRANSACTIONAL_DDL: ClassVar[bool] = False
    """Whether CREATE, ALTER ... RENAME and DROP take part in a transaction (PostgreSQL,
    SQLite, DuckDB), so the statements of :meth:`swap_sql` run in one transaction are one
    atomic change; MySQL/MariaDB commits implicitly before and after each DDL statement."""

    SINK_TZ_AS_UTC: ClassVar[bool] = False
    """Whether a time-zone-aware timestamp is written as the naive UTC time of its instant
    (the writer converts it): where :meth:`sink_type` gives it a column type with no zone
    (MySQL/MariaDB ``DATETIME(6)``, SQLite's ISO text); the zone's name is not kept."""

    SINK_ONE_PROCESS: ClassVar[bool] = False
    """Whether only one process may write the database (a DuckDB file): a job of several
    processes writes a Parquet folder instead, loaded into it by one process."""

    SINK_AS_TEXT: ClassVar[bool] = False
    """Whether decimals, dates, times and timestamps are written as their exact text (ISO
    for times) where :meth:`sink_type` gives them a text column (SQLite)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.name:
            return
        for key in (cls.name, *cls.aliases):
            _REGISTRY[key.lower()] = cls

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    # -- hooks --------------------------------------------------------------------------

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        """An integer expression hashing ``args``; never NULL, also when all args are NULL.

        Args:
            args: the expressions to hash, at least one.
        """
        raise UnsupportedError(f"{self.name} has no deterministic hash function")

    def hashable(self, arg: exp.Expr) -> exp.Expr:
        """``arg`` in a form the hash accepts, for a column whose type it cannot hash."""
        return exp.cast(arg, exp.DataType.Type.TEXT)

    def whole_row_hash(self, alias: str | exp.Identifier) -> exp.Expr:
        """An integer expression hashing every column of the relation named ``alias``.

        Only where :attr:`WHOLE_ROW_HASH` is set. A string is quoted; an identifier is
        used as written (so a relation named without quotes keeps the engine's case rule).
        """
        raise UnsupportedError(f"{self.name} cannot hash a whole row without naming its columns")

    def collation_tiebreak(self, arg: exp.Expr) -> exp.Expr | None:
        """An extra ORDER BY key telling apart values the engine's ORDER BY holds equal.

        A tie-breaker must separate any two different output rows. Engines that compare
        text byte by byte (DuckDB, PostgreSQL's default collations, SQLite) need none
        (None); MySQL/MariaDB's default collations hold ``'a' = 'A'`` and ``'a' = 'a '``,
        so there the value's binary form is ordered on as well.
        """
        return None

    def bucket(self, args: list[exp.Expr], m: int) -> exp.Expr:
        """The partition number of a row, an integer in [0, m).

        NULL-safe (the hash never yields NULL), sign-safe and overflow-safe:
        ``((h % m) + m) % m`` where the hash may be negative, ``h % m`` where it may not.

        >>> from sqlglot import exp
        >>> get_dialect("postgres").bucket([exp.column("a")], 8).sql("postgres")
        '((HASH_RECORD_EXTENDED(ROW(a), 0) % 8) + 8) % 8'
        """
        return self.bucket_of_hash(self.hash_expression(args), m)

    def bucket_of_hash(self, hashed: exp.Expr, m: int) -> exp.Expr:
        """Fold an integer hash expression into [0, m) the way this engine needs."""
        modulus = exp.Literal.number(m)
        first = exp.Mod(this=hashed, expression=modulus)
        if self.HASH_IS_UNSIGNED:
            return first
        shifted = exp.Add(this=exp.paren(first, copy=False), expression=modulus.copy())
        return exp.Mod(this=exp.paren(shifted, copy=False), expression=modulus.copy())

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """The first 7 hex digits of the MD5 of ``text`` as an integer in [0, 2**28).

        The same number on every engine that has MD5 (of the text's UTF-8 bytes, where the
        text is UTF-8: a MySQL column in another character set hashes its own bytes); None
        where the engine has no MD5 (SQLite). The split of :mod:`sqlfeed.ml.split` buckets a
        text key, or a whole row's text, by it.

        >>> from sqlglot import exp
        >>> get_dialect("duckdb").md5_head(exp.column("s")).sql("duckdb")
        "CAST('0x' || SUBSTRING(MD5(s), 1, 7) AS BIGINT)"
        """
        return None

    def quantiles(self, arg: exp.Expr, fractions: list[float]) -> exp.Expr | None:
        """One aggregate returning the discrete quantiles of ``arg`` as an array, or None.

        None where the engine has no quantile aggregate: plans then split MIN..MAX.
        """
        return None

    def integer_division(self, dividend: exp.Expr, divisor: exp.Expr) -> exp.Expr:
        """``dividend DIV divisor`` of two non-negative integers, exact (no float detour)."""
        return exp.IntDiv(this=dividend, expression=divisor)

    def count_star(self) -> exp.Expr:
        """``COUNT(*)``, or the engine's wide variant."""
        return exp.Anonymous(this=self.COUNT_FUNCTION, expressions=[exp.Star()])

    def tablesample(self, table: exp.Expr, percent: float, seed: int | None) -> exp.Expr:
        """Wrap ``table`` (a base or derived table) in a row-level (Bernoulli) sample.

        Args:
            table: the ``exp.Table`` or ``exp.Subquery`` to sample.
            percent: the share of rows to keep, in percent (0, 100].
            seed: a seed for a repeatable sample, or None.
        """
        if not self.TABLESAMPLE_BERNOULLI:
            raise UnsupportedError(
                f"{self.name} has no row-level TABLESAMPLE; use method='hash' (deterministic) "
                "or method='limit'"
            )
        if seed is not None and not self.TABLESAMPLE_SEED:
            raise UnsupportedError(f"{self.name} cannot seed TABLESAMPLE; pass seed=None")
        sample = exp.TableSample(
            method=exp.var("BERNOULLI"),
            percent=exp.Literal.number(_percent_text(percent)),
            seed=exp.Literal.number(seed) if seed is not None else None,
        )
        table.set("sample", sample)
        return table

    def register_functions(self, connection: Any) -> None:
        """Install the functions this dialect's SQL needs on a DB-API connection.

        Most engines have them built in; SQLite does not (see ``sqlfeed.dialects.sqlite``).
        """

    # -- catalog hooks: SQL text the caller runs through its source ---------------------

    def physical_extent(self, source: SqlRunner, table: exp.Table, quoted: str) -> Extent | str:
        """The physical extent of ``table`` (spelled ``quoted``), or why it has none.

        Only where :attr:`PHYSICAL_ADDRESS` is set; the catalog queries run on ``source``.
        """
        return f"{self.name} has no physical row address (PostgreSQL ctid, DuckDB or SQLite rowid)"

    def row_address(self, value: int) -> exp.Expr:
        """A physical row address as the engine compares it (a rowid: the number itself)."""
        return exp.Literal.number(value)

    def catalog_row_estimate(self, source: SqlRunner, table: exp.Table) -> tuple[int, str] | None:
        """The catalog's row estimate of a base table, without counting.

        (rows, where the number comes from); None: no estimate (see also
        :attr:`ROWS_FROM_EXTENT`).
        """
        return None

    def primary_key_sql(self, table: exp.Table, quoted: str) -> str | None:
        """The catalog query for (column, type) of ``table``'s primary key columns in key order.

        ``quoted``: the table as the engine spells it. None: not known here.
        """
        return None

    def unique_keys_sql(self, table: exp.Table) -> str | None:
        """The catalog query for (index, column, not null) of ``table``'s primary and unique keys.

        Partial, expression and prefix indexes are left out. None: not known here.
        """
        return None

    def key_histogram(self, source: SqlRunner, quoted: str, column: str) -> list[int] | None:
        """The equal-count histogram bounds the catalog keeps of an integer column.

        PostgreSQL's ``pg_stats.histogram_bounds``; None: none kept.
        """
        return None

    # -- scratch tables ---------------------------------------------------------------------

    def prepare_scratch_schema(self, source: SqlRunner, schema: str, probe: str) -> str | None:
        """Create the scratch schema ``schema`` where the user may.

        None when a table can be made in it, else why not (as the server says it).
        ``probe``: a free table name a check may create and drop. Only where
        :attr:`CREATES_SCRATCH_SCHEMA` is set.
        """
        return f"{self.name} has no default scratch schema"

    def scratch_properties(self) -> list[exp.Expr]:
        """Properties of a ``CREATE TABLE`` of a scratch copy (PostgreSQL: UNLOGGED)."""
        return []

    def scratch_index(self, table: exp.Table, name: str, schema: str, column: str) -> exp.Create:
        """``CREATE INDEX <name>_rn`` on ``column`` of the scratch table ``table``.

        ``name`` is in the schema ``schema``.
        """
        return exp.Create(
            kind="INDEX",
            this=exp.Index(
                this=exp.to_identifier(f"{name}_rn"),
                table=table.copy(),
                params=exp.IndexParameters(columns=[exp.column(column)]),
            ),
        )

    def relation_pages_sql(self, quoted: str) -> str:
        """The query for the number of pages of the table spelled ``quoted``.

        Only where :attr:`SCRATCH_BY_PAGES` is set.
        """
        raise UnsupportedError(f"{self.name} has no table pages to read ranges of")

    def scratch_tables_sql(self, schema: str) -> str:
        """The catalog query for name, bytes, rows and comment of every table in ``schema``.

        NULL where the engine keeps none (the comment: see :meth:`scratch_comment_sql`).
        """
        literal = exp.Literal.string(schema).sql(self.sqlglot_dialect)
        return (
            "SELECT table_name, NULL, NULL, NULL FROM information_schema.tables "
            f"WHERE table_schema = {literal}"
        )

    def scratch_comment_sql(self, table: exp.Table, text: str) -> str | None:
        """The statement that sets the comment of the scratch table ``table`` to ``text``.

        The comment says whose table it is (a training run's), and
        :meth:`scratch_tables_sql` reads it back; None where the engine keeps no table
        comments.
        """
        return None

    def table_names_sql(self, schema: str) -> str:
        """The catalog query for the name of every table in ``schema``."""
        literal = exp.Literal.string(schema).sql(self.sqlglot_dialect)
        return f"SELECT table_name FROM information_schema.tables WHERE table_schema = {literal}"

    # -- values: literals and arithmetic the statistics' SQL needs ------------------------

    def nan(self) -> exp.Expr:
        """NaN as a value of a float column (only where :attr:`FLOAT_NAN`)."""
        return exp.cast(exp.Literal.string("NaN"), exp.DataType.Type.DOUBLE)

    def infinity(self) -> exp.Expr:
        """Positive infinity as a value (only where :attr:`FLOAT_INFINITY`)."""
        return exp.cast(exp.Literal.string("Infinity"), exp.DataType.Type.DOUBLE)

    def epoch_days(self, column: exp.Expr) -> exp.Expr | None:
        """A date as whole days since 1970-01-01; None: sqlfeed knows no such arithmetic."""
        return None

    def epoch_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """A timestamp as microseconds since 1970 (an integer or exact number).

        None: not known here.
        """
        return None

    def clock_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """A time of day as microseconds since midnight; None: not known here."""
        return None

    def duration_microseconds(self, column: exp.Expr) -> exp.Expr | None:
        """A duration (as the feeds read it) as microseconds; None: not known here."""
        return None

    def unnest_elements(self, value: exp.Expr, depth: int) -> exp.Expr | None:
        """What ``UNNEST`` takes to give the innermost values of a list column.

        The list is ``depth`` levels deep and its inner levels are flattened; None: not in
        SQL here.
        """
        return None

    # -- the lease queue ----------------------------------------------------------------

    def insert_ignoring(self, table: str, values: str) -> str:
        """``INSERT INTO table VALUES values`` that skips a row whose key is there already."""
        raise UnsupportedError(f"{self.name} holds no lease queue")

    def queue_connect_args(self, bounds: QueueBounds, driver: str = "") -> dict[str, Any]:
        """The connect arguments of ``driver`` (SQLAlchemy's name) for queue sessions.

        SQLite: its busy timeout; MySQL: socket timeouts.
        """
        return {}

    def queue_session_sql(self, version: str, bounds: QueueBounds) -> list[str]:
        """Statements run on every new queue connection, so that no queue call waits long on a lock.

        ``version``: what :attr:`SERVER_VERSION_SQL` read, else empty.
        """
        return []

    def queue_name_collation(self, version: str) -> str | None:
        """The collation of a queue's name columns: binary, trailing spaces kept (NO PAD).

        Job and worker names that differ in case or in trailing spaces then stay apart;
        the table sink's text columns take it too (:meth:`sink_type`).
        ``version``: what :attr:`SERVER_VERSION_SQL` read, else empty. None: the engine's
        default collation compares names byte for byte already (PostgreSQL, SQLite).
        """
        return None

    def queue_collations_sql(self, tables: Sequence[str]) -> str | None:
        """A query of (table, column, collation) of the text columns of ``tables``.

        The tables of the queue's database: it finds name columns made with another
        collation than :meth:`queue_name_collation`'s. None where that is None.
        """
        return None

    def modify_columns_sql(self, table: str, definitions: Sequence[str]) -> str | None:
        """One statement giving columns of ``table`` new definitions, their keys kept.

        ``definitions``: ``name TYPE ...`` as CREATE TABLE writes them. None where
        :meth:`queue_collations_sql` is None.
        """
        return None

    # -- the table sink: column types and the statements that put a table in place -------

    def sink_type(
        self,
        kind: str,
        *,
        precision: int | None = None,
        scale: int | None = None,
        unit: str | None = None,
        tz: str | None = None,
        length: int | None = None,
        version: str = "",
    ) -> str | None:
        """The column type (as CREATE TABLE writes it) holding every Arrow value of ``kind``.

        It holds them exactly; None where the engine has none (the caller names the column).

        Exact: a value written and read back by sqlfeed's readers is equal to it once cast
        to the written Arrow type (an ``int8`` may read back as ``int64``, a ``uint64`` in
        PostgreSQL's ``NUMERIC(20,0)`` as a decimal). Floats are exact for finite values;
        NaN and the infinities only where :attr:`FLOAT_NAN` and :attr:`FLOAT_INFINITY` say.
        A time-zone-aware timestamp keeps its instant, not its zone's name (see
        :attr:`SINK_TZ_AS_UTC`).

        Args:
            kind: one of :data:`SINK_KINDS` (the caller maps Arrow types to them).
            precision: a ``decimal``'s precision.
            scale: a ``decimal``'s scale.
            unit: a ``timestamp``'s, ``time``'s or ``duration``'s unit: s, ms, us or ns
                (None: us).
            tz: a ``timestamp``'s zone name, None for a naive one.
            length: the longest ``string`` or ``binary`` value in bytes, where known.
            version: what :attr:`SERVER_VERSION_SQL` read on the output's server, else
                empty. Text columns compare byte for byte, trailing spaces kept, so that
                keys the rows hold apart stay apart (MySQL/MariaDB pick the collation
                :meth:`queue_name_collation` names by it).

        The generic answer is ANSI SQL, None where unsure.

        >>> get_dialect("trino").sink_type("decimal", precision=12, scale=2)
        'DECIMAL(12,2)'
        """
        check_sink_kind(kind)
        if kind == "decimal":
            return decimal_type("DECIMAL", precision, scale, 38)
        if kind == "timestamp":
            return "TIMESTAMP" if tz is None and unit in EXACT_UNITS else None
        return ANSI_SINK_TYPES.get(kind)

    def rename_sql(self, table: exp.Table, new_name: str | exp.Identifier) -> list[str]:
        """The statements renaming ``table`` (maybe schema-qualified) to ``new_name``.

        It stays in its own schema: ``ALTER TABLE s.t RENAME TO n``. A string name is
        quoted; an identifier is used as written (so a name given without quotes keeps the
        engine's case rule).
        """
        return [f"ALTER TABLE {self.sql(table)} RENAME TO {self.sql(sink_identifier(new_name))}"]

    def swap_sql(
        self, table: exp.Table, staging: exp.Table, old_name: str | exp.Identifier
    ) -> list[str]:
        """The statements putting ``staging`` (in ``table``'s schema) in place of ``table``.

        ``table`` is renamed to ``old_name`` (the caller drops it after). Where
        :attr:`TRANSACTIONAL_DDL` is set they run in one transaction; elsewhere the engine
        gives one atomic statement (MySQL's ``RENAME TABLE``). Readers see the old table or
        the new one, never none.
        """
        return [*self.rename_sql(table, old_name), *self.rename_sql(staging, table.this)]

    def add_key_sql(self, table: exp.Table, columns: list[str], unique: bool) -> str | None:
        """The statement giving the table sink's finished staging ``table`` its primary key.

        ``unique``: a unique constraint on ``columns``, built once in bulk; it fails when
        two rows share them (``ALTER TABLE ... ADD``). None: the engine cannot add one
        later, and the staging table is made with it.
        """
        names = ", ".join(self.sql(exp.to_identifier(c, quoted=True)) for c in columns)
        kind = "UNIQUE" if unique else "PRIMARY KEY"
        return f"ALTER TABLE {self.sql(table)} ADD {kind} ({names})"

    def finish_lock_sql(self, name: str) -> tuple[str, str] | None:
        """(take, release) statements of a named lock serialising the finishers of a sink.

        ``release`` empty: the lock ends with the transaction that took it. None where one
        writer at a time holds the database anyway (SQLite, DuckDB).
        """
        return None

    # -- rendering ----------------------------------------------------------------------

    def sql(self, expression: exp.Expr, pretty: bool = False) -> str:
        """Render for this engine; a construct the engine lacks raises instead of vanishing."""
        try:
            return expression.sql(
                dialect=self.sqlglot_dialect, unsupported_level=ErrorLevel.RAISE, pretty=pretty
            )
        except SqlglotUnsupportedError as err:
            message = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            raise UnsupportedError(f"{self.name} cannot express this query: {message}") from None
        except Exception as err:  # a sqlglot transform that cannot cope with this tree
            raise UnsupportedError(
                f"{self.name}: sqlglot cannot render this query ({type(err).__name__}: {err})"
            ) from None


SINK_KINDS = frozenset(
    (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "decimal",
        "string",
        "binary",
        "date",
        "timestamp",
        "time",
        "duration",
        "null",
        "list",
        "struct",
        "map",
    )
)
"""The value kinds :meth:`Dialect.sink_type` answers for (the caller maps Arrow types)."""

EXACT_UNITS = frozenset(("s", "ms", "us", None))
"""Time units a microsecond column holds exactly (None: microseconds)."""

ANSI_SINK_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "bool": "BOOLEAN",
        "int8": "SMALLINT",
        "int16": "SMALLINT",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "uint8": "SMALLINT",
        "uint16": "INTEGER",
        "uint32": "BIGINT",
        "uint64": "DECIMAL(20,0)",
        "float32": "REAL",
        "float64": "DOUBLE PRECISION",
        "string": "VARCHAR",
        "date": "DATE",
        "null": "VARCHAR",
    }
)
"""The generic :meth:`Dialect.sink_type` of the kinds that need no parameter."""


def check_sink_kind(kind: str) -> None:
    """Raise InvalidArgumentError unless ``kind`` is one of :data:`SINK_KINDS`."""
    if kind not in SINK_KINDS:
        raise InvalidArgumentError(
            f"unknown value kind {kind!r}; pass one of {', '.join(sorted(SINK_KINDS))}"
        )


def decimal_type(name: str, precision: int | None, scale: int | None, most: int) -> str | None:
    """``name(p,s)`` where 1 <= p <= ``most`` and 0 <= s <= p, else None.

    >>> decimal_type("NUMERIC", 12, 2, 1000), decimal_type("DECIMAL", 40, 2, 38)
    ('NUMERIC(12,2)', None)
    """
    if precision is None or not 1 <= precision <= most:
        return None
    scale = scale or 0
    return f"{name}({precision},{scale})" if 0 <= scale <= precision else None


def sink_identifier(name: str | exp.Identifier) -> exp.Identifier:
    """``name`` quoted where a string, as written where an identifier."""
    return name.copy() if isinstance(name, exp.Identifier) else exp.to_identifier(name, quoted=True)


def md5_hex_head(hex_digest: exp.Expr) -> exp.Expr:
    """``SUBSTRING(hex, 1, 7)``: the first 7 hex digits of a hex MD5 digest."""
    return exp.Substring(this=hex_digest, start=exp.Literal.number(1), length=exp.Literal.number(7))


def conv_md5_head(text: exp.Expr) -> exp.Expr:
    """The MD5 head of engines whose ``CONV`` turns hex text into a number.

    ``CAST(CONV(SUBSTRING(MD5(t), 1, 7), 16, 10) AS BIGINT)`` (MySQL/MariaDB, Spark/Hive).
    """
    decimal = exp.Anonymous(
        this="CONV",
        expressions=[
            md5_hex_head(exp.MD5(this=text)),
            exp.Literal.number(16),
            exp.Literal.number(10),
        ],
    )
    return exp.cast(decimal, exp.DataType.Type.BIGINT)


def days_since_1970(column: exp.Expr) -> exp.Expr:
    """``CAST((date - DATE '1970-01-01') AS BIGINT)``: where a date minus a date is days."""
    epoch = exp.cast(exp.Literal.string("1970-01-01"), exp.DataType.Type.DATE)
    return exp.cast(
        exp.paren(exp.Sub(this=column.copy(), expression=epoch)), exp.DataType.Type.BIGINT
    )


def _percent_text(percent: float) -> str:
    text = f"{percent:.10f}".rstrip("0").rstrip(".")
    if text in ("", "0"):
        raise InvalidArgumentError(f"a sample of {percent}% is too small to express; use more")
    return text


def dialect_names() -> list[str]:
    """The canonical names of all registered dialects, sorted."""
    return sorted({cls.name for cls in _REGISTRY.values()})


def get_dialect(name: str | Dialect) -> Dialect:
    """The dialect registered under ``name`` (canonical name, alias or URL backend).

    Raises:
        UnknownDialectError: naming the closest registered names when there are any.

    >>> get_dialect("PostgreSQL").name
    'postgres'
    """
    if isinstance(name, Dialect):
        return name
    key = str(name).strip().lower()
    cls = _REGISTRY.get(key)
    if cls is None:
        close = difflib.get_close_matches(key, list(_REGISTRY), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownDialectError(
            f"unknown dialect {name!r}{hint} (known: {', '.join(dialect_names())})"
        )
    return cls()


# Module prefixes of DB-API connection classes, mapped to dialect names.
_DRIVER_MODULES = {
    "duckdb": "duckdb",
    "_duckdb": "duckdb",
    "sqlite3": "sqlite",
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "pg8000": "postgres",
    "asyncpg": "postgres",
    "adbc_driver_postgresql": "postgres",
    "pymysql": "mysql",
    "MySQLdb": "mysql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "snowflake": "snowflake",
    "google": "bigquery",
    "pyhive": "spark",
    "databricks": "spark",
    "clickhouse_driver": "clickhouse",
    "clickhouse_connect": "clickhouse",
    "trino": "trino",
    "pymssql": "tsql",
    "pyodbc": "tsql",
    "oracledb": "oracle",
    "cx_Oracle": "oracle",
}


def dialect_for(target: Any) -> Dialect:
    """The dialect of a URL string, a SQLAlchemy engine/URL/connection, or a DB-API connection.

    >>> dialect_for("postgresql+psycopg://user@host/db").name
    'postgres'
    >>> dialect_for("duckdb:///data.duckdb").name
    'duckdb'
    """
    if isinstance(target, Dialect):
        return target
    if isinstance(target, str):
        return get_dialect(url_backend(target))
    # SQLAlchemy Engine and Connection both expose .dialect.name; a URL exposes .get_backend_name.
    sa_dialect = getattr(target, "dialect", None)
    sa_name = getattr(sa_dialect, "name", None)
    if isinstance(sa_name, str):
        return get_dialect(sa_name)
    backend = getattr(target, "get_backend_name", None)
    if callable(backend):
        return get_dialect(str(backend()))
    module = type(target).__module__ or ""
    for prefix in (module, module.split(".")[0]):
        if prefix in _DRIVER_MODULES:
            return get_dialect(_DRIVER_MODULES[prefix])
    raise UnknownDialectError(
        f"cannot tell the SQL dialect of a {type(target).__module__}.{type(target).__name__}; "
        "pass a SQLAlchemy URL or engine, a DuckDB connection, or dialect=NAME"
    )


def url_backend(url: str) -> str:
    """The backend part of a URL's scheme: ``postgresql+psycopg://...`` -> ``postgresql``."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        if url.endswith(".duckdb") or url == ":memory:":
            return "duckdb"
        raise UnknownDialectError(
            f"{url!r} is not a database URL; expected e.g. postgresql://user@host/db, "
            "mysql+pymysql://root@host/db, sqlite:///file.db or duckdb:///file.duckdb"
        )
    return scheme.split("+", 1)[0].lower()

"""The dialect base class, its registry, and look-up by name, URL or connection object.

A dialect is a small class of declarative capability flags plus a few hooks that build
sqlglot expressions. Subclasses register themselves when they are defined.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.errors import ErrorLevel
from sqlglot.errors import UnsupportedError as SqlglotUnsupportedError

from dialects.errors import InvalidArgumentError, UnknownDialectError, UnsupportedError

_REGISTRY: dict[str, type[Dialect]] = {}
"""Every name and URL scheme a dialect answers to, lower-cased, mapped to its class."""


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

        Most engines have them built in; SQLite does not (see ``dialects.sqlite``).
        """

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

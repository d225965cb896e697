"""Prepare TPC-H ``lineitem`` data for benchmarks.

The data is generated with ``tpchgen-cli`` as a single Parquet file, cached under
``<repo>/.bench-data/`` and loaded (idempotently) into PostgreSQL and DuckDB, and on request
into MariaDB/MySQL (:func:`load_mariadb`) and SQLite (:func:`load_sqlite`).

Layout of the cache directory::

    .bench-data/
        sf1/lineitem.parquet        # one file per scale factor
        sf0_01/lineitem.parquet
        tpch.duckdb                 # DuckDB database used by ``__main__``
        tpch.sqlite                 # SQLite database (:func:`load_sqlite`)

Each loaded table is named ``<base>_sf<tag>`` (e.g. ``lineitem_sf1``, ``lineitem_sf0_1``) so
that several scale factors can coexist. A small ``bench_meta`` table in each database records
which tables were loaded from which source with how many rows; a repeated load is skipped when
that marker matches.

Usage as a script (from the repository root)::

    .venv/bin/python -m benchmarks.tpch --scale 1
"""

from __future__ import annotations

import argparse
import io
import os
import queue
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
from psycopg import sql

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_DUCKDB_PATH",
    "DEFAULT_MYSQL_URL",
    "DEFAULT_PG_URL",
    "DEFAULT_SQLITE_PATH",
    "META_TABLE",
    "lineitem_parquet",
    "load_duckdb",
    "load_mariadb",
    "load_postgres",
    "load_sqlite",
    "scale_tag",
    "table_name",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR = REPO_ROOT / ".bench-data"
DEFAULT_DUCKDB_PATH = DEFAULT_CACHE_DIR / "tpch.duckdb"
DEFAULT_PG_URL = os.environ.get(
    "SQLFEED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
"""The tests' PostgreSQL (``SQLFEED_TEST_POSTGRES_URL``, see ``tests/helpers/engines.py``)."""
DEFAULT_MYSQL_URL = os.environ.get("SQLFEED_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
"""The tests' MariaDB/MySQL (``SQLFEED_TEST_MYSQL_URL``)."""
DEFAULT_SQLITE_PATH = DEFAULT_CACHE_DIR / "tpch.sqlite"
META_TABLE = "bench_meta"

_BATCH_ROWS = 100_000
_QUEUE_DEPTH = 4


def scale_tag(scale: float) -> str:
    """Return a filesystem/identifier-safe tag for a scale factor.

    Args:
        scale: TPC-H scale factor.

    Returns:
        The scale factor without a trailing ``.0`` and with ``.`` replaced by ``_``,
        e.g. ``1 -> "1"``, ``0.1 -> "0_1"``, ``0.01 -> "0_01"``, ``10 -> "10"``.

    Raises:
        ValueError: If ``scale`` is not positive.
    """
    if scale <= 0:
        raise ValueError(f"scale factor must be positive, got {scale!r}")
    return format(Decimal(str(scale)).normalize(), "f").replace(".", "_")


def table_name(base: str, scale: float) -> str:
    """Return the table name used for ``base`` at ``scale`` (e.g. ``lineitem_sf0_1``).

    Args:
        base: Base table name, e.g. ``"lineitem"``.
        scale: TPC-H scale factor.

    Returns:
        ``f"{base}_sf{scale_tag(scale)}"``.
    """
    return f"{base}_sf{scale_tag(scale)}"


def _tpchgen_executable() -> str:
    """Locate ``tpchgen-cli``, preferring the one next to the running interpreter."""
    candidate = Path(sys.executable).parent / "tpchgen-cli"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise FileNotFoundError("tpchgen-cli not found (expected in the virtualenv's bin/)")
    return found


def lineitem_parquet(scale: float = 1.0, cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """Generate (or reuse) TPC-H ``lineitem`` at ``scale`` as a single Parquet file.

    ``tpchgen-cli`` is run without ``--parts``, so it writes exactly one file. Generation
    happens in a temporary directory and the file is moved into place atomically, so an
    interrupted run never leaves a truncated file that would be mistaken for a cache hit.

    Args:
        scale: TPC-H scale factor (SF 1 is ~6M lineitem rows).
        cache_dir: Cache root; the file is ``<cache_dir>/sf<tag>/lineitem.parquet``.

    Returns:
        Path of the Parquet file (a single file, not a directory).

    Raises:
        subprocess.CalledProcessError: If ``tpchgen-cli`` fails.
        FileNotFoundError: If ``tpchgen-cli`` cannot be found or produced no file.
    """
    target_dir = Path(cache_dir) / f"sf{scale_tag(scale)}"
    target = target_dir / "lineitem.parquet"
    if target.is_file():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tpchgen-", dir=target_dir) as tmp:
        subprocess.run(
            [
                _tpchgen_executable(),
                "parquet",
                "--scale-factor",
                str(scale),
                "--tables",
                "lineitem",
                "--output-dir",
                tmp,
                "--quiet",
            ],
            check=True,
        )
        produced = Path(tmp) / "lineitem.parquet"
        if not produced.is_file():
            raise FileNotFoundError(f"tpchgen-cli did not produce {produced}")
        os.replace(produced, target)
    return target


def _parquet_rows(parquet: Path) -> int:
    """Return the row count recorded in a Parquet file's footer."""
    return int(pq.ParquetFile(parquet).metadata.num_rows)


def _pg_type(dtype: pa.DataType) -> str:
    """Map an Arrow type to a PostgreSQL column type."""
    if pa.types.is_int64(dtype):
        return "bigint"
    if pa.types.is_int32(dtype):
        return "integer"
    if pa.types.is_int16(dtype) or pa.types.is_int8(dtype):
        return "smallint"
    if pa.types.is_decimal(dtype):
        return f"numeric({dtype.precision},{dtype.scale})"
    if pa.types.is_date32(dtype) or pa.types.is_date64(dtype):
        return "date"
    if pa.types.is_floating(dtype):
        return "double precision"
    if pa.types.is_boolean(dtype):
        return "boolean"
    if (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_string_view(dtype)
    ):
        return "text"
    raise TypeError(f"no PostgreSQL mapping for Arrow type {dtype}")


def _csv_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with ``string_view`` columns (unsupported by the CSV writer) as string."""
    fields = [f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in schema]
    return pa.schema(fields)


def _csv_chunks(parquet: Path, batch_rows: int = _BATCH_ROWS) -> Iterator[bytes]:
    """Yield the Parquet file as header-less CSV, one chunk per record batch.

    Encoding runs in a background thread (pyarrow releases the GIL) so it overlaps with
    sending the previous chunk to the server.
    """
    pf = pq.ParquetFile(parquet)
    schema = _csv_schema(pf.schema_arrow)
    options = pa_csv.WriteOptions(include_header=False)
    # Items: CSV bytes; then None (done) or the exception that stopped the producer.
    chunks: queue.Queue[bytes | Exception | None] = queue.Queue(maxsize=_QUEUE_DEPTH)
    stop = threading.Event()

    def produce() -> None:
        error: Exception | None = None
        try:
            for batch in pf.iter_batches(batch_size=batch_rows):
                if stop.is_set():
                    return
                buf = io.BytesIO()
                pa_csv.write_csv(batch.cast(schema), buf, options)
                chunks.put(buf.getvalue())
        except Exception as exc:
            error = exc
        finally:
            chunks.put(error)

    worker = threading.Thread(target=produce, name="parquet-to-csv", daemon=True)
    worker.start()
    try:
        while (item := chunks.get()) is not None:
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                chunks.get_nowait()
            except queue.Empty:
                worker.join(timeout=0.05)


def _pg_is_loaded(cur: psycopg.Cursor[Any], table: str, scale: float, rows: int) -> bool:
    """Return whether ``bench_meta`` says ``table`` already holds ``rows`` rows at ``scale``."""
    cur.execute(
        sql.SQL(
            "SELECT m.row_count, m.scale FROM {meta} m"
            " WHERE m.table_name = %s AND to_regclass(quote_ident(%s)) IS NOT NULL"
        ).format(meta=sql.Identifier(META_TABLE)),
        (table, table),
    )
    found = cur.fetchone()
    return found is not None and found[0] == rows and found[1] == scale


def load_postgres(url: str, parquet: Path, table: str = "lineitem", scale: float = 1.0) -> str:
    """Load a TPC-H Parquet file into PostgreSQL, skipping the load if already done.

    The table ``<table>_sf<tag>`` is (re)created with types derived from the Parquet schema
    (bigint/integer, numeric(15,2), date, text, all NOT NULL; ``lineitem`` gets its TPC-H
    primary key ``(l_orderkey, l_linenumber)`` after the load) and filled with
    ``COPY ... FROM STDIN (FORMAT csv, FREEZE)`` inside one transaction, which also records
    ``(table_name, scale, row_count, source)`` in ``bench_meta`` and runs ``ANALYZE``. A second
    call returns immediately when ``bench_meta`` matches the scale and the Parquet row count.
    Concurrent callers are serialised with a transaction-level advisory lock.

    Args:
        url: libpq connection URL, e.g. :data:`DEFAULT_PG_URL`.
        parquet: Parquet file to load, e.g. from :func:`lineitem_parquet`.
        table: Base table name; the scale tag is appended.
        scale: Scale factor of ``parquet`` (used for the table name and the marker).

    Returns:
        The name of the loaded table, e.g. ``"lineitem_sf1"``.
    """
    name = table_name(table, scale)
    rows = _parquet_rows(parquet)
    ident = sql.Identifier(name)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sqlfeed-bench:{name}",))
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {meta} ("
                " table_name text PRIMARY KEY,"
                " scale double precision NOT NULL,"
                " row_count bigint NOT NULL,"
                " source text NOT NULL,"
                " loaded_at timestamptz NOT NULL DEFAULT now())"
            ).format(meta=sql.Identifier(META_TABLE))
        )
        if _pg_is_loaded(cur, name, scale, rows):
            _pg_primary_key(cur, name)  # tables loaded before the key was added get it
            return name

        schema = pq.ParquetFile(parquet).schema_arrow
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}{}").format(
                sql.Identifier(f.name),
                sql.SQL(_pg_type(f.type)),
                sql.SQL("") if f.nullable else sql.SQL(" NOT NULL"),
            )
            for f in schema
        )
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(ident, columns))
        copy_stmt = sql.SQL("COPY {} FROM STDIN (FORMAT csv, FREEZE true)").format(ident)
        with cur.copy(copy_stmt) as copy:
            for chunk in _csv_chunks(parquet):
                copy.write(chunk)
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(ident))
        loaded = cur.fetchone()
        if loaded is None or loaded[0] != rows:
            raise RuntimeError(f"{name}: expected {rows} rows, loaded {loaded}")
        cur.execute(
            sql.SQL(
                "INSERT INTO {meta} (table_name, scale, row_count, source)"
                " VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (table_name) DO UPDATE SET scale = EXCLUDED.scale,"
                " row_count = EXCLUDED.row_count, source = EXCLUDED.source, loaded_at = now()"
            ).format(meta=sql.Identifier(META_TABLE)),
            (name, scale, rows, str(Path(parquet).resolve())),
        )
        _pg_primary_key(cur, name)
        cur.execute(sql.SQL("ANALYZE {}").format(ident))
    return name


def _pg_primary_key(cur: psycopg.Cursor[Any], name: str) -> None:
    """Give a loaded ``lineitem`` table its TPC-H primary key, as the other engines' have."""
    cur.execute(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass(quote_ident(%s)) "
        "AND contype = 'p'",
        (name,),
    )
    found = cur.fetchone()
    if not name.startswith("lineitem") or (found is not None and found[0]):
        return
    key = sql.SQL(", ").join(sql.Identifier(c) for c in _LINEITEM_KEY)
    cur.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(sql.Identifier(name), key))


def _duck_ident(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def load_duckdb(db_path: Path, parquet: Path, table: str) -> str:
    """Load a Parquet file into a DuckDB database file, skipping the load if already done.

    Runs ``CREATE OR REPLACE TABLE <table> AS SELECT * FROM read_parquet(...)`` and records
    ``(table_name, row_count, source)`` in ``bench_meta`` in the same transaction. A second
    call returns immediately when the table exists and the marker matches the Parquet source
    and row count.

    Args:
        db_path: DuckDB database file (created if missing).
        parquet: Parquet file to load.
        table: Full table name to create, used as is (see :func:`table_name`).

    Returns:
        ``table``.
    """
    rows = _parquet_rows(parquet)
    source = str(Path(parquet).resolve())
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    meta = _duck_ident(META_TABLE)
    ident = _duck_ident(table)
    if _duck_loaded(db_path, table, rows, source):
        return table
    with duckdb.connect(str(db_path)) as con:
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {meta} ("
            " table_name VARCHAR PRIMARY KEY, row_count BIGINT NOT NULL,"
            " source VARCHAR NOT NULL, loaded_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        found = con.execute(
            f"SELECT m.row_count, m.source FROM {meta} m"
            " JOIN information_schema.tables t ON t.table_name = m.table_name"
            " WHERE m.table_name = ? AND t.table_schema = current_schema()",
            [table],
        ).fetchone()
        if found is not None and found[0] == rows and found[1] == source:
            return table
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(
                f"CREATE OR REPLACE TABLE {ident} AS SELECT * FROM read_parquet(?)", [source]
            )
            counted = con.execute(f"SELECT count(*) FROM {ident}").fetchone()
            if counted is None or counted[0] != rows:
                raise RuntimeError(f"{table}: expected {rows} rows, loaded {counted}")
            con.execute(f"DELETE FROM {meta} WHERE table_name = ?", [table])
            con.execute(
                f"INSERT INTO {meta} (table_name, row_count, source) VALUES (?, ?, ?)",
                [table, rows, source],
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return table


def _duck_loaded(db_path: Path, table: str, rows: int, source: str) -> bool:
    """Whether ``table`` is loaded from ``source`` already, checked read-only (other
    processes may hold the file open read-only, which a read-write open would wait on)."""
    if not Path(db_path).is_file():
        return False
    meta = _duck_ident(META_TABLE)
    try:
        with duckdb.connect(str(db_path), read_only=True) as con:
            found = con.execute(
                f"SELECT m.row_count, m.source FROM {meta} m"
                " JOIN information_schema.tables t ON t.table_name = m.table_name"
                " WHERE m.table_name = ? AND t.table_schema = current_schema()",
                [table],
            ).fetchone()
    except duckdb.Error:
        return False
    return found is not None and found[0] == rows and found[1] == source


def _sql_type(dtype: pa.DataType, dialect: str) -> str:
    """Map an Arrow ``lineitem`` type to a MariaDB/MySQL or SQLite column type.

    SQLite keeps decimals as REAL and dates as ISO text (what its own date functions read).
    """
    if pa.types.is_integer(dtype):
        return "BIGINT" if dialect == "mysql" and pa.types.is_int64(dtype) else "INTEGER"
    if pa.types.is_decimal(dtype):
        return f"DECIMAL({dtype.precision},{dtype.scale})" if dialect == "mysql" else "REAL"
    if pa.types.is_date(dtype):
        return "DATE" if dialect == "mysql" else "TEXT"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "VARCHAR(64) CHARACTER SET utf8mb4" if dialect == "mysql" else "TEXT"
    if pa.types.is_string_view(dtype):
        return _sql_type(pa.string(), dialect)
    raise TypeError(f"no {dialect} mapping for Arrow type {dtype}")


_LINEITEM_KEY = ("l_orderkey", "l_linenumber")
"""The primary key of every loaded ``lineitem`` table (TPC-H's)."""


def _create_sql(name: str, schema: pa.Schema, dialect: str, quote: str) -> str:
    """``CREATE TABLE`` for a Parquet schema, NOT NULL columns, ``lineitem``'s primary key."""
    columns = [f"{quote}{f.name}{quote} {_sql_type(f.type, dialect)} NOT NULL" for f in schema]
    key = ", ".join(f"{quote}{c}{quote}" for c in _LINEITEM_KEY if c in schema.names)
    if key:
        columns.append(f"PRIMARY KEY ({key})")
    return f"CREATE TABLE {quote}{name}{quote} ({', '.join(columns)})"


def _mysql_connect(url: str) -> Any:
    """A pymysql connection (LOCAL INFILE allowed) to a ``mysql://user:pw@host:port/db`` URL."""
    import pymysql

    parsed = urlparse(url)
    return pymysql.connect(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 3306,
        user=unquote(parsed.username or "root"),
        password=unquote(parsed.password or ""),
        database=parsed.path.lstrip("/") or None,
        charset="utf8mb4",
        local_infile=True,
    )


def load_mariadb(url: str, parquet: Path, table: str = "lineitem", scale: float = 1.0) -> str:
    """Load a TPC-H Parquet file into MariaDB/MySQL, skipping the load if already done.

    The table ``<table>_sf<tag>`` (InnoDB, primary key ``(l_orderkey, l_linenumber)``,
    BIGINT/INT, DECIMAL(15,2), DATE, VARCHAR) is filled with ``LOAD DATA LOCAL INFILE``
    from CSV chunks and recorded in ``bench_meta`` with its scale and row count; a second
    call returns at once when the marker matches and the table holds that many rows.
    Concurrent callers are serialised with ``GET_LOCK``.

    Args:
        url: ``mysql://user[:password]@host[:port]/database``, e.g. :data:`DEFAULT_MYSQL_URL`.
        parquet: Parquet file to load, e.g. from :func:`lineitem_parquet`.
        table: Base table name; the scale tag is appended.
        scale: Scale factor of ``parquet`` (used for the table name and the marker).

    Returns:
        The name of the loaded table, e.g. ``"lineitem_sf1"``.
    """
    name = table_name(table, scale)
    rows = _parquet_rows(parquet)
    conn = _mysql_connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT GET_LOCK(%s, 3600)", (f"sqlfeed-bench:{name}",))
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (table_name VARCHAR(128) PRIMARY KEY,"
            " scale DOUBLE NOT NULL, row_count BIGINT NOT NULL, source TEXT NOT NULL,"
            " loaded_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
        cur.execute(f"SELECT row_count, scale FROM {META_TABLE} WHERE table_name = %s", (name,))
        found = cur.fetchone()
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema ="
            " DATABASE() AND table_name = %s",
            (name,),
        )
        exists = cur.fetchone()[0] > 0
        if found is not None and exists and found[0] == rows and found[1] == scale:
            return name
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(_create_sql(name, pq.ParquetFile(parquet).schema_arrow, "mysql", "`"))
        _mysql_load_csv(cur, name, parquet)
        cur.execute(f"SELECT COUNT(*) FROM `{name}`")
        loaded = cur.fetchone()[0]
        if loaded != rows:
            raise RuntimeError(f"{name}: expected {rows} rows, loaded {loaded}")
        cur.execute(
            f"REPLACE INTO {META_TABLE} (table_name, scale, row_count, source)"
            " VALUES (%s, %s, %s, %s)",
            (name, scale, rows, str(Path(parquet).resolve())),
        )
        cur.execute(f"ANALYZE TABLE `{name}`")
        cur.fetchall()
        conn.commit()
    finally:
        conn.close()
    return name


def _mysql_load_csv(cur: Any, name: str, parquet: Path) -> None:
    """``LOAD DATA LOCAL INFILE`` the Parquet file's CSV chunks into ``name``, one by one."""
    with tempfile.TemporaryDirectory(prefix="tpch-mariadb-") as tmp:
        path = Path(tmp) / "chunk.csv"
        for chunk in _csv_chunks(parquet):
            path.write_bytes(chunk)
            cur.execute(
                f"LOAD DATA LOCAL INFILE %s INTO TABLE `{name}` CHARACTER SET utf8mb4"
                " FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY ''"
                " LINES TERMINATED BY '\\n'",
                (str(path),),
            )


def load_sqlite(db_path: Path, parquet: Path, table: str = "lineitem", scale: float = 1.0) -> str:
    """Load a TPC-H Parquet file into a SQLite database file, skipping the load if already done.

    The table ``<table>_sf<tag>`` (a rowid table with primary key ``(l_orderkey,
    l_linenumber)``; INTEGER, REAL for decimals, TEXT for dates and strings) is filled
    in one transaction, which also records it in ``bench_meta``; a second call returns at
    once when the marker matches the source, the row count and the table's own count.

    Args:
        db_path: SQLite database file (created if missing), e.g. :data:`DEFAULT_SQLITE_PATH`.
        parquet: Parquet file to load.
        table: Base table name; the scale tag is appended.
        scale: Scale factor of ``parquet``.

    Returns:
        The name of the loaded table, e.g. ``"lineitem_sf1"``.
    """
    name = table_name(table, scale)
    rows = _parquet_rows(parquet)
    source = str(Path(parquet).resolve())
    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(db_path), timeout=3600, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (table_name TEXT PRIMARY KEY,"
            " scale REAL NOT NULL, row_count INTEGER NOT NULL, source TEXT NOT NULL,"
            " loaded_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
        found = conn.execute(
            f"SELECT m.row_count, m.source FROM {META_TABLE} m JOIN sqlite_master t"
            " ON t.name = m.table_name AND t.type = 'table' WHERE m.table_name = ?",
            (name,),
        ).fetchone()
        if found is not None and found == (rows, source):
            (counted,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            if counted == rows:
                conn.execute("COMMIT")
                return name
        _sqlite_fill(conn, name, parquet, rows)
        conn.execute(
            f"INSERT OR REPLACE INTO {META_TABLE} (table_name, scale, row_count, source)"
            " VALUES (?, ?, ?, ?)",
            (name, scale, rows, source),
        )
        conn.execute("COMMIT")
        conn.execute(f'ANALYZE "{name}"')
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return name


def _sqlite_fill(conn: sqlite3.Connection, name: str, parquet: Path, rows: int) -> None:
    """(Re)create ``name`` and insert the Parquet rows (decimals as floats, dates as text)."""
    pf = pq.ParquetFile(parquet)
    conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.execute(_create_sql(name, pf.schema_arrow, "sqlite", '"'))
    marks = ", ".join("?" * len(pf.schema_arrow))
    for batch in pf.iter_batches(batch_size=_BATCH_ROWS):
        columns = []
        for column in batch.columns:
            if pa.types.is_decimal(column.type):
                column = column.cast(pa.float64())
            elif pa.types.is_date(column.type) or pa.types.is_string_view(column.type):
                column = column.cast(pa.string())
            columns.append(column.to_pylist())
        conn.executemany(f'INSERT INTO "{name}" VALUES ({marks})', zip(*columns, strict=True))
    (counted,) = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
    if counted != rows:
        raise RuntimeError(f"{name}: expected {rows} rows, loaded {counted}")


@contextmanager
def _timed(label: str) -> Iterator[None]:
    """Print how long the enclosed block took."""
    start = time.perf_counter()
    yield
    print(f"  {label}: {time.perf_counter() - start:.2f}s", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Prepare ``lineitem`` at ``--scale`` as Parquet, in PostgreSQL and in DuckDB.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        Process exit code.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--duckdb", type=Path, default=None, help="DuckDB database file")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny scale (0.01): check the loaders run"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale = 0.01
    db_path: Path = args.duckdb or args.cache_dir / "tpch.duckdb"

    print(f"TPC-H lineitem SF {args.scale}")
    with _timed("parquet"):
        parquet = lineitem_parquet(args.scale, args.cache_dir)
    print(f"    {parquet} ({_parquet_rows(parquet)} rows)")

    with _timed("postgres"):
        pg_table = load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    with psycopg.connect(args.pg_url) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(pg_table)))
        pg_rows = row.fetchone()
    print(f"    {args.pg_url} table {pg_table} ({pg_rows[0] if pg_rows else '?'} rows)")

    with _timed("duckdb"):
        duck_table = load_duckdb(db_path, parquet, table_name("lineitem", args.scale))
    with duckdb.connect(str(db_path), read_only=True) as con:
        duck_rows = con.execute(f"SELECT count(*) FROM {_duck_ident(duck_table)}").fetchone()
    print(f"    {db_path} table {duck_table} ({duck_rows[0] if duck_rows else '?'} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

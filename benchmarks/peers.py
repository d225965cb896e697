"""sqlfeed against its peers: all of TPC-H ``lineitem`` into Arrow (or pandas), side by side.

Every contender reads ``SELECT * FROM lineitem_sf<tag>`` in a fresh Python subprocess (so
its peak RSS, ``VmHWM`` read in the child, is its own; for Ray only the driver process
is counted, not its workers). The runs are interleaved: round 1 runs every contender
once, then round 2, and so on for ``--repeat`` rounds, so a change of the machine's load
touches them all alike. The clock starts after the imports (and after ``ray.init``) and
stops after the last row. Reported per contender: rows, best and median seconds and
rows/s, peak RSS, and its ratio to the best peer (the fastest contender of the same
database other than sqlfeed). The load average is printed at the start and the end.
Contenders (``--only`` ids, glob patterns):

* PostgreSQL: ``pg-sqlfeed`` (``sqlfeed.plan(auto)`` and a ``Feeder`` with ``--readers``
  readers), ``pg-connectorx`` (``return_type="arrow"``, ``partition_on="l_orderkey"``,
  2 partitions), ``pg-daft`` (``daft.read_sql``, ``partition_col="l_orderkey"``, 2
  partitions, ``to_arrow()``), ``pg-ray`` (``ray.data.read_sql`` over psycopg, batches as
  Arrow), ``pg-dask`` (``dask.dataframe.read_sql_query`` with ``index_col="l_orderkey"``,
  2 partitions), ``pg-pandas`` (``pandas.read_sql`` of the first 1 M rows, reported as
  rows/s).
* MariaDB/MySQL: ``mariadb-sqlfeed``, ``mariadb-connectorx``, ``mariadb-pandas``.
* SQLite: ``sqlite-sqlfeed``, ``sqlite-connectorx``, ``sqlite-pandas``.

A peer that is not installed is reported as such. The peers are the ``bench`` extra
(``pip install -e '.[bench]'``); daft is not in it: it pins an older pyarrow than the
project's (install it by hand into another environment to compare it). Data is generated
and loaded by :mod:`benchmarks.tpch` when missing. Nothing is asserted: the script only
reports. Run from the repository root on an otherwise idle machine::

    .venv/bin/python -m benchmarks.peers --scale 1 --json /tmp/peers.json
    .venv/bin/python -m benchmarks.peers --scale 0.01 --repeat 1 --only 'sqlite-*'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress
from benchmarks.harness import Outcome, Tally, start
from benchmarks.read_throughput import sqlfeed_read

__all__ = ["CONTENDERS", "Config", "Contender", "Result", "main", "measure"]

SCAN_SQL = "SELECT * FROM {table}"
KEY = "l_orderkey"
PANDAS_ROWS = 1_000_000
PEER_PARTITIONS = 2


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line).

    Attributes:
        pg_url: libpq URL, ``postgresql://...``.
        mysql_url: ``mysql://user@host:port/db`` (connectorx's form).
        sqlite_path: The SQLite database file.
        tables: Per engine (``postgres``, ``mariadb``, ``sqlite``), the loaded table.
        readers: Feeder readers for sqlfeed.
    """

    pg_url: str
    mysql_url: str
    sqlite_path: str
    tables: dict[str, str] = field(default_factory=dict)
    readers: int = 2

    def sql(self, engine: str, limit: int | None = None) -> str:
        """The scan of ``engine``'s table, with a ``LIMIT`` when given."""
        text = SCAN_SQL.format(table=self.tables[engine])
        return text if limit is None else f"{text} LIMIT {limit}"

    def url(self, engine: str, kind: str) -> str:
        """The URL of ``engine`` for ``kind``: ``native`` (libpq, connectorx, daft) or
        ``sqlalchemy``."""
        if engine == "postgres":
            rest = self.pg_url.partition("://")[2]
            return self.pg_url if kind == "native" else f"postgresql+psycopg://{rest}"
        if engine == "mariadb":
            rest = self.mysql_url.partition("://")[2]
            return self.mysql_url if kind == "native" else f"mysql+pymysql://{rest}"
        return (
            f"sqlite://{self.sqlite_path}" if kind == "native" else f"sqlite:///{self.sqlite_path}"
        )


Contender = harness.Contender[Config]
"""One way of reading the whole table: id ``<engine>-<peer>``, group the engine."""


def _sqlfeed(cfg: Config, engine: str, snapshot: bool = True) -> Outcome:
    """sqlfeed: connect, plan (auto), Feeder with ``cfg.readers`` readers, in one state of
    the table (the default) or, with ``snapshot=False``, its partitions read at any time."""
    import sqlfeed

    begun = start()
    source = sqlfeed.connect(cfg.url(engine, "sqlalchemy"))
    try:
        rows, _, details = sqlfeed_read(source, cfg.sql(engine), cfg.readers, snapshot)
        details["reader"] = getattr(source, "reader_for", lambda _: "-")(cfg.sql(engine))
    finally:
        source.close()
    return rows, time.perf_counter() - begun, details


def _connectorx(cfg: Config, engine: str) -> Outcome:
    """connectorx into one Arrow table, 2 partitions on ``l_orderkey``."""
    import connectorx

    begun = start()
    table: Any = connectorx.read_sql(
        cfg.url(engine, "native"),
        cfg.sql(engine),
        return_type="arrow",
        partition_on=KEY,
        partition_num=PEER_PARTITIONS,
    )
    seconds = time.perf_counter() - begun
    tally = Tally()
    tally.add(table)
    return tally.rows, seconds, {"version": connectorx.__version__, **tally.details()}


def _daft(cfg: Config, engine: str) -> Outcome:
    """daft.read_sql, 2 partitions on ``l_orderkey``, collected as one Arrow table."""
    import daft  # type: ignore[import-not-found]

    begun = start()
    frame = daft.read_sql(
        cfg.sql(engine),
        cfg.url(engine, "native"),
        partition_col=KEY,
        num_partitions=PEER_PARTITIONS,
    )
    table = frame.to_arrow()
    seconds = time.perf_counter() - begun
    tally = Tally()
    tally.add(table)
    return tally.rows, seconds, {"version": daft.__version__, **tally.details()}


def _ray(cfg: Config, engine: str) -> Outcome:
    """ray.data.read_sql over psycopg (one read task), drained as Arrow batches."""
    import psycopg
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        begun = start()
        dataset = ray.data.read_sql(cfg.sql(engine), lambda: psycopg.connect(cfg.pg_url))
        batches: Any = dataset.iter_batches(batch_format="pyarrow")
        tally = Tally()
        for batch in batches:
            tally.add(batch)
        seconds = time.perf_counter() - begun
    finally:
        ray.shutdown()
    return tally.rows, seconds, {"version": ray.__version__, **tally.details()}


def _dask(cfg: Config, engine: str) -> Outcome:
    """dask.dataframe.read_sql_query, ``index_col=l_orderkey``, 2 partitions."""
    import dask
    import dask.dataframe as dd
    import sqlalchemy as sa

    begun = start()
    columns = _columns(cfg, engine)
    query: Any = sa.select(*[sa.column(c) for c in columns]).select_from(
        sa.table(cfg.tables[engine])
    )
    frame = dd.read_sql_query(  # type: ignore[no-untyped-call]
        query, cfg.url(engine, "sqlalchemy"), index_col=KEY, npartitions=PEER_PARTITIONS
    )
    rows = int(frame.map_partitions(len).compute().sum())
    return rows, time.perf_counter() - begun, {"version": getattr(dask, "__version__", "?")}


def _columns(cfg: Config, engine: str) -> list[str]:
    """The table's column names (a ``LIMIT 0`` query through SQLAlchemy)."""
    import sqlalchemy as sa

    engine_ = sa.create_engine(cfg.url(engine, "sqlalchemy"))
    try:
        with engine_.connect() as connection:
            return list(connection.execute(sa.text(cfg.sql(engine, 0))).keys())
    finally:
        engine_.dispose()


def _pandas(cfg: Config, engine: str) -> Outcome:
    """``pandas.read_sql`` of the first 1 M rows through a SQLAlchemy engine."""
    import pandas
    import sqlalchemy

    begun = start()
    sa_engine = sqlalchemy.create_engine(cfg.url(engine, "sqlalchemy"))
    try:
        rows = len(pandas.read_sql(cfg.sql(engine, PANDAS_ROWS), sa_engine))
    finally:
        sa_engine.dispose()
    return rows, time.perf_counter() - begun, {"version": pandas.__version__}


_PEERS: dict[str, tuple[str, Callable[[Config, str], Outcome]]] = {
    "sqlfeed": ("sqlfeed plan(auto) + Feeder", _sqlfeed),
    "sqlfeed_nosnapshot": (
        "sqlfeed plan(auto) + Feeder(snapshot=False)",
        lambda cfg, engine: _sqlfeed(cfg, engine, snapshot=False),
    ),
    "connectorx": (f"connectorx arrow, partition_on {KEY}, {PEER_PARTITIONS}", _connectorx),
    "daft": (f"daft.read_sql, partition_col {KEY}, {PEER_PARTITIONS}", _daft),
    "ray": ("ray.data.read_sql (psycopg)", _ray),
    "dask": (f"dask read_sql_query, index_col {KEY}, {PEER_PARTITIONS}", _dask),
    "pandas": ("pandas.read_sql, first 1M rows", _pandas),
}
SQLFEED_CONTENDERS = ("sqlfeed", "sqlfeed_nosnapshot")
"""The contenders that are sqlfeed itself (never a peer to compare with)."""
_ENGINE_PEERS = {
    "postgres": ("sqlfeed", "connectorx", "daft", "ray", "dask", "pandas"),
    "mariadb": ("sqlfeed", "sqlfeed_nosnapshot", "connectorx", "pandas"),
    "sqlite": ("sqlfeed", "sqlfeed_nosnapshot", "connectorx", "pandas"),
}
_PREFIX = {"postgres": "pg", "mariadb": "mariadb", "sqlite": "sqlite"}

_REQUIRES = {"connectorx": ("connectorx",), "daft": ("daft",), "ray": ("ray", "psycopg")}
_REQUIRES["dask"] = ("dask",)


def _bound(run: Callable[[Config, str], Outcome], engine: str) -> Callable[[Config], Outcome]:
    """``run`` with its engine bound."""
    return lambda cfg: run(cfg, engine)


CONTENDERS: dict[str, Contender] = {
    f"{_PREFIX[engine]}-{peer}": harness.Contender(
        f"{_PREFIX[engine]}-{peer}",
        _PEERS[peer][0],
        _bound(_PEERS[peer][1], engine),
        group=engine,
        requires=_REQUIRES.get(peer, ()),
        partial=peer == "pandas",
    )
    for engine, peers in _ENGINE_PEERS.items()
    for peer in peers
}


@dataclass
class Result:
    """All runs of one contender.

    Attributes:
        id: The contender's id.
        engine: Its database.
        label: What it runs.
        rows: Rows read by its runs (-1 when none succeeded).
        runs: Seconds of every run.
        peak_rss_bytes: The largest ``VmHWM`` of its runs.
        details: What its fastest run reported (sqlfeed: strategy, partitions, reader).
        error: The error of a failed run, if any.
    """

    id: str
    engine: str
    label: str
    rows: int = -1
    runs: list[float] = field(default_factory=list)
    peak_rss_bytes: int = -1
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def best(self) -> float | None:
        """The fastest run's seconds."""
        return min(self.runs) if self.runs else None

    @property
    def median(self) -> float | None:
        """The median run's seconds."""
        return statistics.median(self.runs) if self.runs else None

    def rate(self, seconds: float | None) -> float | None:
        """Rows per second at ``seconds``."""
        return self.rows / seconds if seconds and self.rows >= 0 else None


def measure(
    contenders: Sequence[Contender], cfg: Config, repeat: int, timeout: float, check: bool = False
) -> tuple[list[Result], list[str]]:
    """Run every contender ``repeat`` times, interleaved, each run in a fresh subprocess;
    also return the disagreements between the contenders of one database."""
    measured = harness.measure(
        "peers", [(c, cfg) for c in contenders], repeat, timeout, check=check
    )
    results = []
    for contender, got in zip(contenders, measured, strict=True):
        result = Result(contender.id, contender.group, contender.label)
        result.error = got.error or got.skipped
        result.runs = [round(r.seconds, 3) for r in got.runs]
        result.peak_rss_bytes = got.peak_rss_bytes
        best = got.best_run
        if best is not None:
            result.rows, result.details = best.rows, dict(best.details)
        results.append(result)
    return results, harness.agreement(measured)


def best_peer(results: Sequence[Result], engine: str) -> Result | None:
    """The fastest successful contender of ``engine`` other than sqlfeed's."""
    ours = {f"{_PREFIX[engine]}-{name}" for name in SQLFEED_CONTENDERS}
    peers = [r for r in results if r.engine == engine and r.id not in ours]
    rated = [r for r in peers if r.rate(r.best) is not None]
    return max(rated, key=lambda r: r.rate(r.best) or 0.0, default=None)


def format_results(results: Sequence[Result]) -> str:
    """The results of every database as aligned text tables, with the ratios to the best peer."""
    header = (
        "contender",
        "what",
        "rows",
        "best s",
        "median s",
        "best rows/s",
        "median rows/s",
        "peak RSS MB",
        "x best peer",
        "notes",
    )
    blocks = []
    for engine in _ENGINE_PEERS:
        group = [r for r in results if r.engine == engine]
        if not group:
            continue
        top = best_peer(results, engine)
        top_rate = top.rate(top.best) if top is not None else None
        rows = [_row(r, top_rate) for r in group]
        title = f"{engine} (best peer: {top.id if top else 'none'})"
        blocks.append(title + "\n" + harness.table(header, rows, right={2, 3, 4, 5, 6, 7, 8}))
    return "\n\n".join(blocks)


def _row(r: Result, top_rate: float | None) -> tuple[str, ...]:
    """One contender's line of the table."""
    if r.error and not r.runs:
        return (r.id, r.label, "-", "-", "-", "-", "-", "-", "-", f"ERROR {r.error}")
    best, median = r.rate(r.best), r.rate(r.median)
    ratio = f"{best / top_rate:.2f}" if best and top_rate else "-"
    notes = ", ".join(
        f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in r.details.items()
        if k != "reason"
    )
    if r.error:
        notes = f"ERROR {r.error}; {notes}"
    return (
        r.id,
        r.label,
        str(r.rows),
        f"{r.best:.2f}",
        f"{r.median:.2f}",
        f"{best:,.0f}",
        f"{median:,.0f}",
        f"{r.peak_rss_bytes / 2**20:,.0f}",
        ratio,
        notes,
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    from benchmarks.tpch import DEFAULT_CACHE_DIR, DEFAULT_MYSQL_URL, DEFAULT_PG_URL

    parser = argparse.ArgumentParser(
        description="sqlfeed against ConnectorX, Daft, Ray Data, Dask and pandas: all of TPC-H "
        "lineitem from PostgreSQL, MariaDB and SQLite."
    )
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--readers", type=int, default=2, help="sqlfeed Feeder readers (default 2)")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="PATTERN",
        help="glob patterns over the ids: " + ", ".join(CONTENDERS),
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="libpq URL")
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL, help="mysql://user@host:port/db")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--sqlite", type=Path, default=None, help="SQLite database file")
    parser.add_argument("--child-timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default=None, help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat = 0.01, 1
    if args.child is None and (args.repeat < 1 or args.readers < 1):
        parser.error("--repeat and --readers must be >= 1")
    return args


def _prepare(args: argparse.Namespace, engines: set[str]) -> Config:
    """Generate and load the data the selected contenders read (cached)."""
    from benchmarks.tpch import lineitem_parquet, load_mariadb, load_postgres, load_sqlite

    parquet = lineitem_parquet(args.scale, args.cache_dir)
    sqlite_path: Path = args.sqlite or args.cache_dir / "tpch.sqlite"
    tables = {}
    if "postgres" in engines:
        tables["postgres"] = load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    if "mariadb" in engines:
        tables["mariadb"] = load_mariadb(args.mysql_url, parquet, "lineitem", args.scale)
    if "sqlite" in engines:
        tables["sqlite"] = load_sqlite(sqlite_path, parquet, "lineitem", args.scale)
    return Config(
        pg_url=args.pg_url,
        mysql_url=args.mysql_url,
        sqlite_path=str(sqlite_path.resolve()),
        tables=tables,
        readers=args.readers,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the tables, optionally write JSON.

    Returns:
        0; 1 when a contender that is installed failed.
    """
    args = _parse_args(argv)
    if args.child is not None:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config or "{}")
    contenders: list[Contender] = [
        c
        for c in CONTENDERS.values()
        if not args.only or any(fnmatch.fnmatchcase(c.id, p) for p in args.only)
    ]
    if not contenders:
        progress(f"--only selects nothing; the ids are {', '.join(CONTENDERS)}")
        return 2
    started, load_before = time.perf_counter(), os.getloadavg()
    cfg = _prepare(args, {c.group for c in contenders})
    progress(f"TPC-H lineitem SF {args.scale:g}: {cfg.tables}")
    results, disagreements = measure(
        contenders, cfg, args.repeat, args.child_timeout, check=args.smoke
    )
    load_after = os.getloadavg()
    print(
        f"sqlfeed and its peers, TPC-H lineitem SF {args.scale:g}, {args.repeat} interleaved "
        f"round(s) ({platform.node()}, {os.cpu_count()} CPUs; load average "
        f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} at start, "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} at end; "
        f"total {time.perf_counter() - started:.0f}s)\n"
    )
    print(format_results(results))
    print(
        "\n  x best peer = best rows/s / best rows/s of the fastest other contender on the "
        "same database; pandas reads at most the first 1M rows"
    )
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "repeat": args.repeat,
            "config": asdict(cfg),
            "load_average_start": load_before,
            "load_average_end": load_after,
            "results": [asdict(r) | {"best": r.best, "median": r.median} for r in results],
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        progress(f"wrote {args.json}")
    failed = any(r.error and not r.error.startswith("not installed") for r in results)
    return 1 if failed or disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())

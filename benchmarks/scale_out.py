"""Scaling out: sqlfeed's plan into Ray Data and Dask, against their own SQL readers.

TPC-H ``lineitem`` at one scale factor, in PostgreSQL (``SELECT * FROM lineitem_sf<tag>``),
read to the end by each contender, side by side in one run:

* **Ray Data**, every batch drained with ``ds.iter_batches(batch_format="pyarrow")``:

  - ``ray-sqlfeed``: ``sqlfeed.ray.dataset(sql, url, strategy=--strategy,
    partitions=--partitions)`` (planning is timed and included);
  - ``ray-read_sql``: ``ray.data.read_sql(sql, psycopg.connect, shard_keys=["l_orderkey"],
    override_num_blocks=--partitions)``, Ray's default ``shard_hash_fn="MD5"``: on
    PostgreSQL ``ABS(MD5(...))`` fails, Ray refuses to shard ("set override_num_blocks to
    1"), and the read runs in one task, as Ray asks;
  - ``ray-read_sql-hashtext``: ``shard_keys=["l_orderkey::text"], shard_hash_fn="hashtext"``
    (an integer hash PostgreSQL has), so Ray's reader does run ``--partitions`` tasks.

* **Dask**, computed to one pandas DataFrame on the threaded scheduler (``--dask-scheduler``):

  - ``dask-sqlfeed``: ``sqlfeed.dask.dataframe(sql, url, strategy=..., partitions=...)``,
    the default ``dtype_backend="numpy_nullable"`` (exact: NUMERIC columns become
    ``Decimal`` objects, which is most of its conversion time on ``lineitem``);
  - ``dask-sqlfeed-pyarrow``: the same with ``dtype_backend="pyarrow"`` (every column an
    ``ArrowDtype``, converted without copying);
  - ``dask-read_sql_query``: ``dask.dataframe.read_sql_query(select * from the table,
    url, index_col="l_orderkey", npartitions=--partitions)`` (pandas ``read_sql`` per
    partition, NUMERIC as float64; Dask queries MIN/MAX of the index for the divisions and
    reads 5 rows first for ``meta``);
  - ``dask-sqlfeed-arrow``: sqlfeed's partitions straight to Arrow
    (``dask.delayed(reader.table)`` per partition, concatenated), what a pipeline that
    wants Arrow rather than pandas gets.

Every contender runs in a fresh Python subprocess. The clock starts after the imports and,
for Ray, after ``ray.init(num_cpus=--cpus)`` and a warm-up dataset that starts the Ray
worker processes (cluster start-up is reported apart, as ``startup_s``); it stops after
the last row was counted. The table shows each contender's best and median run
(``--repeat``), the 1-minute load average when its runs started, and the ratios of sqlfeed
to each peer on both the best and the median runs. **Memory**: a thread samples the
proportional set size (PSS, so pages shared with Ray's object store count once) of the
child and all its descendants (Ray's raylet, GCS and workers; Dask's threads are in the
child) every 0.2 s; reported as the peak and as the peak above the level just before the
read (``peak_tree_pss``, ``read_pss``), plus the child's own ``VmHWM``. The goal: sqlfeed
>= 1.5x the rows/s of each peer on the same engine. Nothing is asserted.

Run from the repository root (PostgreSQL must be running; the data is generated and loaded
by :mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.scale_out --scale 1 --json /tmp/scale_out.json
    .venv/bin/python -m benchmarks.scale_out --scale 0.01 --only 'dask-*'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Tally

__all__ = ["CONTENDERS", "Config", "main"]

SCAN_SQL = "SELECT * FROM {table}"
SHARD_KEY = "l_orderkey"
GOAL_RATIO = 1.5
SAMPLE_SECONDS = 0.2


@dataclass(frozen=True)
class Config:
    """What a child needs (passed as JSON on its command line).

    Attributes:
        pg_url: libpq URL (``postgresql://...``), for psycopg.
        sa_url: the same as a SQLAlchemy URL (``postgresql+psycopg://...``).
        table: the ``lineitem`` table.
        partitions: partitions / blocks / shards for every contender.
        cpus: Ray's ``num_cpus``; Dask's thread count.
        strategy: sqlfeed's plan strategy.
        dask_scheduler: ``threads`` or ``processes``.
    """

    pg_url: str
    sa_url: str
    table: str
    partitions: int
    cpus: int
    strategy: str
    dask_scheduler: str = "threads"

    @property
    def sql(self) -> str:
        return SCAN_SQL.format(table=self.table)


class TreeMemory:
    """Samples the PSS of this process and its descendants in a thread; keeps the peak."""

    def __init__(self) -> None:
        import psutil  # type: ignore[import-untyped]

        self._psutil = psutil
        self.peak = 0
        self.baseline = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        """The summed PSS (bytes) of this process tree now."""
        me = self._psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                info = proc.memory_full_info()
            except (self._psutil.Error, OSError):
                continue
            total += int(getattr(info, "pss", info.rss))
        return total

    def __enter__(self) -> TreeMemory:
        self.baseline = self.peak = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.sample())

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, self.sample())


Outcome = tuple[Tally, dict[str, Any]]
"""What a contender's read returns: (rows and checksum, details)."""


@dataclass(frozen=True)
class Contender:
    """One way of reading the whole table into a framework (run through the harness as
    :meth:`as_harness`).

    Attributes:
        id: name for ``--only`` and the tables.
        framework: ``ray`` or ``dask``.
        label: what it runs.
        setup: imports and starts the framework; returns a context (or None).
        read: reads every row (timed); returns (rows, details).
    """

    id: str
    framework: str
    label: str
    setup: Callable[[Config], Any]
    read: Callable[[Config, Any], Outcome]

    def run(self, cfg: Config) -> harness.Outcome:
        """Set up (untimed), then read with the process tree's memory sampled (timed)."""
        started = time.perf_counter()
        context = self.setup(cfg)
        extra: dict[str, Any] = {"startup_s": time.perf_counter() - started}
        extra["load"] = os.getloadavg()[0]
        with TreeMemory() as memory:
            started = harness.start()
            tally, details = self.read(cfg, context)
            seconds = time.perf_counter() - started
        extra.update(peak_tree_pss=memory.peak, read_pss=memory.peak - memory.baseline)
        return tally.rows, seconds, {**details, **tally.details(), "measured": extra}

    def as_harness(self) -> harness.Contender[Config]:
        """This contender for :func:`benchmarks.harness.measure`."""
        return harness.Contender(self.id, self.label, self.run, requires=(self.framework,))


def _ray_setup(cfg: Config) -> Any:
    import ray
    import ray.data

    import sqlfeed.ray  # noqa: F401  (imported before the clock starts, like Ray)

    ray.init(num_cpus=cfg.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    # Start the worker processes (as a running cluster has them) before the clock starts:
    # a Ray Data read of nothing that runs on every CPU. What a contender's tasks import
    # (sqlfeed, psycopg) is still imported on the clock.
    warm = ray.data.range(cfg.cpus * 4, override_num_blocks=cfg.cpus * 4)
    warm.map_batches(lambda batch: batch).materialize()
    return ray


def _ray_drain(ds: Any) -> Tally:
    tally = Tally(SHARD_KEY)
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        tally.add(batch)
    return tally


def _ray_sqlfeed(cfg: Config, ray: Any) -> Outcome:
    import sqlfeed.ray

    ds = sqlfeed.ray.dataset(cfg.sql, cfg.sa_url, strategy=cfg.strategy, partitions=cfg.partitions)
    return _ray_drain(ds), {"ray": ray.__version__}


def _ray_read_sql(cfg: Config, ray: Any, hash_fn: str = "MD5", key: str = SHARD_KEY) -> Outcome:
    import psycopg

    url = cfg.pg_url

    def factory() -> Any:
        return psycopg.connect(url)

    blocks = cfg.partitions
    details: dict[str, Any] = {"ray": ray.__version__, "shard_hash_fn": hash_fn, "key": key}
    try:
        ds = ray.data.read_sql(
            cfg.sql, factory, shard_keys=[key], shard_hash_fn=hash_fn, override_num_blocks=blocks
        )
    except ValueError as err:  # "Database does not support sharding": one task, as Ray asks
        details["sharding"] = f"refused ({err}); read in 1 task"
        blocks = 1
        ds = ray.data.read_sql(cfg.sql, factory, override_num_blocks=1)
    details["blocks"] = blocks
    return _ray_drain(ds), details


def _ray_read_sql_hashtext(cfg: Config, ray: Any) -> Outcome:
    # hashtext takes text: Ray pastes the key into MOD(ABS(hashtext(<key>)), n).
    return _ray_read_sql(cfg, ray, "hashtext", f"{SHARD_KEY}::text")


def _dask_setup(cfg: Config) -> Any:
    import dask
    import dask.dataframe

    import sqlfeed.dask  # noqa: F401

    dask.config.set(scheduler=cfg.dask_scheduler, num_workers=cfg.cpus)
    return dask


def _dask_sqlfeed(cfg: Config, dask: Any, dtype_backend: str = "numpy_nullable") -> Outcome:
    import sqlfeed.dask

    frame = sqlfeed.dask.dataframe(
        cfg.sql,
        cfg.sa_url,
        strategy=cfg.strategy,
        partitions=cfg.partitions,
        dtype_backend=dtype_backend,
    )
    tally = Tally(SHARD_KEY)
    tally.add_frame(frame.compute())
    return tally, {"dask": dask.__version__, "npartitions": frame.npartitions}


def _dask_sqlfeed_pyarrow(cfg: Config, dask: Any) -> Outcome:
    return _dask_sqlfeed(cfg, dask, "pyarrow")


def _dask_sqlfeed_arrow(cfg: Config, dask: Any) -> Outcome:
    import pyarrow as pa

    from sqlfeed.feed.remote import plan_for_url, reader_for
    from sqlfeed.io import DEFAULT_BATCH_ROWS

    plan = plan_for_url(
        cfg.sql, cfg.sa_url, {"strategy": cfg.strategy, "partitions": cfg.partitions}
    )
    reader = reader_for(plan, cfg.sa_url, DEFAULT_BATCH_ROWS, None)
    parts = [dask.delayed(reader.table)(p) for p in plan.partitions]
    tables = dask.compute(*parts)
    tally = Tally(SHARD_KEY)
    tally.add(pa.concat_tables(tables))
    return tally, {"dask": dask.__version__}


def _dask_read_sql_query(cfg: Config, dask: Any) -> Outcome:
    import dask.dataframe as dd
    import sqlalchemy as sa

    query = sa.select(sa.text("*")).select_from(sa.table(cfg.table))
    frame = dd.read_sql_query(  # type: ignore[no-untyped-call]
        query, cfg.sa_url, index_col=sa.column(SHARD_KEY), npartitions=cfg.partitions
    )
    computed = frame.compute()
    tally = Tally(SHARD_KEY)
    tally.add_values(len(computed), computed.index.to_numpy())  # the key is the index
    return tally, {"dask": dask.__version__, "npartitions": frame.npartitions}


CONTENDERS: dict[str, Contender] = {
    c.id: c
    for c in (
        Contender("ray-sqlfeed", "ray", "sqlfeed.ray.dataset", _ray_setup, _ray_sqlfeed),
        Contender(
            "ray-read_sql", "ray", "ray.data.read_sql shard_keys (MD5)", _ray_setup, _ray_read_sql
        ),
        Contender(
            "ray-read_sql-hashtext",
            "ray",
            "ray.data.read_sql shard_keys (hashtext)",
            _ray_setup,
            _ray_read_sql_hashtext,
        ),
        Contender(
            "dask-sqlfeed", "dask", "sqlfeed.dask.dataframe -> pandas", _dask_setup, _dask_sqlfeed
        ),
        Contender(
            "dask-sqlfeed-pyarrow",
            "dask",
            "sqlfeed.dask.dataframe -> pandas (ArrowDtype)",
            _dask_setup,
            _dask_sqlfeed_pyarrow,
        ),
        Contender(
            "dask-sqlfeed-arrow",
            "dask",
            "sqlfeed partitions -> Arrow (delayed)",
            _dask_setup,
            _dask_sqlfeed_arrow,
        ),
        Contender(
            "dask-read_sql_query",
            "dask",
            "dd.read_sql_query -> pandas",
            _dask_setup,
            _dask_read_sql_query,
        ),
    )
}


@dataclass
class Result:
    """One contender's best run (see the module docstring for the fields)."""

    id: str
    framework: str
    label: str
    rows: int = -1
    seconds: float = 0.0
    rows_per_second: float = 0.0
    startup_s: float = 0.0
    peak_tree_pss: int = -1
    read_pss: int = -1
    vm_hwm: int = -1
    median_seconds: float = 0.0
    median_rows_per_second: float = 0.0
    runs: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def measure(
    contenders: Sequence[Contender], cfg: Config, repeat: int, timeout: float, check: bool = False
) -> tuple[list[Result], list[str]]:
    """Run each contender ``repeat`` times (interleaved) in fresh subprocesses; keep the
    fastest run (and the median time). Also returns the disagreements (rows; the sum of
    ``l_orderkey`` when ``check``)."""
    entries = [(c.as_harness(), cfg) for c in contenders]
    measured = harness.measure("scale_out", entries, repeat, timeout, check=check)
    results = []
    for contender, got in zip(contenders, measured, strict=True):
        out = Result(contender.id, contender.framework, contender.label)
        out.error = got.error or got.skipped
        out.runs = [r.seconds for r in got.runs]
        out.loads = [float(r.details.get("measured", {}).get("load", -1.0)) for r in got.runs]
        best = got.best_run
        if best is not None and out.error is None:
            details = dict(best.details)
            extra = details.pop("measured", {})
            out.rows, out.seconds = best.rows, best.seconds
            out.rows_per_second = best.rows / best.seconds if best.seconds else 0.0
            out.startup_s, out.details = float(extra.get("startup_s", 0.0)), details
            out.peak_tree_pss = int(extra.get("peak_tree_pss", -1))
            out.read_pss = int(extra.get("read_pss", -1))
            out.vm_hwm = best.peak_rss_bytes
            out.median_seconds = statistics.median(out.runs)
            if out.median_seconds:
                out.median_rows_per_second = out.rows / out.median_seconds
        results.append(out)
    return results, harness.agreement(measured)


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f}" if value >= 0 else "-"


def _loads(r: Result) -> str:
    known = [load for load in r.loads if load >= 0]
    if not known:
        return "-"
    low, high = min(known), max(known)
    return f"{low:.1f}" if high - low < 0.05 else f"{low:.1f}-{high:.1f}"


def format_results(results: Sequence[Result]) -> str:
    """The side-by-side table (best and median runs, load), and sqlfeed's ratios to each
    peer of its framework on both."""
    lines = [
        f"{'contender':<24} {'rows':>10} {'best s':>7} {'med s':>7} {'best rows/s':>12} "
        f"{'med rows/s':>11} {'start s':>7} {'peak MiB':>9} {'read MiB':>9} {'load':>9}  what",
    ]
    for r in results:
        if r.error:
            lines.append(f"{r.id:<24} ERROR {r.error}")
            continue
        lines.append(
            f"{r.id:<24} {r.rows:>10,} {r.seconds:>7.2f} {r.median_seconds:>7.2f} "
            f"{r.rows_per_second:>12,.0f} {r.median_rows_per_second:>11,.0f} "
            f"{r.startup_s:>7.1f} {_mib(r.peak_tree_pss):>9} {_mib(r.read_pss):>9} "
            f"{_loads(r):>9}  {r.label}"
        )
    lines.append("")
    lines.extend(_ratios({r.id: r for r in results if not r.error}))
    return "\n".join(lines)


def _ratios(by_id: dict[str, Result]) -> list[str]:
    """sqlfeed's rows/s and memory against each peer, best run and median run."""
    lines = []
    for ours, peers in (
        ("ray-sqlfeed", ("ray-read_sql", "ray-read_sql-hashtext")),
        ("dask-sqlfeed", ("dask-read_sql_query",)),
        ("dask-sqlfeed-pyarrow", ("dask-read_sql_query",)),
    ):
        for peer in peers:
            mine, theirs = by_id.get(ours), by_id.get(peer)
            if mine is None or theirs is None or not theirs.rows_per_second:
                continue
            best = mine.rows_per_second / theirs.rows_per_second
            median = mine.median_rows_per_second / max(theirs.median_rows_per_second, 1e-9)
            peak = theirs.peak_tree_pss / max(mine.peak_tree_pss, 1)
            read = theirs.read_pss / max(mine.read_pss, 1)
            verdict = "meets" if min(best, median) >= GOAL_RATIO else "misses"
            lines.append(
                f"{ours} vs {peer}: rows/s {best:.2f}x best, {median:.2f}x median; "
                f"memory {peak:.2f}x less peak, {read:.2f}x less read ({verdict} the "
                f"{GOAL_RATIO}x rows/s goal)"
            )
    return lines


def _prepare(args: argparse.Namespace) -> Config:
    from benchmarks.tpch import DEFAULT_CACHE_DIR, DEFAULT_PG_URL, lineitem_parquet, load_postgres

    pg_url: str = args.pg_url or DEFAULT_PG_URL
    parquet = lineitem_parquet(args.scale, args.cache_dir or DEFAULT_CACHE_DIR)
    table = load_postgres(pg_url, parquet, "lineitem", args.scale)
    scheme, sep, rest = pg_url.partition("://")
    sa_url = (
        f"postgresql+psycopg://{rest}" if sep and scheme in ("postgresql", "postgres") else pg_url
    )
    return Config(
        pg_url, sa_url, table, args.partitions, args.cpus, args.strategy, args.dask_scheduler
    )


def main(argv: list[str] | None = None) -> int:
    """Prepare the data, run the contenders, print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    parser.add_argument("--partitions", type=int, default=16, help="partitions/blocks (16)")
    parser.add_argument(
        "--cpus", type=int, default=os.cpu_count() or 2, help="Ray CPUs, Dask threads"
    )
    parser.add_argument(
        "--strategy", default="auto", help="sqlfeed's strategy (default auto: ctid)"
    )
    parser.add_argument("--dask-scheduler", choices=("threads", "processes"), default="threads")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender (fastest kept)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per child run")
    parser.add_argument("--only", nargs="+", default=["*"], metavar="GLOB", help="contender ids")
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        table = {c.id: c.as_harness() for c in CONTENDERS.values()}
        return harness.child_main(table, Config, args.child, args.child_config)
    if args.smoke:
        args.scale, args.repeat, args.partitions = 0.01, 1, 2
    chosen = [c for c in CONTENDERS.values() if any(fnmatch.fnmatch(c.id, g) for g in args.only)]
    if not chosen:
        parser.error(f"--only matches no contender (ids: {', '.join(CONTENDERS)})")
    cfg = _prepare(args)
    load = os.getloadavg()
    _progress(f"TPC-H lineitem SF {args.scale:g} in PostgreSQL ({cfg.table}); load {load[0]:.2f}")
    results, disagreements = measure(chosen, cfg, args.repeat, args.timeout, check=args.smoke)
    end = os.getloadavg()
    title = (
        f"scale-out reads, TPC-H lineitem SF {args.scale:g} from PostgreSQL ({platform.node()}, "
        f"{os.cpu_count()} CPUs, {cfg.partitions} partitions, Ray num_cpus={cfg.cpus}, Dask "
        f"{cfg.dask_scheduler}, {args.repeat} run(s) each; load average {load[0]:.2f} at "
        f"start, {end[0]:.2f} at end)"
    )
    print(title)
    print(format_results(results))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(
                {
                    "title": title,
                    "config": asdict(cfg),
                    "scale": args.scale,
                    "results": [asdict(r) for r in results],
                },
                out,
                indent=2,
            )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())

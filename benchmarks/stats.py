"""Feature statistics: sqlfeed's three methods against the pandas way, time and peak memory.

On TPC-H ``lineitem`` at one scale factor, side by side in one run, for two engines:

* ``postgres``: ``SELECT <columns> FROM lineitem_sf<tag>``; sqlfeed through
  ``sqlfeed.connect("postgresql+psycopg://...")``, pandas through
  ``pandas.read_sql(sql, sqlalchemy_engine, parse_dates=["l_shipdate"])``;
* ``duckdb``: ``SELECT <columns> FROM read_parquet('<file>')``; sqlfeed through an
  in-memory ``sqlfeed.connect("duckdb://")``, pandas through ``duckdb.sql(sql).df()``.

The columns: ``l_quantity``, ``l_extendedprice``, ``l_discount``, ``l_tax`` (numeric),
``l_returnflag``, ``l_linestatus``, ``l_shipmode``, ``l_shipinstruct`` (categorical) and
``l_shipdate`` (a date, described as numeric). The contenders (``--contenders``):

* ``pushdown``: ``sqlfeed.compute_stats(sql, source, spec=..., method="pushdown")``: the
  engine aggregates every row (counts, distinct counts, min/max, mean, variance, quantile
  boundaries, histograms, top-k vocabularies);
* ``sample``: the same over ``method="sample", sample_rows=--sample-rows`` (the default
  ``limit`` sample: the first rows the engine returns, not a random sample);
* ``accumulate``: ``method="accumulate"``: the rows are streamed partition by partition
  (the planner's default partitioning, ``--readers`` reader threads) into mergeable
  accumulators; slow on PostgreSQL, ``--skip-postgres-accumulate`` leaves it out;
* ``pandas``: the whole result read into a DataFrame, then ``df.describe()``,
  ``df[c].value_counts()`` for each categorical column and ``df[c].quantile(fractions)``
  for the numeric columns and the date (the same fractions as sqlfeed's boundaries).

Every contender runs in its own fresh Python subprocess (``--repeat`` times; the fastest
run is kept, with its peak). The time runs from before connecting to the last statistic;
the imports are excluded. The peak is ``VmHWM`` from ``/proc/self/status`` read in the
child at the end (``ru_maxrss`` is not used: it is inherited across fork); ``base`` is the
child's ``VmRSS`` after its imports, when the clock started. Only the client process is
measured: PostgreSQL's server memory is not, DuckDB's (in-process) is.

Sanity checks (the script exits with status 1 when one fails or a contender errs): the
pushdown mean of ``l_extendedprice`` equals pandas' within 1e-9 relative, and the pushdown
vocabulary of ``l_shipmode`` (values and counts) is ``value_counts()``'s, in order (ties
may be ordered differently: sqlfeed breaks them by value); the same for accumulate against
pushdown, and the pushdown means of the two engines. Nothing about time is asserted.

Run from the repository root (PostgreSQL must be running; data is generated and loaded by
:mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.stats --json /tmp/stats.json
    .venv/bin/python -m benchmarks.stats --scale 0.01 --engines duckdb --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Contender

__all__ = ["COLUMNS", "CONTENDERS", "ENGINES", "Job", "Measurement", "main", "measure"]

ENGINES = ("postgres", "duckdb")
CONTENDERS = ("pushdown", "sample", "accumulate", "pandas")
SA_URL = os.environ.get(
    "SQLFEED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
).replace("postgresql://", "postgresql+psycopg://", 1)
"""The tests' PostgreSQL (``SQLFEED_TEST_POSTGRES_URL``) as a SQLAlchemy URL."""

NUMERIC = ("l_quantity", "l_extendedprice", "l_discount", "l_tax")
CATEGORICAL = ("l_returnflag", "l_linestatus", "l_shipmode", "l_shipinstruct")
DATE = "l_shipdate"
COLUMNS = (*NUMERIC, *CATEGORICAL, DATE)
BUCKETS = 10
"""Quantile buckets: sqlfeed's ``StatsSpec(buckets=...)``, pandas' quantile fractions."""
FRACTIONS = [i / BUCKETS for i in range(1, BUCKETS)]

MEAN_COLUMN = "l_extendedprice"
VOCABULARY_COLUMN = "l_shipmode"
MEAN_TOLERANCE = 1e-9


# -- the contenders, each run in a child process ------------------------------------------


@dataclass(frozen=True)
class Job:
    """What a child process runs (passed as JSON on its command line).

    Attributes:
        engine: ``postgres`` or ``duckdb``.
        contender: One of :data:`CONTENDERS`.
        sql: The query over the columns.
        url: Where it runs: a SQLAlchemy URL, or ``duckdb://`` (in memory).
        sample_rows: ``sample_rows`` of the ``sample`` method.
        readers: Reader threads of the ``accumulate`` method.
        partitions: Partitions of the ``accumulate`` method (None: the planner's default).
    """

    engine: str
    contender: str
    sql: str
    url: str
    sample_rows: int = 100_000
    readers: int = 2
    partitions: int | None = None

    @property
    def label(self) -> str:
        """``[engine contender]``, for progress lines."""
        return f"[{self.engine} {self.contender}]"


Outcome = dict[str, Any]
"""What a contender returns: rows, seconds, the checked values and details."""


def _sqlfeed(job: Job) -> Outcome:
    """``sqlfeed.compute_stats`` with the job's method; the steps are timed too."""
    import sqlfeed

    spec = sqlfeed.StatsSpec(
        kinds={
            **dict.fromkeys(NUMERIC, "numeric"),
            **dict.fromkeys(CATEGORICAL, "categorical"),
            DATE: "numeric",
        },
        buckets=BUCKETS,
    )
    options: dict[str, Any] = {}
    if job.contender == "sample":
        options["sample_rows"] = job.sample_rows
    elif job.contender == "accumulate":
        options["readers"] = job.readers
        if job.partitions is not None:
            options["partitions"] = job.partitions
    steps: list[tuple[str, float]] = []
    shown = [0.0]

    def progress(step: str) -> None:
        now = time.perf_counter()
        steps.append((step, now))
        if not step.startswith("partition ") or now - shown[0] >= 5.0:
            shown[0] = now
            _progress(f"{job.label} {step} ({now - start:.1f}s)")

    start = harness.start()
    source = sqlfeed.connect(job.url)
    try:
        connected = time.perf_counter()
        stats = sqlfeed.compute_stats(
            job.sql, source, spec=spec, method=job.contender, progress=progress, **options
        )
        seconds = time.perf_counter() - start
    finally:
        source.close()
    ends = [t for _, t in steps[1:]] + [start + seconds]
    timed = [(s, end - t) for (s, t), end in zip(steps, ends, strict=True)]
    details: dict[str, Any] = {"connect_seconds": round(connected - start, 3)}
    if job.contender == "accumulate":
        parts = [s for s, _ in timed if s.startswith("partition ")]
        details["partitions"] = parts[-1].rpartition("/")[2] if parts else None
    else:
        details["steps"] = {s: round(d, 3) for s, d in timed}
    vocabulary = stats[VOCABULARY_COLUMN]
    return {
        "rows": stats.rows,
        "seconds": seconds,
        "mean": stats[MEAN_COLUMN].mean,
        "vocabulary": [str(v) for v in vocabulary.vocabulary],
        "vocabulary_counts": [int(n) for n in vocabulary.vocabulary_counts],
        "details": details,
    }


def _pandas(job: Job) -> Outcome:
    """The pandas way: read everything, then describe, value_counts and quantile."""
    import pandas

    if job.engine == "postgres":
        import sqlalchemy

        start = harness.start()
        engine = sqlalchemy.create_engine(job.url)
        try:
            frame = pandas.read_sql(job.sql, engine, parse_dates=[DATE])
        finally:
            engine.dispose()
    else:
        import duckdb

        start = harness.start()
        relation: Any = duckdb.sql(job.sql)
        frame = relation.df()
    read = time.perf_counter()
    described = frame.describe()
    counts = {column: frame[column].value_counts() for column in CATEGORICAL}
    quantiles = {column: frame[column].quantile(FRACTIONS) for column in (*NUMERIC, DATE)}
    seconds = time.perf_counter() - start
    vocabulary = counts[VOCABULARY_COLUMN]
    mean: Any = described.loc["mean", MEAN_COLUMN]
    return {
        "rows": len(frame),
        "seconds": seconds,
        "mean": float(mean),
        "vocabulary": [str(v) for v in vocabulary.index],
        "vocabulary_counts": [int(n) for n in vocabulary.to_numpy()],
        "details": {
            "read_seconds": round(read - start, 3),
            "stats_seconds": round(seconds - (read - start), 3),
            "dtypes": {c: str(t) for c, t in frame.dtypes.items()},
            "quantiles_of": sorted(quantiles),
            "pandas": pandas.__version__,
        },
    }


RUNNERS: dict[str, Callable[[Job], Outcome]] = {
    "pushdown": _sqlfeed,
    "sample": _sqlfeed,
    "accumulate": _sqlfeed,
    "pandas": _pandas,
}


def _outcome(run: Callable[[Job], Outcome]) -> Callable[[Job], harness.Outcome]:
    """``run``'s result dict as a harness outcome (the checked values in the details)."""

    def outcome(job: Job) -> harness.Outcome:
        got = run(job)
        details = dict(got.get("details") or {})
        details["checked"] = {k: got[k] for k in ("mean", "vocabulary", "vocabulary_counts")}
        return int(got["rows"]), float(got["seconds"]), details

    return outcome


CONTENDER_TABLE: dict[str, Contender[Job]] = {
    f"{engine}-{name}": Contender(
        f"{engine}-{name}", name, _outcome(RUNNERS[name]), group=engine, partial=name == "sample"
    )
    for engine in ENGINES
    for name in CONTENDERS
}
"""``<engine>-<contender>``, run through :mod:`benchmarks.harness` (a job is its config);
the contenders of one engine describe the same rows (``sample`` a part of them)."""


# -- the parent: runs, table, checks -------------------------------------------------------


@dataclass
class Measurement:
    """The result of one contender on one engine.

    Attributes:
        engine: ``postgres`` or ``duckdb``.
        contender: One of :data:`CONTENDERS`.
        rows: Rows described (the sample's for ``sample``; -1 on error).
        seconds: Best time (connect + statistics; imports excluded).
        peak_rss_bytes: ``VmHWM`` of the child process of the best run.
        rss_after_imports_bytes: Its ``VmRSS`` when the clock started.
        mean: The mean of ``l_extendedprice``.
        vocabulary: The ``l_shipmode`` values, most frequent first.
        vocabulary_counts: Their counts.
        runs: Seconds of every run.
        details: What the contender reported (steps, read/stats split, partitions).
        error: The error, if it failed.
    """

    engine: str
    contender: str
    rows: int = -1
    seconds: float = 0.0
    peak_rss_bytes: int = -1
    rss_after_imports_bytes: int = -1
    mean: float | None = None
    vocabulary: list[str] = field(default_factory=list)
    vocabulary_counts: list[int] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def measure(jobs: Sequence[Job], repeat: int, timeout: float) -> list[Measurement]:
    """Run every job ``repeat`` times (interleaved), each run in its own subprocess.

    Args:
        jobs: What to run.
        repeat: Runs per job; the fastest is kept (with its peak RSS).
        timeout: Seconds after which a child is killed.

    Returns:
        One :class:`Measurement` per job (a disagreement on rows is an error).
    """
    entries = [(CONTENDER_TABLE[f"{job.engine}-{job.contender}"], job) for job in jobs]
    measured = harness.measure("stats", entries, repeat, timeout)
    results = []
    for job, got in zip(jobs, measured, strict=True):
        best = Measurement(job.engine, job.contender)
        best.error = got.error or got.skipped
        best.runs = [round(r.seconds, 3) for r in got.runs]
        run = got.best_run
        if run is not None:
            best.rows, best.seconds = run.rows, run.seconds
            best.peak_rss_bytes = run.peak_rss_bytes
            best.rss_after_imports_bytes = run.rss_after_imports_bytes
            best.details = dict(run.details)
            checked = best.details.pop("checked", {})
            best.mean = checked.get("mean")
            best.vocabulary = list(checked.get("vocabulary") or [])
            best.vocabulary_counts = list(checked.get("vocabulary_counts") or [])
        results.append(best)
    for problem in harness.agreement(measured):
        _progress(f"DISAGREE: {problem}")
        results[0].error = results[0].error or f"contenders disagree: {problem}"
    return results


def _find(results: Sequence[Measurement], engine: str, contender: str) -> Measurement | None:
    """The successful measurement of ``contender`` on ``engine``, if any."""
    for m in results:
        if m.engine == engine and m.contender == contender and m.error is None:
            return m
    return None


def _mb(value: int) -> str:
    return f"{value / 2**20:.0f}" if value >= 0 else "?"


def _ratio(numerator: float, denominator: float) -> str:
    if denominator <= 0 or numerator < 0:
        return "-"
    ratio = numerator / denominator
    return f"{ratio:.2f}x" if ratio < 1 else f"{ratio:.1f}x"


def format_table(results: Sequence[Measurement]) -> str:
    """Render the results as an aligned text table.

    ``time / pd`` and ``peak / pd`` are relative to sqlfeed pushdown on the same engine:
    on the ``pandas`` row they are pandas' time and peak over sqlfeed pushdown's.

    Args:
        results: The measurements.

    Returns:
        The table, one line per measurement, with a header.
    """
    header = (
        "engine",
        "contender",
        "seconds",
        "peak MB",
        "base MB",
        "time / pd",
        "peak / pd",
        "rows",
        "notes",
    )
    lines: list[tuple[str, ...]] = []
    for m in results:
        if m.error is not None:
            lines.append((m.engine, m.contender, "-", "-", "-", "-", "-", "-", m.error))
            continue
        pushdown = _find(results, m.engine, "pushdown")
        notes = ""
        if m.contender == "pandas":
            d = m.details
            notes = f"read {d.get('read_seconds', 0):.1f}s + stats {d.get('stats_seconds', 0):.1f}s"
        elif m.contender == "accumulate":
            notes = f"{m.details.get('partitions')} partitions"
        if len(m.runs) > 1:
            notes = f"{notes}; runs {', '.join(f'{s:.2f}' for s in m.runs)}".lstrip("; ")
        lines.append(
            (
                m.engine,
                m.contender,
                f"{m.seconds:.2f}",
                _mb(m.peak_rss_bytes),
                _mb(m.rss_after_imports_bytes),
                _ratio(m.seconds, pushdown.seconds) if pushdown else "-",
                _ratio(m.peak_rss_bytes, pushdown.peak_rss_bytes) if pushdown else "-",
                str(m.rows),
                notes,
            )
        )
    return harness.table(header, lines, right={2, 3, 4, 5, 6, 7})


@dataclass
class Check:
    """One sanity check.

    Attributes:
        name: What is compared.
        ok: Whether it holds (None: not run, a side is missing).
        detail: The values compared.
    """

    name: str
    ok: bool | None
    detail: str


def _mean_check(name: str, a: Measurement | None, b: Measurement | None) -> Check:
    """``a.mean`` and ``b.mean`` agree within :data:`MEAN_TOLERANCE` relative."""
    if a is None or b is None or a.mean is None or b.mean is None:
        return Check(name, None, "not measured")
    relative = abs(a.mean - b.mean) / max(abs(a.mean), abs(b.mean), 1e-300)
    detail = f"{a.mean!r} vs {b.mean!r}, relative difference {relative:.2e}"
    return Check(name, relative <= MEAN_TOLERANCE, detail)


def _vocabulary_check(name: str, a: Measurement | None, b: Measurement | None) -> Check:
    """The vocabularies agree: same values with the same counts, in order (ties aside)."""
    if a is None or b is None:
        return Check(name, None, "not measured")
    ours = list(zip(a.vocabulary, a.vocabulary_counts, strict=True))
    theirs = list(zip(b.vocabulary, b.vocabulary_counts, strict=True))
    shown = ", ".join(f"{v} {n}" for v, n in ours)
    if ours == theirs:
        return Check(name, True, shown)
    if dict(ours) == dict(theirs) and a.vocabulary_counts == b.vocabulary_counts:
        return Check(name, True, f"{shown} (ties ordered differently)")
    return Check(name, False, f"{shown} != {', '.join(f'{v} {n}' for v, n in theirs)}")


def sanity_checks(results: Sequence[Measurement], engines: Sequence[str]) -> list[Check]:
    """The agreement checks described in the module docstring.

    Args:
        results: The measurements.
        engines: The engines measured.

    Returns:
        The checks, some of them possibly not run (``ok`` None).
    """
    checks = []
    for engine in engines:
        pushdown = _find(results, engine, "pushdown")
        pandas = _find(results, engine, "pandas")
        accumulate = _find(results, engine, "accumulate")
        checks += [
            _mean_check(f"{engine}: pushdown mean {MEAN_COLUMN} == pandas", pushdown, pandas),
            _vocabulary_check(
                f"{engine}: pushdown {VOCABULARY_COLUMN} vocabulary == value_counts",
                pushdown,
                pandas,
            ),
        ]
        if accumulate is not None and pushdown is not None:
            checks += [
                _mean_check(f"{engine}: accumulate mean == pushdown", accumulate, pushdown),
                _vocabulary_check(
                    f"{engine}: accumulate vocabulary == pushdown", accumulate, pushdown
                ),
            ]
    first, second = (_find(results, e, "pushdown") for e in (*engines, "", "")[:2])
    if first is not None and second is not None:
        checks.append(_mean_check(f"pushdown mean {engines[0]} == {engines[1]}", first, second))
    return checks


# -- setup and main -----------------------------------------------------------------------


def _columns_sql(relation: str) -> str:
    return f"SELECT {', '.join(COLUMNS)} FROM {relation}"


def _warm_up(engine: str, sql: str, url: str) -> dict[str, Any]:
    """Read the data once so the first contender does not pay for a cold cache.

    Returns:
        The engine's version and settings, for the JSON output.
    """
    start = time.perf_counter()
    info: dict[str, Any]
    if engine == "postgres":
        import psycopg

        libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"SELECT count(*) FROM ({sql}) AS q").fetchone()
            settings = (
                "server_version",
                "max_parallel_workers_per_gather",
                "work_mem",
                "shared_buffers",
                "jit",
            )
            info = {}
            for setting in settings:
                row = conn.execute(f"SHOW {setting}").fetchone()
                info[setting] = row[0] if row else None
    else:
        import duckdb

        with duckdb.connect() as con:
            con.execute(f"SELECT count(*), count(DISTINCT l_shipmode) FROM ({sql})").fetchone()
            row = con.execute("SELECT current_setting('threads')").fetchone()
            info = {"version": duckdb.__version__, "threads": row[0] if row else None}
    _progress(f"[{engine}] warm-up read in {time.perf_counter() - start:.1f}s: {info}")
    return info


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Feature statistics: sqlfeed pushdown / sample / accumulate against pandas."
    )
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument(
        "--contenders",
        nargs="+",
        choices=CONTENDERS,
        default=list(CONTENDERS),
        help="what to run (default: all)",
    )
    parser.add_argument(
        "--skip-postgres-accumulate",
        action="store_true",
        help="leave out method='accumulate' on PostgreSQL (it streams every row)",
    )
    parser.add_argument(
        "--sample-rows", type=int, default=100_000, help="sample_rows of method='sample'"
    )
    parser.add_argument(
        "--readers", type=int, default=2, help="reader threads of method='accumulate'"
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of method='accumulate' (default: the planner's)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per contender, fastest kept (default 1)"
    )
    parser.add_argument(
        "--child-timeout",
        type=float,
        default=1800.0,
        help="seconds after which a contender's process is killed (default 1800)",
    )
    parser.add_argument("--no-warm-up", action="store_true", help="skip the warm-up reads")
    parser.add_argument("--sa-url", default=SA_URL, help="PostgreSQL as a SQLAlchemy URL")
    parser.add_argument("--cache-dir", type=Path, default=None, help="TPC-H data cache")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default=None, help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat, args.sample_rows = 0.01, 1, 10_000
    if args.repeat < 1 or args.readers < 1 or args.sample_rows < 1:
        parser.error("--repeat, --readers and --sample-rows must be >= 1")
    if args.partitions is not None and args.partitions < 1:
        parser.error("--partitions must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and the checks, optionally write JSON.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        0, or 1 when a contender failed or a sanity check did not hold.
    """
    args = _parse_args(argv)
    if args.child is not None:
        return harness.child_main(CONTENDER_TABLE, Job, args.child, args.child_config)
    # Imported here, not at the top: a child process imports only its contender's modules.
    from benchmarks.tpch import DEFAULT_CACHE_DIR, lineitem_parquet, load_postgres

    started = time.perf_counter()
    load_before = os.getloadavg()
    _progress(f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    parquet = lineitem_parquet(args.scale, args.cache_dir or DEFAULT_CACHE_DIR)
    _progress(f"TPC-H lineitem SF {args.scale:g}: {parquet}")
    engines = list(dict.fromkeys(args.engines))
    contenders = list(dict.fromkeys(args.contenders))
    jobs: list[Job] = []
    engines_info: dict[str, dict[str, Any]] = {}
    for engine in engines:
        if engine == "postgres":
            libpq = args.sa_url.replace("postgresql+psycopg://", "postgresql://", 1)
            table = load_postgres(libpq, parquet, "lineitem", args.scale)
            sql, url = _columns_sql(table), args.sa_url
        else:
            path = str(Path(parquet).resolve()).replace("'", "''")
            sql, url = _columns_sql(f"read_parquet('{path}')"), "duckdb://"
        engines_info[engine] = {"sql": sql, "url": url}
        if not args.no_warm_up:
            engines_info[engine].update(_warm_up(engine, sql, url))
        for contender in contenders:
            if contender == "accumulate" and engine == "postgres" and args.skip_postgres_accumulate:
                _progress(f"[{engine} {contender}] skipped (--skip-postgres-accumulate)")
                continue
            jobs.append(
                Job(engine, contender, sql, url, args.sample_rows, args.readers, args.partitions)
            )

    results = measure(jobs, args.repeat, args.child_timeout)
    checks = sanity_checks(results, engines)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    print(
        f"Feature statistics, TPC-H lineitem SF {args.scale:g}, {len(COLUMNS)} columns "
        f"({platform.node()}, {os.cpu_count()} CPUs, load {load_before[0]:.2f} before / "
        f"{load_after[0]:.2f} after, total {elapsed:.0f}s)"
    )
    print(format_table(results))
    print("time / pd, peak / pd: over sqlfeed pushdown on the same engine; peak = client VmHWM")
    for engine in engines:
        pushdown, pandas = _find(results, engine, "pushdown"), _find(results, engine, "pandas")
        if pushdown is not None and pandas is not None:
            print(
                f"{engine}: pandas / sqlfeed pushdown: time "
                f"{_ratio(pandas.seconds, pushdown.seconds)}, peak RSS "
                f"{_ratio(pandas.peak_rss_bytes, pushdown.peak_rss_bytes)}"
            )
    for check in checks:
        mark = {True: "✓", False: "✗ FAIL", None: "- not run"}[check.ok]
        print(f"{mark} {check.name}: {check.detail}")
    failed = [c for c in checks if c.ok is False] + [m for m in results if m.error]
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "parquet": str(parquet),
            "columns": {"numeric": NUMERIC, "categorical": CATEGORICAL, "date": DATE},
            "buckets": BUCKETS,
            "sample_rows": args.sample_rows,
            "readers": args.readers,
            "partitions": args.partitions,
            "repeat": args.repeat,
            "elapsed_seconds": round(elapsed, 2),
            "host": {
                "node": platform.node(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_before": load_before,
                "load_after": load_after,
            },
            "engines": engines_info,
            "results": [asdict(m) for m in results],
            "checks": [asdict(c) for c in checks],
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        _progress(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

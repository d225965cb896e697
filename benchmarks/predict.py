"""Predictions written back into PostgreSQL: ``sqlfeed predict`` against what a user writes
(``pandas.read_sql`` in chunks, the model, ``DataFrame.to_sql``), and the table sink alone
against ``COPY`` from a CSV file and ``DataFrame.to_sql(method="multi")``.

The input is TPC-H ``lineitem`` at ``--scale`` (SF 1: 6,001,215 rows; :mod:`benchmarks.tpch`
generates it), the first ``--rows`` rows of it (default all), as the table
``predict_in_sf<tag>[_r<rows>]`` in PostgreSQL (loaded once, cached by name)::

    id BIGINT PRIMARY KEY (l_orderkey * 8 + l_linenumber),
    l_quantity, l_extendedprice, l_discount, l_tax DOUBLE PRECISION,
    l_shipmode, l_shipinstruct, l_linestatus TEXT, returned INTEGER (l_returnflag = 'R')

A Keras ``linear`` model (``sqlfeed.ml.train(..., family="linear", epochs=1)`` on a 10%
sample, label ``returned``) is trained once into ``<cache>/predict_model_<table>``.

Contenders (``--only`` ids, globs), group ``predict`` (same rows; the checksum is
``SUM(id)`` of the output table):

* ``sqlfeed-1``: ``sqlfeed.ml.predict(sql, url, model, into=..., key=["id"], readers=1)``,
  what ``sqlfeed predict --readers 1`` runs, in this process (clock after the imports).
* ``sqlfeed-threads4``: the same with ``readers=4`` (worker threads of one process).
* ``sqlfeed-procs4``: four ``sqlfeed predict --queue sqlite:///... --job NAME --key id``
  processes; the clock includes their start (interpreter, TensorFlow import, model load).
  Peak memory: the largest worker's (``RUSAGE_CHILDREN``).
* ``pandas``: ``pandas.read_sql(text(sql), engine, chunksize=--chunk)``, each chunk scored
  by the same model and preprocessing (``sqlfeed.ml.load(DIR).predict_batch(
  pyarrow.RecordBatch.from_pandas(chunk))``), ``DataFrame.to_sql(..., if_exists="append",
  method="multi", chunksize=1000)``.

Group ``sink`` (the input table's rows, already in memory as Arrow / pandas / a CSV file
before the clock starts; checksum ``SUM(id)``):

* ``sink-sqlfeed``: ``sqlfeed.write_table(arrow_table, url, table)`` (staging table, commit
  records, rename).
* ``sink-copy``: ``CREATE TABLE`` + psycopg ``COPY ... FROM STDIN (FORMAT csv)`` fed from
  the CSV file (the floor).
* ``sink-copy-key``: the same into a table with the primary key on ``id`` (the sink's
  staging table has a unique index too: the key, or ``_sqlfeed_partition, _sqlfeed_row``).
* ``sink-pandas``: ``DataFrame.to_sql(table, engine, method="multi", chunksize=1000)``.

Goals (reported, never asserted): the best 4-worker sqlfeed predict >= 3x the pandas rows/s;
the sink >= 0.7x the COPY's rows/s. Peak memory should be bounded by the batch, not the table.

Run from the repository root on an otherwise idle machine (PostgreSQL running)::

    .venv/bin/python -m benchmarks.predict                    # SF 1 (6M rows), 1 round
    .venv/bin/python -m benchmarks.predict --scale 0.1 --rows 200000 --only 'sqlfeed-*' pandas
    .venv/bin/python -m benchmarks.predict --smoke            # 5,000 rows, checked
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress
from benchmarks.harness import Contender, Outcome, start

__all__ = ["CONTENDERS", "Config", "main"]

KEY = "id"
LABEL = "returned"
FEATURES = (
    "l_quantity",
    "l_extendedprice",
    "l_discount",
    "l_tax",
    "l_shipmode",
    "l_shipinstruct",
    "l_linestatus",
)
PREDICT_SQL = f"SELECT {KEY}, {', '.join(FEATURES)} FROM {{table}}"
GOAL_PREDICT = 3.0
GOAL_SINK = 0.7
WORKERS = 4


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line).

    Attributes:
        pg_url: PostgreSQL's SQLAlchemy URL (``postgresql+psycopg://...``).
        table: The input table.
        model: The model folder.
        parquet: The input rows as a Parquet file (the sink's data).
        csv: The input rows as a CSV file without header (the COPY's data).
        work_dir: Scratch folder (queues).
        chunk: pandas' read chunk and sqlfeed's batch size.
    """

    pg_url: str
    table: str
    model: str
    parquet: str
    csv: str
    work_dir: str
    chunk: int = 50_000

    def query(self) -> str:
        """The SELECT the predict contenders score."""
        return PREDICT_SQL.format(table=self.table)

    def out(self, contender: str) -> str:
        """The output table of ``contender``."""
        return f"bench_predict_{contender.replace('-', '_')}"

    def libpq(self) -> str:
        """The URL for psycopg (without SQLAlchemy's driver)."""
        return self.pg_url.replace("postgresql+psycopg://", "postgresql://", 1)


# -- the children --------------------------------------------------------------------------


def _import(*modules: str) -> None:
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for module in modules:
        importlib.import_module(module)


def _tally(cfg: Config, table: str, seconds: float, extra: dict[str, Any]) -> Outcome:
    """Rows and ``SUM(id)`` of the written table (and the mean probability, if any)."""
    import psycopg

    with psycopg.connect(cfg.libpq()) as conn:
        cols = [r[0] for r in conn.execute(f"SELECT * FROM {table} LIMIT 0").description or []]
        prob = f"predicted_{LABEL}_prob"
        mean = f", AVG({prob})" if prob in cols else ", NULL"
        row = conn.execute(f"SELECT COUNT(*), SUM({KEY}){mean} FROM {table}").fetchone()
    assert row is not None
    details = dict(extra)
    if row[2] is not None:
        details["mean_prob"] = round(float(row[2]), 6)
    if harness.checking():
        details["checksum"] = int(row[1] or 0)
    return int(row[0]), seconds, details


def _sqlfeed_api(cfg: Config, name: str, readers: int) -> Outcome:
    """``sqlfeed.ml.predict`` with ``readers`` worker threads in this process."""
    _import("tensorflow", "keras", "psycopg")
    from sqlfeed.ml.scoring import predict

    out = cfg.out(name)
    begun = start()
    predict(
        cfg.query(),
        cfg.pg_url,
        cfg.model,
        into=out,
        key=[KEY],
        readers=readers,
        batch_size=cfg.chunk,
    )
    return _tally(cfg, out, time.perf_counter() - begun, {})


def _sqlfeed_procs(cfg: Config, name: str) -> Outcome:
    """``WORKERS`` ``sqlfeed predict`` processes sharing one SQLite queue and a job."""
    out = cfg.out(name)
    queue = Path(cfg.work_dir) / f"queue-{uuid.uuid4().hex[:8]}.sqlite"
    sqlfeed_cli = str(Path(sys.executable).parent / "sqlfeed")
    command = [
        *(sqlfeed_cli, "predict", "--db", cfg.pg_url, "--model", cfg.model, "--into", out),
        *("--key", KEY, "--queue", f"sqlite:///{queue}", "--job", "p"),
        *("--batch-size", str(cfg.chunk), cfg.query()),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    begun = start()
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    time.sleep(0.5)  # the first creates the job and the output; the others join
    rest = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL) for _ in range(WORKERS - 1)
    ]
    codes = [p.wait() for p in (first, *rest)]
    seconds = time.perf_counter() - begun
    if any(codes):
        raise RuntimeError(f"sqlfeed predict workers exited with {codes}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    details = {
        "worker_peak_rss_mb": round(usage.ru_maxrss * 1024 / 2**20),
        "workers_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
    }
    return _tally(cfg, out, seconds, details)


def _pandas(cfg: Config, name: str) -> Outcome:
    """The user's program: chunks of ``pandas.read_sql``, the model, ``to_sql``."""
    _import("tensorflow", "keras", "pandas", "sqlalchemy", "psycopg", "sqlfeed.ml.artifact")
    import numpy as np
    import pandas
    import pyarrow as pa
    import sqlalchemy

    import sqlfeed.ml

    out = cfg.out(name)
    begun = start()
    model = sqlfeed.ml.load(cfg.model)
    engine = sqlalchemy.create_engine(cfg.pg_url)
    try:
        for chunk in pandas.read_sql(sqlalchemy.text(cfg.query()), engine, chunksize=cfg.chunk):
            batch = pa.RecordBatch.from_pandas(chunk, preserve_index=False)
            probability = np.asarray(model.predict_batch(batch), dtype=np.float64)
            frame = pandas.DataFrame(
                {
                    KEY: chunk[KEY].to_numpy(),
                    f"predicted_{LABEL}": (probability > 0.5).astype("int64"),
                    f"predicted_{LABEL}_prob": probability,
                }
            )
            frame.to_sql(
                out, engine, if_exists="append", index=False, method="multi", chunksize=1000
            )
    finally:
        engine.dispose()
    return _tally(cfg, out, time.perf_counter() - begun, {})


def _sink_sqlfeed(cfg: Config, name: str) -> Outcome:
    """``sqlfeed.write_table`` of the Arrow table."""
    _import("pyarrow.parquet", "psycopg", "sqlfeed", "sqlfeed.sink")
    import pyarrow.parquet as pq

    import sqlfeed

    data = pq.read_table(cfg.parquet)
    out = cfg.out(name)
    begun = start()
    sqlfeed.write_table(data, cfg.pg_url, out)
    return _tally(cfg, out, time.perf_counter() - begun, {})


def _sink_copy(cfg: Config, name: str, including: str = "") -> Outcome:
    """``CREATE TABLE`` and ``COPY FROM STDIN`` of the CSV file (the floor); with
    ``including`` ``INCLUDING INDEXES``, the table has the input's primary key on ``id``
    (a unique index, as the sink's staging table has one for row identity)."""
    _import("psycopg")
    import psycopg

    out = cfg.out(name)
    begun = start()
    with psycopg.connect(cfg.libpq()) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {out} (LIKE {cfg.table} {including})")
        with open(cfg.csv, "rb") as f, cur.copy(f"COPY {out} FROM STDIN (FORMAT csv)") as copy:
            while block := f.read(1 << 20):
                copy.write(block)
    return _tally(cfg, out, time.perf_counter() - begun, {})


def _sink_pandas(cfg: Config, name: str) -> Outcome:
    """``DataFrame.to_sql(method="multi")`` of the frame."""
    _import("pandas", "pyarrow.parquet", "sqlalchemy", "psycopg")
    import pyarrow.parquet as pq
    import sqlalchemy

    frame = pq.read_table(cfg.parquet).to_pandas()
    out = cfg.out(name)
    begun = start()
    engine = sqlalchemy.create_engine(cfg.pg_url)
    try:
        frame.to_sql(out, engine, index=False, method="multi", chunksize=1000)
    finally:
        engine.dispose()
    return _tally(cfg, out, time.perf_counter() - begun, {})


def _contenders() -> dict[str, Contender[Config]]:
    tf = ("tensorflow", "keras")
    made: list[Contender[Config]] = [
        Contender(
            "sqlfeed-1",
            "sqlfeed.ml.predict readers=1",
            lambda cfg: _sqlfeed_api(cfg, "sqlfeed-1", 1),
            "predict",
            tf,
        ),
        Contender(
            "sqlfeed-threads4",
            f"sqlfeed.ml.predict readers={WORKERS}",
            lambda cfg: _sqlfeed_api(cfg, "sqlfeed-threads4", WORKERS),
            "predict",
            tf,
        ),
        Contender(
            "sqlfeed-procs4",
            f"{WORKERS} x sqlfeed predict --queue --job (start included)",
            lambda cfg: _sqlfeed_procs(cfg, "sqlfeed-procs4"),
            "predict",
            tf,
        ),
        Contender(
            "pandas",
            "read_sql(chunksize) -> model -> to_sql(multi)",
            lambda cfg: _pandas(cfg, "pandas"),
            "predict",
            (*tf, "pandas", "sqlalchemy"),
        ),
        Contender(
            "sink-sqlfeed",
            "sqlfeed.write_table(arrow table)",
            lambda cfg: _sink_sqlfeed(cfg, "sink-sqlfeed"),
            "sink",
        ),
        Contender(
            "sink-copy",
            "COPY FROM STDIN of a CSV file",
            lambda cfg: _sink_copy(cfg, "sink-copy"),
            "sink",
        ),
        Contender(
            "sink-copy-key",
            "COPY FROM STDIN of a CSV file, primary key on id",
            lambda cfg: _sink_copy(cfg, "sink-copy-key", "INCLUDING INDEXES"),
            "sink",
        ),
        Contender(
            "sink-pandas",
            'DataFrame.to_sql(method="multi")',
            lambda cfg: _sink_pandas(cfg, "sink-pandas"),
            "sink",
            ("pandas", "sqlalchemy"),
        ),
    ]
    return {c.id: c for c in made}


CONTENDERS = _contenders()


# -- the parent ----------------------------------------------------------------------------


def _input_parquet(args: argparse.Namespace) -> tuple[Path, str]:
    """The input rows as a cached Parquet file, and the table name they load into."""
    import duckdb

    from benchmarks import tpch

    lineitem = tpch.lineitem_parquet(args.scale, args.cache_dir)
    suffix = f"_r{args.rows}" if args.rows else ""
    base = f"predict_in{suffix}"
    target: Path = args.cache_dir / f"sf{tpch.scale_tag(args.scale)}" / f"{base}.parquet"
    if not target.is_file():
        numeric = ", ".join(f"CAST({c} AS DOUBLE) AS {c}" for c in FEATURES[:4])
        limit = f" LIMIT {args.rows}" if args.rows else ""
        partial = target.with_suffix(".partial")
        with duckdb.connect() as con:
            con.execute(
                f"COPY (SELECT l_orderkey * 8 + l_linenumber AS {KEY}, {numeric}, "
                f"{', '.join(FEATURES[4:])}, "
                f"CAST(CASE WHEN l_returnflag = 'R' THEN 1 ELSE 0 END AS INTEGER) AS {LABEL} "
                f"FROM read_parquet('{lineitem}') ORDER BY {KEY}{limit}) "
                f"TO '{partial}' (FORMAT parquet)"
            )
        os.replace(partial, target)
    return target, tpch.table_name(base, args.scale)


def _load(args: argparse.Namespace, parquet: Path, table: str) -> tuple[str, Path]:
    """The input table in PostgreSQL (cached, with its primary key) and its CSV file."""
    import psycopg
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    from benchmarks import tpch

    base = table.rsplit("_sf", 1)[0]
    name = tpch.load_postgres(args.pg_url, parquet, base, args.scale)
    with psycopg.connect(args.pg_url) as conn:
        has_key = conn.execute(
            "SELECT COUNT(*) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
            (name,),
        ).fetchone()
        if not has_key or not has_key[0]:
            conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY ({KEY})")
    csv = parquet.with_suffix(".csv")
    if not csv.is_file():
        partial = csv.with_suffix(".partial")
        options = pa_csv.WriteOptions(include_header=False)
        pa_csv.write_csv(pq.read_table(parquet), str(partial), options)
        os.replace(partial, csv)
    return name, csv


def _model(args: argparse.Namespace, pg_url: str, table: str) -> Path:
    """The model, trained once on a 10% sample into the cache."""
    folder: Path = args.cache_dir / f"predict_model_{table}"
    if (folder / "manifest.json").is_file():
        return folder
    import sqlfeed.ml

    progress(f"training the model into {folder}")
    sample = (
        f"SELECT {KEY}, {', '.join(FEATURES)}, {LABEL} FROM {table} WHERE {KEY} % 10 = 0"
        if not args.smoke
        else f"SELECT {KEY}, {', '.join(FEATURES)}, {LABEL} FROM {table}"
    )
    sqlfeed.ml.train(
        sample,
        pg_url,
        label=LABEL,
        out=folder,
        family="linear",
        key=KEY,
        epochs=1,
        seed=0,
        report=False,
    )
    return folder


def _drop(cfg: Config, contender: Contender[Config]) -> None:
    """Drop ``contender``'s output table."""
    import psycopg

    with psycopg.connect(cfg.libpq(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {cfg.out(contender.id)}")


def _mb(value: int) -> str:
    return f"{value / 2**20:,.0f}" if value >= 0 else "-"


def _report(results: Sequence[harness.Result]) -> str:
    """The table of both groups and the goal lines."""
    by_id = {r.id: r for r in results}
    rows = []
    for result in results:
        run = result.best_run
        if run is None:
            why = f"ERROR {result.error}" if result.error else f"skipped: {result.skipped}"
            rows.append([result.id, result.label, "-", "-", "-", "-", "-", "-", why])
            continue
        base = by_id.get("pandas" if result.group == "predict" else "sink-copy")
        rate = result.rate()
        base_rate = base.rate() if base is not None else None
        shown = harness.ratio(rate, base_rate)
        peak = max(run.peak_rss_bytes, int(run.details.get("worker_peak_rss_mb", -1)) * 2**20)
        workers = "worker_peak_rss_mb" in run.details
        growth = -1 if workers else run.peak_rss_bytes - run.rss_after_imports_bytes
        notes = ", ".join(f"{k} {v}" for k, v in run.details.items() if k != "checksum")
        rows.append(
            [
                result.id,
                result.label,
                f"{run.rows:,}",
                f"{run.seconds:.2f}",
                f"{rate or 0:,.0f}",
                "-" if shown is None else f"{shown:.2f}",
                _mb(peak),
                _mb(growth),
                notes,
            ]
        )
    header = (
        *("contender", "what", "rows", "best s", "rows/s", "x base"),
        *("peak RSS MB", "+ after imports MB", "notes"),
    )
    fours = [by_id[i].rate() for i in ("sqlfeed-threads4", "sqlfeed-procs4") if i in by_id]
    best_four = max((r for r in fours if r is not None), default=None)
    pandas, copy, sink = (by_id.get(i) for i in ("pandas", "sink-copy", "sink-sqlfeed"))
    keyed = by_id.get("sink-copy-key")
    goals = [
        harness.Goal(
            f"sqlfeed predict {WORKERS} workers rows/s vs pandas",
            harness.ratio(best_four, pandas.rate() if pandas else None),
            GOAL_PREDICT,
        ).line(),
        harness.Goal(
            "sqlfeed.write_table rows/s vs COPY",
            harness.ratio(sink.rate() if sink else None, copy.rate() if copy else None),
            GOAL_SINK,
        ).line(),
        harness.Goal(
            "sqlfeed.write_table rows/s vs COPY into a keyed table (same index work)",
            harness.ratio(sink.rate() if sink else None, keyed.rate() if keyed else None),
            GOAL_SINK,
        ).line(),
    ]
    note = (
        "x base: rows/s over pandas' (predict) or the COPY's (sink); + after imports: peak "
        "RSS less the RSS when the clock started (TensorFlow alone is most of the peak)"
    )
    return "\n\n".join([harness.table(header, rows, right=range(2, 8)), note, "\n".join(goals)])


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    from benchmarks.tpch import DEFAULT_CACHE_DIR, DEFAULT_PG_URL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1: 6M rows)")
    parser.add_argument("--rows", type=int, default=0, help="the first N rows only (0: all)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="contender ids (globs)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (best kept)")
    parser.add_argument("--chunk", type=int, default=50_000, help="pandas chunk, sqlfeed batch")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="libpq URL")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    args.pg_url = args.pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    if args.smoke:
        args.scale, args.rows, args.rounds, args.chunk = 0.01, 5000, 1, 1000
    return args


def main(argv: list[str] | None = None) -> int:
    """Prepare the data and the model, run the contenders, print the table and the goals.

    Returns:
        0; 1 when a contender failed or the contenders of a group wrote other rows.
    """
    args = _parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config or "{}")
    chosen = [
        c
        for c in CONTENDERS.values()
        if not args.only or any(fnmatch.fnmatchcase(c.id, p) for p in args.only)
    ]
    if not chosen:
        progress(f"nothing selected; the ids are {', '.join(CONTENDERS)}")
        return 2
    load_start = harness.load_line()
    started = time.perf_counter()
    parquet, table = _input_parquet(args)
    table, csv = _load(args, parquet, table)
    sa_url = args.pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    model = _model(args, sa_url, table)
    with tempfile.TemporaryDirectory(prefix="sqlfeed-bench-predict-") as work_dir:
        cfg = Config(sa_url, table, str(model), str(parquet), str(csv), work_dir, args.chunk)
        progress(f"input {table} ({parquet}), model {model}")

        def drop(contender: Contender[Config], _cfg: Config) -> None:
            _drop(cfg, contender)

        def dropped(contender: Contender[Config], _cfg: Config, _run: harness.Run) -> None:
            _drop(cfg, contender)

        measured = harness.measure(
            "predict",
            [(c, cfg) for c in chosen],
            args.rounds,
            args.timeout,
            check=args.smoke,
            before=drop,
            after=dropped,
        )
    disagreements = harness.agreement(measured)
    rows = f"first {args.rows:,} rows" if args.rows else "all rows"
    print(
        f"predict into PostgreSQL: TPC-H lineitem SF {args.scale:g} ({rows}), key {KEY}, "
        f"Keras linear model, {len(FEATURES)} features; batch/chunk {args.chunk:,}; "
        f"{args.rounds} interleaved round(s) ({platform.node()}, Python "
        f"{platform.python_version()}, total {time.perf_counter() - started:.0f}s)"
    )
    print(f"at start: {load_start}\nat end:   {harness.load_line()}\n")
    print(_report(measured))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "rows": args.rows,
            "config": asdict(cfg),
            "load_average_start": load_start,
            "load_average_end": harness.load_line(),
            "results": harness.summaries(measured),
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    failed = [r.id for r in measured if r.error]
    return 1 if failed or disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())

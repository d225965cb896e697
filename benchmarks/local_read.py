"""Local files at the speed of DuckDB: sqlfeed's Feeder against DuckDB and pyarrow.

TPC-H ``lineitem`` at one scale factor, as one Parquet file (:mod:`benchmarks.tpch`) and
as one CSV file written from it (cached beside it, ``.bench-data/sf<tag>/lineitem.csv``),
read whole by ``SELECT * FROM read_parquet('<file>')`` / ``read_csv('<file>')``.

**A. Throughput** (section ``read``). Every contender runs in its own fresh Python
subprocess (``--repeat`` times, interleaved; the fastest run is kept with its peak RSS,
``VmHWM``). The time runs from after the imports to the last batch; every batch is
touched (rows counted). Contenders (``--only`` ids ``<format>-<contender>``):

* ``feeder``: ``sqlfeed.Feeder(sql, sqlfeed.connect("duckdb://"), format="arrow",
  readers=--readers)``, planning (auto) included;
* ``duckdb``: DuckDB reading the query once, ``duckdb.sql(sql)`` streamed as record
  batches (``to_arrow_reader``; ``fetch_record_batch`` before DuckDB 2.0);
* ``pyarrow``: ``pyarrow.dataset.dataset(file, format=...).to_batches()``.

Each contender's imports are outside its clock alike: before it, a warm-up reads ``SELECT 1``
the same way (sqlfeed's lazy imports of the read path, DuckDB's first connection). The
``-cold`` contenders (``feeder-cold``, ``duckdb-cold``) start the clock before their first
``import`` instead: what a process's first read costs, imports included, both alike.

**B. Plan cost** (section ``cost``), for M in ``--partitions`` (16, 64, 256):
``sqlfeed.plan(sql, source, partitions=M)`` (auto), then every partition read one after
another through ``Source.read`` on one in-memory DuckDB, against one read of the whole
query the same way (the best of two)::

    cost = (sum of the M partition reads) / (one read of the whole query)

in CPU seconds of the process (all DuckDB threads: the work done), and in wall seconds
(where a one-row-group partition uses one core while the whole read uses them all, so
the wall ratio overstates the work on a multi-core host).

The plan's own estimate (``plan.cost``, in reads) is printed beside it.

Goals (reported, never asserted): Feeder >= 1.0x DuckDB's rows/s (>= 0.8x cold); plan cost
<= 1.1x at every M. The load average (``os.getloadavg``) is printed before and after: figures taken
while other work runs are not comparable.

Run from the repository root (data generated with ``tpchgen-cli`` when missing)::

    .venv/bin/python -m benchmarks.local_read --scale 1 --repeat 3 --json /tmp/local_read.json
    .venv/bin/python -m benchmarks.local_read --scale 0.05 --repeat 1    # quick smoke run
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Contender, Outcome, Tally

__all__ = ["CONTENDERS", "Config", "main", "measure_cost", "measure_reads"]

FORMATS = ("parquet", "csv")
GOAL_VS_DUCKDB = 1.0
"""Feeder rows/s over DuckDB's, each with its imports done before the clock (issue #38)."""
GOAL_VS_DUCKDB_COLD = 0.8
"""The same with each contender's imports inside its clock."""
GOAL_COST = 1.1
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line).

    Attributes:
        file: The lineitem file.
        fmt: ``parquet`` or ``csv``.
        readers: Feeder readers.
    """

    file: str
    fmt: str
    readers: int = 2

    def sql(self) -> str:
        """``SELECT * FROM read_parquet('<file>')`` (``read_csv`` for CSV)."""
        function = "read_parquet" if self.fmt == "parquet" else "read_csv"
        return f"SELECT * FROM {function}('" + self.file.replace("'", "''") + "')"


def _feeder(cfg: Config, cold: bool = False) -> Outcome:
    if cold:
        start = harness.start()
    import sqlfeed

    if not cold:  # the read path's lazy imports, outside the clock as DuckDB's are
        with sqlfeed.connect("duckdb://") as warm:
            list(sqlfeed.Feeder("SELECT 1 AS x", warm, format="arrow"))
        start = harness.start()
    tally = Tally()
    source = sqlfeed.connect("duckdb://")
    feeder = sqlfeed.Feeder(cfg.sql(), source, format="arrow", readers=cfg.readers)
    for batch in feeder:
        tally.add(batch)
    seconds = time.perf_counter() - start
    plan = getattr(feeder, "plan", None)
    details: dict[str, Any] = tally.details()
    if plan is not None:
        details.update(strategy=plan.strategy, partitions=plan.num_partitions, cost=plan.cost)
    source.close()
    return tally.rows, seconds, details


def _duckdb(cfg: Config, cold: bool = False) -> Outcome:
    if cold:
        start = harness.start()
    import duckdb

    if not cold:
        with duckdb.connect() as warm:
            warm.sql("SELECT 1 AS x").fetchall()
        start = harness.start()
    tally = Tally()
    con = duckdb.connect()
    relation = con.sql(cfg.sql())
    to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    for batch in to_reader(BATCH_ROWS):
        tally.add(batch)
    seconds = time.perf_counter() - start
    con.close()
    return tally.rows, seconds, tally.details()


def _pyarrow(cfg: Config) -> Outcome:
    import pyarrow.dataset as ds

    tally = Tally()
    start = harness.start()
    dataset = ds.dataset(cfg.file, format=cfg.fmt)
    for batch in dataset.to_batches(batch_size=BATCH_ROWS):
        tally.add(batch)
    return tally.rows, time.perf_counter() - start, tally.details()


_KINDS: dict[str, tuple[str, Callable[[Config], Outcome]]] = {
    "feeder": ("sqlfeed.Feeder (auto, readers=N)", _feeder),
    "duckdb": ("duckdb.sql().to_arrow_reader()", _duckdb),
    "pyarrow": ("pyarrow.dataset.to_batches()", _pyarrow),
    "feeder-cold": ("sqlfeed.Feeder, imports inside the clock", partial(_feeder, cold=True)),
    "duckdb-cold": ("duckdb, imports inside the clock", partial(_duckdb, cold=True)),
}
CONTENDERS: dict[str, Contender[Config]] = {
    f"{fmt}-{name}": Contender(f"{fmt}-{name}", label, run, group=fmt)
    for fmt in FORMATS
    for name, (label, run) in _KINDS.items()
}
"""``<format>-<kind>``: every kind of reader on every format (a format's read the same rows)."""


@dataclass
class Read:
    """The best run of one contender on one format."""

    id: str
    fmt: str
    contender: str
    rows: int = -1
    seconds: float = 0.0
    rows_per_second: float = 0.0
    peak_rss_bytes: int = -1
    runs: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def measure_reads(
    files: dict[str, str],
    names: Sequence[str],
    readers: int,
    repeat: int,
    timeout: float,
    check: bool = False,
) -> tuple[list[Read], list[str]]:
    """Run every ``(format, contender)`` ``repeat`` times (interleaved), each run in its own
    subprocess; keep the fastest run of each. Also returns the disagreements (rows,
    checksums when ``check``) between the contenders of one format."""
    entries = [
        (CONTENDERS[f"{fmt}-{n}"], Config(files[fmt], fmt, readers)) for fmt in files for n in names
    ]
    results = harness.measure("local_read", entries, repeat, timeout, check=check)
    reads = []
    for (contender, cfg), result in zip(entries, results, strict=True):
        read = Read(contender.id, cfg.fmt, contender.id.split("-", 1)[1])
        read.error = result.error or result.skipped
        read.runs = [r.seconds for r in result.runs]
        best = result.best_run
        if best is not None:
            read.rows, read.seconds = best.rows, best.seconds
            read.rows_per_second = read.rows / max(read.seconds, 1e-9)
            read.peak_rss_bytes = best.peak_rss_bytes
            read.details = dict(best.details)
        reads.append(read)
    return reads, harness.agreement(results)


@dataclass
class Cost:
    """One plan's measured cost at one M."""

    fmt: str
    asked: int
    partitions: int = 0
    strategy: str = ""
    estimate: float | None = None
    plan_seconds: float = 0.0
    one_read_cpu: float = 0.0
    partitions_cpu: float = 0.0
    ratio: float = 0.0
    """CPU seconds of the partition reads / CPU seconds of one read: the work."""
    wall_ratio: float = 0.0
    """The same in wall time (one read runs on all cores; a small partition may not)."""
    rows_match: bool = False


def _drain(
    source: Any, sql: str, schema: Any, estimate: int | None = None
) -> tuple[float, float, int]:
    """(CPU seconds of this process, all threads; wall seconds; rows) of one read (with the
    plan's row ``estimate``, as the readers of a plan pass it)."""
    cpu, wall = time.process_time(), time.perf_counter()
    rows = sum(batch.num_rows for batch in source.read(sql, schema=schema, rows=estimate))
    return time.process_time() - cpu, time.perf_counter() - wall, rows


def measure_cost(fmt: str, file: str, partitions: Sequence[int], repeat: int = 2) -> list[Cost]:
    """Plan cost (sum of the partition reads / one read) at each M, on one source: the
    best of ``repeat`` passes on each side, one read and the partitions interleaved (a
    best one read against a single pass of the partitions would count noise as cost)."""
    import sqlfeed

    sql = Config(file, fmt).sql()
    out = []
    with sqlfeed.connect("duckdb://") as source:
        schema = source.schema(sql)
        _drain(source, sql, schema)  # warm the page cache and the footers
        for m in partitions:
            cell = Cost(fmt, m)
            start = time.perf_counter()
            plan = sqlfeed.plan(sql, source, partitions=m)
            cell.plan_seconds = time.perf_counter() - start
            cell.partitions, cell.strategy, cell.estimate = (
                plan.num_partitions,
                plan.strategy,
                plan.cost,
            )
            part_schema = plan.arrow_schema()
            ones, passes = [], []
            for _ in range(max(1, repeat)):
                ones.append(_drain(source, sql, schema))
                read = [
                    _drain(source, p.sql, part_schema, p.estimated_rows) for p in plan.partitions
                ]
                passes.append(
                    (
                        sum(c for c, _, _ in read),
                        sum(w for _, w, _ in read),
                        sum(n for _, _, n in read),
                    )
                )
            one_cpu, one_wall, rows = (
                min(c for c, _, _ in ones),
                min(w for _, w, _ in ones),
                ones[0][2],
            )
            cell.one_read_cpu = one_cpu
            cell.partitions_cpu = min(c for c, _, _ in passes)
            cell.ratio = cell.partitions_cpu / max(one_cpu, 1e-9)
            cell.wall_ratio = min(w for _, w, _ in passes) / max(one_wall, 1e-9)
            cell.rows_match = all(n == rows for _, _, n in passes)
            _progress(
                f"[cost] {fmt} M={m}: {plan.num_partitions} partitions ({plan.strategy}), "
                f"{cell.ratio:.2f}x one read (CPU), {cell.wall_ratio:.2f}x (wall), "
                f"best of {max(1, repeat)}"
            )
            out.append(cell)
    return out


def _duckdb_of(reads: Sequence[Read], read: Read) -> Read | None:
    """The DuckDB read ``read`` compares with: the same format, cold with cold."""
    kind = "duckdb-cold" if read.contender.endswith("-cold") else "duckdb"
    return next((d for d in reads if d.fmt == read.fmt and d.contender == kind), None)


def report(reads: Sequence[Read], costs: Sequence[Cost]) -> tuple[str, list[str]]:
    """The tables, and the goals' lines (``ok`` / ``MISSED``)."""
    read_rows = []
    for r in reads:
        vs = _duckdb_of(reads, r)
        ratio = r.rows_per_second / vs.rows_per_second if vs and vs.rows_per_second else 0
        extra = ", ".join(f"{k}={v}" for k, v in r.details.items())
        read_rows.append(
            [
                r.id,
                r.error or f"{r.rows:,}",
                f"{r.seconds:.2f}",
                f"{r.rows_per_second:,.0f}",
                f"{ratio:.2f}x",
                f"{r.peak_rss_bytes / 2**20:,.0f}",
                extra,
            ]
        )
    text = harness.table(
        ["contender", "rows", "best s", "rows/s", "vs duckdb", "peak MB", "plan"], read_rows
    )
    cost_rows = [
        [
            c.fmt,
            str(c.asked),
            str(c.partitions),
            c.strategy,
            f"{c.estimate}",
            f"{c.plan_seconds:.2f}",
            f"{c.one_read_cpu:.2f}",
            f"{c.partitions_cpu:.2f}",
            f"{c.ratio:.2f}x",
            f"{c.wall_ratio:.2f}x",
            str(c.rows_match),
        ]
        for c in costs
    ]
    text += "\n\n" + harness.table(
        [
            "format",
            "M",
            "parts",
            "strategy",
            "plan.cost",
            "plan s",
            "one read cpu s",
            "parts cpu s",
            "cost (cpu)",
            "cost (wall)",
            "rows ok",
        ],
        cost_rows,
    )
    goals = []
    for r in reads:
        duck = _duckdb_of(reads, r)
        least = {"feeder": GOAL_VS_DUCKDB, "feeder-cold": GOAL_VS_DUCKDB_COLD}.get(r.contender)
        if least is not None and duck and duck.rows_per_second and not r.error:
            ratio = r.rows_per_second / duck.rows_per_second
            cold = ", imports inside" if "cold" in r.id else ""
            what = f"{r.fmt} Feeder rows/s vs DuckDB{cold}"
            goals.append(harness.Goal(what, ratio, least))
    lines = [goal.line() for goal in goals]
    for c in costs:
        goal = harness.Goal(
            f"{c.fmt} plan cost at M={c.asked}, CPU time / one read's",
            c.ratio if c.rows_match else None,
            GOAL_COST,
            at_most=True,
        )
        lines.append(f"{goal.line()}; wall time {c.wall_ratio:.2f}x, rows match {c.rows_match}")
    return text, lines


def csv_copy(parquet: Path) -> Path:
    """``lineitem.csv`` beside ``parquet`` (written once, atomically)."""
    import duckdb

    target = parquet.with_suffix(".csv")
    if not target.is_file():
        temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        with duckdb.connect() as con:
            source = "'" + str(parquet).replace("'", "''") + "'"
            con.execute(f"COPY (FROM read_parquet({source})) TO '{temporary}' (HEADER)")
        os.replace(temporary, target)
    return target


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="ids or globs: parquet-feeder, csv-*, cost-parquet, ...",
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default=None, help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat, args.partitions = 0.01, 1, [4]
    return args


def _picked(item: str, only: Sequence[str] | None) -> bool:
    return only is None or any(fnmatch.fnmatch(item, pattern) for pattern in only)


def main(argv: list[str] | None = None) -> int:
    """Prepare the files, run both sections, print the tables and the goals."""
    args = _parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config)
    from benchmarks.tpch import lineitem_parquet

    parquet = lineitem_parquet(args.scale)
    files = {"parquet": str(parquet)}
    if "csv" in args.formats:
        files["csv"] = str(csv_copy(parquet))
    files = {fmt: path for fmt, path in files.items() if fmt in args.formats}
    load_before = os.getloadavg()
    _progress(f"[setup] SF {args.scale}: {files}; load average {load_before}")
    names = [n for n in _KINDS if any(_picked(f"{fmt}-{n}", args.only) for fmt in files)]
    reads, disagreements = measure_reads(
        files, names, args.readers, args.repeat, args.timeout, check=args.smoke
    )
    reads = [r for r in reads if _picked(r.id, args.only)]
    costs = [
        cell
        for fmt, path in files.items()
        if _picked(f"cost-{fmt}", args.only)
        for cell in measure_cost(fmt, path, args.partitions, args.repeat)
    ]
    load_after = os.getloadavg()
    text, goals = report(reads, costs)
    print(f"TPC-H lineitem SF {args.scale} on {platform.node()}, {os.cpu_count()} cores")
    print(f"load average before {load_before}, after {load_after}\n")
    print(text + "\n\n" + "\n".join(goals))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json:
        document = {
            "scale": args.scale,
            "load_before": load_before,
            "load_after": load_after,
            "reads": [asdict(r) for r in reads],
            "costs": [asdict(c) for c in costs],
            "goals": goals,
        }
        args.json.write_text(json.dumps(document, indent=2, default=str))
    return 1 if disagreements or any(r.error for r in reads) else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Lakehouse reads: sqlfeed's Feeder over an Iceberg table against pyiceberg, Daft and DuckDB.

TPC-H ``lineitem`` at one scale factor (:mod:`benchmarks.tpch`) written as three Iceberg
tables (format v2, a SQLite catalog, cached under ``.bench-data/lakehouse/sf<tag>/``; files of
about a quarter of the rows, row groups of 1/16th), each read whole:

* ``plain``: no deletes;
* ``pos``: 5 % of the rows (seeded, spread over every file) deleted by position deletes;
* ``eq``: 5 % of the rows deleted by one equality delete file on
  (``l_orderkey``, ``l_linenumber``).

The delete files are written per the Iceberg spec and committed through pyiceberg by
:mod:`tests.lake.builders` (no writer here produces them). Contenders (``--only`` ids
``<variant>-<contender>``), each run in a fresh subprocess (``--repeat`` times, interleaved;
the time runs from after the imports to the last batch, every batch touched; every contender
imports ``pyiceberg.io.pyarrow`` before the clock: pyiceberg loads it lazily on the first
table it opens, and it imports pandas where pandas is installed, 0.4 s that sqlfeed's
environment paid and Daft's, without pandas, did not):

* ``feeder``: ``sqlfeed.Feeder("SELECT * FROM lineitem", "iceberg:////…metadata.json?view=
  lineitem", partitions=--partitions, readers=--readers, batch_size=--batch-size)``;
* ``pyiceberg``: ``StaticTable.from_metadata(…).scan().to_arrow_batch_reader()`` (it refuses
  equality deletes: ``eq-pyiceberg`` reports the refusal);
* ``daft``: ``daft.read_iceberg(table).to_arrow_iter()`` in Daft's own virtualenv
  (``--daft-python``, default ``.bench-data/daft-venv/bin/python``: Daft pins pyarrow < 26;
  ``python -m venv .bench-data/daft-venv && .bench-data/daft-venv/bin/pip install daft
  pyiceberg``); skipped when missing; Daft plans through pyiceberg, so it refuses equality
  deletes too;
* ``duckdb``: ``iceberg_scan('<metadata.json>')`` where DuckDB's ``iceberg`` extension
  loads (it is downloaded from extensions.duckdb.org; skipped, with the reason, offline).

Every contender's rows are checked against the table's expected count (rows written minus
rows deleted) and, with ``--smoke`` or ``--check``, the sum of ``l_orderkey`` against its
variant's other contenders. Goal (reported, never asserted): the Feeder >= 1.0x the best
other contender's rows/s on each variant. The load average is printed before and after.

Run from the repository root (the tables are built on the first run)::

    .venv/bin/python -m benchmarks.lakehouse --scale 1 --repeat 3 --json /tmp/lakehouse.json
    .venv/bin/python -m benchmarks.lakehouse --smoke        # SF 0.01, one round, checked
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress
from benchmarks.harness import Contender, Outcome, Tally
from benchmarks.tpch import DEFAULT_CACHE_DIR, lineitem_parquet, scale_tag

__all__ = ["CONTENDERS", "Config", "build_tables", "main"]

VARIANTS = ("plain", "pos", "eq")
DELETED_FRACTION = 0.05
SEED = 28
GOAL_VS_BEST = 1.0
DAFT_PYTHON = DEFAULT_CACHE_DIR / "daft-venv" / "bin" / "python"
TABLES_FILE = "tables.json"
"""Beside the catalog: each variant's metadata location and row counts (the cache marker)."""


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line).

    Attributes:
        metadata: The table's metadata JSON path.
        expected_rows: Rows written minus rows deleted.
        partitions: The Feeder's partitions.
        readers: The Feeder's readers.
        batch_size: Rows per batch (Feeder, pyiceberg's reader as written).
        daft_python: The interpreter of Daft's virtualenv.
    """

    metadata: str
    expected_rows: int
    partitions: int = 16
    readers: int = 2
    batch_size: int = 65_536
    daft_python: str = str(DAFT_PYTHON)


def _details(tally: Tally, cfg: Config, **more: Any) -> dict[str, Any]:
    details = {**tally.details(), **more}
    if tally.rows != cfg.expected_rows:
        raise AssertionError(f"read {tally.rows} rows, the table holds {cfg.expected_rows}")
    return details


def _feeder(cfg: Config) -> Outcome:
    import pyiceberg.io.pyarrow  # imported before the clock, as the others do
    import pyiceberg.table  # noqa: F401
    import sqlglot.dialects.duckdb  # noqa: F401  (the lake source's SQL dialect: an import)

    import sqlfeed
    import sqlfeed.lake  # the Iceberg source

    tally = Tally()
    feeder_class = sqlfeed.Feeder
    start = harness.start()
    url = f"iceberg:///{cfg.metadata}?view=lineitem"
    feeder = feeder_class(
        "SELECT * FROM lineitem",
        url,
        format="arrow",
        partitions=cfg.partitions,
        readers=cfg.readers,
        batch_size=cfg.batch_size,
    )
    for batch in feeder:
        tally.add(batch)
    seconds = time.perf_counter() - start
    plan = getattr(feeder, "plan", None)
    more = {"strategy": plan.strategy, "partitions": plan.num_partitions} if plan else {}
    return tally.rows, seconds, _details(tally, cfg, **more)


def _pyiceberg(cfg: Config) -> Outcome:
    import pyiceberg.io.pyarrow  # noqa: F401  (imported before the clock, as the others do)
    from pyiceberg.table import StaticTable

    tally = Tally()
    start = harness.start()
    table = StaticTable.from_metadata(cfg.metadata)
    for batch in table.scan().to_arrow_batch_reader():
        tally.add(batch)
    return tally.rows, time.perf_counter() - start, _details(tally, cfg)


_DAFT_SCRIPT = """
import json, sys, time
import daft
import pyarrow.compute as pc
import pyiceberg.io.pyarrow
from pyiceberg.table import StaticTable
start = time.perf_counter()
df = daft.read_iceberg(StaticTable.from_metadata(sys.argv[1]))
rows = checksum = 0
for batch in df.to_arrow_iter():
    rows += batch.num_rows
    if sys.argv[2] == "1" and batch.num_rows:
        checksum += int(pc.sum(batch.column("l_orderkey")).as_py())
print("@@daft@@", json.dumps({"rows": rows, "seconds": time.perf_counter() - start,
      "checksum": checksum, "version": daft.__version__}))
"""


def _daft(cfg: Config) -> Outcome:
    if not Path(cfg.daft_python).is_file():
        raise ImportError(f"no Daft virtualenv at {cfg.daft_python}", name="daft")
    harness.start()
    check = "1" if harness.checking() else "0"
    proc = subprocess.run(
        [cfg.daft_python, "-c", _DAFT_SCRIPT, cfg.metadata, check],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("@@daft@@ ")), None)
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"daft exited with status {proc.returncode}: {last}")
    got = json.loads(line.split(" ", 1)[1])
    tally = Tally()
    tally.rows = int(got["rows"])
    if tally.checksum is not None:
        tally.checksum = int(got["checksum"])
    return tally.rows, float(got["seconds"]), _details(tally, cfg, daft=got["version"])


def duckdb_iceberg() -> str | None:
    """Why DuckDB's ``iceberg`` extension does not load here, or None when it does."""
    import duckdb

    with duckdb.connect() as con:
        try:
            con.execute("INSTALL iceberg")
            con.execute("LOAD iceberg")
        except duckdb.Error as err:
            return str(err).strip().splitlines()[0]
    return None


def _duckdb(cfg: Config) -> Outcome:
    import duckdb

    if duckdb_iceberg() is not None:
        raise ImportError("DuckDB's iceberg extension does not load", name="duckdb-iceberg")
    tally = Tally()
    start = harness.start()
    with duckdb.connect() as con:
        con.execute("LOAD iceberg")
        path = cfg.metadata.replace("'", "''")
        for batch in con.sql(f"SELECT * FROM iceberg_scan('{path}')").to_arrow_reader(65_536):
            tally.add(batch)
    return tally.rows, time.perf_counter() - start, _details(tally, cfg)


_KINDS: dict[str, tuple[str, Callable[[Config], Outcome]]] = {
    "feeder": ("sqlfeed.Feeder(iceberg:, partitions=M, readers=R)", _feeder),
    "pyiceberg": ("pyiceberg scan().to_arrow_batch_reader()", _pyiceberg),
    "daft": ("daft.read_iceberg().to_arrow_iter() (own venv)", _daft),
    "duckdb": ("duckdb iceberg_scan()", _duckdb),
}
CONTENDERS: dict[str, Contender[Config]] = {
    f"{variant}-{name}": Contender(f"{variant}-{name}", label, run, group=variant)
    for variant in VARIANTS
    for name, (label, run) in _KINDS.items()
}
"""``<variant>-<kind>``: every reader on every table (a variant's contenders read the same
rows)."""


# -- the tables ----------------------------------------------------------------------------


def _lineitem(parquet: Path) -> Any:
    """The lineitem file as a pyarrow table with plain strings and no field ids (pyiceberg
    assigns its own)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    fields = [
        pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type, f.nullable)
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def build_tables(scale: float, folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """The three tables at ``scale`` (built once, then read from ``tables.json``): variant ->
    ``{"metadata": path, "rows": written, "deleted": rows deleted, "expected": rows left}``."""
    folder = folder or DEFAULT_CACHE_DIR / "lakehouse" / f"sf{scale_tag(scale)}"
    marker = folder / TABLES_FILE
    if marker.is_file():
        tables: dict[str, dict[str, Any]] = json.loads(marker.read_text())
        if all(Path(t["metadata"]).is_file() for t in tables.values()):
            return tables
    import shutil

    import numpy as np
    import pyarrow as pa

    from tests.lake import builders

    shutil.rmtree(folder, ignore_errors=True)
    data = _lineitem(lineitem_parquet(scale))
    rows = data.num_rows
    file_rows = max(1, -(-rows // 4))
    catalog = builders.iceberg_catalog(folder, "bench")
    rng = np.random.default_rng(SEED)
    tables = {}
    for variant in VARIANTS:
        started = time.perf_counter()
        table = builders.iceberg_table(
            catalog,
            f"lineitem_{variant}",
            data,
            target_file_rows=file_rows,
            row_group_rows=max(1, file_rows // 4),
        )
        deleted = 0
        if variant == "pos":
            picks = {}
            for live in builders.live_data_files(table):
                count = round(live.record_count * DELETED_FRACTION)
                chosen = rng.choice(live.record_count, size=count, replace=False)
                picks[live.file_path] = sorted(int(p) for p in chosen)
                deleted += count
            builders.delete_positions(table, picks)
        elif variant == "eq":
            deleted = round(rows * DELETED_FRACTION)
            chosen = pa.array(np.sort(rng.choice(rows, size=deleted, replace=False)))
            keys = data.select(["l_orderkey", "l_linenumber"]).take(chosen)
            builders.delete_equal(table, keys)
        location = table.metadata_location.removeprefix("file://")
        tables[variant] = {
            "metadata": location,
            "rows": rows,
            "deleted": deleted,
            "expected": rows - deleted,
        }
        progress(
            f"[setup] {variant}: {rows:,} rows, {deleted:,} deleted, "
            f"{time.perf_counter() - started:.1f}s: {location}"
        )
    marker.write_text(json.dumps(tables, indent=2))
    return tables


# -- the run -------------------------------------------------------------------------------


def _picked(item: str, only: Sequence[str] | None) -> bool:
    return only is None or any(fnmatch.fnmatch(item, pattern) for pattern in only)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--readers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--batch-size", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=None, help="ids or globs: eq-*, *-feeder")
    parser.add_argument("--daft-python", type=Path, default=DAFT_PYTHON)
    parser.add_argument("--check", action="store_true", help="checksums without --smoke")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-config", default=None, help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.repeat, args.partitions = 0.01, 1, 4
    return args


def _report(
    results: Sequence[harness.Result], entries: Sequence[tuple[Contender[Config], Config]]
) -> tuple[str, list[str]]:
    rows: list[list[str]] = []
    goals: list[str] = []
    for variant in VARIANTS:
        mine = [
            (r, cfg) for r, (c, cfg) in zip(results, entries, strict=True) if c.group == variant
        ]
        if not mine:
            continue
        rates: dict[str, float] = {
            r.id: rate for r, _ in mine if (rate := r.rate()) and not r.error
        }
        best = max(rates.values(), default=None)
        for result, cfg in mine:
            rate = rates.get(result.id)
            extra = ", ".join(
                f"{k}={v}" for k, v in (result.best_run or harness.Run(0, 0)).details.items()
            )
            rows.append(
                [
                    result.id,
                    (result.error or result.skipped or "")[:70] or f"{result.rows:,}",
                    f"{cfg.expected_rows:,}",
                    f"{result.best:.2f}" if result.best else "-",
                    f"{rate:,.0f}" if rate else "-",
                    f"{harness.ratio(rate, best):.2f}x" if rate and best else "-",
                    f"{result.peak_rss_bytes / 2**20:,.0f}" if result.runs else "-",
                    extra,
                ]
            )
        feeder = rates.get(f"{variant}-feeder")
        others = [v for k, v in rates.items() if not k.endswith("-feeder")]
        if feeder is not None and others:
            value = harness.ratio(feeder, max(others))
            goal = harness.Goal(f"{variant}: Feeder rows/s vs the best other", value, GOAL_VS_BEST)
            goals.append(goal.line())
        elif feeder is not None:
            goals.append(f"n/a: {variant}: no other contender read the table (see the errors)")
    header = ["contender", "rows", "expected", "best s", "rows/s", "vs best", "peak MB", "details"]
    return harness.table(header, rows, right=(1, 2, 3, 4, 5, 6)), goals


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the tables, run the contenders, print the table and the goals."""
    args = _parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config)
    missing = [m for m in ("pyiceberg", "deltalake") if importlib.util.find_spec(m) is None]
    if missing:  # the tables' writer needs both (tests/lake/builders.py)
        print(f"skipped: not installed ({', '.join(missing)}): pip install sqlfeed[lakehouse]")
        return 0
    tables = build_tables(args.scale)
    load_before = os.getloadavg()
    why = duckdb_iceberg()
    if why:
        progress(f"[setup] DuckDB's iceberg extension: {why}")
    entries = []
    for variant in args.variants:
        cfg = Config(
            tables[variant]["metadata"],
            int(tables[variant]["expected"]),
            args.partitions,
            args.readers,
            args.batch_size,
            str(args.daft_python),
        )
        entries += [
            (CONTENDERS[f"{variant}-{kind}"], cfg)
            for kind in _KINDS
            if _picked(f"{variant}-{kind}", args.only)
        ]
    results = harness.measure(
        "lakehouse", entries, args.repeat, args.timeout, check=args.smoke or args.check
    )
    load_after = os.getloadavg()
    text, goals = _report(results, entries)
    print(
        f"TPC-H lineitem SF {args.scale} as Iceberg v2 tables on {platform.node()}, "
        f"{os.cpu_count()} cores; partitions={args.partitions}, readers={args.readers}"
    )
    print(f"load average before {load_before}, after {load_after}\n")
    print(text + "\n\n" + "\n".join(goals))
    if why:
        print(f"duckdb: iceberg extension unavailable ({why})")
    disagreements = harness.agreement(results)
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    # Refusals of equality deletes by pyiceberg and Daft are findings, not failures.
    failed = [
        r for r in results if r.error and not ("equality deletes" in r.error and r.group == "eq")
    ]
    for result in failed:
        print(f"FAILED: {result.id}: {result.error}")
    if args.json:
        document = {
            "scale": args.scale,
            "tables": tables,
            "load_before": load_before,
            "load_after": load_after,
            "results": harness.summaries(results),
            "goals": goals,
            "duckdb_iceberg": why,
            "config": asdict(entries[0][1]) if entries else {},
        }
        args.json.write_text(json.dumps(document, indent=2, default=str))
    return 1 if disagreements or failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""PyTorch DataLoader feed throughput: sqlfeed against what users do today, on TPC-H ``lineitem``.

Rows per second consumed by the same loop over a ``torch.utils.data.DataLoader``
(``for batch in loader: rows += len(batch["l_orderkey"])``) of the 8 numeric columns of
``lineitem`` (4 int64, 4 float64: the same columns as :mod:`benchmarks.tf_feed`), in
batches of ``--batch-size`` (1024), side by side in one run. Every contender runs in a fresh
Python subprocess; the clock starts after the imports (torch's included) and covers
connecting, planning, reading, converting, batching and the loop. Contenders (``--only``):

* ``sqlfeed-duckdb``: ``DataLoader(sqlfeed.torch.SQLDataset(sql, "duckdb:///...",
  batch_size=1024), batch_size=None, num_workers=--workers)`` over the DuckDB benchmark
  database (read-only), default plan;
* ``sqlfeed-postgres``: the same over PostgreSQL;
* ``memory-batches``: the in-memory upper bound of a DataLoader: a ``TensorDataset`` of
  the columns already in memory (loaded before the clock starts), fetched 1024 rows at a
  time (``BatchSampler`` + ``batch_size=None``: one indexing per batch, no collate);
* ``memory-tensordataset``: ``DataLoader(TensorDataset(...), batch_size=1024)`` over the
  same tensors (what most tutorials do: per-row indexing, then collate);
* ``pandas-postgres``: ``pandas.read_sql(sql, engine)``, then ``TensorDataset`` of its
  columns and ``DataLoader(batch_size=1024)`` (what users do today), read time included.

Goal (reported, not asserted): sqlfeed from DuckDB >= 0.5x the in-memory batch loader.
The machine may be shared and noisy: compare the ratios of one run.

Run from the repository root (PostgreSQL must be running for the PostgreSQL contenders;
the data is generated and loaded by :mod:`benchmarks.tpch` when missing)::

    .venv/bin/python -m benchmarks.torch_feed --scale 1
    .venv/bin/python -m benchmarks.torch_feed --scale 0.01 --only sqlfeed-duckdb 'memory-*'
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import progress as _progress
from benchmarks.common import status_bytes as _status_bytes
from benchmarks.tf_feed import COLUMNS, Config

__all__ = ["CONTENDERS", "main"]

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_MARK = "@@torch_feed@@ "
GOAL_DUCKDB_VS_MEMORY = 0.5

Outcome = tuple[int, float, dict[str, Any]]
"""(rows, seconds, details)."""


@dataclass(frozen=True)
class TorchConfig:
    """The tf.data benchmark's configuration, plus the DataLoader's worker processes."""

    base: Config
    workers: int = 2


def _consume(loader: Any) -> int:
    """The loop every contender is measured with: rows seen."""
    rows = 0
    for batch in loader:
        rows += len(batch["l_orderkey"])
    return rows


def _in_memory(cfg: Config) -> dict[str, Any]:
    """The columns as tensors, read from DuckDB (before the clock starts)."""
    import duckdb
    import torch

    with duckdb.connect(cfg.duckdb_path, read_only=True) as con:
        arrays = con.sql(cfg.typed_sql(cfg.duckdb_table)).fetchnumpy()
    return {name: torch.from_numpy(arrays[name].copy()) for name in COLUMNS}


class _Columns:
    """A map-style dataset of named columns: ``dataset[indices]`` is a dict of slices."""

    def __init__(self, columns: dict[str, Any]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, index: Any) -> dict[str, Any]:
        return {name: column[index] for name, column in self.columns.items()}


def _sqlfeed(tcfg: TorchConfig, url: str, sql: str) -> Outcome:
    import sqlfeed.torch

    dataset_class = sqlfeed.torch.SQLDataset  # imports torch: before the clock starts
    start = time.perf_counter()
    dataset = dataset_class(sql, url, batch_size=tcfg.base.batch_size, readers=tcfg.base.readers)
    planned = time.perf_counter() - start
    loader = sqlfeed.torch.dataloader(dataset, num_workers=tcfg.workers, stateful=False)
    rows = _consume(loader)
    plan = dataset.plan
    return (
        rows,
        time.perf_counter() - start,
        {
            "strategy": plan.strategy,
            "partitions": plan.num_partitions,
            "workers": tcfg.workers,
            "plan_seconds": round(planned, 3),
        },
    )


def _sqlfeed_duckdb(tcfg: TorchConfig) -> Outcome:
    url = f"duckdb:///{Path(tcfg.base.duckdb_path).resolve()}"
    return _sqlfeed(tcfg, url, tcfg.base.scan_sql(tcfg.base.duckdb_table))


def _sqlfeed_postgres(tcfg: TorchConfig) -> Outcome:
    return _sqlfeed(tcfg, tcfg.base.sa_url, tcfg.base.scan_sql(tcfg.base.pg_table))


def _memory_batches(tcfg: TorchConfig) -> Outcome:
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    columns = _Columns(_in_memory(tcfg.base))
    start = time.perf_counter()
    sampler = BatchSampler(SequentialSampler(range(len(columns))), tcfg.base.batch_size, False)
    rows = _consume(DataLoader(columns, sampler=sampler, batch_size=None))  # type: ignore[arg-type]
    return rows, time.perf_counter() - start, {}


def _memory_tensordataset(tcfg: TorchConfig) -> Outcome:
    from torch.utils.data import DataLoader

    columns = _Columns(_in_memory(tcfg.base))
    start = time.perf_counter()
    rows = _consume(DataLoader(columns, batch_size=tcfg.base.batch_size))  # type: ignore[arg-type]
    return rows, time.perf_counter() - start, {}


def _pandas_postgres(tcfg: TorchConfig) -> Outcome:
    import pandas
    import sqlalchemy
    import torch
    from torch.utils.data import DataLoader

    start = time.perf_counter()
    engine = sqlalchemy.create_engine(tcfg.base.sa_url)
    frame = pandas.read_sql(tcfg.base.scan_sql(tcfg.base.pg_table), engine)
    read = time.perf_counter() - start
    columns = {c: torch.from_numpy(frame[c].to_numpy(dtype="float64")) for c in COLUMNS}
    rows = _consume(DataLoader(_Columns(columns), batch_size=tcfg.base.batch_size))  # type: ignore[arg-type]
    engine.dispose()
    return rows, time.perf_counter() - start, {"read_seconds": round(read, 3)}


@dataclass(frozen=True)
class Contender:
    """One way of feeding the loop."""

    id: str
    label: str
    run: Callable[[TorchConfig], Outcome]
    postgres: bool = False


CONTENDERS: dict[str, Contender] = {
    c.id: c
    for c in (
        Contender("sqlfeed-duckdb", "sqlfeed.torch.SQLDataset, DuckDB file", _sqlfeed_duckdb),
        Contender(
            "sqlfeed-postgres",
            "sqlfeed.torch.SQLDataset, PostgreSQL",
            _sqlfeed_postgres,
            postgres=True,
        ),
        Contender("memory-batches", "in-memory tensors, 1024-row index batches", _memory_batches),
        Contender(
            "memory-tensordataset",
            "TensorDataset + DataLoader(batch_size=1024)",
            _memory_tensordataset,
        ),
        Contender(
            "pandas-postgres",
            "pandas.read_sql + TensorDataset, PostgreSQL",
            _pandas_postgres,
            postgres=True,
        ),
    )
}


def _child_main(name: str, config_json: str) -> int:
    raw = json.loads(config_json)
    tcfg = TorchConfig(Config(**raw["base"]), raw["workers"])
    result: dict[str, Any] = {"id": name}
    try:
        rows, seconds, details = CONTENDERS[name].run(tcfg)
        result.update(rows=rows, seconds=seconds, details=details)
    except Exception as err:
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
    result["peak_rss_bytes"] = _status_bytes("VmHWM")
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)
    return 1 if "error" in result else 0


def _run_child(name: str, tcfg: TorchConfig, timeout: float) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "benchmarks.torch_feed",
        "--child",
        name,
        "--child-config",
        json.dumps(asdict(tcfg)),
    ]
    try:
        proc = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"id": name, "error": f"timed out after {timeout:g}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            if "error" in result:
                sys.stderr.write(proc.stderr[-3000:])
            return result
    sys.stderr.write(proc.stderr[-3000:])
    return {"id": name, "error": f"child exited with status {proc.returncode} and no result"}


def _selected(name: str, only: Sequence[str] | None) -> bool:
    return not only or any(fnmatch.fnmatch(name, pattern) for pattern in only)


def _prepare(args: argparse.Namespace) -> TorchConfig:
    from benchmarks import tpch

    _progress(f"preparing TPC-H lineitem SF {args.scale} (cached under {args.cache_dir})")
    parquet = tpch.lineitem_parquet(args.scale, args.cache_dir)
    duckdb_path = args.cache_dir / "tpch.duckdb"
    duckdb_table = tpch.load_duckdb(duckdb_path, parquet, tpch.table_name("lineitem", args.scale))
    pg_table = ""
    if any(c.postgres and _selected(c.id, args.only) for c in CONTENDERS.values()):
        pg_table = tpch.load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    base = Config(
        pg_url=args.pg_url,
        sa_url=args.pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
        pg_table=pg_table,
        duckdb_path=str(duckdb_path),
        duckdb_table=duckdb_table,
        batch_size=args.batch_size,
        readers=args.readers,
    )
    return TorchConfig(base, args.workers)


def _report(results: dict[str, dict[str, Any]], tcfg: TorchConfig, scale: float) -> str:
    lines = [
        f"torch DataLoader feed of TPC-H lineitem SF {scale:g} ({len(COLUMNS)} numeric columns, "
        f"batch {tcfg.base.batch_size}), {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        "",
        f"{'contender':<21} {'what':<46} {'rows':>9} {'seconds':>8} {'rows/s':>11} {'peak RSS':>9}",
    ]
    for name, contender in CONTENDERS.items():
        result = results.get(name)
        if result is None:
            continue
        if "error" in result:
            lines.append(f"{name:<21} {contender.label:<46} ERROR {result['error']}")
            continue
        extra = ", ".join(f"{k}={v}" for k, v in (result.get("details") or {}).items())
        lines.append(
            f"{name:<21} {contender.label:<46} {result['rows']:>9} {result['seconds']:>8.2f} "
            f"{result['rows_per_second']:>11,.0f} {result['peak_rss_bytes'] / 2**20:>6.0f} MB"
            + (f"   ({extra})" if extra else "")
        )
    lines.append("")
    checks = [
        (
            "sqlfeed-duckdb",
            "memory-batches",
            GOAL_DUCKDB_VS_MEMORY,
            "sqlfeed from DuckDB vs the in-memory batch loader",
        ),
        (
            "sqlfeed-duckdb",
            "memory-tensordataset",
            None,
            "sqlfeed from DuckDB vs TensorDataset + DataLoader(batch_size=1024)",
        ),
        (
            "sqlfeed-postgres",
            "pandas-postgres",
            None,
            "sqlfeed from PostgreSQL vs pandas.read_sql + TensorDataset",
        ),
    ]
    for a, b, goal, what in checks:
        first, second = results.get(a), results.get(b)
        if not first or not second or "error" in first or "error" in second:
            continue
        ratio = float(first["rows_per_second"]) / float(second["rows_per_second"])
        verdict = f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})" if goal else ""
        lines.append(f"{what}: {ratio:.2f}x{verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the contenders (each in a subprocess) and print the table and the goal."""
    from benchmarks import tpch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1: 6M rows)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--readers", type=int, default=1, help="Feeder readers per worker")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--only", nargs="+", metavar="ID", help="contender ids (globs)")
    parser.add_argument("--cache-dir", type=Path, default=tpch.DEFAULT_CACHE_DIR)
    parser.add_argument("--pg-url", default=tpch.DEFAULT_PG_URL)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per contender")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.child_config)
    tcfg = _prepare(args)
    results: dict[str, dict[str, Any]] = {}
    for name in CONTENDERS:
        if not _selected(name, args.only):
            continue
        _progress(f"[{name}] running")
        result = _run_child(name, tcfg, args.timeout)
        if "error" not in result:
            result["rows_per_second"] = result["rows"] / max(result["seconds"], 1e-9)
            _progress(
                f"[{name}] {result['rows']} rows in {result['seconds']:.2f}s "
                f"({result['rows_per_second']:,.0f} rows/s)"
            )
        else:
            _progress(f"[{name}] ERROR {result['error']}")
        results[name] = result
    print(_report(results, tcfg, args.scale))
    if args.json:
        args.json.write_text(json.dumps({"config": asdict(tcfg), "results": results}, indent=2))
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())

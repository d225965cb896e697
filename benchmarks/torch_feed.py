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
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress as _progress
from benchmarks.harness import Contender, Outcome, Tally
from benchmarks.tf_feed import COLUMNS, Config

__all__ = ["CONTENDERS", "main"]

GOAL_DUCKDB_VS_MEMORY = 0.5


@dataclass(frozen=True)
class TorchConfig:
    """The tf.data benchmark's configuration, plus the DataLoader's worker processes."""

    base: Config
    workers: int = 2

    @classmethod
    def from_json(cls, base: dict[str, Any], workers: int = 2) -> TorchConfig:
        """Rebuild the config from its JSON object (the child's side)."""
        return cls(Config(**base), workers)


def _consume(loader: Any) -> int:
    """The loop every contender is measured with: rows seen (and, when checking, the sum
    of ``l_orderkey`` kept for :func:`_checked`)."""
    tally = Tally()
    for batch in loader:
        keys = batch["l_orderkey"]
        if tally.checksum is None:
            tally.rows += len(keys)
        else:
            tally.add_values(len(keys), keys)
    _TALLY.append(tally)
    return tally.rows


_TALLY: list[Tally] = []
"""The last loop's tally (one per child process)."""


def _checked(outcome: Outcome) -> Outcome:
    """``outcome`` with the loop's checksum in its details (when checking)."""
    rows, seconds, details = outcome
    if _TALLY:
        details.update(_TALLY[-1].details())
    return rows, seconds, details


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


def _contender(
    id: str, label: str, run: Callable[[TorchConfig], Outcome]
) -> Contender[TorchConfig]:
    return Contender(id, label, lambda cfg: _checked(run(cfg)), requires=("torch",))


CONTENDERS: dict[str, Contender[TorchConfig]] = {
    c.id: c
    for c in (
        _contender("sqlfeed-duckdb", "sqlfeed.torch.SQLDataset, DuckDB file", _sqlfeed_duckdb),
        _contender("sqlfeed-postgres", "sqlfeed.torch.SQLDataset, PostgreSQL", _sqlfeed_postgres),
        _contender("memory-batches", "in-memory tensors, 1024-row index batches", _memory_batches),
        _contender(
            "memory-tensordataset",
            "TensorDataset + DataLoader(batch_size=1024)",
            _memory_tensordataset,
        ),
        _contender(
            "pandas-postgres", "pandas.read_sql + TensorDataset, PostgreSQL", _pandas_postgres
        ),
    )
}
POSTGRES = ("sqlfeed-postgres", "pandas-postgres")
"""The contenders that read PostgreSQL (its table is loaded only when one is selected)."""


def _selected(name: str, only: Sequence[str] | None) -> bool:
    return not only or any(fnmatch.fnmatch(name, pattern) for pattern in only)


def _prepare(args: argparse.Namespace) -> TorchConfig:
    from benchmarks import tpch

    _progress(f"preparing TPC-H lineitem SF {args.scale} (cached under {args.cache_dir})")
    parquet = tpch.lineitem_parquet(args.scale, args.cache_dir)
    duckdb_path = args.cache_dir / "tpch.duckdb"
    duckdb_table = tpch.load_duckdb(duckdb_path, parquet, tpch.table_name("lineitem", args.scale))
    pg_table = ""
    if any(_selected(name, args.only) for name in POSTGRES):
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
        harness.load_line(),
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
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds (best kept)")
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, TorchConfig.from_json, args.child, args.child_config)
    if args.smoke:
        args.scale, args.repeat = 0.01, 1
    tcfg = _prepare(args)
    entries = [(c, tcfg) for name, c in CONTENDERS.items() if _selected(name, args.only)]
    measured = harness.measure("torch_feed", entries, args.repeat, args.timeout, check=args.smoke)
    results = harness.summaries(measured)
    disagreements = harness.agreement(measured)
    print(_report(results, tcfg, args.scale))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json:
        args.json.write_text(json.dumps({"config": asdict(tcfg), "results": results}, indent=2))
    return 1 if disagreements or any(r.error for r in measured) else 0


if __name__ == "__main__":
    raise SystemExit(main())

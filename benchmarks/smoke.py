"""Every benchmark at a tiny scale: does it run, and do its contenders agree (``make bench-smoke``).

Runs ``python -m benchmarks.<name> --smoke`` for every benchmark in :data:`SMOKES`
(TPC-H SF 0.01, one round; :mod:`benchmarks.harness` turns checksums on, so contenders
that read the same rows must report the same count and the same sum of ``l_orderkey``),
``--jobs`` at a time after :mod:`benchmarks.tpch` has prepared the data alone. A
benchmark fails when it exits non-zero: an error, a contender that disagrees with its
group, or a failed sanity check of its own (goals are reported, never enforced). A
contender whose optional package is missing is skipped by the harness, not failed.
As in the tests, a benchmark whose server (:data:`SERVERS`) does not answer is skipped
with the reason, except under ``CI=true``, where it fails.

The slowest contenders to start are left out by default (Ray starts a cluster in each
child, TensorFlow takes seconds to import): ``--all`` runs every contender. PostgreSQL
and MariaDB are the tests' (``SQLFEED_TEST_POSTGRES_URL``, ``SQLFEED_TEST_MYSQL_URL``).

    .venv/bin/python -m benchmarks.smoke              # what make bench-smoke runs
    .venv/bin/python -m benchmarks.smoke --only peers stats --all
"""

from __future__ import annotations

import argparse
import os
import pkgutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

from benchmarks import harness
from benchmarks.tpch import DEFAULT_MYSQL_URL, DEFAULT_PG_URL, lineitem_parquet

__all__ = ["LEFT_OUT", "SMOKES", "main", "smoke"]

REPO_ROOT = Path(__file__).resolve().parent.parent
NOT_BENCHMARKS = frozenset({"common", "harness", "smoke"})
"""Modules of the package that are not benchmarks."""

SMOKES: dict[str, tuple[str, ...]] = {
    "tpch": (),
    "tf_feed": (),
    "train": (),
    "peers": (),
    "stats": ("--no-warm-up",),
    "read_throughput": (),
    "scale_out": (),
    "local_read": (),
    "dispatch": (),
    "reshard": (),
    "shardsets": (),
    "torch_feed": (),
    "pg_readers": (),
    "partition_overhead": (),
    "tiebreak": (),
    "tpc_queries": (),
    "accuracy": (),
    "predict": ("--only", "sqlfeed-1", "sqlfeed-threads4", "pandas", "sink-*"),
    "lakehouse": (),
}
"""Every benchmark and the arguments its smoke run adds to ``--smoke`` (the longest first,
so two at a time finish together)."""

LEFT_OUT: dict[str, tuple[str, ...]] = {
    "peers": (
        "--only",
        "pg-sqlfeed",
        "pg-connectorx",
        "pg-pandas",
        "mariadb-sqlfeed",
        "mariadb-connectorx",
        "sqlite-*",
    ),
    "scale_out": ("--only", "dask-*"),
    "accuracy": ("--families", "gbdt"),
    "tf_feed": ("--only", "sqlfeed-duckdb", "memory-generator"),
    "torch_feed": ("--only", "sqlfeed-duckdb", "memory-batches"),
}
"""Without ``--all``: the contenders run (Ray's, Dask's in peers (scale_out runs them) and
most of TensorFlow's left out: each starts a cluster or takes seconds to import)."""

SERVERS: dict[str, tuple[str, ...]] = {
    "tpch": ("postgres",),
    "dispatch": ("postgres", "mariadb"),
    "partition_overhead": ("postgres",),
    "peers": ("postgres", "mariadb"),
    "pg_readers": ("postgres",),
    "predict": ("postgres",),
    "read_throughput": ("postgres",),
    "scale_out": ("postgres",),
    "stats": ("postgres",),
    "tiebreak": ("postgres",),
}
"""The servers each smoke run reads (``tf_feed`` and ``torch_feed`` too with ``--all``)."""
URLS = {"postgres": DEFAULT_PG_URL, "mariadb": DEFAULT_MYSQL_URL}


def unreachable(server: str) -> str | None:
    """Why ``server`` (``postgres``, ``mariadb``) does not answer, or None when it does."""
    url = urlparse(URLS[server])
    port = url.port or (5432 if server == "postgres" else 3306)
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", port), timeout=3):
            return None
    except OSError as err:
        return f"{server} unreachable at {url.hostname}:{port} ({err})"


def benchmarks() -> list[str]:
    """The benchmark modules of the package (every module but the helpers)."""
    folder = str(Path(__file__).parent)
    return sorted(m.name for m in pkgutil.iter_modules([folder]) if m.name not in NOT_BENCHMARKS)


def smoke(name: str, every: bool, timeout: float) -> tuple[str, float, str]:
    """Run one benchmark's smoke; (``ok`` / ``FAILED``, seconds, the output's tail)."""
    command = [sys.executable, "-m", f"benchmarks.{name}", "--smoke", *SMOKES[name]]
    if not every:
        command += LEFT_OUT.get(name, ())
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "FAILED", time.perf_counter() - start, f"timed out after {timeout:g}s"
    seconds = time.perf_counter() - start
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
    return ("ok" if proc.returncode == 0 else "FAILED"), seconds, tail


def main(argv: Sequence[str] | None = None) -> int:
    """Run the smokes; print one line each and the total; 1 when one failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", nargs="+", choices=sorted(SMOKES), default=None)
    parser.add_argument("--all", action="store_true", help="every contender (Ray, TensorFlow)")
    parser.add_argument("--jobs", type=int, default=2, help="smokes at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per benchmark")
    args = parser.parse_args(argv)
    missing = sorted(set(benchmarks()) - set(SMOKES))
    if missing:
        print(f"FAILED: no smoke run for {', '.join(missing)} (add them to SMOKES)")
        return 1
    names = [n for n in SMOKES if args.only is None or n in args.only]
    print(f"bench-smoke: {len(names)} benchmarks, {args.jobs} at a time; {harness.load_line()}")
    started = time.perf_counter()
    results: dict[str, tuple[str, float, str]] = {}
    down = {s: why for s in URLS if (why := unreachable(s)) is not None}
    for name in list(names):
        needs = SERVERS.get(name, ("postgres",) if args.all and name.endswith("_feed") else ())
        why = next((down[s] for s in needs if s in down), None)
        if why is not None:
            names.remove(name)
            results[name] = ("FAILED" if os.environ.get("CI") == "true" else "skipped", 0.0, why)
            print(f"  {results[name][0]:<7} {name}: {why}", flush=True)
    lineitem_parquet(0.01)  # generated once here, before the runs that read it in parallel
    if "tpch" in names:  # prepares the data the others read: alone, first
        results["tpch"] = smoke("tpch", args.all, args.timeout)
        print(f"  {results['tpch'][0]:<7} tpch {results['tpch'][1]:.1f}s", flush=True)
    rest = [n for n in names if n != "tpch"]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = {n: pool.submit(smoke, n, args.all, args.timeout) for n in rest}
        for name, future in futures.items():
            results[name] = future.result()
            status, seconds, _ = results[name]
            print(f"  {status:<7} {name} {seconds:.1f}s", flush=True)
    failed = [n for n, (status, _, _) in results.items() if status == "FAILED"]
    for name in failed:
        print(f"\n--- {name} (last lines) ---\n{results[name][2]}")
    total = time.perf_counter() - started
    print(
        f"bench-smoke: {sum(r[0] == 'ok' for r in results.values())} ok, "
        f"{sum(r[0] == 'skipped' for r in results.values())} skipped, {len(failed)} failed "
        f"in {total:.0f}s "
        f"({harness.load_line()})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Accuracy parity: sqlfeed.ml's models against scikit-learn on exactly the same rows.

For every data set shipped inside a PyPI package (:mod:`tests.helpers.ml_datasets`:
scikit-learn's bundled ``breast_cancer``, ``iris``, ``wine``, ``digits`` and ``diabetes``;
palmerpenguins' ``species`` and ``body_mass_g``, with string columns and NULLs), written
into each engine (``duckdb``: in memory; ``postgres``: the tests' server) with an ``id``
column, and for every family (``linear``, ``dnn``, ``gbdt``) and seed:

* sqlfeed: ``sqlfeed.ml.train("SELECT * FROM <table>", source, label=..., key="id",
  validation=0.2, family=..., seed=...)`` (``--epochs`` and ``--batch-size``: sqlfeed's
  defaults unless given), then ``sqlfeed.ml.evaluate(model)`` on its validation split;
* scikit-learn on the rows of the manifest's training and validation SQL, read with the
  engine's own driver: imputation, scaling and one-hot, then ``LogisticRegression`` /
  ``Ridge`` for ``linear`` and ``dnn``; ``HistGradientBoosting*`` for ``gbdt``.

The table shows, per data set, engine and family, sqlfeed's metric (mean over the seeds,
lowest and highest) beside scikit-learn's, the difference (in validation rows for
accuracy) and whether the goal holds: accuracy at most max(2 rows, 0.02) below
scikit-learn's, ROC AUC (binary) at most 0.01 below, R² at most 0.05 below. Goals are
reported, not enforced. Sanity checks (exit status 1 when one fails or a training errs):
the two SQL texts split the table's rows exactly, both sides scored the same row count,
and the validation rows are the same on every engine.

Run from the repository root (PostgreSQL at ``SQLFEED_TEST_POSTGRES_URL``)::

    .venv/bin/python -m benchmarks.accuracy --json /tmp/accuracy.json
    .venv/bin/python -m benchmarks.accuracy --datasets iris wine --families linear --seeds 2
    .venv/bin/python -m benchmarks.accuracy --smoke   # iris, linear, one seed, DuckDB
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress

__all__ = ["DATASETS", "ENGINES", "FAMILIES", "Case", "main", "run_case"]

DATASETS = ("breast_cancer", "iris", "wine", "digits", "diabetes", "penguins", "penguins_mass")
"""The data sets of the issue (``penguins_binary`` runs when named)."""
FAMILIES = ("linear", "dnn", "gbdt")
ENGINES = ("duckdb", "postgres")
REQUIRES = ("sklearn", "palmerpenguins", "duckdb")
"""Modules without which nothing runs (``tensorflow`` too for the Keras families, ``xgboost``
for ``gbdt``: a family whose module is missing is skipped)."""
NEEDS = {"linear": "tensorflow", "dnn": "tensorflow", "gbdt": "xgboost"}


@dataclass
class Case:
    """One data set, engine and family over the seeds.

    Attributes:
        dataset: A name of :data:`tests.helpers.ml_datasets.DATASETS`.
        engine: ``duckdb`` or ``postgres``.
        family: A ``sqlfeed.ml`` family.
        task: The data set's task.
        ours: sqlfeed's validation metrics per seed (the numbers compared).
        theirs: scikit-learn's per seed.
        seconds: sqlfeed's training time per seed (wall, train() returned).
        validation_ids: The validation rows' ids (the first seed's).
        error: What went wrong, if anything did.
        problems: Sanity checks that failed.
    """

    dataset: str
    engine: str
    family: str
    task: str = ""
    ours: list[dict[str, float]] = field(default_factory=list)
    theirs: list[dict[str, float]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    validation_ids: list[int] = field(default_factory=list)
    error: str | None = None
    problems: list[str] = field(default_factory=list)


def run_case(case: Case, table: Any, seeds: Sequence[int], options: dict[str, Any]) -> None:
    """Train and score ``case`` for each seed, filling it in (errors recorded, not raised).

    Args:
        case: What to run; its results are added to it.
        table: The :class:`tests.helpers.ml_datasets.Table` of the data set on the engine.
        seeds: The seeds.
        options: More ``sqlfeed.ml.train`` options (epochs, batch_size).
    """
    import sqlfeed.ml
    from tests.helpers.ml_datasets import BASELINE_OF, manifest_frames, sklearn_baseline

    case.task = table.task
    keep = ("rows", "accuracy", "roc_auc", "r2")
    for seed in seeds:
        label = f"[{case.dataset} {case.engine} {case.family} seed {seed}]"
        try:
            with tempfile.TemporaryDirectory() as folder, table.engine.source() as source:
                started = time.perf_counter()
                model = sqlfeed.ml.train(
                    f"SELECT * FROM {table.sql_name}",
                    source,
                    label=table.label,
                    out=Path(folder) / "model",
                    task=table.task,
                    family=case.family,
                    key="id",
                    validation=0.2,
                    seed=seed,
                    report=False,
                    **options,
                )
                case.seconds.append(time.perf_counter() - started)
                ours = sqlfeed.ml.evaluate(model, source=source)
            train, val = manifest_frames(table.engine, model.manifest)
            theirs = sklearn_baseline(
                train, val, table.label, table.task, BASELINE_OF[case.family], seed=seed
            )
        except Exception as err:  # reported in the table, the others still run
            case.error = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
            progress(f"{label} failed: {case.error}")
            return
        ids = sorted(int(i) for i in [*train["id"], *val["id"]])
        if ids != list(range(table.rows)):
            case.problems.append(f"seed {seed}: the two SQL texts do not split the rows")
        if int(ours["rows"]) != len(val):
            case.problems.append(f"seed {seed}: sqlfeed scored {ours['rows']}, sklearn {len(val)}")
        if not case.validation_ids:
            case.validation_ids = sorted(int(i) for i in val["id"])
        case.ours.append({k: float(ours[k]) for k in keep if ours.get(k) is not None})
        case.theirs.append(theirs)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in case.ours[-1].items() if k != "rows")
        progress(f"{label} {shown} in {case.seconds[-1]:.1f}s")


def _rows(case: Case) -> list[list[str]]:
    """The table's lines of one case."""
    from tests.helpers.ml_datasets import parity

    head = [case.dataset, case.engine, case.family]
    if case.error or not case.ours:
        return [[*head, "-", "-", "-", "-", "-", "-", "-", f"ERROR {case.error}"]]
    seconds = sum(case.seconds) / len(case.seconds)
    lines = []
    for result in parity(case.task, case.ours, case.theirs):
        behind = result.rows_behind
        lines.append(
            [
                *head,
                result.metric,
                f"{result.ours:.4f}",
                f"{result.low:.4f}..{result.high:.4f}",
                f"{result.theirs:.4f}",
                f"{result.ours - result.theirs:+.4f}",
                "-" if behind is None else f"{-behind + 0.0:+.1f}",  # never -0.0
                f"{seconds:.1f}",
                "met" if result.met else "MISSED",
            ]
        )
    return lines


def report(cases: Sequence[Case], seeds: int) -> tuple[str, list[str]]:
    """The table and the goals missed (``dataset engine family metric`` each)."""
    from tests.helpers.ml_datasets import parity

    header = [
        "dataset",
        "engine",
        "family",
        "metric",
        f"sqlfeed (mean of {seeds})",
        "min..max",
        "sklearn",
        "diff",
        "rows",
        "s/train",
        "goal",
    ]
    lines = [line for case in cases for line in _rows(case)]
    missed = [
        f"{c.dataset} {c.engine} {c.family} {p.metric}"
        for c in cases
        if c.ours and not c.error
        for p in parity(c.task, c.ours, c.theirs)
        if not p.met
    ]
    return harness.table(header, lines, right={4, 6, 7, 8, 9}), missed


def same_split(cases: Sequence[Case]) -> list[str]:
    """Problems: a data set whose validation rows differ between engines."""
    problems = []
    for dataset in dict.fromkeys(c.dataset for c in cases):
        splits = {c.engine: c.validation_ids for c in cases if c.dataset == dataset}
        splits = {e: ids for e, ids in splits.items() if ids}
        if len({tuple(ids) for ids in splits.values()}) > 1:
            problems.append(f"{dataset}: the validation rows differ between {', '.join(splits)}")
    return problems


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from tests.helpers.ml_datasets import DATASETS as ALL

    parser = argparse.ArgumentParser(
        description="Accuracy parity of sqlfeed.ml with scikit-learn on the same rows."
    )
    parser.add_argument("--datasets", nargs="+", choices=sorted(ALL), default=list(DATASETS))
    parser.add_argument(
        "--families", nargs="+", choices=FAMILIES, default=None, help="default: all (smoke: linear)"
    )
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--epochs", type=int, default=None, help="default: sqlfeed's")
    parser.add_argument("--batch-size", type=int, default=None, help="default: sqlfeed's")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.datasets, args.engines, args.seeds = ["iris"], ["duckdb"], 1
        args.families = args.families or ["linear"]
    args.families = args.families or list(FAMILIES)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    return args


def _run(args: argparse.Namespace) -> list[Case]:
    """Every case of ``args``, each engine's tables written first and dropped at the end."""
    from tests.helpers.engines import open_engine
    from tests.helpers.ml_datasets import drop_table, load_table

    options = {k: v for k, v in (("epochs", args.epochs), ("batch_size", args.batch_size)) if v}
    families = [f for f in args.families if importlib.util.find_spec(NEEDS[f]) is not None]
    for family in sorted(set(args.families) - set(families)):
        progress(f"{family} skipped: not installed ({NEEDS[family]})")
    cases: list[Case] = []
    for name in args.engines:
        engine = open_engine(name)
        try:
            for dataset in args.datasets:
                table = load_table(engine, dataset)
                try:
                    for family in families:
                        case = Case(dataset, name, family)
                        run_case(case, table, range(args.seeds), options)
                        cases.append(case)
                finally:
                    drop_table(table)
        finally:
            engine.close()
    return cases


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table and the checks, optionally write JSON.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        0, or 1 when a training failed or a sanity check did not hold (a missed goal is
        reported, not a failure).
    """
    args = _parse_args(argv)
    missing = [m for m in REQUIRES if importlib.util.find_spec(m) is None]
    if missing:
        print(f"accuracy: skipped, not installed ({', '.join(missing)})")
        return 0
    load_before = harness.load_line()
    progress(load_before)
    started = time.perf_counter()
    cases = _run(args)
    elapsed = time.perf_counter() - started
    table, missed = report(cases, args.seeds)
    problems = [f"{c.dataset} {c.engine} {c.family}: {p}" for c in cases for p in c.problems]
    problems += same_split(cases)
    budget = f"epochs {args.epochs or 'sqlfeed default'}, batch {args.batch_size or 'default'}"
    print(
        f"Accuracy parity with scikit-learn on the same rows, {args.seeds} seeds, {budget} "
        f"({platform.node()}, {load_before} before, {harness.load_line()} after, "
        f"total {elapsed:.0f}s)"
    )
    print(table)
    print(
        "goal: accuracy >= sklearn - max(2 rows, 0.02), ROC AUC >= sklearn - 0.01, "
        "R2 >= sklearn - 0.05 (means over the seeds); rows: validation rows sqlfeed gets "
        "right more (+) or fewer (-) than sklearn"
    )
    total = sum(len(c.ours) > 0 and not c.error for c in cases)
    print(f"goals missed: {len(missed)} ({', '.join(missed) or 'none'}); {total} cases ran")
    errors = [c for c in cases if c.error]
    for check in problems:
        print(f"✗ FAIL {check}")
    if not problems:
        print("✓ every split exact, both sides scored the same rows, the same split per engine")
    if args.json is not None:
        doc = {
            "seeds": args.seeds,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "elapsed_seconds": round(elapsed, 2),
            "host": {"node": platform.node(), "cpus": os.cpu_count(), "load": load_before},
            "cases": [asdict(c) for c in cases],
            "missed": missed,
            "problems": problems,
        }
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        progress(f"wrote {args.json}")
    return 1 if problems or errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

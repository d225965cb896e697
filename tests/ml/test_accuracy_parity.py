"""Accuracy parity: sqlfeed.ml's models against scikit-learn on exactly the same rows (#26).

Data shipped inside PyPI packages (:mod:`tests.helpers.ml_datasets`: scikit-learn's
bundled data sets and palmerpenguins, with an ``id`` column) is written into DuckDB and
PostgreSQL; ``sqlfeed.ml.train`` splits it by a 0.2 hash of ``id`` and trains; scikit-learn
(imputation, scaling, one-hot, then ``LogisticRegression``/``Ridge``; or
``HistGradientBoosting*``) trains and scores on the rows of the manifest's two SQL texts,
read with the engine's own driver. Goal, on the mean over the seeds: ``linear`` and
``dnn`` at most max(2 validation rows, 0.02) below LogisticRegression's accuracy and 0.01
below its ROC AUC (binary); ``gbdt`` the same against HistGradientBoosting; R² at most
0.05 below Ridge's (HistGradientBoostingRegressor's for ``gbdt``).

This file runs a subset that 2 cores afford (one or two seeds, a few cases per family,
about 400 steps of batches of 32 for the Keras families);
``benchmarks/accuracy.py`` runs every data set and family with 5 seeds on both engines.
The first test holds the baselines themselves to the figures published for them (an
80/20 split by ``id % 5``), so a broken baseline cannot make the parity pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import get_engine
from tests.helpers.ml_datasets import (
    BASELINE_OF,
    DATASETS,
    Table,
    drop_table,
    load_table,
    manifest_frames,
    parity,
    read_frame,
    sklearn_baseline,
)
from tests.helpers.sources import require_module

require_module("sklearn", "palmerpenguins")

STEPS = 400
BATCH_SIZE = 32
"""The Keras families' training here: batches of 32, enough epochs for about 400 steps
(sqlfeed's default, about 2,000 steps, costs 2 cores too much)."""

CASES: list[tuple[str, str, str, tuple[int, ...]]] = [
    ("iris", "linear", "duckdb", (0, 1)),
    ("breast_cancer", "linear", "duckdb", (0,)),
    ("diabetes", "linear", "duckdb", (0,)),
    ("penguins_mass", "linear", "duckdb", (0,)),
    ("wine", "dnn", "duckdb", (0,)),
    ("penguins", "dnn", "duckdb", (0,)),
    ("penguins_mass", "dnn", "duckdb", (0,)),
    ("diabetes", "gbdt", "duckdb", (0,)),
    ("penguins", "gbdt", "duckdb", (0,)),
    ("breast_cancer", "gbdt", "postgres", (0,)),
    ("penguins", "linear", "postgres", (0,)),
]
"""(data set, family, engine, seeds) of the parity test: each family, each task, strings
and NULLs, both engines; the rest (digits, 5 seeds) in ``benchmarks/accuracy.py``."""
MISSED: dict[tuple[str, ...], str] = {}
"""Cases that miss the goal today, and by how much."""

PUBLISHED = {
    ("breast_cancer", "linear"): {"accuracy": 0.965, "roc_auc": 0.996},
    ("iris", "linear"): {"accuracy": 0.967},
    ("wine", "linear"): {"accuracy": 1.000},
    ("digits", "linear"): {"accuracy": 0.964},
    ("diabetes", "linear"): {"r2": 0.520},
    ("penguins", "linear"): {"accuracy": 1.000},
    ("penguins_mass", "linear"): {"r2": 0.853},
    ("breast_cancer", "hgb"): {"accuracy": 0.939},
    ("digits", "hgb"): {"accuracy": 0.978},
    ("diabetes", "hgb"): {"r2": 0.392},
}
"""scikit-learn 1.9.1's figures on an 80/20 split by ``id % 5`` (``../shared/ml-peers.md``)."""


@pytest.fixture(scope="module")
def tables() -> Iterator[Callable[[str, str], Table]]:
    """``tables(engine, dataset)``: the data set written into the engine once per module,
    dropped at its end."""
    loaded: dict[tuple[str, str], Table] = {}

    def table(engine: str, dataset: str) -> Table:
        if (engine, dataset) not in loaded:
            loaded[engine, dataset] = load_table(get_engine(engine), dataset)
        return loaded[engine, dataset]

    yield table
    for written in loaded.values():
        drop_table(written)


@pytest.mark.parametrize(
    ("dataset", "kind"), sorted(PUBLISHED), ids=[f"{d}-{k}" for d, k in sorted(PUBLISHED)]
)
def test_baselines_give_the_published_figures(
    tables: Callable[[str, str], Table], dataset: str, kind: str
) -> None:
    table = tables("duckdb", dataset)
    train = read_frame(table.engine, f"SELECT * FROM {table.name} WHERE id % 5 <> 0")
    val = read_frame(table.engine, f"SELECT * FROM {table.name} WHERE id % 5 = 0")
    assert len(train) + len(val) == table.rows
    assert next(iter(train.columns)) == "id"
    assert table.label in train.columns
    result = sklearn_baseline(train, val, table.label, table.task, kind)
    assert result["rows"] == len(val)
    for metric, figure in PUBLISHED[dataset, kind].items():
        assert result[metric] == pytest.approx(figure, abs=0.0025), metric


def test_every_data_set_has_an_id_and_its_label() -> None:
    for name, (loader, label, task) in DATASETS.items():
        data = loader()
        assert list(data["id"]) == list(range(len(data))), name
        assert data[label].notna().all(), name
        assert all(c == c.lower() and c.replace("_", "").isalnum() for c in data.columns), name
        classes = data[label].nunique()
        assert (classes == 2) == (task == "binary"), name
        assert task == "regression" or classes <= 10, name


def _train_and_score(
    table: Table, family: str, seed: int, out: Path
) -> tuple[dict[str, Any], dict[str, float]]:
    """sqlfeed's validation metrics and scikit-learn's on the manifest's rows."""
    import sqlfeed.ml

    with table.engine.source() as source:
        model = sqlfeed.ml.train(
            f"SELECT * FROM {table.sql_name}",
            source,
            label=table.label,
            out=out,
            task=table.task,
            family=family,
            key="id",
            validation=0.2,
            seed=seed,
            epochs=math.ceil(STEPS / math.ceil(0.8 * table.rows / BATCH_SIZE)),
            batch_size=BATCH_SIZE,
            report=False,
        )
        ours = sqlfeed.ml.evaluate(model, source=source)
    train, val = manifest_frames(table.engine, model.manifest)
    ids = sorted([*train["id"], *val["id"]])
    assert ids == list(range(table.rows)), "the two SQL texts split the rows exactly"
    assert 0.1 * table.rows < len(val) < 0.3 * table.rows
    assert ours["rows"] == len(val)
    kind = BASELINE_OF[family]
    return ours, sklearn_baseline(train, val, table.label, table.task, kind, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dataset", "family", "engine", "seeds"),
    [
        pytest.param(
            *case,
            id="-".join(case[:3]),
            marks=[pytest.mark.xfail(strict=True, reason=MISSED[case[:3]])]
            if case[:3] in MISSED
            else [],
        )
        for case in CASES
    ],
)
def test_accuracy_parity_with_scikit_learn(
    tables: Callable[[str, str], Table],
    tmp_path: Path,
    dataset: str,
    family: str,
    engine: str,
    seeds: tuple[int, ...],
) -> None:
    require_module("tensorflow", *(("xgboost",) if family == "gbdt" else ()))
    table = tables(engine, dataset)
    scored = [_train_and_score(table, family, s, tmp_path / f"seed{s}") for s in seeds]
    results = parity(table.task, [o for o, _ in scored], [t for _, t in scored])
    missed = [r.line() for r in results if not r.met]
    assert not missed, f"{dataset} {family} on {engine}, seeds {seeds}: " + "; ".join(missed)

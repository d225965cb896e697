"""The preprocessing travels: a model trained on DuckDB scores the same rows on any engine (#26).

Models are trained on DuckDB tables of palmerpenguins (strings, NULLs in a string column
and in the numbers): a binary ``species`` (Adelie or Chinstrap) and the regression of
``body_mass_g``. The same rows are written into PostgreSQL, MariaDB and SQLite, and
``sqlfeed.ml.evaluate`` scores the validation rows (``WHERE id IN (...)``, the ids of the
manifest's validation SQL) there: every metric equals DuckDB's (1e-6), and no statistics
are computed at evaluate time: the statistics functions of ``sqlfeed.compute_stats``
(``sqlfeed.stats.pushdown.compute_pushdown``,
``sqlfeed.stats.accumulate.StatsAccumulator``) raise while evaluate runs, and every query
sqlfeed's sources run is recorded by what it is for (none is a ``statistics query``).
Controls show both checks fire: under them ``train`` (which computes statistics) fails,
and ``compute_stats`` is recorded as a statistics query.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import get_engine
from tests.helpers.ml_datasets import Table, drop_table, frame, load_table, read_frame
from tests.helpers.sources import require_module

require_module("sklearn", "palmerpenguins", "tensorflow")

pytestmark = [pytest.mark.slow, pytest.mark.engine]

MODELS = {
    "binary-dnn": ("penguins_binary", "dnn"),
    "regression-wide_deep": ("penguins_mass", "wide_deep"),
    "binary-gbdt": ("penguins_binary", "gbdt"),
}
"""What is trained on DuckDB: (data set, family); wide_deep carries quantile buckets,
gbdt vocabulary codes as categorical features."""
ENGINES = ("postgres", "mysql", "sqlite")
TOLERANCE = 1e-6
"""Absolute, and relative to the value: the models predict in float32, whose last bit may
differ with the batch shape TensorFlow's kernels see (an MAE of ~330 moved by 7e-6 between
engines with TensorFlow 2.21); a row read wrongly moves a metric by far more."""


class Trained:
    """A model trained on DuckDB and its validation rows."""

    def __init__(self, dataset: str, family: str, out: Path) -> None:
        import sqlfeed.ml

        self.dataset = dataset
        self.table = load_table(get_engine("duckdb"), dataset)
        with self.table.engine.source() as source:
            self.model = sqlfeed.ml.train(
                f"SELECT * FROM {self.table.sql_name}",
                source,
                label=self.table.label,
                out=out,
                family=family,
                key="id",
                validation=0.2,
                epochs=5,
                report=False,
            )
        validation = read_frame(self.table.engine, self.model.manifest["validation_sql"])
        self.ids = [int(i) for i in validation["id"]]
        with self.table.engine.source() as source:
            self.duckdb = sqlfeed.ml.evaluate(self.model, self.sql(self.table), source)

    def sql(self, table: Table) -> str:
        """The validation rows of ``table`` (a copy of the data set), portably."""
        return f"SELECT * FROM {table.sql_name} WHERE id IN ({', '.join(map(str, self.ids))})"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Trained]]:
    """``trained(name)``: the model of :data:`MODELS` ``name``, trained once per module."""
    models: dict[str, Trained] = {}

    def get(name: str) -> Trained:
        if name not in models:
            dataset, family = MODELS[name]
            if family == "gbdt":
                require_module("xgboost")
            models[name] = Trained(dataset, family, tmp_path_factory.mktemp(name) / "model")
        return models[name]

    yield get
    for model in models.values():
        drop_table(model.table)


class StatisticsWatch:
    """Every query of sqlfeed's sources recorded by what it is for (``what``), and, with
    ``forbid``, the statistics functions of ``compute_stats`` made to raise."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, forbid: bool = True) -> None:
        from sqlfeed.io.source import Source

        # the modules (``stats`` exports functions of the same names as two of them)
        statistics, pushdown, accumulate = (
            importlib.import_module(m)
            for m in (
                "sqlfeed.feed.statistics",
                "sqlfeed.stats.pushdown",
                "sqlfeed.stats.accumulate",
            )
        )

        self.whats: list[str] = []

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("statistics were computed")

        if forbid:
            for home, name in (
                (statistics, "compute_pushdown"),
                (pushdown, "compute_pushdown"),
                (statistics, "StatsAccumulator"),
                (accumulate, "StatsAccumulator"),
            ):
                monkeypatch.setattr(home, name, refuse)
        for method in ("arrow", "rows"):
            monkeypatch.setattr(Source, method, self._recorded(getattr(Source, method)))

    def _recorded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(source: Any, sql: str, *args: Any, what: str = "query", **kwargs: Any) -> Any:
            self.whats.append(what)
            return method(source, sql, *args, what=what, **kwargs)

        return call


def _assert_equal_metrics(ours: Any, theirs: Any, where: str) -> None:
    """Every number of two metric results equal within :data:`TOLERANCE` (same keys)."""
    if isinstance(ours, dict):
        assert isinstance(theirs, dict), where
        keys = set(ours) - {"sql", "training_overlap"}  # not a metric: how rows were chosen
        assert keys == set(theirs) - {"sql", "training_overlap"}, where
        for key in sorted(keys):
            _assert_equal_metrics(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, list | tuple):
        assert isinstance(theirs, list | tuple), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _assert_equal_metrics(a, b, f"{where}[{i}]")
    elif isinstance(ours, float) and isinstance(theirs, int | float) and math.isnan(ours):
        assert math.isnan(theirs), where
    elif isinstance(ours, int | float) and not isinstance(ours, bool):
        assert theirs == pytest.approx(ours, rel=TOLERANCE, abs=TOLERANCE), where
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("engine_name", ENGINES)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_evaluate_on_another_engine_gives_duckdbs_metrics(
    trained: Callable[[str], Trained],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    engine_name: str,
) -> None:
    import sqlfeed.ml

    model = trained(name)
    engine = get_engine(engine_name)
    copy = load_table(engine, model.dataset, data=frame(model.dataset))
    try:
        watch = StatisticsWatch(monkeypatch)
        with engine.source() as source:
            result = sqlfeed.ml.evaluate(model.model, model.sql(copy), source)
    finally:
        drop_table(copy)
    assert result["rows"] == len(model.ids)
    assert result["training_overlap"] is None  # the copy's database has no training table
    assert watch.whats, "the recorder saw sqlfeed's queries"
    assert "statistics query" not in watch.whats
    _assert_equal_metrics(model.duckdb, result, f"{name} on {engine_name}")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_validation_rows_give_the_manifests_metrics(
    trained: Callable[[str], Trained], name: str
) -> None:
    model = trained(name)
    assert model.duckdb["rows"] == len(model.ids) > 0
    recorded = model.model.manifest["metrics"]["validation"]
    _assert_equal_metrics(model.duckdb, recorded, f"{name}: id list vs manifest SQL")


def test_the_copies_hold_the_same_rows_on_every_engine() -> None:
    data = frame("penguins")
    copies = [load_table(get_engine(e), "penguins", data=data) for e in ("duckdb", *ENGINES)]
    try:
        rows = [c.engine.rows(f"SELECT * FROM {c.name} ORDER BY id") for c in copies]
    finally:
        for copy in copies:
            drop_table(copy)
    assert len(rows[0]) == 344
    assert any(None in row for row in rows[0])
    for copy, theirs in zip(copies[1:], rows[1:], strict=True):
        assert theirs == rows[0], copy.engine.name


def test_the_watch_sees_statistics(
    trained: Callable[[str], Trained], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sqlfeed.ml

    table = trained("binary-dnn").table
    query = f"SELECT * FROM {table.sql_name}"
    with pytest.MonkeyPatch.context() as patch, table.engine.source() as source:
        StatisticsWatch(patch)
        with pytest.raises(AssertionError, match="statistics were computed"):
            sqlfeed.ml.train(query, source, label=table.label, out=tmp_path / "m", key="id")
    assert not (tmp_path / "m").exists()
    watch = StatisticsWatch(monkeypatch, forbid=False)
    with table.engine.source() as source:
        sqlfeed.compute_stats(query, source)
    assert "statistics query" in watch.whats

"""Time and peak memory to a trained model: ``sqlfeed.ml.train`` against the program a user
would write (``pandas.read_sql``, preprocessing in pandas, Keras or XGBoost on NumPy).

The data is TPC-H ``lineitem`` at ``--scale`` (SF 1: 6,001,215 rows; :mod:`benchmarks.tpch`
generates and loads it), in DuckDB and PostgreSQL, as the SELECT::

    SELECT l_orderkey * 8 + l_linenumber AS k,                         -- the split key
           l_quantity, l_extendedprice, l_discount, l_tax,            -- numeric features
           l_shipmode, l_shipinstruct, l_linestatus,                  -- text features
           CASE WHEN l_returnflag = 'R' THEN 1 ELSE 0 END AS returned -- the binary label
    FROM lineitem_sf<tag>

split 80/20 by sqlfeed's hash of ``k`` (:mod:`sqlfeed.ml.split`). The parent computes
both split SELECTs before the runs; the baselines read exactly those two texts, and the
sqlfeed child checks that the manifest's ``training_sql`` is the same text, so every
contender of a pair trains and scores on the same rows (``--smoke`` also compares the
row counts and the sum of ``k`` of the training rows).

Contenders (``--only`` ids, globs), each pair per engine (``duckdb-``, ``postgres-``):

* ``<engine>-sqlfeed-keras``: ``sqlfeed.ml.train(sql, source, label="returned", key="k",
  validation=0.2, family=--family, epochs=--epochs, batch_size=--batch-size, seed=0,
  report=False)``: the split, exact statistics of the training split in the engine, the
  Keras model with its preprocessing inside, fit from sqlfeed's feed, the validation
  metrics, the model folder written (the HTML statistics report is left out: the
  baseline writes none). The source is ``duckdb.connect(path, read_only=True)`` or the
  SQLAlchemy URL.
* ``<engine>-pandas-keras``: the two split SELECTs into pandas (``duckdb.connect(path)
  .execute(sql).df()``; ``pandas.read_sql(sqlalchemy.text(sql), engine)`` for PostgreSQL,
  ``text()`` because psycopg takes the ``%`` of the split's hash for a placeholder); the
  preprocessing computed in pandas from the training rows (mean and population standard
  deviation of each numeric column, NULLs filled with the mean plus a NULL mask; the top
  100 values of each text column by count as the lookup vocabulary); **the same Keras
  network**: :func:`sqlfeed.ml.keras_model.build_model` called with those pandas-computed
  transforms (same layers, widths, optimizer, learning rate and seed; the standardization
  and lookup run as the model's first layers, exactly as in sqlfeed's model); ``model.fit``
  on the NumPy arrays (``shuffle=True``), same epochs and batch size; ``model.predict`` on
  the validation rows, scored with ``sklearn.metrics.roc_auc_score``; ``model.save``.
* ``<engine>-sqlfeed-gbdt``: ``sqlfeed.ml.train(..., family="gbdt", trees=--trees,
  max_depth=--max-depth, learning_rate=--eta)`` (XGBoost on the Feeder through its
  external-memory iterator, evaluated on the validation split after every tree).
* ``<engine>-pandas-xgboost``: the same two frames; the text columns as pandas categories
  (the validation frame's with the training frame's categories), ``xgboost.DMatrix(frame,
  label, enable_categorical=True)``, ``xgboost.train`` with the same objective
  (``binary:logistic``), ``tree_method="hist"``, trees, depth, eta and seed, the
  validation matrix in ``evals`` as sqlfeed's; ``predict``, ``roc_auc_score``,
  ``save_model``.

Each run is a fresh interpreter (:mod:`benchmarks.harness`); the clock starts after the
imports (TensorFlow, Keras, XGBoost, pandas, scikit-learn, the drivers and sqlfeed) and
stops once the model is trained, scored on the validation rows and saved. Peak memory is
the child's ``VmHWM`` (the database servers' memory is not counted for either).

Goals (reported, never asserted), per engine and for each pair: sqlfeed's time <= 0.66x
the baseline's, its peak RSS <= 0.25x the baseline's, its validation ROC AUC within 0.005
of the baseline's. The load average is printed at the start and at the end: figures taken
while other work runs are not comparable.

Run from the repository root (PostgreSQL must be running), on an otherwise idle machine::

    .venv/bin/python -m benchmarks.train                       # SF 1, both engines, 1 round
    .venv/bin/python -m benchmarks.train --scale 0.05 --engines duckdb --only '*-keras'
    .venv/bin/python -m benchmarks.train --smoke               # SF 0.01, DuckDB, checked
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.common import progress
from benchmarks.harness import Contender, Outcome, start

__all__ = ["CONTENDERS", "Config", "main"]

KEY = "k"
LABEL = "returned"
NUMERIC = ("l_quantity", "l_extendedprice", "l_discount", "l_tax")
TEXT = ("l_shipmode", "l_shipinstruct", "l_linestatus")
QUERY = (
    f"SELECT l_orderkey * 8 + l_linenumber AS {KEY}, {', '.join(NUMERIC + TEXT)}, "
    f"CASE WHEN l_returnflag = 'R' THEN 1 ELSE 0 END AS {LABEL} FROM {{table}}"
)
ENGINES = ("duckdb", "postgres")
TOP_K = 100
"""The vocabulary size (sqlfeed's ``top_k`` default), the baseline's too."""
PREDICT_BATCH = 8192
GOAL_TIME = 0.66
GOAL_MEMORY = 0.25
GOAL_METRIC = 0.005
PAIRS = (("sqlfeed-keras", "pandas-keras"), ("sqlfeed-gbdt", "pandas-xgboost"))
"""Each sqlfeed contender and its baseline (ids without the engine)."""


@dataclass(frozen=True)
class Config:
    """What a child process needs (passed as JSON on its command line).

    Attributes:
        duckdb_path: The DuckDB benchmark database.
        pg_url: PostgreSQL's SQLAlchemy URL (``postgresql+psycopg://...``).
        tables: Per engine, the loaded ``lineitem`` table.
        training_sql: Per engine, the training split's SELECT (sqlfeed's hash split).
        validation_sql: Per engine, the validation split's SELECT.
        out_dir: Where the children write their models (one folder each).
        family: The Keras family of the Keras pair (``dnn`` or ``linear``).
        epochs: Keras epochs.
        batch_size: Keras batch size.
        seed: Weights, shuffle and XGBoost seed.
        trees: XGBoost boosting rounds.
        max_depth: XGBoost tree depth.
        eta: XGBoost learning rate.
        validation: The validation share of the split.
    """

    duckdb_path: str
    pg_url: str
    tables: dict[str, str] = field(default_factory=dict)
    training_sql: dict[str, str] = field(default_factory=dict)
    validation_sql: dict[str, str] = field(default_factory=dict)
    out_dir: str = ""
    family: str = "dnn"
    epochs: int = 1
    batch_size: int = 1024
    seed: int = 0
    trees: int = 100
    max_depth: int = 6
    eta: float = 0.1
    validation: float = 0.2

    def query(self, engine: str) -> str:
        """The benchmark's SELECT over ``engine``'s table."""
        return QUERY.format(table=self.tables[engine])

    def out(self, name: str) -> Path:
        """A fresh (removed) model folder for contender ``name``."""
        folder = Path(self.out_dir) / name
        shutil.rmtree(folder, ignore_errors=True)
        return folder


# -- the sources -----------------------------------------------------------------------------


def _duckdb_source(cfg: Config) -> Any:
    import duckdb

    return duckdb.connect(cfg.duckdb_path, read_only=True)


def _postgres_source(cfg: Config) -> Any:
    return cfg.pg_url


def _duckdb_frames(cfg: Config, sqls: Sequence[str]) -> list[Any]:
    """``duckdb.connect(path).execute(sql).df()`` of each SELECT."""
    import duckdb

    with duckdb.connect(cfg.duckdb_path, read_only=True) as con:
        return [con.execute(sql).df() for sql in sqls]


def _postgres_frames(cfg: Config, sqls: Sequence[str]) -> list[Any]:
    """``pandas.read_sql`` of each SELECT through one SQLAlchemy engine."""
    import pandas
    import sqlalchemy

    engine = sqlalchemy.create_engine(cfg.pg_url)
    try:
        return [pandas.read_sql(sqlalchemy.text(sql), engine) for sql in sqls]
    finally:
        engine.dispose()


def _duckdb_sum(cfg: Config, sql: str) -> int:
    with _duckdb_source(cfg) as con:
        row = con.execute(f"SELECT SUM({KEY}) FROM ({sql}) AS q").fetchone()
    return int(row[0] or 0) if row else 0


def _postgres_sum(cfg: Config, sql: str) -> int:
    import sqlalchemy

    engine = sqlalchemy.create_engine(cfg.pg_url)
    try:
        with engine.connect() as con:
            total = con.execute(sqlalchemy.text(f"SELECT SUM({KEY}) FROM ({sql}) AS q")).scalar()
    finally:
        engine.dispose()
    return int(total or 0)


_SOURCES: dict[str, Callable[[Config], Any]] = {
    "duckdb": _duckdb_source,
    "postgres": _postgres_source,
}
"""What ``sqlfeed.ml.train`` is given: a DuckDB connection, or the SQLAlchemy URL."""
_FRAMES: dict[str, Callable[[Config, Sequence[str]], list[Any]]] = {
    "duckdb": _duckdb_frames,
    "postgres": _postgres_frames,
}
"""How the baseline reads: what a pandas user writes for each engine."""
_KEY_SUMS: dict[str, Callable[[Config, str], int]] = {
    "duckdb": _duckdb_sum,
    "postgres": _postgres_sum,
}
"""The sum of ``k`` over a SELECT's rows, in the engine (the checksum of sqlfeed's rows)."""
_DRIVERS = {"duckdb": ("duckdb",), "postgres": ("sqlalchemy", "psycopg")}


# -- the contenders --------------------------------------------------------------------------


def _import(*modules: str) -> None:
    """Import ``modules`` before the clock starts (TensorFlow's logging quieted)."""
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for module in modules:
        importlib.import_module(module)


def _sqlfeed(cfg: Config, engine: str, family: str) -> Outcome:
    """``sqlfeed.ml.train`` of ``family`` from ``engine``: the split, the statistics, the fit,
    the validation metrics and the model folder."""
    keras = ("tensorflow", "keras") if family != "gbdt" else ("xgboost",)
    _import(*keras, *_DRIVERS[engine], "sqlfeed", "sqlfeed.ml.trainer", "sqlfeed.ml.training")
    import sqlfeed.ml

    out = cfg.out(f"{engine}-sqlfeed-{family}")
    begun = start()
    model = sqlfeed.ml.train(
        cfg.query(engine),
        _SOURCES[engine](cfg),
        label=LABEL,
        out=out,
        family=family,
        key=KEY,
        validation=cfg.validation,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        trees=cfg.trees,
        max_depth=cfg.max_depth,
        learning_rate=cfg.eta if family == "gbdt" else None,
        report=False,
    )
    seconds = time.perf_counter() - begun
    manifest = model.manifest
    if manifest["training_sql"] != cfg.training_sql[engine]:
        raise RuntimeError("sqlfeed's training SELECT is not the one the baseline reads")
    metrics = manifest["metrics"]["validation"]
    details: dict[str, Any] = {
        "roc_auc": round(float(metrics["roc_auc"]), 5),
        "accuracy": round(float(metrics["accuracy"]), 5),
        "validation_rows": int(metrics["rows"]),
        "fit_seconds": round(float(manifest["training"].get("seconds", 0.0)), 2),
    }
    if harness.checking():
        details["checksum"] = _KEY_SUMS[engine](cfg, cfg.training_sql[engine])
    return int(manifest["rows"]["training"]), seconds, details


def _scored(labels: Any, probabilities: Any) -> dict[str, Any]:
    """ROC AUC (scikit-learn) and accuracy at 0.5 of the validation rows."""
    import numpy as np
    from sklearn.metrics import roc_auc_score  # type: ignore[import-untyped]

    predicted = np.asarray(probabilities).reshape(-1)
    return {
        "roc_auc": round(float(roc_auc_score(labels, predicted)), 5),
        "accuracy": round(float(np.mean((predicted >= 0.5) == (labels == 1))), 5),
        "validation_rows": len(labels),
    }


def _checksum(frame: Any) -> dict[str, Any]:
    return {"checksum": int(frame[KEY].sum())} if harness.checking() else {}


def _pandas_features(frame: Any) -> list[Any]:
    """The features with their transforms computed in pandas from the training rows."""
    from sqlfeed.ml.features import Feature

    features = []
    for name in NUMERIC:
        column = frame[name]
        mean, std = float(column.mean()), float(column.std(ddof=0))
        transform = {"mean": mean, "std": std or 1.0, "fill": mean, "mask": True}
        features.append(Feature(name, "double", "numeric", transform))
    for name in TEXT:
        vocabulary = [str(v) for v in frame[name].value_counts().index[:TOP_K]]
        features.append(
            Feature(name, "string", "categorical", {"vocabulary": vocabulary, "dtype": "string"})
        )
    return features


def _arrays(frame: Any, features: Sequence[Any]) -> dict[str, Any]:
    """The model's inputs as NumPy arrays: each column (NULLs filled) and its NULL mask."""
    from sqlfeed.feed.tensors import MASK_SUFFIX

    arrays = {}
    for feature in features:
        column = frame[feature.name]
        arrays[feature.name + MASK_SUFFIX] = column.isna().to_numpy()
        if feature.family == "numeric":
            arrays[feature.name] = column.fillna(feature.transform["fill"]).to_numpy("float64")
        else:
            arrays[feature.name] = column.fillna("").astype(str).to_numpy(object)
    return arrays


def _pandas_keras(cfg: Config, engine: str) -> Outcome:
    """The user's program: pandas frames, preprocessing in pandas, the same Keras network
    fit on NumPy arrays, scored on the validation rows, saved."""
    _import("tensorflow", "keras", "pandas", "sklearn.metrics", *_DRIVERS[engine])
    _import("sqlfeed.ml.keras_model")
    from sqlfeed.ml.keras_model import build_model
    from sqlfeed.ml.options import TrainOptions

    out = cfg.out(f"{engine}-pandas-keras")
    begun = start()
    sqls = (cfg.training_sql[engine], cfg.validation_sql[engine])
    train, valid = _FRAMES[engine](cfg, sqls)
    read = time.perf_counter() - begun
    features = _pandas_features(train)
    fed = {f.name: "float64" if f.family == "numeric" else "string" for f in features}
    options = TrainOptions(
        family=cfg.family, epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed
    )
    model = build_model(
        features, fed, task="binary", classes=2, label_scale=(0.0, 1.0), options=options
    )
    x_train, y_train = _arrays(train, features), train[LABEL].to_numpy("float32")
    fit_started = time.perf_counter()
    model.fit(
        x_train, y_train, batch_size=cfg.batch_size, epochs=cfg.epochs, shuffle=True, verbose=0
    )
    fit = time.perf_counter() - fit_started
    probabilities = model.predict(_arrays(valid, features), batch_size=PREDICT_BATCH, verbose=0)
    details = _scored(valid[LABEL].to_numpy(), probabilities)
    out.mkdir(parents=True)
    model.save(str(out / "model.keras"))
    seconds = time.perf_counter() - begun
    details |= {"read_seconds": round(read, 2), "fit_seconds": round(fit, 2)}
    return len(train), seconds, details | _checksum(train)


def _categorical(frame: Any, categories: dict[str, Any]) -> Any:
    """The feature columns, the text ones as pandas categories of the training rows."""
    import pandas

    matrix = frame[list(NUMERIC + TEXT)].copy()
    for name in TEXT:
        matrix[name] = pandas.Categorical(matrix[name], categories=categories[name])
    return matrix


def _pandas_xgboost(cfg: Config, engine: str) -> Outcome:
    """The user's program: pandas frames, ``xgboost.DMatrix`` of them, ``xgboost.train``
    with the same trees, depth and eta, scored on the validation rows, saved."""
    _import("xgboost", "pandas", "sklearn.metrics", *_DRIVERS[engine])
    import xgboost

    out = cfg.out(f"{engine}-pandas-xgboost")
    begun = start()
    sqls = (cfg.training_sql[engine], cfg.validation_sql[engine])
    train, valid = _FRAMES[engine](cfg, sqls)
    read = time.perf_counter() - begun
    categories = {n: train[n].astype("category").cat.categories for n in TEXT}
    dtrain = xgboost.DMatrix(
        _categorical(train, categories), label=train[LABEL], enable_categorical=True
    )
    dvalid = xgboost.DMatrix(
        _categorical(valid, categories), label=valid[LABEL], enable_categorical=True
    )
    params = {
        "objective": "binary:logistic",
        "tree_method": "hist",
        "max_depth": cfg.max_depth,
        "learning_rate": cfg.eta,
        "seed": cfg.seed,
    }
    fit_started = time.perf_counter()
    booster = xgboost.train(
        params,
        dtrain,
        num_boost_round=cfg.trees,
        evals=[(dvalid, "validation")],
        verbose_eval=False,
    )
    fit = time.perf_counter() - fit_started
    details = _scored(valid[LABEL].to_numpy(), booster.predict(dvalid))
    out.mkdir(parents=True)
    booster.save_model(str(out / "model.json"))
    seconds = time.perf_counter() - begun
    details |= {"read_seconds": round(read, 2), "fit_seconds": round(fit, 2)}
    return len(train), seconds, details | _checksum(train)


def _contenders() -> dict[str, Contender[Config]]:
    made: list[Contender[Config]] = []
    for engine in ENGINES:

        def keras(cfg: Config, engine: str = engine) -> Outcome:
            return _sqlfeed(cfg, engine, cfg.family)

        def gbdt(cfg: Config, engine: str = engine) -> Outcome:
            return _sqlfeed(cfg, engine, "gbdt")

        def pandas_keras(cfg: Config, engine: str = engine) -> Outcome:
            return _pandas_keras(cfg, engine)

        def pandas_xgboost(cfg: Config, engine: str = engine) -> Outcome:
            return _pandas_xgboost(cfg, engine)

        tf, xgb = ("tensorflow", "keras"), ("xgboost",)
        made += [
            Contender(
                f"{engine}-sqlfeed-keras", "sqlfeed.ml.train (Keras)", keras, f"{engine}-keras", tf
            ),
            Contender(
                f"{engine}-pandas-keras",
                "pandas + the same Keras model on NumPy",
                pandas_keras,
                f"{engine}-keras",
                (*tf, "pandas", "sklearn"),
            ),
            Contender(
                f"{engine}-sqlfeed-gbdt", "sqlfeed.ml.train gbdt", gbdt, f"{engine}-gbdt", xgb
            ),
            Contender(
                f"{engine}-pandas-xgboost",
                "pandas + xgboost.DMatrix + xgboost.train",
                pandas_xgboost,
                f"{engine}-gbdt",
                (*xgb, "pandas", "sklearn"),
            ),
        ]
    return {c.id: c for c in made}


CONTENDERS = _contenders()


# -- the parent ------------------------------------------------------------------------------


def _split(cfg: Config, engine: str) -> tuple[str, str]:
    """sqlfeed's training and validation SELECTs of ``engine`` (as ``train`` makes them)."""
    import sqlfeed
    from sqlfeed.ml.split import Split, split_sql

    target = _SOURCES[engine](cfg)
    source = sqlfeed.connect(target)
    try:
        parsed = source.parse(cfg.query(engine))
        return split_sql(parsed, source, Split(KEY, cfg.validation))
    finally:
        source.close()
        if hasattr(target, "close"):
            target.close()


def _prepare(args: argparse.Namespace, engines: Sequence[str], out_dir: str) -> Config:
    """Generate and load the data (cached), and make the split SELECTs."""
    from benchmarks import tpch

    parquet = tpch.lineitem_parquet(args.scale, args.cache_dir)
    duckdb_path = args.cache_dir / "tpch.duckdb"
    tables = {}
    if "duckdb" in engines:
        name = tpch.table_name("lineitem", args.scale)
        tables["duckdb"] = tpch.load_duckdb(duckdb_path, parquet, name)
    if "postgres" in engines:
        tables["postgres"] = tpch.load_postgres(args.pg_url, parquet, "lineitem", args.scale)
    cfg = Config(
        duckdb_path=str(duckdb_path),
        pg_url=args.pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
        tables=tables,
        out_dir=out_dir,
        family=args.family,
        epochs=args.epochs,
        batch_size=args.batch_size,
        seed=args.seed,
        trees=args.trees,
        max_depth=args.max_depth,
        eta=args.eta,
    )
    for engine in engines:
        cfg.training_sql[engine], cfg.validation_sql[engine] = _split(cfg, engine)
    return cfg


def _mb(value: int) -> str:
    return f"{value / 2**20:,.0f}" if value >= 0 else "-"


def _row(result: harness.Result, baseline: harness.Result | None) -> list[str]:
    """One contender's line: times, memory, metric and its ratios to the baseline."""
    run = result.best_run
    if run is None:
        why = f"ERROR {result.error}" if result.error else f"skipped: {result.skipped}"
        return [result.id, result.label, "-", "-", "-", "-", "-", "-", "-", "-", "-", why]
    base = baseline.best_run if baseline is not None else None
    time_ratio = harness.ratio(run.seconds, base.seconds if base else None)
    memory_ratio = harness.ratio(run.peak_rss_bytes, base.peak_rss_bytes if base else None)
    details = run.details
    notes = ", ".join(
        f"{k} {v}" for k, v in details.items() if k not in ("roc_auc", "accuracy", "checksum")
    )
    return [
        result.id,
        result.label,
        f"{run.rows:,}",
        f"{run.seconds:.1f}",
        f"{result.median or 0:.1f}",
        _mb(run.peak_rss_bytes),
        _mb(run.rss_after_imports_bytes),
        f"{details.get('roc_auc', float('nan')):.4f}",
        f"{details.get('accuracy', float('nan')):.4f}",
        "-" if time_ratio is None or result is baseline else f"{time_ratio:.2f}",
        "-" if memory_ratio is None or result is baseline else f"{memory_ratio:.2f}",
        notes,
    ]


def _goals(ours: harness.Result, base: harness.Result) -> list[str]:
    """The three goal lines of one pair (time, memory, validation AUC)."""
    mine, theirs = ours.best_run, base.best_run
    what = f"{ours.id} vs {base.id}"
    seconds = harness.ratio(mine.seconds if mine else None, theirs.seconds if theirs else None)
    memory = harness.ratio(
        mine.peak_rss_bytes if mine else None, theirs.peak_rss_bytes if theirs else None
    )
    lines = [
        harness.Goal(f"{what}: time", seconds, GOAL_TIME, at_most=True).line(),
        harness.Goal(f"{what}: peak RSS", memory, GOAL_MEMORY, at_most=True).line(),
    ]
    a = mine.details.get("roc_auc") if mine else None
    b = theirs.details.get("roc_auc") if theirs else None
    if a is None or b is None:
        lines.append(f"MISSED: {what}: validation ROC AUC n/a (goal within {GOAL_METRIC:g})")
    else:
        gap = abs(float(a) - float(b))
        verdict = "met" if gap <= GOAL_METRIC else "MISSED"
        lines.append(
            f"{verdict}: {what}: validation ROC AUC {float(a):.4f} vs {float(b):.4f}, "
            f"|difference| {gap:.4f} (goal <= {GOAL_METRIC:g})"
        )
    return lines


def _report(results: Sequence[harness.Result], engines: Sequence[str]) -> str:
    """The table of each engine and the goals of each pair."""
    by_id = {r.id: r for r in results}
    header = (
        "contender",
        "what",
        "train rows",
        "best s",
        "median s",
        "peak RSS MB",
        "RSS at start MB",
        "val AUC",
        "val acc",
        "x time",
        "x peak RSS",
        "notes",
    )
    blocks, goals = [], []
    for engine in engines:
        rows = []
        for ours_id, base_id in PAIRS:
            ours, base = by_id.get(f"{engine}-{ours_id}"), by_id.get(f"{engine}-{base_id}")
            for result in (ours, base):
                if result is not None:
                    rows.append(_row(result, base))
            if ours is not None and base is not None:
                goals += _goals(ours, base)
        if rows:
            table = harness.table(header, rows, right=range(2, 11))
            blocks.append(f"{engine}\n{table}")
    note = (
        "x time / x peak RSS: the sqlfeed contender's best time and peak RSS over its "
        "baseline's (the pandas line below it); RSS at start: after the imports"
    )
    return "\n\n".join([*blocks, note, "\n".join(goals)])


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    from benchmarks.tpch import DEFAULT_CACHE_DIR, DEFAULT_PG_URL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor (1: 6M rows)")
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help="comma-separated: duckdb,postgres"
    )
    parser.add_argument("--only", nargs="+", metavar="ID", help="contender ids (globs)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (best kept)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--family", choices=("dnn", "linear"), default="dnn", help="Keras family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trees", type=int, default=100, help="XGBoost boosting rounds")
    parser.add_argument("--max-depth", type=int, default=6, help="XGBoost tree depth")
    parser.add_argument("--eta", type=float, default=0.1, help="XGBoost learning rate")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="libpq URL")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    harness.add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.rounds, args.engines, args.trees = 0.01, 1, "duckdb", 10
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(args.engines) - set(ENGINES))
    if args.child is None and (unknown or not args.engines):
        parser.error(f"--engines takes {', '.join(ENGINES)}, not {', '.join(unknown) or '-'}")
    if args.child is None and min(args.rounds, args.epochs, args.batch_size, args.trees) < 1:
        parser.error("--rounds, --epochs, --batch-size and --trees must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the contenders (each in a fresh interpreter), print the tables and the goals.

    Returns:
        0; 1 when a contender failed or the contenders of a pair trained on other rows.
    """
    args = _parse_args(argv)
    if args.child:
        return harness.child_main(CONTENDERS, Config, args.child, args.child_config or "{}")
    chosen = [
        c
        for c in CONTENDERS.values()
        if c.id.partition("-")[0] in args.engines
        and (not args.only or any(fnmatch.fnmatchcase(c.id, p) for p in args.only))
    ]
    if not chosen:
        progress(f"nothing selected; the ids are {', '.join(CONTENDERS)}")
        return 2
    engines = [e for e in args.engines if any(c.id.startswith(e + "-") for c in chosen)]
    load_start = harness.load_line()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sqlfeed-bench-train-") as out_dir:
        cfg = _prepare(args, engines, out_dir)
        progress(f"TPC-H lineitem SF {args.scale:g}: {cfg.tables}")
        measured = harness.measure(
            "train", [(c, cfg) for c in chosen], args.rounds, args.timeout, check=args.smoke
        )
    disagreements = harness.agreement(measured)
    print(
        f"time to a trained model, TPC-H lineitem SF {args.scale:g}, label l_returnflag = 'R', "
        f"{len(NUMERIC)} numeric + {len(TEXT)} text features, 20% validation by a hash of {KEY}; "
        f"Keras {args.family}: {args.epochs} epoch(s), batch {args.batch_size}; XGBoost: "
        f"{args.trees} trees, depth {args.max_depth}, eta {args.eta:g}; {args.rounds} "
        f"interleaved round(s) ({platform.node()}, Python {platform.python_version()}, "
        f"total {time.perf_counter() - started:.0f}s)"
    )
    print(f"at start: {load_start}\nat end:   {harness.load_line()}\n")
    print(_report(measured, engines))
    for problem in disagreements:
        print(f"DISAGREE: {problem}")
    if args.json is not None:
        doc = {
            "scale": args.scale,
            "rounds": args.rounds,
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

"""sqlfeed.ml.metrics: mergeable metrics equal sklearn.metrics, beside a trivial baseline."""

from __future__ import annotations

import ast
import doctest
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sqlfeed.dialects.errors import InvalidArgumentError
from sqlfeed.ml import metrics as m
from sqlfeed.ml.metrics import Accumulator, format_metrics, metrics_for

sk = pytest.importorskip("sklearn.metrics")

SEEDS = [0, 1, 2, 3, 4]
EXACT = 1e-9
AUC_TOLERANCE = 0.005


def accumulate(
    make: Callable[[], Accumulator],
    y_true: np.ndarray,
    y_pred: np.ndarray,
    rng: np.random.Generator,
    parts: int,
) -> Accumulator:
    """Rows cut at random points into ``parts`` partitions, each fed in random batches, the
    partitions merged in a random order and tree shape."""
    cuts = np.sort(rng.choice(np.arange(1, len(y_true)), size=parts - 1, replace=False))
    accs = []
    for truth, pred in zip(np.split(y_true, cuts), np.split(y_pred, cuts), strict=True):
        acc = make()
        batch_cuts = np.sort(rng.integers(0, len(truth) + 1, size=3))
        for t, p in zip(np.split(truth, batch_cuts), np.split(pred, batch_cuts), strict=True):
            acc.update(t, p)
        accs.append(acc)
    rng.shuffle(accs)  # type: ignore[arg-type]
    while len(accs) > 1:
        i = int(rng.integers(0, len(accs) - 1))
        accs[i : i + 2] = [accs[i].merge(accs[i + 1])]
    return accs[0]


def binary_data(seed: int, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3 + 0.1 * seed / len(SEEDS)).astype(np.int64)
    logit = rng.normal(0, 1.5, n) + 1.2 * (2 * y - 1)
    return y, 1 / (1 + np.exp(-logit))


def multiclass_data(seed: int, n: int = 3000, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.choice(k, size=n, p=[0.4, 0.3, 0.2, 0.1][:k])
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), y] += 1.0
    proba = np.exp(logits)
    return y, proba / proba.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_binary_equals_sklearn(seed: int, parts: int) -> None:
    y, p = binary_data(seed)
    acc = accumulate(lambda: metrics_for("binary"), y, p, np.random.default_rng(seed), parts)
    got = acc.result()
    label = (p > 0.5).astype(int)
    assert got["rows"] == len(y)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, label), abs=EXACT)
    assert got["precision"] == pytest.approx(sk.precision_score(y, label), abs=EXACT)
    assert got["recall"] == pytest.approx(sk.recall_score(y, label), abs=EXACT)
    assert got["f1"] == pytest.approx(sk.f1_score(y, label), abs=EXACT)
    assert got["log_loss"] == pytest.approx(sk.log_loss(y, p), abs=EXACT)
    assert got["confusion_matrix"] == sk.confusion_matrix(y, label).tolist()
    assert got["roc_auc"] == pytest.approx(sk.roc_auc_score(y, p), abs=AUC_TOLERANCE)
    assert got["pr_auc"] == pytest.approx(sk.average_precision_score(y, p), abs=AUC_TOLERANCE)
    assert got["baseline"] is None


@pytest.mark.parametrize("seed", SEEDS)
def test_auc_exact_when_scores_fall_in_distinct_bins(seed: int) -> None:
    """Ties (many rows with one score) count half, as in sklearn; scores on a grid coarser
    than the bins give sklearn's areas exactly."""
    y, p = binary_data(seed)
    p = np.round(p, 3)
    acc = accumulate(lambda: metrics_for("binary"), y, p, np.random.default_rng(seed), 5)
    got = acc.result()
    assert got["roc_auc"] == pytest.approx(sk.roc_auc_score(y, p), abs=1e-12)
    assert got["pr_auc"] == pytest.approx(sk.average_precision_score(y, p), abs=1e-12)


@pytest.mark.parametrize(
    ("name", "scale"), [("rare events, scores near 0", -9.0), ("scores near 1", 9.0)]
)
def test_auc_close_to_sklearn_where_scores_crowd_an_end(name: str, scale: float) -> None:
    """Equal bins alone would put these scores (all within 1e-3 of an end) in a few bins."""
    rng = np.random.default_rng(7)
    y = (rng.random(20000) < 0.05).astype(np.int64)
    logit = scale + rng.normal(0, 0.8, len(y)) + 0.7 * y * np.sign(-scale)
    p = 1 / (1 + np.exp(-logit))
    acc = metrics_for("binary")
    acc.update(y, p)
    got = acc.result()
    assert got["roc_auc"] == pytest.approx(sk.roc_auc_score(y, p), abs=1e-3), name
    assert got["pr_auc"] == pytest.approx(sk.average_precision_score(y, p), abs=1e-3), name


def test_log_loss_clips_float32_at_its_eps_as_sklearn() -> None:
    """A float32 model's saturated 0.0 / 1.0 scores: clipped at float32's eps, not float64's."""
    y = np.array([0, 1, 0, 1, 1, 0])
    p = np.array([1.0, 0.0, 0.0, 1.0, 0.7, 0.2], dtype=np.float32)
    acc = metrics_for("binary")
    acc.update(y, p)
    got = acc.result()["log_loss"]
    assert got == pytest.approx(sk.log_loss(y, p), rel=1e-6)
    eps32 = float(np.finfo(np.float32).eps)
    assert got > -np.log(eps32) / 3  # two of six rows cost -log(eps32) = 15.9 each
    assert got < -np.log(np.finfo(np.float64).eps) / 3
    acc64 = metrics_for("binary")
    acc64.update(y, p.astype(np.float64))
    assert acc64.result()["log_loss"] == pytest.approx(
        sk.log_loss(y, p.astype(np.float64)), abs=EXACT
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("parts", [1, 3, 8])
def test_multiclass_equals_sklearn(seed: int, parts: int) -> None:
    y, proba = multiclass_data(seed)
    classes = ["a", "b", "c", "d"]
    rng = np.random.default_rng(seed)
    got = accumulate(lambda: metrics_for("multiclass", classes), y, proba, rng, parts).result()
    label = proba.argmax(axis=1)
    labels = list(range(4))
    assert got["classes"] == classes
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, label), abs=EXACT)
    assert got["macro_f1"] == pytest.approx(sk.f1_score(y, label, average="macro"), abs=EXACT)
    assert got["weighted_f1"] == pytest.approx(sk.f1_score(y, label, average="weighted"), abs=EXACT)
    assert got["log_loss"] == pytest.approx(sk.log_loss(y, proba, labels=labels), abs=EXACT)
    assert got["confusion_matrix"] == sk.confusion_matrix(y, label, labels=labels).tolist()


def test_multiclass_f1_averages_over_the_classes_present_as_sklearn() -> None:
    """Class 2 is neither a true nor a predicted label: left out of the macro average."""
    y = np.array([0, 0, 1, 1, 3, 3, 3])
    proba = np.eye(4)[[0, 1, 1, 1, 3, 0, 3]] * 0.7 + 0.075
    acc = metrics_for("multiclass", [10, 20, 30, 40])
    acc.update(y, proba)
    got = acc.result()
    label = proba.argmax(axis=1)
    assert got["macro_f1"] == pytest.approx(sk.f1_score(y, label, average="macro"), abs=EXACT)
    assert got["weighted_f1"] == pytest.approx(sk.f1_score(y, label, average="weighted"), abs=EXACT)
    assert got["log_loss"] == pytest.approx(sk.log_loss(y, proba, labels=range(4)), abs=EXACT)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("offset", [0.0, 1e8])
def test_regression_equals_sklearn(seed: int, offset: float) -> None:
    """A label far from 0 (1e8 + noise) keeps R² exact: the variance merges by Chan's update."""
    rng = np.random.default_rng(seed)
    y = offset + rng.normal(3, 2, 5000)
    pred = y + rng.normal(0, 0.7, len(y))
    got = accumulate(lambda: metrics_for("regression"), y, pred, rng, 6).result()
    assert got["rows"] == len(y)
    assert got["mae"] == pytest.approx(sk.mean_absolute_error(y, pred), rel=EXACT)
    assert got["rmse"] == pytest.approx(sk.root_mean_squared_error(y, pred), rel=EXACT)
    assert got["r2"] == pytest.approx(sk.r2_score(y, pred), abs=EXACT)
    assert 0.8 < got["r2"] < 0.95


def test_regression_constant_label_r2_as_sklearn() -> None:
    y = np.full(5, 2.5)
    for pred in (y.copy(), y + np.array([0.1, 0, 0, 0, 0])):
        acc = metrics_for("regression")
        acc.update(y, pred)
        assert acc.result()["r2"] == sk.r2_score(y, pred)


@pytest.mark.parametrize(("counts", "majority"), [({0: 70, 1: 30}, 0), ({0: 20, 1: 80}, 1)])
def test_binary_baseline_is_sklearn_on_the_constant_prediction(
    counts: dict[int, int], majority: int
) -> None:
    y, p = binary_data(3)
    acc = metrics_for("binary", [0, 1], baseline={"class_counts": counts})
    acc.update(y, p)
    base = acc.result()["baseline"]
    prior = counts[1] / (counts[0] + counts[1])
    label, score = np.full(len(y), majority), np.full(len(y), prior)
    assert base["prediction"] == majority
    assert base["score"] == prior
    assert base["accuracy"] == pytest.approx(sk.accuracy_score(y, label), abs=EXACT)
    assert base["precision"] == pytest.approx(
        sk.precision_score(y, label, zero_division=0), abs=EXACT
    )
    assert base["recall"] == pytest.approx(sk.recall_score(y, label), abs=EXACT)
    assert base["f1"] == pytest.approx(sk.f1_score(y, label, zero_division=0), abs=EXACT)
    assert base["log_loss"] == pytest.approx(sk.log_loss(y, score), abs=EXACT)
    assert base["roc_auc"] == sk.roc_auc_score(y, score) == 0.5
    assert base["pr_auc"] == pytest.approx(sk.average_precision_score(y, score), abs=EXACT)
    assert base["confusion_matrix"] == sk.confusion_matrix(y, label).tolist()


def test_multiclass_baseline_is_sklearn_on_the_constant_prediction() -> None:
    y, proba = multiclass_data(2)
    counts = {"a": 10, "b": 50, "c": 25}  # "d" absent from training: probability 0, clipped
    acc = metrics_for("multiclass", ["a", "b", "c", "d"], baseline={"class_counts": counts})
    acc.update(y, proba)
    base = acc.result()["baseline"]
    q = np.array([10, 50, 25, 0]) / 85
    label, score = np.full(len(y), 1), np.tile(q, (len(y), 1))
    assert base["prediction"] == "b"
    assert base["probabilities"] == pytest.approx(q.tolist(), abs=1e-15)
    assert base["accuracy"] == pytest.approx(sk.accuracy_score(y, label), abs=EXACT)
    assert base["macro_f1"] == pytest.approx(
        sk.f1_score(y, label, average="macro", zero_division=0), abs=EXACT
    )
    assert base["weighted_f1"] == pytest.approx(
        sk.f1_score(y, label, average="weighted", zero_division=0), abs=EXACT
    )
    assert base["log_loss"] == pytest.approx(sk.log_loss(y, score, labels=range(4)), abs=EXACT)
    assert base["confusion_matrix"] == sk.confusion_matrix(y, label, labels=range(4)).tolist()


def test_regression_baseline_is_sklearn_on_the_training_mean() -> None:
    rng = np.random.default_rng(5)
    y = rng.normal(10, 3, 2000)
    pred = y + rng.normal(0, 1, len(y))
    got = accumulate(
        lambda: metrics_for("regression", baseline={"mean": 9.5}), y, pred, rng, 4
    ).result()
    base, constant = got["baseline"], np.full(len(y), 9.5)
    assert base["prediction"] == 9.5
    assert base["mae"] == pytest.approx(sk.mean_absolute_error(y, constant), rel=EXACT)
    assert base["rmse"] == pytest.approx(sk.root_mean_squared_error(y, constant), rel=EXACT)
    assert base["r2"] == pytest.approx(sk.r2_score(y, constant), abs=EXACT)
    assert base["r2"] < 0 < got["r2"]


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_merge_order_and_tree_shape_do_not_change_the_result(task: str) -> None:
    if task == "binary":
        y, pred = binary_data(1)
        make: Callable[[], Accumulator] = lambda: metrics_for(  # noqa: E731
            "binary", baseline={"class_counts": {0: 3, 1: 2}}
        )
    elif task == "multiclass":
        y, pred = multiclass_data(1)
        make = lambda: metrics_for("multiclass", list("abcd"))  # noqa: E731
    else:
        rng = np.random.default_rng(1)
        y = rng.normal(0, 1, 3000)
        pred = y * 0.5
        make = lambda: metrics_for("regression", baseline={"mean": 0.1})  # noqa: E731
    results = [accumulate(make, y, pred, np.random.default_rng(s), 9).result() for s in range(6)]
    first = results[0]
    for other in results[1:]:
        assert other.keys() == first.keys()
        for key, value in first.items():
            if isinstance(value, float):
                assert other[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
            elif key != "baseline":
                assert other[key] == value, key
    if task == "binary":  # the histograms merge exactly: the AUCs are the same floats
        assert {r["roc_auc"] for r in results} == {first["roc_auc"]}
        assert {r["pr_auc"] for r in results} == {first["pr_auc"]}


def test_merge_leaves_both_operands_unchanged_and_refuses_other_metrics() -> None:
    a, b = metrics_for("binary"), metrics_for("binary")
    a.update(np.array([0, 1]), np.array([0.2, 0.7]))
    b.update(np.array([1]), np.array([0.1]))
    merged = a.merge(b)
    assert (a.rows, b.rows, merged.rows) == (2, 1, 3)
    assert merged.result()["confusion_matrix"] == [[1, 0], [1, 1]]
    for other in (
        metrics_for("binary", ["n", "y"]),
        metrics_for("binary", baseline={"class_counts": {0: 1, 1: 1}}),
        metrics_for("regression"),
    ):
        with pytest.raises(InvalidArgumentError, match="cannot merge"):
            a.merge(other)


def test_pickled_accumulator_merges_as_the_original() -> None:
    y, p = binary_data(4)
    acc = metrics_for("binary", baseline={"class_counts": {0: 1, 1: 1}})
    acc.update(y, p)
    copy = pickle.loads(pickle.dumps(acc))
    assert copy.merge(acc).result() == acc.merge(acc).result()


def test_mask_drops_rows_as_filtering_does() -> None:
    y, p = binary_data(2, n=500)
    keep = np.random.default_rng(0).random(len(y)) < 0.8
    masked, filtered = metrics_for("binary"), metrics_for("binary")
    masked.update(y, p, mask=keep)
    filtered.update(y[keep], p[keep])
    assert masked.result() == filtered.result()
    reg = metrics_for("regression")
    y_null = np.array([1.0, np.nan, 3.0])
    reg.update(y_null, np.array([1.0, 2.0, 2.0]), mask=~np.isnan(y_null))
    assert reg.result()["rows"] == 2
    assert reg.result()["mae"] == 0.5


def test_one_class_present_leaves_the_aucs_undefined() -> None:
    negatives = metrics_for("binary", baseline={"class_counts": {0: 5, 1: 5}})
    negatives.update(np.zeros(4, dtype=int), np.array([0.1, 0.6, 0.3, 0.2]))
    got = negatives.result()
    assert got["roc_auc"] is None
    assert got["pr_auc"] is None
    assert got["baseline"]["roc_auc"] is None
    assert got["recall"] == 0.0  # no positive row: sklearn's zero_division=0
    positives = metrics_for("binary")
    positives.update(np.ones(3, dtype=int), np.array([0.9, 0.8, 0.2]))
    assert positives.result()["roc_auc"] is None
    assert positives.result()["pr_auc"] == 1.0


def test_no_positive_prediction_gives_precision_zero_as_sklearn() -> None:
    y = np.array([0, 1, 1, 0])
    p = np.array([0.1, 0.2, 0.5, 0.4])  # 0.5 is not above the threshold
    acc = metrics_for("binary")
    acc.update(y, p)
    got = acc.result()
    assert got["precision"] == sk.precision_score(y, p > 0.5, zero_division=0) == 0.0
    assert got["f1"] == 0.0


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_zero_rows_is_a_one_line_error(task: str) -> None:
    acc = metrics_for(
        task, None if task == "regression" else ["x", "y", "z"][: 2 + (task != "binary")]
    )
    if task == "multiclass":
        acc.update(np.array([], dtype=int), np.zeros((0, 3)))
    else:
        acc.update(np.array([], dtype=int), np.array([]))
    with pytest.raises(InvalidArgumentError, match="no rows to evaluate") as info:
        acc.result()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: metrics_for("ranking"), "unknown task 'ranking'"),
        (lambda: metrics_for("binary", ["a", "b", "c"]), "exactly two classes"),
        (lambda: metrics_for("multiclass"), "needs the list of its classes"),
        (lambda: metrics_for("regression", ["a", "b"]), "regression has no classes"),
        (lambda: metrics_for("regression", baseline={"median": 1.0}), "'mean'"),
        (lambda: metrics_for("binary", baseline={"class_counts": {2: 1}}), "baseline class 2"),
        (lambda: metrics_for("binary", baseline={"class_counts": {0: -1}}), ">= 0"),
        (lambda: metrics_for("binary").update([0, 2], [0.1, 0.2]), "holds 2, not a class"),
        (lambda: metrics_for("binary").update([0, 1], [0.1, np.nan]), "NaN"),
        (lambda: metrics_for("binary").update([0, 1], [0.1, 1.5]), r"probabilities in \[0, 1\]"),
        (lambda: metrics_for("binary").update([0, 1], [0.1]), "same n"),
        (lambda: metrics_for("binary").update([0.0, np.nan], [0.1, 0.2]), "drop NULL labels"),
        (lambda: metrics_for("multiclass", "abc").update([0], [[0.5, 0.5]]), "2 columns"),
        (lambda: metrics_for("regression").update([1.0, np.nan], [1.0, 1.0]), "pass mask"),
        (lambda: format_metrics({"task": "binary"}, "yaml"), "unknown format 'yaml'"),
        (lambda: format_metrics({"rows": 3}), "not a metrics result"),
    ],
)
def test_bad_input_is_one_line(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def _binary_result() -> dict[str, Any]:
    y, p = binary_data(0, n=1234)
    acc = metrics_for("binary", ["no", "yes"], baseline={"class_counts": {"no": 7, "yes": 3}})
    acc.update(y, p)
    return acc.result()


def test_json_is_sorted_stable_and_round_trips() -> None:
    result = _binary_result()
    text = format_metrics(result, "json")
    assert json.loads(text) == result
    assert text == format_metrics(json.loads(text), "json")
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert json.loads(text)["classes"] == ["no", "yes"]


def test_text_is_an_aligned_table_beside_the_baseline_and_the_confusion_matrix() -> None:
    result = _binary_result()
    text = format_metrics(result)
    lines = text.splitlines()
    assert lines[0] == "binary on 1,234 rows"
    header = lines[1]
    assert header.split() == ["metric", "model", "baseline"]
    table = lines[1 : 2 + len(m.METRICS["binary"])]
    assert [line.split()[0] for line in table[1:]] == list(m.METRICS["binary"])
    assert {len(line) for line in table} == {len(header)}  # right-aligned numbers
    accuracy = next(line for line in table if line.startswith("accuracy"))
    assert accuracy.split()[1:] == [
        f"{result['accuracy']:.4f}",
        f"{result['baseline']['accuracy']:.4f}",
    ]
    assert "baseline: predicts the majority class 'no'" in text
    (tn, fp), (fn, tp) = result["confusion_matrix"]
    at = lines.index("confusion matrix (rows: true class, columns: predicted class)")
    assert lines[at + 1].split()[-2:] == ["no", "yes"]
    assert lines[at + 2].split() == ["no", f"{tn:,}", f"{fp:,}"]
    assert lines[at + 3].split() == ["yes", f"{fn:,}", f"{tp:,}"]
    assert format_metrics(json.loads(format_metrics(result, "json"))) == text


def test_text_of_regression_and_of_a_result_without_baseline() -> None:
    acc = metrics_for("regression", baseline={"mean": 2.0})
    acc.update(np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 3.0]))
    text = format_metrics(acc.result())
    assert text.splitlines()[0] == "regression on 3 rows"
    assert [line.split()[0] for line in text.splitlines()[2:5]] == ["mae", "rmse", "r2"]
    assert "baseline: predicts the training mean 2.0000" in text
    assert "confusion" not in text
    bare = metrics_for("binary")
    bare.update(np.array([0, 1]), np.array([0.3, 0.8]))
    lines = format_metrics(bare.result()).splitlines()
    assert lines[2].split() == ["accuracy", "1.0000", "-"]
    assert not any(line.startswith("baseline:") for line in lines)


def test_docstring_example_holds() -> None:
    assert doctest.testmod(m).failed == 0
    assert doctest.testmod(m).attempted > 0


def test_module_imports_no_sklearn() -> None:
    tree = ast.parse(Path(m.__file__).read_text(encoding="utf-8"))
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported
    assert not [name for name in imported if name.split(".")[0] == "sklearn"]

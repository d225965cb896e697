"""Mergeable evaluation metrics, each beside a trivial baseline, and their text/JSON form.

``metrics_for(task, classes, baseline)`` returns an accumulator; feed it one batch at a time
with ``update(y_true, y_pred)`` (one accumulator per partition, read in parallel if wanted),
combine partitions with ``merge`` in any order, and read ``result()``:

* ``binary``: accuracy (a row is predicted class 1 when its score is above 0.5, as Keras and
  scikit-learn's ``predict`` decide), precision, recall, F1, ROC AUC, PR AUC (average
  precision), log loss and the confusion matrix ``[[tn, fp], [fn, tp]]``;
* ``multiclass``: accuracy (the predicted class is the first largest probability), macro F1,
  weighted F1, log loss and the ``k x k`` confusion matrix (rows: true, columns: predicted);
* ``regression``: MAE, RMSE and R².

Every metric except the two AUCs equals ``sklearn.metrics`` on the same rows (to float
rounding): precision, recall and F1 use ``zero_division=0``; macro and weighted F1 average over
the classes present in the true or the predicted labels (scikit-learn's default); log loss
clips the probability of the true class to ``[eps, 1 - eps]`` with ``eps`` of the predictions'
float dtype, as scikit-learn 1.5+ does, then takes the logarithm in float64; R² is 1.0 for a
perfect fit of a constant label and 0.0 for an imperfect one (``force_finite``). ROC AUC and
PR AUC come from a fixed histogram of the scores of each true class (the finer of 65,536
equal bins in ``[0, 1]`` and 65,536 equal bins in logit space at every point), so that they
merge exactly; they equal scikit-learn's whenever no two different scores of different rows
share a bin, and stay within 0.005 of it on real score distributions. ROC AUC is ``None``
when the rows hold only one class, PR AUC is ``None`` when they hold no positive row.

Counts, confusion matrices and the histograms merge exactly; the float sums (log loss, errors)
merge up to float rounding (about 1e-15 relative), whatever the order.

Labels are class indices ``0..len(classes) - 1`` (regression: floats). NULL labels are not
rows to evaluate: callers drop them, or pass ``mask`` (``False`` drops the row). A result on
zero rows is refused with a one-line :class:`InvalidArgumentError`.

>>> import numpy as np
>>> acc = metrics_for("binary", ["no", "yes"], baseline={"class_counts": {"no": 6, "yes": 4}})
>>> acc.update(np.array([0, 1, 1, 0]), np.array([0.2, 0.9, 0.4, 0.1]))
>>> result = acc.result()
>>> result["accuracy"], result["recall"], result["confusion_matrix"]
(0.75, 0.5, [[2, 0], [1, 1]])
>>> result["baseline"]["prediction"], result["baseline"]["accuracy"]
('no', 0.5)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sqlfeed.dialects.errors import InvalidArgumentError

TASKS = ("binary", "multiclass", "regression")

# The metrics of each task, in the order the text table shows them.
METRICS = {
    "binary": ("accuracy", "precision", "recall", "f1", "roc_auc", "pr_auc", "log_loss"),
    "multiclass": ("accuracy", "macro_f1", "weighted_f1", "log_loss"),
    "regression": ("mae", "rmse", "r2"),
}

FORMATS = ("text", "json")

# Equal bins in [0, 1] and equal bins in logit space over [-LOGIT_RANGE, LOGIT_RANGE].
SCORE_BINS = 1 << 16
LOGIT_RANGE = 36.0

FloatArray = npt.NDArray[np.floating[Any]]
IntArray = npt.NDArray[np.int64]


@functools.cache
def score_edges() -> npt.NDArray[np.float64]:
    """The sorted bin edges of the score histograms (first 0.0, last 1.0).

    Returns:
        The union of equal steps in probability and equal steps in logit, so every region of
        ``[0, 1]`` gets the finer of the two (1.5e-5 around 0.5, 0.1% relative near 0 and 1).
    """
    linear = np.linspace(0.0, 1.0, SCORE_BINS + 1)
    logits = np.linspace(-LOGIT_RANGE, LOGIT_RANGE, SCORE_BINS + 1)
    edges = np.unique(np.concatenate([linear, 1.0 / (1.0 + np.exp(-logits)), [0.0, 1.0]]))
    edges.flags.writeable = False
    return edges


def metrics_for(
    task: str,
    classes: Sequence[Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> Accumulator:
    """An empty accumulator of the metrics of ``task``.

    Args:
        task: ``"binary"``, ``"multiclass"`` or ``"regression"``.
        classes: the class values, in the order of the class indices (binary: two, the second
            is the positive class; default ``[0, 1]``); ``None`` for regression.
        baseline: what the trivial baseline knows of the training split: ``{"class_counts":
            {class: rows}}`` for classification (it predicts the majority class, and scores
            every row with the training class frequencies for log loss and the AUCs), ``{"mean":
            float}`` for regression (it predicts the training mean); ``None``: no baseline.

    Returns:
        The accumulator; ``result()["baseline"]`` is ``None`` without a baseline.

    Raises:
        InvalidArgumentError: unknown task, wrong classes, or a baseline of the wrong shape.
    """
    if task == "regression":
        if classes is not None:
            raise InvalidArgumentError("regression has no classes: pass classes=None")
        mean = None if baseline is None else _baseline_mean(baseline)
        return RegressionAccumulator(mean)
    if task not in TASKS:
        raise InvalidArgumentError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if classes is None and task == "binary":
        classes = [0, 1]
    if classes is None or len(classes) < 2:
        raise InvalidArgumentError(f"{task} needs the list of its classes (at least two)")
    if task == "binary" and len(classes) != 2:
        raise InvalidArgumentError(
            f"binary needs exactly two classes, got {len(classes)}: use task='multiclass'"
        )
    values = [_plain(c) for c in classes]
    counts = None if baseline is None else _baseline_counts(baseline, values)
    if task == "binary":
        return BinaryAccumulator(values, counts)
    return MulticlassAccumulator(values, counts)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value (so results are JSON-able); others unchanged."""
    return value.item() if isinstance(value, np.generic) else value


def _baseline_mean(baseline: Mapping[str, Any]) -> float:
    mean = baseline.get("mean")
    if set(baseline) != {"mean"} or isinstance(mean, bool) or not isinstance(mean, int | float):
        raise InvalidArgumentError(
            f"a regression baseline is {{'mean': training label mean}}, got {dict(baseline)!r}"
        )
    if not math.isfinite(mean):
        raise InvalidArgumentError(f"the baseline mean must be finite, got {mean!r}")
    return float(mean)


def _baseline_counts(baseline: Mapping[str, Any], classes: list[Any]) -> list[int]:
    counts = baseline.get("class_counts")
    if set(baseline) != {"class_counts"} or not isinstance(counts, Mapping):
        raise InvalidArgumentError(
            "a classification baseline is {'class_counts': {class: training rows}}, "
            f"got {dict(baseline)!r}"
        )
    plain = {_plain(k): v for k, v in counts.items()}
    unknown = [k for k in plain if k not in classes]
    if unknown:
        raise InvalidArgumentError(
            f"baseline class {unknown[0]!r} is not one of the classes {classes!r}"
        )
    out = [plain.get(c, 0) for c in classes]
    if any(isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0 for n in out):
        raise InvalidArgumentError(f"baseline class counts must be whole numbers >= 0: {plain!r}")
    if sum(out) == 0:
        raise InvalidArgumentError("the baseline class counts are all 0: pass the training rows")
    return [int(n) for n in out]


def _ratio(num: float, den: float) -> float:
    """``num / den``, 0.0 when ``den`` is 0 (scikit-learn's ``zero_division=0``)."""
    return float(num / den) if den else 0.0


def _masked(
    y_true: Any, y_pred: Any, mask: Any, ndim: int
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The rows of one batch as arrays, checked for shape, with the masked-out rows dropped."""
    truth = np.asarray(y_true)
    pred = np.asarray(y_pred)
    if ndim == 1 and pred.ndim == 2 and pred.shape[1] == 1:
        pred = pred[:, 0]
    if truth.ndim != 1 or pred.ndim != ndim or len(pred) != len(truth):
        want = "(n,)" if ndim == 1 else "(n, classes)"
        raise InvalidArgumentError(
            f"y_true must have shape (n,) and y_pred {want} with the same n, "
            f"got {truth.shape} and {pred.shape}"
        )
    if mask is not None:
        keep = np.asarray(mask)
        if keep.dtype != np.bool_ or keep.shape != truth.shape:
            raise InvalidArgumentError(f"mask must be a bool array of shape {truth.shape}")
        truth, pred = truth[keep], pred[keep]
    if pred.dtype.kind not in "fiub":
        raise InvalidArgumentError(f"y_pred must be numbers, got dtype {pred.dtype}")
    if pred.dtype.kind != "f":
        pred = pred.astype(np.float64)
    if not np.all(np.isfinite(pred)):
        raise InvalidArgumentError("y_pred holds NaN or infinity: check the model's input")
    return truth, pred


def _class_indices(truth: npt.NDArray[Any], k: int) -> IntArray:
    """The true labels as int64 class indices, refused when one is not in ``0..k-1``."""
    if truth.dtype.kind not in "iubf":
        raise InvalidArgumentError(
            f"y_true must be class indices 0..{k - 1}, got dtype {truth.dtype}: map labels first"
        )
    if truth.dtype.kind == "f" and not np.all(np.isfinite(truth)):
        raise InvalidArgumentError(
            "y_true holds NaN or infinity: drop NULL labels first (or pass mask)"
        )
    index = truth.astype(np.int64)
    bad = (index != truth) | (index < 0) | (index >= k)
    if np.any(bad):
        raise InvalidArgumentError(
            f"y_true holds {_plain(truth[bad][0])!r}, not a class index 0..{k - 1}: map labels to "
            "indices first and drop NULL labels (or pass mask)"
        )
    return index


def _probabilities(pred: FloatArray) -> None:
    if pred.size and (pred.min() < 0 or pred.max() > 1):
        raise InvalidArgumentError(
            "y_pred must be probabilities in [0, 1], got values from "
            f"{pred.min():g} to {pred.max():g}"
        )


def _log_loss_sum(p_true: FloatArray) -> float:
    """The summed ``-log`` of the true classes' probabilities, clipped as scikit-learn does."""
    eps = np.finfo(p_true.dtype).eps
    clipped = np.clip(p_true, eps, 1 - eps).astype(np.float64)
    return float(-np.sum(np.log(clipped)))


def _constant_log_loss(q: FloatArray, support: IntArray) -> float:
    """Mean log loss of scoring every row with the probabilities ``q`` (clipped)."""
    eps = np.finfo(np.float64).eps
    logs = np.log(np.clip(q, eps, 1 - eps))
    return float(-np.dot(support, logs) / support.sum())


class Accumulator:
    """Metrics of one task over the rows seen so far; ``merge`` adds another's rows.

    Subclasses hold only counts and sums, so partitions can be accumulated apart (and
    pickled) and merged in any order.
    """

    task: str = ""

    @property
    def rows(self) -> int:
        """The rows accumulated so far."""
        raise NotImplementedError

    def update(self, y_true: Any, y_pred: Any, mask: Any = None) -> None:
        """Add one batch of rows.

        Args:
            y_true: the labels, shape ``(n,)``: class indices (classification) or numbers.
            y_pred: the model's output as ``Model.predict_batch`` gives it.
            mask: optional bool array of shape ``(n,)``; rows where it is ``False`` (NULL
                labels) are left out.

        Raises:
            InvalidArgumentError: shapes disagree, a label is not a class index, a prediction
                is NaN or (classification) not a probability.
        """
        raise NotImplementedError

    def merge(self, other: Accumulator) -> Accumulator:
        """A new accumulator holding the rows of both (neither operand changes).

        Args:
            other: an accumulator of the same task, classes and baseline.

        Returns:
            The merged accumulator.

        Raises:
            InvalidArgumentError: the two measure different things.
        """
        if type(other) is not type(self) or self._key() != other._key():
            raise InvalidArgumentError(
                "cannot merge metrics of a different task, classes or baseline"
            )
        return self._merged(other)

    def result(self) -> dict[str, Any]:
        """The metrics as a JSON-able dict.

        Returns:
            ``{"task", "rows", <metric>: float | None, ..., "baseline": dict | None}`` plus
            ``"classes"`` and ``"confusion_matrix"`` for classification.

        Raises:
            InvalidArgumentError: no rows were accumulated.
        """
        if self.rows == 0:
            raise InvalidArgumentError(
                "no rows to evaluate: the SELECT gave no rows with a non-NULL label"
            )
        return self._result()

    def _key(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _merged(self, other: Any) -> Accumulator:
        raise NotImplementedError

    def _result(self) -> dict[str, Any]:
        raise NotImplementedError


class _Classification(Accumulator):
    """The state classification tasks share: a confusion matrix and the log loss sum."""

    def __init__(self, classes: list[Any], counts: list[int] | None) -> None:
        k = len(classes)
        self.classes = classes
        self.counts = counts
        self.confusion: IntArray = np.zeros((k, k), dtype=np.int64)
        self.loss_sum = 0.0

    @property
    def rows(self) -> int:
        return int(self.confusion.sum())

    def _key(self) -> tuple[Any, ...]:
        return (self.task, self.classes, self.counts)

    def _merged(self, other: Any) -> _Classification:
        out = type(self)(self.classes, self.counts)
        out.confusion = self.confusion + other.confusion
        out.loss_sum = self.loss_sum + other.loss_sum
        return out

    def _add(self, index: IntArray, predicted: IntArray, p_true: FloatArray) -> None:
        k = len(self.classes)
        cells = np.bincount(index * k + predicted, minlength=k * k)
        self.confusion += cells.reshape(k, k)
        self.loss_sum += _log_loss_sum(p_true)

    def _prior(self) -> tuple[int, npt.NDArray[np.float64]] | None:
        """The baseline's majority class index and training class frequencies."""
        if self.counts is None:
            return None
        counts = np.asarray(self.counts, dtype=np.float64)
        return int(np.argmax(counts)), counts / counts.sum()

    def _common(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "rows": self.rows,
            "classes": list(self.classes),
            "accuracy": float(np.trace(self.confusion) / self.rows),
            "log_loss": self.loss_sum / self.rows,
            "confusion_matrix": self.confusion.tolist(),
        }

    def _baseline_common(self, majority: int, q: npt.NDArray[np.float64]) -> dict[str, Any]:
        support = self.confusion.sum(axis=1)
        confusion = np.zeros_like(self.confusion)
        confusion[:, majority] = support
        return {
            "strategy": "majority_class",
            "prediction": self.classes[majority],
            "accuracy": float(support[majority] / self.rows),
            "log_loss": _constant_log_loss(q, support),
            "confusion_matrix": confusion.tolist(),
        }


class BinaryAccumulator(_Classification):
    """Binary metrics: ``y_pred`` is the probability of class index 1, shape ``(n,)``."""

    task = "binary"

    def __init__(self, classes: list[Any], counts: list[int] | None) -> None:
        super().__init__(classes, counts)
        self.histogram: IntArray = np.zeros((2, len(score_edges()) - 1), dtype=np.int64)

    def update(self, y_true: Any, y_pred: Any, mask: Any = None) -> None:
        truth, score = _masked(y_true, y_pred, mask, ndim=1)
        _probabilities(score)
        index = _class_indices(truth, 2)
        predicted = (score > 0.5).astype(np.int64)
        self._add(index, predicted, np.where(index == 1, score, 1 - score))
        edges = score_edges()
        for label in (0, 1):
            # sorted first: searchsorted walks the edges in order (4x faster on 1M rows)
            ordered = np.sort(score[index == label].astype(np.float64))
            bins = np.clip(np.searchsorted(edges, ordered, side="right") - 1, 0, len(edges) - 2)
            found, counts = np.unique(bins, return_counts=True)
            self.histogram[label, found] += counts

    def __getstate__(self) -> dict[str, Any]:
        """The state with the histograms as their non-empty bins (a few kB, not 2 MB)."""
        state = dict(self.__dict__)
        state["histogram"] = [(np.flatnonzero(h), h[h > 0]) for h in self.histogram]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        sparse = state.pop("histogram")
        self.__dict__.update(state)
        self.histogram = np.zeros((2, len(score_edges()) - 1), dtype=np.int64)
        for label, (found, counts) in enumerate(sparse):
            self.histogram[label, found] = counts

    def _merged(self, other: Any) -> BinaryAccumulator:
        out = super()._merged(other)
        assert isinstance(out, BinaryAccumulator)
        out.histogram = self.histogram + other.histogram
        return out

    def _result(self) -> dict[str, Any]:
        (_, fp), (fn, tp) = self.confusion.tolist()
        out = self._common()
        out["precision"] = _ratio(tp, tp + fp)
        out["recall"] = _ratio(tp, tp + fn)
        out["f1"] = _ratio(2 * tp, 2 * tp + fp + fn)
        out["roc_auc"] = roc_auc(self.histogram[0], self.histogram[1])
        out["pr_auc"] = average_precision(self.histogram[0], self.histogram[1])
        out["baseline"] = self._baseline()
        return out

    def _baseline(self) -> dict[str, Any] | None:
        prior = self._prior()
        if prior is None:
            return None
        majority, q = prior
        negatives, positives = self.confusion.sum(axis=1).tolist()
        out = self._baseline_common(majority, q)
        out["score"] = float(q[1])
        tp, fp = (positives, negatives) if majority == 1 else (0, 0)
        out["precision"] = _ratio(tp, tp + fp)
        out["recall"] = _ratio(tp, positives)
        out["f1"] = _ratio(2 * tp, tp + fp + positives)
        out["roc_auc"] = 0.5 if negatives and positives else None
        out["pr_auc"] = _ratio(positives, self.rows) if positives else None
        return out


def roc_auc(negatives: IntArray, positives: IntArray) -> float | None:
    """ROC AUC from per-bin counts of the two classes' scores (ties within a bin count half).

    Args:
        negatives: rows of class 0 per score bin, bins in increasing score order.
        positives: rows of class 1 per score bin.

    Returns:
        The area, or ``None`` when either class has no row (the area is undefined).
    """
    n_neg, n_pos = int(negatives.sum()), int(positives.sum())
    if n_neg == 0 or n_pos == 0:
        return None
    below = np.cumsum(negatives) - negatives
    if n_neg * n_pos < 1 << 61:
        twice = int(np.dot(positives, 2 * below + negatives))
        return twice / (2 * n_neg * n_pos)
    both = positives.astype(np.float64) * (below + 0.5 * negatives)
    return float(both.sum() / n_neg / n_pos)


def average_precision(negatives: IntArray, positives: IntArray) -> float | None:
    """Average precision (PR AUC) from per-bin counts, each bin one threshold.

    Args:
        negatives: rows of class 0 per score bin, bins in increasing score order.
        positives: rows of class 1 per score bin.

    Returns:
        ``sum over thresholds of (recall step) * precision``, or ``None`` with no positive row.
    """
    n_pos = int(positives.sum())
    if n_pos == 0:
        return None
    tp = np.cumsum(positives[::-1])
    fp = np.cumsum(negatives[::-1])
    step = positives[::-1] > 0
    precision = tp[step] / (tp[step] + fp[step])
    return float(np.dot(positives[::-1][step], precision) / n_pos)


class MulticlassAccumulator(_Classification):
    """Multiclass metrics: ``y_pred`` is the probabilities, shape ``(n, len(classes))``."""

    task = "multiclass"

    def update(self, y_true: Any, y_pred: Any, mask: Any = None) -> None:
        truth, proba = _masked(y_true, y_pred, mask, ndim=2)
        k = len(self.classes)
        if proba.shape[1] != k:
            raise InvalidArgumentError(
                f"y_pred has {proba.shape[1]} columns but there are {k} classes"
            )
        _probabilities(proba)
        index = _class_indices(truth, k)
        predicted = np.argmax(proba, axis=1).astype(np.int64)
        self._add(index, predicted, proba[np.arange(len(index)), index])

    def _result(self) -> dict[str, Any]:
        out = self._common()
        macro, weighted = _f1_averages(self.confusion)
        out["macro_f1"] = macro
        out["weighted_f1"] = weighted
        prior = self._prior()
        out["baseline"] = None
        if prior is not None:
            majority, q = prior
            base = self._baseline_common(majority, q)
            base["macro_f1"], base["weighted_f1"] = _f1_averages(
                np.asarray(base["confusion_matrix"], dtype=np.int64)
            )
            base["probabilities"] = q.tolist()
            out["baseline"] = base
        return out


def _f1_averages(confusion: IntArray) -> tuple[float, float]:
    """Macro and support-weighted F1 over the classes present in the true or predicted labels."""
    tp = np.diag(confusion).astype(np.float64)
    support = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    den = support + predicted
    present = den > 0
    f1 = np.divide(2 * tp, den, out=np.zeros_like(tp), where=present)
    return float(f1[present].mean()), float(np.dot(f1, support) / support.sum())


class RegressionAccumulator(Accumulator):
    """Regression metrics from mergeable sums (Chan's parallel update for the label variance)."""

    task = "regression"

    def __init__(self, mean: float | None) -> None:
        self.baseline_mean = mean
        self.count = 0
        self.mean = 0.0  # of the labels
        self.m2 = 0.0  # sum of squared deviations of the labels from their mean
        self.sse = 0.0
        self.sae = 0.0
        self.baseline_sse = 0.0
        self.baseline_sae = 0.0

    @property
    def rows(self) -> int:
        return self.count

    def update(self, y_true: Any, y_pred: Any, mask: Any = None) -> None:
        truth, pred = _masked(y_true, y_pred, mask, ndim=1)
        if truth.dtype.kind not in "iuf":
            raise InvalidArgumentError(f"regression labels must be numbers, got {truth.dtype}")
        y = truth.astype(np.float64)
        if not np.all(np.isfinite(y)):
            raise InvalidArgumentError(
                "y_true holds NaN or infinity: drop NULL labels first (or pass mask)"
            )
        if len(y) == 0:
            return
        error = y - pred.astype(np.float64)
        part = RegressionAccumulator(self.baseline_mean)
        part.count = len(y)
        part.mean = float(y.mean())
        part.m2 = float(np.sum((y - part.mean) ** 2))
        part.sse = float(np.dot(error, error))
        part.sae = float(np.abs(error).sum())
        if self.baseline_mean is not None:
            base = y - self.baseline_mean
            part.baseline_sse = float(np.dot(base, base))
            part.baseline_sae = float(np.abs(base).sum())
        self.__dict__.update(self._merged(part).__dict__)

    def _key(self) -> tuple[Any, ...]:
        return (self.task, self.baseline_mean)

    def _merged(self, other: Any) -> RegressionAccumulator:
        out = RegressionAccumulator(self.baseline_mean)
        out.count = self.count + other.count
        if out.count:
            delta = other.mean - self.mean
            out.mean = self.mean + delta * other.count / out.count
            out.m2 = self.m2 + other.m2 + delta * delta * self.count * other.count / out.count
        for name in ("sse", "sae", "baseline_sse", "baseline_sae"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def _scores(self, sse: float, sae: float) -> dict[str, Any]:
        # sklearn's force_finite: a constant label scores 1.0 when fit exactly, else 0.0
        r2 = 1.0 - sse / self.m2 if self.m2 > 0 else float(sse == 0)
        return {"mae": sae / self.count, "rmse": math.sqrt(sse / self.count), "r2": r2}

    def _result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.task, "rows": self.count}
        out.update(self._scores(self.sse, self.sae))
        out["baseline"] = None
        if self.baseline_mean is not None:
            base = {"strategy": "training_mean", "prediction": self.baseline_mean}
            base.update(self._scores(self.baseline_sse, self.baseline_sae))
            out["baseline"] = base
        return out


def format_metrics(result: Mapping[str, Any], fmt: str = "text") -> str:
    """A metrics result as text for a terminal, or as JSON.

    Args:
        result: what ``result()`` returned (or the same dict read back from JSON).
        fmt: ``"text"``: a table of each metric for the model and the baseline, the
            confusion matrix below it with the class names; ``"json"``: ``json.dumps`` with
            sorted keys (the same text for the same result).

    Returns:
        The text, without a trailing newline.

    Raises:
        InvalidArgumentError: an unknown ``fmt``, or a result without a known task.
    """
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(result, sort_keys=True, default=str)
    task = result.get("task")
    if task not in METRICS:
        raise InvalidArgumentError(f"not a metrics result (task {task!r}): pass result()")
    baseline = result.get("baseline") or {}
    rows: list[tuple[str, ...]] = [("metric", "model", "baseline")]
    for name in METRICS[task]:
        if name in result:
            rows.append((name, _number(result[name]), _number(baseline.get(name))))
    lines = [f"{task} on {result.get('rows', 0):,} rows", *_table(rows, left=1)]
    if baseline:
        lines.append(_baseline_line(baseline))
    if "confusion_matrix" in result:
        lines += ["", *_confusion(result["confusion_matrix"], result.get("classes"))]
    return "\n".join(lines)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0 or 1e-3 <= abs(value) < 1e6 or not math.isfinite(value):
        return f"{value:.4f}"
    return f"{value:.4g}"


def _table(rows: list[tuple[str, ...]], left: int) -> list[str]:
    """Rows as aligned lines; the first ``left`` columns left-aligned, the others right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _baseline_line(baseline: Mapping[str, Any]) -> str:
    prediction = baseline.get("prediction")
    if baseline.get("strategy") == "training_mean":
        return f"baseline: predicts the training mean {_number(prediction)}"
    line = f"baseline: predicts the majority class {prediction!r}"
    if "score" in baseline:
        line += f", scores every row {_number(baseline['score'])} (training share of class 1)"
    return line


def _confusion(matrix: Sequence[Sequence[int]], classes: Sequence[Any] | None) -> list[str]:
    names = [str(c) for c in classes] if classes else [str(i) for i in range(len(matrix))]
    rows = [("true \\ predicted", *names)]
    rows += [(name, *(f"{n:,}" for n in row)) for name, row in zip(names, matrix, strict=True)]
    return ["confusion matrix (rows: true class, columns: predicted class)", *_table(rows, 1)]

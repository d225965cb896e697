"""``sqlfeed.ml.evaluate_table``: the metrics of a table of predictions, computed in the engine.

The table holds a label column and a predicted column (``sqlfeed predict --into`` writes
such a table); no model is loaded and no row leaves the engine: a few aggregate queries
return counts and sums, and the metrics are assembled from them with the accumulators of
:mod:`sqlfeed.ml.metrics`, so the result has the shape and the names of
:func:`sqlfeed.ml.evaluate`'s:

* ``regression``: MAE, MSE, RMSE and R² (the label's squared deviations from their mean come
  from a two-level query, in double precision, not from ``SUM(y*y) - SUM(y)^2/n``);
* ``binary`` and ``multiclass``: accuracy (the rows where the engine finds ``label =
  predicted``), the confusion matrix (one ``GROUP BY label, predicted``; classes sorted,
  a binary table's second class is the positive one), precision, recall and F1 (binary),
  macro and weighted F1 (multiclass); binary with a probability column (the probability of
  the positive class; default ``<predicted>_prob`` when the table has it) adds log loss
  (clipped to ``[eps, 1 - eps]`` as scikit-learn does), ROC AUC (exact: the Mann-Whitney U
  over the distinct probabilities, ties counted half) and PR AUC (average precision over
  the distinct probabilities, as scikit-learn's ``average_precision_score``); multiclass
  with a probability column per class (``<predicted>_prob_<class>``, as ``sqlfeed predict
  --proba`` writes them) adds log loss (of each row's true class, clipped alike).

The baseline is computed on the table's own labels (there is no training split): the
majority class and the class shares, or the labels' mean (its R² is 0).
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from sqlfeed.errors import EngineError, InvalidArgumentError
from sqlfeed.io import Source, connect
from sqlfeed.ml.metrics import TASKS, format_metrics, metrics_for
from sqlfeed.sql.names import table_name

__all__ = ["evaluate_table", "table_metrics_text"]

EPS = 2.220446049250313e-16
"""The clipping of probabilities for log loss: float64's machine epsilon (scikit-learn's)."""


@dataclasses.dataclass
class _Table:
    source: Source
    name: str
    table: exp.Table
    schema: pa.Schema
    label: str
    predicted: str
    probability: str | None
    per_class: dict[str, str] = dataclasses.field(default_factory=dict)
    """Multiclass: a class's text -> the column of its probability (``<prefix><class>``)."""
    prefix: str = ""

    def sql(self, expression: exp.Expr) -> str:
        return self.source.dialect.sql(expression)

    def rows(self, expression: exp.Expr) -> list[tuple[Any, ...]]:
        return self.source.rows(self.sql(expression), what="metrics query")

    def column(self, name: str) -> exp.Column:
        return exp.column(name, quoted=True)

    def double(self, name: str) -> exp.Expr:
        return exp.cast(self.column(name), exp.DataType.Type.DOUBLE)


def evaluate_table(
    source: Any,
    table: str,
    *,
    label: str,
    predicted: str,
    task: str,
    probability: str | None = None,
) -> dict[str, Any]:
    """The metrics of the predictions a table holds, computed as aggregates in its engine.

    Args:
        source: a :class:`~sqlfeed.io.Source` or a database URL.
        table: ``"name"`` or ``"schema.name"``, in the engine's SQL.
        label: the column of the true values.
        predicted: the column of the predicted values (classification: class values).
        task: ``"binary"``, ``"multiclass"`` or ``"regression"``.
        probability: binary: the column of the positive class's probability (default
            ``<predicted>_prob`` when the table has it); adds log loss, ROC AUC and PR AUC.
            Multiclass: the start of the per-class probability columns' names, each
            ``<probability><class>`` (default ``<predicted>_prob_`` when the table has
            such columns); adds log loss.

    Returns:
        ``{"task", "rows", <metric>: ..., "baseline": {...}, "table", "label", "predicted",
        "probability"}`` plus ``"classes"`` and ``"confusion_matrix"`` for classification.

    Raises:
        InvalidArgumentError: an unknown task or table, a missing column, NULL labels,
            predictions or probabilities, types that cannot be compared, no rows.
    """
    if task not in TASKS:
        raise InvalidArgumentError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if probability is not None and task == "regression":
        raise InvalidArgumentError("a probability column is for a classification, not regression")
    src = connect(source)
    try:
        t = _open(src, table, label, predicted, task, probability)
        _check_rows(t)
        result = _regression(t) if task == "regression" else _classification(t, task)
    finally:
        if src is not source:
            src.close()
    shown = f"{t.prefix}<class>" if t.per_class else t.probability
    result.update(table=table, label=t.label, predicted=t.predicted, probability=shown)
    return result


def _open(
    src: Source, table: str, label: str, predicted: str, task: str, probability: str | None
) -> _Table:
    parsed = table_name(table, src.dialect, "table")
    try:
        schema = src.schema(src.dialect.sql(exp.select("*").from_(parsed)))
    except EngineError as err:
        raise InvalidArgumentError(
            f"cannot read table {table!r}: {err}: check its name (name or schema.name)"
        ) from None
    names = schema.names
    found = [_find(names, label, "label", table), _find(names, predicted, "predicted", table)]
    per_class: dict[str, str] = {}
    prefix = ""
    if task == "multiclass":
        prefix = probability if probability is not None else f"{found[1]}_prob_"
        per_class = {n[len(prefix) :]: n for n in names if n.startswith(prefix)}
        if probability is not None and not per_class:
            raise InvalidArgumentError(
                f"table {table!r} has no column named {prefix}<class> (a class's "
                f"probability): its columns are {', '.join(names)}"
            )
        probability = None
    elif probability is None and task == "binary":
        default = f"{found[1]}_prob"
        probability = default if default in names else None
    elif probability is not None:
        probability = _find(names, probability, "probability", table)
    t = _Table(src, table, parsed, schema, found[0], found[1], probability, per_class)
    t.prefix = prefix if task == "multiclass" else ""
    _check_types(t, task)
    return t


def _find(names: list[str], name: str, what: str, table: str) -> str:
    if name in names:
        return name
    folded = [n for n in names if n.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0]
    raise InvalidArgumentError(
        f"table {table!r} has no {what} column {name!r}: its columns are {', '.join(names)}"
    )


def _kind(arrow: pa.DataType) -> str:
    if pa.types.is_boolean(arrow):
        return "bool"
    if pa.types.is_integer(arrow) or pa.types.is_decimal(arrow) or pa.types.is_floating(arrow):
        return "number"
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return "text"
    return str(arrow)


def _noun(kind: str) -> str:
    return {"bool": "booleans", "number": "numbers", "text": "text"}.get(kind, f"{kind} values")


def _check_types(t: _Table, task: str) -> None:
    kinds = {c: _kind(t.schema.field(c).type) for c in (t.label, t.predicted)}
    if task == "regression":
        wrong = [c for c, k in kinds.items() if k != "number"]
        if wrong:
            raise InvalidArgumentError(
                f"regression compares numbers: column {wrong[0]!r} holds {_noun(kinds[wrong[0]])}: "
                "pass numeric label and predicted columns (or --task binary|multiclass)"
            )
    elif len({k if k != "bool" else "number" for k in kinds.values()}) > 1:
        raise InvalidArgumentError(
            f"the label column {t.label!r} holds {_noun(kinds[t.label])} and the predicted "
            f"column {t.predicted!r} {_noun(kinds[t.predicted])}: the engine cannot compare "
            "them; cast one in a view"
        )
    probabilities = [*t.per_class.values(), *([t.probability] if t.probability else [])]
    for name in probabilities:
        if _kind(t.schema.field(name).type) != "number":
            raise InvalidArgumentError(
                f"the probability column {name!r} is not numeric: pass --probability COL"
            )


def _compared(t: _Table) -> tuple[exp.Expr, exp.Expr]:
    """The label and the predicted value as the engine compares them.

    A boolean beside a number as 0/1: not every engine compares the two.
    """
    kinds = [_kind(t.schema.field(c).type) for c in (t.label, t.predicted)]
    out: list[exp.Expr] = []
    for name, kind in zip((t.label, t.predicted), kinds, strict=True):
        if kind == "bool" and kinds != ["bool", "bool"]:
            out.append(exp.cast(t.column(name), exp.DataType.Type.INT))
        else:
            out.append(t.column(name))
    return out[0], out[1]


def _count_if(condition: exp.Expr) -> exp.Expr:
    return exp.Sum(
        this=exp.case().when(condition, exp.Literal.number(1)).else_(exp.Literal.number(0))
    )


def _check_rows(t: _Table) -> int:
    """Counts the rows and the NULLs.

    Refuses NULL labels, predictions and probabilities, and probabilities outside [0, 1].
    """
    columns = [t.label, t.predicted] + ([t.probability] if t.probability else [])
    select = exp.select(exp.Count(this=exp.Star()))
    select = select.select(*(exp.Count(this=t.column(c)) for c in columns))
    if t.probability:
        select = select.select(
            exp.Min(this=t.double(t.probability)), exp.Max(this=t.double(t.probability))
        )
    row = t.rows(select.from_(t.table.copy()))[0]
    total = int(row[0])
    if total == 0:
        raise InvalidArgumentError(f"table {t.name!r} has no rows to evaluate")
    for name, what, count in zip(
        columns, ("label", "predicted", "probability"), row[1 : 1 + len(columns)], strict=False
    ):
        nulls = total - int(count)
        if nulls:
            raise InvalidArgumentError(
                f"{nulls:,} of {total:,} rows of {t.name!r} have a NULL {what} ({name!r}): "
                "evaluate a view without them"
            )
    if t.probability and (float(row[-2]) < 0 or float(row[-1]) > 1):
        raise InvalidArgumentError(
            f"the probability column {t.probability!r} holds values from {float(row[-2]):g} "
            f"to {float(row[-1]):g}, not probabilities in [0, 1]"
        )
    return total


# -- regression ---------------------------------------------------------------------------


def _regression(t: _Table) -> dict[str, Any]:
    y, p, m = t.double(t.label), t.double(t.predicted), exp.column("m", "s", quoted=True)
    error = exp.Paren(this=exp.Sub(this=y.copy(), expression=p))
    spread = exp.Paren(this=exp.Sub(this=y.copy(), expression=m.copy()))
    mean = exp.select(exp.alias_(exp.Avg(this=y.copy()), "m", quoted=True)).from_(t.table.copy())
    select = (
        exp.select(
            exp.Count(this=exp.Star()),
            exp.Sum(this=exp.Abs(this=error.copy())),
            exp.Sum(this=exp.Mul(this=error.copy(), expression=error.copy())),
            exp.Sum(this=exp.Mul(this=spread.copy(), expression=spread.copy())),
            exp.Sum(this=exp.Abs(this=spread.copy())),
            exp.Max(this=m.copy()),
        )
        .from_(t.table.copy())
        .join(mean.subquery("s", copy=False), join_type="cross")
    )
    n, sae, sse, sst, base_sae, label_mean = (float(v) for v in t.rows(select)[0])
    acc = metrics_for("regression", None, {"mean": label_mean})
    acc.__dict__.update(
        count=int(n),
        mean=label_mean,
        m2=sst,
        sse=sse,
        sae=sae,
        baseline_sse=sst,
        baseline_sae=base_sae,
    )
    result = acc.result()
    result["mse"] = sse / n
    result["baseline"].update(strategy="label_mean", mse=sst / n)
    return result


# -- classification -----------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as JSON writes it: a decimal as an int when whole, else a float."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _classification(t: _Table, task: str) -> dict[str, Any]:
    groups = _groups(t)
    classes = _classes(groups, task)
    k = len(classes)
    confusion = [[0] * k for _ in range(k)]
    label_counts = [0] * k
    loss = 0.0
    for truth, guess, count, equal, ln_p, ln_q in groups:
        i = _position(classes, truth)
        j = i if equal else _position(classes, guess)
        confusion[i][j] += count
        label_counts[i] += count
        if t.probability is not None:
            loss -= ln_p if i == 1 else ln_q
    acc = metrics_for(
        task, classes, {"class_counts": dict(zip(classes, label_counts, strict=True))}
    )
    acc.__dict__.update(confusion=np.array(confusion, dtype=np.int64), loss_sum=loss)
    result = acc.result()
    result["baseline"]["strategy"] = "majority_class_of_labels"
    if task == "multiclass":
        loss_sum = _true_class_loss(t, classes, label_counts)
        result["log_loss"] = None if loss_sum is None else loss_sum / sum(label_counts)
    elif t.probability is None:
        result.update(log_loss=None, roc_auc=None, pr_auc=None)
    else:
        result["roc_auc"], result["pr_auc"] = _aucs(t, classes[1], label_counts)
    return result


def _true_class_loss(t: _Table, classes: list[Any], counts: list[int]) -> float | None:
    """The summed ``-ln`` of each row's true-class probability (clipped), from its column.

    None: no per-class columns, or a class some label holds has none. NULL probabilities
    and values outside [0, 1] are refused.
    """
    held = [(c, t.per_class.get(str(c))) for c, n in zip(classes, counts, strict=True) if n]
    if not t.per_class or any(name is None for _, name in held):
        return None
    used = [str(name) for _, name in held]
    truth = t.column(t.label)
    true_ln = exp.case()
    for value, name in held:
        true_ln = true_ln.when(
            exp.EQ(this=truth.copy(), expression=_literal(value)), _clipped_ln(t.double(str(name)))
        )
    select = exp.select(exp.Count(this=exp.Star()), exp.Sum(this=true_ln))
    for name in used:
        column = t.double(name)
        select = select.select(
            exp.Count(this=t.column(name)), exp.Min(this=column.copy()), exp.Max(this=column)
        )
    row = t.rows(select.from_(t.table.copy()))[0]
    total = int(row[0])
    for i, name in enumerate(used):
        count, low, high = row[2 + 3 * i : 5 + 3 * i]
        if int(count) < total:
            raise InvalidArgumentError(
                f"{total - int(count):,} of {total:,} rows of {t.name!r} have a NULL "
                f"probability ({name!r}): evaluate a view without them"
            )
        if float(low) < 0 or float(high) > 1:
            raise InvalidArgumentError(
                f"the probability column {name!r} holds values from {float(low):g} to "
                f"{float(high):g}, not probabilities in [0, 1]"
            )
    return -float(row[1])


def _position(classes: list[Any], value: Any) -> int:
    return next(i for i, c in enumerate(classes) if c == value)


def _groups(t: _Table) -> list[tuple[Any, Any, int, bool, float, float]]:
    """One row per (label, predicted) pair.

    The values, the rows, whether the engine finds them equal, and (with a probability) the
    sums of the clipped logs of p and 1 - p.
    """
    truth, guess = _compared(t)
    equal = exp.EQ(this=truth, expression=guess)
    label, predicted = t.column(t.label), t.column(t.predicted)
    select = exp.select(
        label.copy(), predicted.copy(), exp.Count(this=exp.Star()), exp.Max(this=_flag(equal))
    )
    if t.probability is not None:
        p = t.double(t.probability)
        one_minus = exp.Sub(this=exp.Literal.number(1), expression=p.copy())
        select = select.select(exp.Sum(this=_clipped_ln(p)), exp.Sum(this=_clipped_ln(one_minus)))
    select = select.from_(t.table.copy()).group_by(label, predicted)
    out = []
    for row in t.rows(select):
        logs = (float(row[4]), float(row[5])) if t.probability is not None else (0.0, 0.0)
        out.append((_plain(row[0]), _plain(row[1]), int(row[2]), bool(row[3]), *logs))
    return out


def _flag(condition: exp.Expr) -> exp.Expr:
    return exp.case().when(condition, exp.Literal.number(1)).else_(exp.Literal.number(0))


def _clipped_ln(p: exp.Expr) -> exp.Expr:
    low, high = exp.Literal.number(repr(EPS)), exp.Literal.number(repr(1 - EPS))
    clipped = (
        exp.case()
        .when(exp.LT(this=p.copy(), expression=low.copy()), low.copy())
        .when(exp.GT(this=p.copy(), expression=high.copy()), high.copy())
        .else_(p.copy())
    )
    return exp.Ln(this=clipped)


def _classes(groups: list[tuple[Any, ...]], task: str) -> list[Any]:
    """The class values, sorted.

    The labels' values, then the predicted values equal to no label (a pair the engine finds
    equal counts as one class, written as the label).
    """
    found: list[Any] = []
    for truth, *_ in groups:
        if not any(truth == c for c in found):
            found.append(truth)
    for _, guess, _, equal, *_ in groups:
        if not equal and not any(guess == c for c in found):
            found.append(guess)
    try:
        classes = sorted(found)
    except TypeError:
        classes = sorted(found, key=str)
    if task == "binary" and len(classes) == 1 and classes[0] in (0, 1):
        other = type(classes[0])(1 - classes[0])
        classes = sorted([classes[0], other])
    if task == "binary" and len(classes) != 2:
        raise InvalidArgumentError(
            f"binary needs two classes, the label and predicted columns hold {len(classes)}: "
            "use --task multiclass"
        )
    if task == "multiclass" and len(classes) < 2:
        raise InvalidArgumentError(
            f"the label and predicted columns hold one class ({classes[0]!r}): nothing to score"
        )
    return classes


def _literal(value: Any) -> exp.Expr:
    if isinstance(value, bool):
        return exp.true() if value else exp.false()
    if isinstance(value, int | float):
        return exp.Literal.number(repr(value))
    return exp.Literal.string(str(value))


def _aucs(t: _Table, positive: Any, counts: list[int]) -> tuple[float | None, float | None]:
    """ROC AUC (Mann-Whitney U, ties half) and average precision.

    From one query over the distinct probabilities: ``(None, None)`` parts where a class has
    no row.
    """
    n_neg, n_pos = counts
    if n_pos == 0:
        return None, None
    truth = t.column(t.label)
    p = t.double(t.probability or "")
    per_score = (
        exp.select(
            exp.alias_(p.copy(), "p", quoted=True),
            exp.alias_(
                _count_if(exp.EQ(this=truth, expression=_literal(positive))), "pos", quoted=True
            ),
            exp.alias_(exp.Count(this=exp.Star()), "n", quoted=True),
        )
        .from_(t.table.copy())
        .group_by(p.copy())
    )
    pos, n = exp.column("pos", quoted=True), exp.column("n", quoted=True)
    neg = exp.Paren(this=exp.Sub(this=n.copy(), expression=pos.copy()))
    below = _running(neg, desc=False)
    tp, seen = _running(pos, desc=True), _running(n, desc=True)
    ranked = exp.select(
        exp.alias_(_double(pos), "pos", quoted=True),
        exp.alias_(_double(neg), "neg", quoted=True),
        exp.alias_(exp.Sub(this=_double(below), expression=_double(neg)), "below", quoted=True),
        exp.alias_(exp.Div(this=_double(tp), expression=_double(seen)), "precision", quoted=True),
    ).from_(per_score.subquery("g", copy=False))
    c = {name: exp.column(name, quoted=True) for name in ("pos", "neg", "below", "precision")}
    twice_u = exp.Mul(
        this=c["pos"].copy(),
        expression=exp.Paren(
            this=exp.Add(
                this=exp.Mul(this=exp.Literal.number(2), expression=c["below"].copy()),
                expression=c["neg"].copy(),
            )
        ),
    )
    select = exp.select(
        exp.Sum(this=twice_u), exp.Sum(this=exp.Mul(this=c["pos"], expression=c["precision"]))
    ).from_(ranked.subquery("r", copy=False))
    twice, precision_sum = (float(v) for v in t.rows(select)[0])
    roc = twice / (2.0 * n_neg * n_pos) if n_neg else None
    return roc, precision_sum / n_pos


def _double(value: exp.Expr) -> exp.Expr:
    return exp.cast(value.copy(), exp.DataType.Type.DOUBLE)


def _running(value: exp.Expr, *, desc: bool) -> exp.Expr:
    """``SUM(value)`` over the distinct probabilities up to this one (ascending or not)."""
    order = exp.Ordered(this=exp.column("p", quoted=True), desc=desc, nulls_first=not desc)
    return exp.Window(
        this=exp.Sum(this=value.copy()),
        order=exp.Order(expressions=[order]),
        spec=exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING"),
    )


# -- text ---------------------------------------------------------------------------------


def table_metrics_text(result: Mapping[str, Any]) -> str:
    """:func:`~sqlfeed.ml.metrics.format_metrics`'s text of an :func:`evaluate_table` result.

    Its baseline line says the baseline is computed from the table's own labels.
    """
    lines = format_metrics(result, "text").split("\n")
    baseline = result.get("baseline") or {}
    if result["task"] == "regression":
        said = f"baseline: predicts the labels' mean {baseline.get('prediction')!r}"
    else:
        said = f"baseline: predicts the labels' majority class {baseline.get('prediction')!r}"
    head = (
        f"table {result.get('table')}: label {result.get('label')!r}, predicted "
        f"{result.get('predicted')!r}"
        + (f", probability {result['probability']!r}" if result.get("probability") else "")
    )
    out = [said if line.startswith("baseline: ") else line for line in lines]
    return "\n".join([head, *out])

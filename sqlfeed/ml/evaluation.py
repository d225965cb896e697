"""``sqlfeed.ml.evaluate``: a model's metrics on its validation split or on any SELECT.

The SELECT's rows are read partition by partition (readers in parallel) and scored batch by
batch; each batch's metrics are an accumulator of :mod:`sqlfeed.ml.metrics`, merged as they
come, so the result does not depend on the order the partitions arrive in. Nothing is
derived from the data again: the model's preprocessing is inside it, and no statistics
query runs. The SELECT must return every feature with a compatible type
(:meth:`sqlfeed.ml.Model.check_schema`) and the label.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp

from sqlfeed.dialects import get_dialect
from sqlfeed.errors import EngineError, InvalidArgumentError
from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.io import Source, connect
from sqlfeed.io.faults import table_missing
from sqlfeed.ml.artifact import Model, load
from sqlfeed.ml.metrics import metrics_for
from sqlfeed.ml.split import Split, split_sql

__all__ = ["evaluate", "evaluate_sql", "scored_sql", "training_overlap"]


def evaluate(
    model: Model | str | os.PathLike[str],
    query: str | None = None,
    source: Any = None,
    *,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The model's metrics, beside a trivial baseline's.

    Args:
        model: a :class:`~sqlfeed.ml.Model` or its folder.
        query: the SELECT to score (with the label); None: the model's validation split
            (its manifest's SQL, or, on an engine of another dialect, the same split rule
            applied to its query).
        source: where the SELECT runs.
        partitions: partitions of the read (None: the planner's choice).
        progress: called with a line when done.

    Returns:
        :meth:`sqlfeed.ml.metrics.Accumulator.result`, plus ``sql`` (what was scored) and,
        for a given SELECT, ``training_overlap``: how many of its rows the model was
        trained on (:func:`training_overlap`; a warning says so when there are some;
        None where the training split's table is not in that database).
    """
    opened = model if isinstance(model, Model) else load(model)
    src = connect(source)
    try:
        sql = query if query is not None else _split_sqls(opened, src)[1]
        result = evaluate_sql(opened, sql, src, partitions=partitions)
        if query is not None:
            result["training_overlap"] = overlap = _overlap_if_known(opened, query, src)
            if overlap:
                warnings.warn(_overlap_message(opened, overlap, result["rows"]), stacklevel=2)
    finally:
        if src is not source:  # opened here from a URL
            src.close()
    if progress:
        progress(f"scored {result['rows']:,} rows")
    return result


def _overlap_if_known(model: Model, query: str, src: Source) -> int | None:
    """:func:`training_overlap`, or None where the training split cannot be read here.

    A model evaluated on another database (a copy of its data under another name) finds no
    training table there: nothing tells which rows it was trained on, and nothing is said.
    Any other failure of the count (a training table with other columns, a lost server)
    also leaves it unknown, with a warning that says why: never read as "no overlap".
    """
    try:
        return training_overlap(model, query, src)
    except EngineError as err:
        if not table_missing(err):
            warnings.warn(
                f"could not count the evaluated rows the model was trained on ({err}): "
                "training_overlap is unknown (None)",
                stacklevel=3,
            )
        return None


def _overlap_message(model: Model, overlap: int, rows: int) -> str:
    return (
        f"{overlap:,} of the {rows:,} rows evaluated are rows the model was trained on (its "
        f"training split, matched by {_matched_by(model)}): their metrics flatter it; "
        "evaluate on its validation split (give no SELECT) or on other rows"
    )


def _matched_by(model: Model, names: list[str] | None = None) -> str:
    key = (model.manifest.get("split") or {}).get("key")
    if key is not None and (names is None or key in names):
        return f"the split key {key}"
    return "features and label"


def _split_sqls(model: Model, src: Source) -> tuple[str, str]:
    """The model's training and validation SELECTs, in the dialect of ``src``."""
    manifest = model.manifest
    if manifest["dialect"] == src.dialect.name:
        return str(manifest["training_sql"]), str(manifest["validation_sql"])
    written = get_dialect(manifest["dialect"]).sqlglot_dialect
    query = sqlglot.transpile(manifest["query"], read=written, write=src.dialect.sqlglot_dialect)[0]
    return split_sql(query, src, Split.from_rule(manifest["split"]))


def training_overlap(model: Model, query: str, source: Any) -> int:
    """How many of the rows of ``query`` are rows ``model`` was trained on.

    Rows of the SELECT found in the model's training split (its manifest's SQL, or the same
    split rule applied on another engine): by the split's key when the SELECT has that
    column (a NULL key matches nothing), else by the features and the label together (a
    row with a NULL among them matches nothing). The engine counts them: one query.
    """
    src = connect(source)
    parsed = src.parse(query)
    names = list(src.schema(parsed).names)
    key = (model.manifest.get("split") or {}).get("key")
    columns = [str(key)] if key in names else [*model.feature_names, model.label]
    training_split = src.parse(_split_sqls(model, src)[0])
    # Bound on its own first: nested in the count, a column its table lacks would bind to the
    # evaluated row's column of that name (SQL's outer references; DuckDB's implicit lateral
    # joins too) and count a wrong overlap with no error.
    src.schema(training_split)
    training = training_split.tree.copy()
    evaluated = parsed.tree.copy()
    assert isinstance(training, exp.Query)
    assert isinstance(evaluated, exp.Query)
    same = [
        exp.EQ(this=exp.column(c, "t", quoted=True), expression=exp.column(c, "e", quoted=True))
        for c in columns
    ]
    trained = exp.select("1").from_(training.subquery("t")).where(exp.and_(*same))
    count = (
        exp.select(exp.Count(this=exp.Star()))
        .from_(evaluated.subquery("e"))
        .where(exp.Exists(this=trained))
    )
    return int(src.scalar(count.sql(dialect=src.dialect.sqlglot_dialect), what="overlap count"))


def scored_sql(model: Model, query: str, src: Source, *, label: bool = True) -> str:
    """The SELECT's columns the model reads (its features, and the label), checked first.

    Raises:
        InvalidArgumentError: a missing or incompatible feature, or no label column.
    """
    parsed = src.parse(query)
    schema = src.schema(parsed)
    model.check_schema(schema)
    columns = model.feature_names
    if label:
        if model.label not in schema.names:
            raise InvalidArgumentError(
                f"the SELECT lacks the label column {model.label!r}, which evaluate compares "
                "the predictions with: select it"
            )
        columns = [*columns, model.label]
    inner = parsed.tree.copy()
    assert isinstance(inner, exp.Query)
    select = exp.select(*(exp.column(c, quoted=True) for c in columns)).from_(inner.subquery("q"))
    return select.sql(dialect=src.dialect.sqlglot_dialect)


def evaluate_sql(
    model: Model, query: str, source: Any, *, partitions: int | None = None
) -> dict[str, Any]:
    """The metrics of ``model`` on the rows of ``query`` (see :func:`evaluate`)."""
    src = connect(source)
    sql = scored_sql(model, query, src)
    manifest = model.manifest
    if model.task == "regression":
        baseline: dict[str, Any] = {"mean": manifest["label_scale"][0]}
    else:
        counts = manifest.get("class_counts") or {}
        baseline = {"class_counts": {c: counts.get(str(c), 0) for c in model.classes or []}}
    total = metrics_for(model.task, model.classes, baseline)
    options: dict[str, Any] = {"partitions": partitions} if partitions else {}
    for batch in PartitionFeeder(sql, src, **options):
        if not batch.num_rows:
            continue
        part = metrics_for(model.task, model.classes, baseline)
        part.update(model.label_indices(batch.column(model.label)), model.predict_batch(batch))
        total = total.merge(part)
    if not total.rows:
        raise InvalidArgumentError(f"the SELECT returns no rows to evaluate: {query}")
    result = total.result()
    result["sql"] = query
    return result

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
from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp

from dialects import get_dialect
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.io import Source, connect
from sqlfeed.ml.artifact import Model, load
from sqlfeed.ml.metrics import metrics_for
from sqlfeed.ml.split import Split, split_sql

__all__ = ["evaluate", "evaluate_sql", "scored_sql"]


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
        :meth:`sqlfeed.ml.metrics.Accumulator.result`, plus ``sql`` (what was scored).
    """
    opened = model if isinstance(model, Model) else load(model)
    src = connect(source)
    try:
        sql = query if query is not None else _validation_sql(opened, src)
        result = evaluate_sql(opened, sql, src, partitions=partitions)
    finally:
        if src is not source:  # opened here from a URL
            src.close()
    if progress:
        progress(f"scored {result['rows']:,} rows")
    return result


def _validation_sql(model: Model, src: Source) -> str:
    manifest = model.manifest
    if manifest["dialect"] == src.dialect.name:
        return str(manifest["validation_sql"])
    written = get_dialect(manifest["dialect"]).sqlglot_dialect
    query = sqlglot.transpile(manifest["query"], read=written, write=src.dialect.sqlglot_dialect)[0]
    return split_sql(query, src, Split.from_rule(manifest["split"]))[1]


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

"""The ``sqlfeed sql`` command: SQLFlow's ``SELECT ... TO TRAIN | TO EVALUATE | TO PREDICT``.

The statement is split and its clause parsed by :func:`sqlfeed.ml.sqlflow.parse_statement`;
the SELECT is validated as every query is; ``TO TRAIN`` runs :func:`sqlfeed.ml.train`,
``TO EVALUATE`` runs :func:`sqlfeed.ml.evaluate` and prints its metrics. Every mistake in
the statement is one stderr line (exit 2) before anything connects, trains or writes.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

from sqlfeed import ParsedQuery, connect, parse
from sqlfeed.cli.checks import check_output_folder
from sqlfeed.cli.common import read_sql, warn, write_json
from sqlfeed.cli.parsers.sqlflow import HELP as HELP  # the command's help line
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.ml.artifact import load
from sqlfeed.ml.evaluation import evaluate
from sqlfeed.ml.metrics import METRICS, format_metrics
from sqlfeed.ml.scoring import predict
from sqlfeed.ml.sqlflow import Statement, parse_statement
from sqlfeed.ml.trainer import train
from sqlfeed.sql import check_stable

_SQLFEED = Path(__file__).resolve().parents[1]
"""The package's folder: warnings raised from its files are sqlfeed's own."""

METRIC_ALIASES = {"auc": "roc_auc", "logloss": "log_loss"}
"""SQLFlow's ``validation.metrics`` names (case aside) -> the names of sqlfeed's metrics."""


def _cmd_sql(args: argparse.Namespace, out: TextIO) -> None:
    engine = dialect_for(args.db)
    statement = parse_statement(read_sql(args.statement), engine)
    parsed = parse(statement.select, engine)
    check_stable(parsed, orders=False)
    if statement.kind == "predict":
        _predict(args, statement, parsed, out)
    elif statement.kind == "train":
        _train(args, statement, parsed, out)
    else:
        _evaluate(args, statement, parsed, out)


def _predict(
    args: argparse.Namespace, statement: Statement, parsed: ParsedQuery, out: TextIO
) -> None:
    """``TO PREDICT table.col USING model``: the SELECT's rows with predictions, into ``table``.

    The SELECT's columns and the prediction in ``col`` go into ``table``, replaced
    atomically (SQLFlow drops and re-inserts it), exactly once. A selected column named
    ``col`` (case aside: the true label, often) is kept as it is and the prediction is
    named ``predicted_<col>``, as ``sqlfeed predict`` names it, with a warning: SQLFlow
    dropped that column, and its values with it.
    """
    target = str(statement.predict_column)
    table, _, column = target.rpartition(".")
    if not table:
        raise InvalidArgumentError(
            f"TO PREDICT {target}: name the result table and column, TO PREDICT table.col"
        )
    if not Path(str(statement.model_path), "manifest.json").is_file():
        raise InvalidArgumentError(
            f"USING {statement.model_path} is not a model folder (no manifest.json): give a "
            "folder sqlfeed train (or TO TRAIN) wrote"
        )
    with connect(args.db) as source:
        names = source.schema(parsed).names
        selected = [name for name in names if name.casefold() == column.casefold()]
        if selected:
            warn(
                f"TO PREDICT {target}: the SELECT has a column {selected[0]}, kept as it is; "
                f"the prediction is predicted_{column}"
            )
            column = f"predicted_{column}"
        report = predict(
            statement.select,
            source,
            str(statement.model_path),
            into=table,
            mode="replace",
            keep=names,
            name=column,
        )
    summary = report.to_dict() if report is not None else {}
    summary["column"] = column
    if args.format == "json":
        write_json(out, summary, indent=1)
        return
    out.write(f"{summary.get('rows', 0):,} predictions in {table}.{column}\n")


def _train(
    args: argparse.Namespace, statement: Statement, parsed: ParsedQuery, out: TextIO
) -> None:
    """``TO TRAIN``: the options and the model folder checked, then :func:`sqlfeed.ml.train`."""
    options = statement.train_options(overwrite=args.overwrite, checkpoint_dir=args.checkpoint_dir)
    path = str(statement.model_path)
    if Path(path).exists() and not args.overwrite:
        raise InvalidArgumentError(f"INTO {path} exists; pass --overwrite to replace it")
    check_output_folder(path, "INTO")
    if args.checkpoint_dir is not None:
        check_output_folder(args.checkpoint_dir, "--checkpoint-dir")
    with connect(args.db) as source:
        if statement.classifier and statement.task == "auto":
            _check_classifier_label(statement, source.schema(parsed))
        model = train(
            statement.select,
            source,
            label=str(statement.label),
            out=path,
            options=options,
            progress=_say,
        )
    summary = {
        "model": str(model.path),
        "task": model.task,
        "family": options.family,
        "label": model.label,
        "metrics": model.manifest.get("metrics"),
    }
    if args.format == "json":
        write_json(out, summary)
    else:
        out.write(f"trained a {options.family} {model.task} model of {model.label} into {path}\n")


def _check_classifier_label(statement: Statement, schema: Any) -> None:
    """A ``...Classifier`` on a floating-point label is refused before it trains."""
    wanted = str(statement.label).casefold()
    for column in schema:
        if column.name.casefold() == wanted:
            statement.check_label_type(column.type)
            return


def _evaluate(
    args: argparse.Namespace, statement: Statement, parsed: ParsedQuery, out: TextIO
) -> None:
    """``TO EVALUATE``: the model's label checked, then :func:`sqlfeed.ml.evaluate`."""
    if args.overwrite or args.checkpoint_dir is not None:
        flag = "--overwrite" if args.overwrite else "--checkpoint-dir"
        raise InvalidArgumentError(f"{flag} is for TO TRAIN; TO EVALUATE writes nothing")
    if statement.into is not None:
        raise InvalidArgumentError(
            f"TO EVALUATE ... INTO {statement.into}: sqlfeed sql prints the metrics and writes "
            "no table; drop INTO (--format json gives them as JSON)"
        )
    model = load(str(statement.model_path))
    if str(model.label).casefold() != str(statement.label).casefold():
        raise InvalidArgumentError(
            f"LABEL {statement.label}: the model {statement.model_path} was trained on "
            f"LABEL {model.label}"
        )
    keep = metric_names(statement.metrics, model.task) if statement.metrics else None
    with connect(args.db) as source, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = evaluate(model, statement.select, source, progress=_say)
    for caught_warning in caught:  # sqlfeed's own (rows the model was trained on): kept
        if Path(caught_warning.filename).resolve().is_relative_to(_SQLFEED):
            warn(" ".join(str(caught_warning.message).split()))
    if keep is not None:
        result = chosen_metrics(result, keep)
    text = format_metrics(result, args.format)
    out.write(text if text.endswith("\n") else f"{text}\n")


def metric_names(names: tuple[str, ...], task: str) -> list[str]:
    """The sqlfeed names of the metrics ``validation.metrics`` names, for a model of ``task``.

    Raises:
        InvalidArgumentError: a name that is no metric of the task.
    """
    known = list(METRICS.get(task, ()))
    chosen = []
    for name in names:
        key = METRIC_ALIASES.get(name.casefold(), name.casefold())
        if key not in known:
            raise InvalidArgumentError(
                f"validation.metrics names {name!r}, which a {task} model has not "
                f"(metrics: {', '.join(known)})"
            )
        chosen.append(key)
    return chosen


def chosen_metrics(result: dict[str, Any], keep: list[str]) -> dict[str, Any]:
    """``result`` without the metrics its task has that ``keep`` leaves out.

    For the model and the baseline; the rest (task, rows, classes, confusion matrix, ...) as
    it is.
    """
    drop = set(METRICS.get(str(result.get("task")), ())) - set(keep)
    chosen = {k: v for k, v in result.items() if k not in drop}
    baseline = result.get("baseline")
    if isinstance(baseline, dict):
        chosen["baseline"] = {k: v for k, v in baseline.items() if k not in drop}
    return chosen


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

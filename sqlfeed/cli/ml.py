"""The ``sqlfeed train``, ``evaluate`` and ``model show`` commands (:mod:`sqlfeed.ml`).

``train`` writes a model folder from a SELECT (:func:`sqlfeed.ml.train`): its progress
lines go to stderr, its summary (the folder, the task, the features, the validation
metrics beside the baseline's) to stdout. ``evaluate`` scores a model on its validation
split or on a given SELECT (:func:`sqlfeed.ml.evaluate`), or a table of predictions
(``--predictions``, :func:`sqlfeed.ml.evaluate_table`). ``model show`` prints what a
model folder's manifest says, without loading the model (no TensorFlow, no database).

Every bad input is one stderr line and exit code 2, before anything connects, trains or
writes: the options (checked by :class:`~sqlfeed.ml.TrainOptions`, worded as the flags),
an existing ``--out``, the SQL; then, on the database, what :func:`sqlfeed.ml.train`
refuses before its first query or its first progress line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from sqlfeed import connect, parse
from sqlfeed.cli.checks import check_output_folder
from sqlfeed.cli.common import (
    positive,
    read_sql,
    warn,
    write_json,
)
from sqlfeed.cli.parsers.ml import HELP as HELP  # the command's help line
from sqlfeed.dialects import InvalidArgumentError, dialect_for
from sqlfeed.ml.artifact import check_target, load, read_manifest
from sqlfeed.ml.evaluation import evaluate
from sqlfeed.ml.metrics import format_metrics
from sqlfeed.ml.options import TASKS, TrainOptions
from sqlfeed.ml.tablemetrics import evaluate_table, table_metrics_text
from sqlfeed.ml.trainer import train
from sqlfeed.sql import check_stable

__all__: list[str] = []


SHOWN_VALUES = 10
"""``model show``: the vocabulary values printed per feature (the rest are counted)."""

_SQLFEED = str(Path(__file__).resolve().parents[1])
"""The package's folder: warnings raised from its modules are sqlfeed's own."""


# -- train --------------------------------------------------------------------------------

_OPTION_FLAGS = (
    "task",
    "family",
    "epochs",
    "batch_size",
    "learning_rate",
    "dropout",
    "replicas",
    "seed",
    "key",
    "validation",
    "features",
    "skip",
    "top_k",
    "buckets",
    "trees",
    "max_depth",
    "partitions",
    "checkpoint_dir",
)
"""The ``train`` flags that are :class:`~sqlfeed.ml.TrainOptions` fields of the same name."""


def train_options(args: argparse.Namespace) -> TrainOptions:
    """The :class:`~sqlfeed.ml.TrainOptions` of ``train``'s flags (those given).

    Raises:
        InvalidArgumentError: a value the options refuse (worded as the flags by the caller).
    """
    fields: dict[str, Any] = {
        name: getattr(args, name) for name in _OPTION_FLAGS if getattr(args, name) is not None
    }
    if args.hidden_units is not None:
        fields["hidden_units"] = _hidden_units(args.hidden_units)
    if args.class_weight is not None:
        fields["class_weight"] = _class_weight(args.class_weight)
    return TrainOptions(**fields, overwrite=args.overwrite, report=not args.no_report)


def _hidden_units(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(unit) for unit in text.split(","))
    except ValueError:
        raise InvalidArgumentError(
            f"--hidden-units takes layer widths separated by commas (64,32), not {text!r}"
        ) from None


def _class_weight(text: str) -> str | dict[str, float]:
    if text == "balanced":
        return text
    try:
        weights = json.loads(text)
    except ValueError:
        weights = None
    if not isinstance(weights, dict) or not all(
        isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in weights.values()
    ):
        raise InvalidArgumentError(
            "--class-weight takes 'balanced' or a JSON object of label value to a weight > 0 "
            f"('{{\"yes\": 3}}'), not {text!r}"
        )
    return {str(k): float(v) for k, v in weights.items()}


def _cmd_train(args: argparse.Namespace, out: TextIO) -> None:
    sql = read_sql(args.sql)
    options = train_options(args)
    check_target(Path(args.out), args.overwrite)
    if args.checkpoint_dir is not None:
        check_output_folder(args.checkpoint_dir, "--checkpoint-dir")
    check_stable(parse(sql, dialect_for(args.db)), orders=False)
    with connect(args.db) as source, _sqlfeed_warnings():
        model = train(sql, source, label=args.label, out=args.out, options=options, progress=_say)
    summary = train_summary(model.manifest, str(model.path))
    if args.format == "json":
        write_json(out, summary, indent=1)
        return
    out.write(_summary_text(summary))


def train_summary(manifest: Mapping[str, Any], path: str) -> dict[str, Any]:
    """What ``train`` prints.

    The folder, the task, the features, the rows and the split, the validation metrics
    (beside the baseline's).
    """
    return {
        "model": path,
        "task": manifest["task"],
        "family": manifest["family"],
        "label": manifest["label"],
        "classes": manifest.get("classes"),
        "features": [f["name"] for f in manifest["features"]],
        "rows": manifest.get("rows"),
        "split": manifest.get("split"),
        "seconds": manifest.get("seconds"),
        "metrics": (manifest.get("metrics") or {}).get("validation"),
    }


def _summary_text(summary: Mapping[str, Any]) -> str:
    rows = summary.get("rows") or {}
    lines = [
        f"model: {summary['model']}",
        f"task: {summary['task']} ({summary['family']}), label {summary['label']!r}"
        + _classes_text(summary.get("classes")),
        f"features ({len(summary['features'])}): {', '.join(summary['features'])}",
        f"rows: {rows.get('training', 0):,} training, {rows.get('validation', 0):,} "
        f"validation (split by {_split_text(summary.get('split'))})",
    ]
    metrics = summary.get("metrics")
    if metrics:
        lines += ["", "validation metrics:", format_metrics(metrics, "text")]
    return "\n".join(lines) + "\n"


def _classes_text(classes: Sequence[Any] | None) -> str:
    if not classes:
        return ""
    return f", classes {_values_text(classes)}"


def _split_text(rule: Mapping[str, Any] | None) -> str:
    if not rule:
        return "no split rule"
    key = rule.get("key")
    what = f"a hash of {key!r}" if key else "a hash of the whole row"
    fraction = rule.get("fraction")
    share = f"{fraction:.0%} validation" if isinstance(fraction, (int, float)) else "?"
    return f"{what}, {share}"


@contextlib.contextmanager
def _sqlfeed_warnings() -> Iterator[None]:
    """Inside: sqlfeed's own warnings are kept for the end, the libraries' are dropped.

    sqlfeed's own warnings (a constant column left out...) are kept for the end of a
    successful command (:func:`~sqlfeed.cli.common.warn`); the libraries' (Keras's,
    TensorFlow's) are dropped: they are about sqlfeed's use of them, not the user's.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    seen: set[str] = set()
    for warning in caught:
        message = " ".join(str(warning.message).split())
        if str(Path(warning.filename).resolve()).startswith(_SQLFEED) and message not in seen:
            seen.add(message)
            warn(message)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# -- evaluate -----------------------------------------------------------------------------


_TABLE_FLAGS = ("label", "predicted", "task", "probability")
"""``evaluate``'s flags of the ``--predictions`` form."""


def _cmd_evaluate(args: argparse.Namespace, out: TextIO) -> None:
    if args.predictions is not None:
        _evaluate_predictions(args, out)
        return
    if args.model is None:
        raise InvalidArgumentError(
            "evaluate needs --model DIR (a model on a SELECT) or --predictions TABLE"
        )
    given = [f"--{name}" for name in _TABLE_FLAGS if getattr(args, name) is not None]
    if given:
        raise InvalidArgumentError(f"{given[0]} goes with --predictions TABLE, not --model")
    sql = None if args.sql is None else read_sql(args.sql)
    if args.partitions is not None:
        positive(args.partitions, "--partitions")
    if sql is not None:
        check_stable(parse(sql, dialect_for(args.db)), orders=False)
    model = load(args.model)
    with connect(args.db) as source, _sqlfeed_warnings():
        result = evaluate(model, sql, source, partitions=args.partitions)
    out.write(format_metrics(result, args.format) + "\n")


def _evaluate_predictions(args: argparse.Namespace, out: TextIO) -> None:
    """``evaluate --predictions TABLE``: the metrics of a table, as aggregates in its engine."""
    mixed = [
        flag
        for flag, value in (("--model", args.model), ("--partitions", args.partitions))
        if value is not None
    ]
    if mixed or args.sql is not None:
        what = mixed[0] if mixed else "a SQL argument"
        raise InvalidArgumentError(
            f"--predictions TABLE scores a table: drop {what} (--model DIR scores a model)"
        )
    for name in ("label", "predicted", "task"):
        if getattr(args, name) is None:
            raise InvalidArgumentError(f"--predictions needs --{name}")
    if args.task not in TASKS:
        raise InvalidArgumentError(
            f"--task {args.task!r} is not a task: use binary, multiclass or regression"
        )
    with connect(args.db) as source:
        result = evaluate_table(
            source,
            args.predictions,
            label=args.label,
            predicted=args.predicted,
            task=args.task,
            probability=args.probability,
        )
    text = format_metrics(result, "json") if args.format == "json" else table_metrics_text(result)
    out.write(text + "\n")


# -- model show ---------------------------------------------------------------------------


def _cmd_model_show(args: argparse.Namespace, out: TextIO) -> None:
    manifest = read_manifest(args.folder)
    if args.format == "json":
        write_json(out, {"path": str(args.folder), **manifest}, indent=1)
        return
    out.write(model_text(manifest, str(args.folder)))


def model_text(manifest: Mapping[str, Any], path: str) -> str:
    """``model show``'s text: what a model folder's manifest says, for a reader."""
    rows = manifest.get("rows") or {}
    head = [
        ("model", path),
        ("format", f"{manifest.get('format')} version {manifest.get('format_version')}"),
        ("task", f"{manifest.get('task')} ({manifest.get('family')})"),
        ("label", f"{manifest.get('label')} ({manifest.get('label_type')})"),
    ]
    if manifest.get("classes"):
        head.append(("classes", _values_text(manifest["classes"])))
    if manifest.get("label_scale"):
        mean, std = manifest["label_scale"]
        head.append(("label scale", f"mean {_number(mean)}, std {_number(std)}"))
    head += [
        (
            "rows",
            f"{rows.get('training', 0):,} training, {rows.get('validation', 0):,} validation",
        ),
        ("split", _split_text(manifest.get("split")) + _buckets(manifest.get("split"))),
        ("seed", str(manifest.get("seed"))),
        ("created", f"{manifest.get('created')} ({manifest.get('seconds')} s)"),
        ("dialect", str(manifest.get("dialect"))),
        ("versions", ", ".join(f"{k} {v}" for k, v in (manifest.get("versions") or {}).items())),
    ]
    width = max(len(name) for name, _ in head)
    lines = [f"{name.ljust(width)}  {value}" for name, value in head]
    features = manifest.get("features") or []
    lines += ["", f"features ({len(features)}):", *_features_text(features)]
    metrics = (manifest.get("metrics") or {}).get("validation")
    if metrics:
        lines += ["", "validation metrics:", *_indent(format_metrics(metrics, "text"))]
    for name in ("query", "training_sql", "validation_sql"):
        if manifest.get(name):
            lines += ["", f"{name.replace('_', ' ')}:", *_indent(str(manifest[name]))]
    for note in manifest.get("notes") or ():
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def _buckets(rule: Mapping[str, Any] | None) -> str:
    extra = {k: v for k, v in (rule or {}).items() if k not in ("key", "fraction")}
    return f" ({', '.join(f'{k} {v}' for k, v in extra.items())})" if extra else ""


def _features_text(features: Sequence[Mapping[str, Any]]) -> list[str]:
    if not features:
        return []
    names = max(len(str(f.get("name"))) for f in features)
    types = max(len(str(f.get("arrow_type"))) for f in features)
    families = max(len(str(f.get("family"))) for f in features)
    return [
        f"  {str(f.get('name')).ljust(names)}  {str(f.get('arrow_type')).ljust(types)}  "
        f"{str(f.get('family')).ljust(families)}  {transform_text(f)}".rstrip()
        for f in features
    ]


def transform_text(feature: Mapping[str, Any]) -> str:
    """A feature's transform in a line.

    A vocabulary truncated to :data:`SHOWN_VALUES` values, ``... (N more)``; the scaling,
    the NULL fill and mask of a number.
    """
    transform = feature.get("transform") or {}
    if "vocabulary" in transform:
        vocabulary = list(transform["vocabulary"])
        return f"vocabulary of {len(vocabulary)} ({transform.get('dtype')}): " + _values_text(
            vocabulary
        )
    parts = []
    if "mean" in transform:
        parts.append(f"mean {_number(transform['mean'])}, std {_number(transform.get('std'))}")
    if "fill" in transform:
        parts.append(
            f"NULL -> {_number(transform['fill'])}" + (" + mask" if transform.get("mask") else "")
        )
    if "unit" in transform:
        parts.append(f"unit {transform['unit']}")
    if transform.get("boundaries"):
        parts.append(f"{len(transform['boundaries']) + 1} buckets")
    shown = {"mean", "std", "fill", "mask", "unit", "boundaries"}
    parts += [f"{k} {v}" for k, v in transform.items() if k not in shown]
    return "; ".join(parts)


def _values_text(values: Sequence[Any]) -> str:
    shown = ", ".join(repr(v) for v in values[:SHOWN_VALUES])
    more = len(values) - SHOWN_VALUES
    return f"{shown}, ... ({more} more)" if more > 0 else shown


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _indent(text: str) -> list[str]:
    return [f"  {line}" if line else "" for line in text.splitlines()]

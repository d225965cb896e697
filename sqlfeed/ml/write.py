"""Step 6 of :func:`sqlfeed.ml.train`: the model folder, scored as written, renamed in.

The folder is written aside (:func:`sqlfeed.ml.artifact.write_folder`), opened again with
:func:`sqlfeed.ml.load` and scored on the validation split, so the metrics in the manifest
are those of the saved model (what ``sqlfeed evaluate`` gives), not of the one in memory.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlfeed.errors import MissingDependencyError
from sqlfeed.ml.artifact import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    Model,
    load,
    versions,
    write_folder,
)
from sqlfeed.ml.data import TrainingData
from sqlfeed.stats.report import html_report

if TYPE_CHECKING:
    from sqlfeed.ml.training import Fitted

__all__ = ["write_model"]


def write_model(
    target: Path,
    data: TrainingData,
    fitted: Fitted,
    started: float,
    evaluate_sql: Callable[..., dict[str, Any]],
    say: Callable[[str], None],
) -> Model:
    """Write the folder ``target`` (see the module docstring); the model, opened."""
    stats = data.stats
    assert stats is not None

    def write(folder: Path) -> None:
        files: dict[str, str] = {"stats": "stats.json"}
        if fitted.family == "gbdt":
            extras = fitted.model.save(folder)
            files["model"] = extras.pop("file")
        else:
            fitted.model.save(folder / "model.keras")
            files["model"], extras = "model.keras", {}
        stats.save(str(folder / "stats.json"))
        try:
            if not data.options.report:
                raise _NoReport
            (folder / "stats.html").write_text(
                html_report(stats, title=f"Training split of {target.name}"),
                encoding="utf-8",
            )
            files["report"] = "stats.html"
        except MissingDependencyError as err:
            data.notes.append(f"no stats.html: {err}")
        except _NoReport:
            pass
        manifest = manifest_base(data, started)
        manifest["files"] = files
        manifest["training"] = {
            "epochs": fitted.epochs,
            "seconds": round(fitted.seconds, 3),
            "rows_per_second": round(fitted.rows_per_second, 1),
            "history": {k: v[-1] for k, v in fitted.history.items() if v},
            "early_stopping": fitted.early_stopping,
            **extras,
        }
        _write_json(folder / MANIFEST, manifest)
        metrics = evaluate_sql(load(folder), data.validation_sql, data.source)
        manifest["metrics"] = {"validation": metrics}
        manifest["seconds"] = round(time.time() - started, 3)
        _write_json(folder / MANIFEST, manifest)
        say(f"validation: {_headline(metrics)}")

    write_folder(target, data.options.overwrite, write)
    say(f"wrote {target}")
    return load(target)


class _NoReport(Exception):
    """``report=False``: no stats.html."""


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _headline(metrics: dict[str, Any]) -> str:
    keys = ("accuracy", "roc_auc", "f1_macro", "r2", "rmse", "mae")
    shown = [f"{k} {metrics[k]:.4f}" for k in keys if isinstance(metrics.get(k), (int, float))]
    base = metrics.get("baseline") or {}
    first = next((k for k in keys if isinstance(base.get(k), (int, float))), None)
    text = ", ".join(shown)
    if first:
        text += f" (baseline {first} {base[first]:.4f})"
    return text + f" on {metrics.get('rows', 0):,} rows"


def fingerprint(text: str) -> str:
    """A short stable digest (the manifest's statistics fingerprint)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


MANIFEST_HEAD = {"format": FORMAT, "format_version": FORMAT_VERSION}
"""The first keys of every manifest."""


def manifest_base(data: TrainingData, started: float) -> dict[str, Any]:
    """The manifest's fields known before the model is saved."""
    assert data.stats is not None
    return {
        **MANIFEST_HEAD,
        "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - started, 3),
        "task": data.task,
        "family": data.options.family,
        "label": data.label,
        "label_type": str(data.schema.field(data.label).type),
        "classes": data.classes,
        "class_counts": data.class_counts or None,
        "label_scale": list(data.label_scale) if data.task == "regression" else None,
        "features": [f.to_dict() for f in data.features],
        "dialect": data.source.dialect.name,
        "query": data.query,
        "training_sql": data.training_sql,
        "validation_sql": data.validation_sql,
        "split": data.split.rule(),
        "rows": data.rows,
        "seed": data.options.seed,
        "options": data.options.to_dict(),
        "stats_fingerprint": fingerprint(data.stats.to_json()),
        "plan_fingerprint": data.plan.fingerprint if data.plan else None,
        "notes": data.notes,
    }

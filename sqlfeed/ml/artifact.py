"""A trained model's folder: written whole or not at all, opened by :func:`load`.

The folder holds the model (``model.keras``, its preprocessing layers inside, or XGBoost's
``model.json``), ``manifest.json`` (format version, versions, task, label and classes,
the features with their Arrow types and transforms, the query, both split SQL texts and
the split rule, plan and statistics fingerprints, rows, seed, options, metrics, time),
``sqlfeed.stats.json`` (the training split's statistics) and ``sqlfeed.stats.html`` (their report).

:func:`write_folder` writes it beside the target, then renames it into place: a training
killed at any point leaves no half model (only a hidden ``.<name>.partial-*`` folder,
removed by the next training of that target).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlfeed.dialects.optional import require
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.feed.converter import Converter
from sqlfeed.feed.tensors import MASK_SUFFIX, column_mappings
from sqlfeed.ml.features import Feature, type_family
from sqlfeed.ml.gbdt import GbdtModel, xgboost_module
from sqlfeed.ml.labels import class_indices, null_label_message
from sqlfeed.ml.layers import layer_classes
from sqlfeed.ml.options import FAMILIES

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Model",
    "check_manifest",
    "check_target",
    "load",
    "model_file",
    "read_manifest",
    "write_folder",
]

FORMAT = "sqlfeed.ml.model"
FORMAT_VERSION = 1
"""The manifest's format version: a folder of another version is refused by :func:`load`."""
MANIFEST = "manifest.json"
MODEL_TASKS = ("binary", "multiclass", "regression")
"""A trained model's task."""
_FEATURE_FIELDS = {"name": str, "arrow_type": str, "family": str, "transform": dict}
_COMPATIBLE = {
    "integer": "number",
    "float": "number",
    "decimal": "number",
    "bool": "number",
}
"""Type families a feature may change between (a number stays a number: SQLite and MariaDB
have no boolean, PostgreSQL's numeric is a decimal)."""


class Model:
    """A model folder, opened: its manifest, and predictions from record batches."""

    def __init__(self, path: Path, manifest: dict[str, Any], predictor: Any) -> None:
        self.path = path
        self.manifest = manifest
        self.features = [Feature.from_dict(f) for f in manifest["features"]]
        self._predictor = predictor

    def __repr__(self) -> str:
        return (
            f"Model({str(self.path)!r}, {self.family}, {self.task}, label={self.label!r}, "
            f"{len(self.features)} features)"
        )

    @property
    def task(self) -> str:
        return str(self.manifest["task"])

    @property
    def family(self) -> str:
        return str(self.manifest["family"])

    @property
    def label(self) -> str:
        return str(self.manifest["label"])

    @property
    def classes(self) -> list[Any] | None:
        classes = self.manifest.get("classes")
        return None if classes is None else list(classes)

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    def check_schema(self, schema: pa.Schema) -> None:
        """Every feature must be a column of ``schema`` of a compatible type.

        Widening (int32 to int64, float to double, an integer where a double was) is fine;
        extra columns are ignored.

        Raises:
            InvalidArgumentError: a missing feature or a type family change, naming it.
        """
        names = list(schema.names)
        for feature in self.features:
            if feature.name not in names:
                raise InvalidArgumentError(
                    f"the SELECT lacks the model's feature column {feature.name!r} "
                    f"({feature.arrow_type}): it must return {', '.join(self.feature_names)}"
                )
            was = type_family(feature.arrow_type)
            now = type_family(schema.field(feature.name).type)
            same = was == now or (
                feature.family != "categorical"
                and _COMPATIBLE.get(str(was)) == _COMPATIBLE.get(str(now), "?")
            )
            if not same:
                raise InvalidArgumentError(
                    f"column {feature.name!r} is {schema.field(feature.name).type} here but "
                    f"the model was trained on {feature.arrow_type} ({was} values): cast it "
                    f"in the SELECT (CAST({feature.name} AS ...))"
                )

    def inputs(self, batch: pa.RecordBatch | pa.Table) -> dict[str, np.ndarray]:
        """The model's inputs from a batch.

        Each feature as the training fed it, and its NULL mask.
        """
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        names = self.feature_names
        assert batch is not None
        mappings = column_mappings(
            batch.schema, features=names, masks=True, float_dtype="float64", time_unit="us"
        )
        arrays = Converter(mappings, "us").arrays(batch)
        out: dict[str, np.ndarray] = {}
        for i, feature in enumerate(self.features):
            values, mask = arrays[2 * i], arrays[2 * i + 1]
            if feature.family != "categorical":
                values = values.astype(np.float64)
            elif feature.transform["dtype"] == "int64":
                values = values.astype(np.int64)
            out[feature.name] = values
            out[feature.name + MASK_SUFFIX] = mask.astype(bool)
        return out

    def predict_batch(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """Predictions for a batch's rows.

        Binary P(the second class) ``(n,)``, multiclass probabilities ``(n, classes)``,
        regression values ``(n,)``.
        """
        if batch.num_rows == 0:
            width = len(self.classes or []) if self.task == "multiclass" else 0
            return np.zeros((0, width) if width else (0,))
        result: np.ndarray = self._predictor(self, batch)
        return result

    def label_indices(self, column: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The class index of each label value, or the values as floats.

        Classification labels are matched by value on every engine
        (:func:`sqlfeed.ml.labels.class_indices`).
        """
        if self.task != "regression":
            return class_indices(column, self.classes or [], self.label)
        if column.null_count:
            raise InvalidArgumentError(null_label_message(self.label, column.null_count))
        return np.asarray(pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False))


def check_target(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out`` (unless ``overwrite``) before anything runs."""
    if not out.exists():  # an overwrite killed between its renames: the old model back
        recover(out)
    if out.exists() and not overwrite:
        raise InvalidArgumentError(
            f"{out} exists already: pass --overwrite (overwrite=True) to replace it, or "
            "another --out"
        )
    if out.exists() and not (out / MANIFEST).is_file():
        raise InvalidArgumentError(
            f"{out} exists and is not a sqlfeed model folder: it is not replaced; choose "
            "another --out"
        )
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"the folder {out.parent} does not exist: create it first")


def write_folder(out: Path, overwrite: bool, write: Callable[[Path], None]) -> None:
    """Run ``write(folder)`` on a new folder beside ``out``, then rename it into place.

    Folders of earlier, killed trainings of the same target are removed first. With
    ``overwrite`` the old model is moved aside (``.<name>.old-*``), the new one renamed in,
    then the old one removed: ``out`` is a whole model at every moment but between the two
    renames, and a training killed there has its old model put back by
    :func:`recover` (run by the next training of ``out`` and by :func:`load`).
    """
    recover(out)
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    partial = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    partial.mkdir()
    try:
        write(partial)
        _fsync_tree(partial)
        if out.exists():
            check_target(out, overwrite)
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
            os.replace(partial, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def recover(out: Path) -> None:
    """Put back the old model of an ``overwrite`` killed between its two renames.

    Then ``out`` is missing and its ``.<name>.old-*`` is there; with ``out`` whole, remove
    stale old ones.
    """
    olds = sorted(out.parent.glob(f".{out.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if not out.exists() and olds:
        os.replace(olds.pop(), out)
    for old in olds:
        shutil.rmtree(old, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())


def load(path: str | os.PathLike[str]) -> Model:
    """Open a model folder written by :func:`sqlfeed.ml.train`.

    The folder's files are checked before TensorFlow or XGBoost is imported: a folder
    without its model file is refused at once.

    Raises:
        InvalidArgumentError: not a model folder, one of another format version, a
            manifest that is not a model's, a missing or unreadable model file.
    """
    folder = Path(path)
    manifest = read_manifest(folder)
    return Model(folder, manifest, _predictor(folder, manifest))


def model_file(folder: Path, manifest: dict[str, Any]) -> Path:
    """The model file the manifest names, checked to be in ``folder``.

    Raises:
        InvalidArgumentError: the folder lacks it.
    """
    name = manifest["files"].get("model")
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise InvalidArgumentError(_not_whole(folder, f"its {MANIFEST} names no model file"))
    path = folder / name
    if not path.is_file():
        raise InvalidArgumentError(_not_whole(folder, f"it has no {name}"))
    return path


def _not_whole(folder: Path, what: str) -> str:
    return (
        f"{folder} is not a whole sqlfeed model folder ({what}): it was changed or copied "
        "in part; train the model again, or give the whole folder sqlfeed train wrote"
    )


def check_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """The manifest's fields a model is opened by: present, of their types.

    Raises:
        InvalidArgumentError: a field missing or of another type, naming it.
    """
    fields: dict[str, tuple[type, ...]] = {
        "family": (str,),
        "task": (str,),
        "label": (str,),
        "features": (list,),
        "files": (dict,),
    }
    for name, types in fields.items():
        if not isinstance(manifest.get(name), types):
            raise InvalidArgumentError(_not_whole(folder, f"its {MANIFEST} has no valid {name!r}"))
    if manifest["family"] not in FAMILIES or manifest["task"] not in MODEL_TASKS:
        raise InvalidArgumentError(
            _not_whole(
                folder,
                f"its {MANIFEST} names family {manifest['family']!r}, task {manifest['task']!r}",
            )
        )
    classes = manifest.get("classes")
    if classes is not None and not isinstance(classes, list):
        raise InvalidArgumentError(_not_whole(folder, f"its {MANIFEST} has no valid 'classes'"))
    for i, feature in enumerate(manifest["features"]):
        if not isinstance(feature, dict) or not all(
            isinstance(feature.get(k), t) for k, t in _FEATURE_FIELDS.items()
        ):
            raise InvalidArgumentError(
                _not_whole(folder, f"feature {i} of its {MANIFEST} is not a feature")
            )


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model folder's manifest, its format version checked.

    The model itself is not read (no TensorFlow or XGBoost import: ``sqlfeed model show``).

    Raises:
        InvalidArgumentError: not a model folder, or one of another format version.
    """
    folder = Path(path)
    if not folder.exists():  # an overwrite killed between its renames: the old model back
        recover(folder)
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "a file, not a folder"
        raise InvalidArgumentError(
            f"{folder} is not a sqlfeed model folder ({what}): give the --out folder of "
            "sqlfeed train"
        )
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise InvalidArgumentError(
            f"{folder} is not a sqlfeed model folder (no {MANIFEST}): give the --out folder "
            "of sqlfeed train"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InvalidArgumentError(f"{manifest_path} is not readable JSON: {err}") from None
    if not isinstance(manifest, dict):
        raise InvalidArgumentError(f"{manifest_path} is not a model manifest (a JSON object)")
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise InvalidArgumentError(
            f"{folder} is a model of format {manifest.get('format')!r} version "
            f"{manifest.get('format_version')!r}; this sqlfeed reads {FORMAT!r} version "
            f"{FORMAT_VERSION}: train it again with this version"
        )
    check_manifest(folder, manifest)
    return manifest


def _predictor(folder: Path, manifest: dict[str, Any]) -> Callable[[Model, Any], np.ndarray]:
    path = model_file(folder, manifest)
    if manifest["family"] == "gbdt":
        xgboost_module()  # missing: its own error, not an unreadable file
        try:
            booster = GbdtModel.load(
                folder,
                [Feature.from_dict(f) for f in manifest["features"]],
                manifest["task"],
                manifest.get("classes"),
            )
        except InvalidArgumentError:
            raise
        except Exception as err:  # XGBoost's error of a cut or changed file
            raise InvalidArgumentError(_unreadable(path, err)) from None
        return lambda _model, batch: np.asarray(booster.predict_batch(batch))
    keras = require("keras", "loading a sqlfeed.ml model")
    layer_classes()  # registered before the model is read
    try:
        network = keras.models.load_model(path, compile=False)
    except Exception as err:  # Keras's error of a cut or changed file
        raise InvalidArgumentError(_unreadable(path, err)) from None

    def predict(model: Model, batch: Any) -> np.ndarray:
        out = np.asarray(network(model.inputs(batch), training=False), dtype=np.float64)
        return out.reshape(-1) if model.task != "multiclass" else out

    return predict


def _unreadable(path: Path, err: Exception) -> str:
    reason = " ".join(str(err).split())[:200] or type(err).__name__
    return (
        f"{path} is not a readable model ({reason}): the folder was changed or copied in "
        "part; train the model again, or give the whole folder sqlfeed train wrote"
    )


def versions(extra: Sequence[str] = ()) -> dict[str, str]:
    """The versions of the packages a model depends on (those installed)."""
    found = {}
    for name in ("sqlfeed", "keras", "tensorflow", "xgboost", "pyarrow", "sqlglot", *extra):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found

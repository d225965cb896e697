"""A model folder that is not whole is one line, before TensorFlow or XGBoost is imported.

Every command that opens a model folder (``predict``, ``evaluate``, ``sql ... TO PREDICT``
and ``TO EVALUATE``, ``model show`` for the manifest) and the Python API (``load``,
``predict``, ``evaluate``) are given: no folder, a file, a folder without its manifest,
manifests that are not a model's (not JSON, not an object, a field missing or of another
type, a feature that is not one), a folder without its model file (a Keras and a gbdt
model's), and model files cut short. Each is exit code 2 with one ``sqlfeed: error:`` line
(or an :class:`InvalidArgumentError`); what the folder's files tell is refused before the
framework is imported (checked in a fresh interpreter).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

import sqlfeed.ml
from sqlfeed.errors import InvalidArgumentError
from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]

MANIFEST: dict[str, Any] = {
    "format": "sqlfeed.ml.model",
    "format_version": 1,
    "task": "binary",
    "family": "dnn",
    "label": "y",
    "label_type": "int64",
    "classes": [0, 1],
    "features": [
        {
            "name": "f1",
            "arrow_type": "double",
            "family": "numeric",
            "transform": {"mean": 0.0, "std": 1.0, "fill": 0.0, "mask": True},
        }
    ],
    "query": "SELECT id, f1, y FROM t",
    "validation_sql": "SELECT id, f1, y FROM t WHERE id % 5 = 0",
    "files": {"stats": "stats.json", "model": "model.keras"},
}
"""A Keras model's manifest (the fields a model is opened by)."""


def _manifest(**changes: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(MANIFEST)
    for name, value in changes.items():
        if value is None:
            manifest.pop(name)
        else:
            manifest[name] = value
    return manifest


def _write(folder: Path, manifest: Any, files: dict[str, bytes] | None = None) -> Path:
    folder.mkdir()
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (folder / "manifest.json").write_text(text)
    for name, content in (files or {}).items():
        (folder / name).write_bytes(content)
    return folder


FOLDERS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "no folder": (lambda tmp: tmp / "missing", "no such folder"),
    "a file": (lambda tmp: _file(tmp / "m"), "a file, not a folder"),
    "no manifest": (lambda tmp: _dir(tmp / "m"), "no manifest.json"),
    "not JSON": (lambda tmp: _write(tmp / "m", '{"format": "sqlfeed.ml'), "not readable JSON"),
    "not an object": (lambda tmp: _write(tmp / "m", [1, 2]), "not a model manifest"),
    "another format": (
        lambda tmp: _write(tmp / "m", _manifest(format_version=7)),
        "version 7",
    ),
    "no features": (
        lambda tmp: _write(tmp / "m", _manifest(features=None)),
        "has no valid 'features'",
    ),
    "no files": (lambda tmp: _write(tmp / "m", _manifest(files=None)), "no valid 'files'"),
    "a bad feature": (
        lambda tmp: _write(tmp / "m", _manifest(features=[{"name": "f1"}])),
        "feature 0 of its manifest.json is not a feature",
    ),
    "an unknown family": (
        lambda tmp: _write(tmp / "m", _manifest(family="forest")),
        "family 'forest'",
    ),
    "labels as text": (
        lambda tmp: _write(tmp / "m", _manifest(classes="0,1")),
        "no valid 'classes'",
    ),
    "no model file named": (
        lambda tmp: _write(tmp / "m", _manifest(files={"stats": "stats.json"})),
        "names no model file",
    ),
    "a model file outside": (
        lambda tmp: _write(tmp / "m", _manifest(files={"model": "../model.keras"})),
        "names no model file",
    ),
    "no model.keras": (lambda tmp: _write(tmp / "m", _manifest()), "it has no model.keras"),
    "no model.json": (
        lambda tmp: _write(tmp / "m", _manifest(family="gbdt", files={"model": "model.json"})),
        "it has no model.json",
    ),
}
"""Each folder that is not a whole model, and what its one line says."""

NO_MANIFEST = ("no folder", "a file", "no manifest")


def _file(path: Path) -> Path:
    path.write_text("not a folder")
    return path


def _dir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "d.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT range AS id, range / 7 AS f1, range % 2 AS y FROM range(50)"
        )
    return f"duckdb:///{path}"


def _commands(db: str, folder: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "predict": [
            "predict",
            "--db",
            db,
            "--model",
            str(folder),
            "--out",
            str(tmp / "predictions"),
            "SELECT id, f1 FROM t",
        ],
        "evaluate": ["evaluate", "--db", db, "--model", str(folder)],
        "TO PREDICT": [
            "sql",
            "--db",
            db,
            f"SELECT id, f1 FROM t TO PREDICT p.y USING '{folder}'",
        ],
        "TO EVALUATE": [
            "sql",
            "--db",
            db,
            f"SELECT id, f1, y FROM t TO EVALUATE '{folder}' LABEL y",
        ],
    }


def _one_line(err: str, expected: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sqlfeed: error: "), err
    assert expected in lines[0], err
    assert "internal error" not in err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", list(FOLDERS))
def test_every_command_refuses_a_folder_that_is_not_a_whole_model_in_one_line(
    case: str, tmp_path: Path, db: str
) -> None:
    make, expected = FOLDERS[case]
    folder = make(tmp_path)
    for command, args in _commands(db, folder, tmp_path).items():
        run = run_cli(args)
        assert run.code == 2, (command, run.err)
        # predict and sql check the folder for a manifest themselves, before anything
        _one_line(run.err, "model folder" if case in NO_MANIFEST else expected)
    assert not (tmp_path / "predictions").exists()
    with pytest.raises(InvalidArgumentError, match=re.escape(expected)):
        sqlfeed.ml.load(folder)
    with pytest.raises(InvalidArgumentError):
        sqlfeed.ml.evaluate(folder, source=db)
    with pytest.raises(InvalidArgumentError):
        sqlfeed.ml.predict("SELECT id, f1 FROM t", db, folder, out=str(tmp_path / "p2"))


MANIFEST_CASES = [c for c in FOLDERS if c not in ("no model.keras", "no model.json")]


@pytest.mark.parametrize("case", [c for c in MANIFEST_CASES if "model file" not in c])
def test_model_show_refuses_a_manifest_that_is_not_a_models(case: str, tmp_path: Path) -> None:
    make, expected = FOLDERS[case]
    run = run_cli(["model", "show", str(make(tmp_path))])
    assert run.code == 2
    _one_line(run.err, expected)


def test_model_show_reads_a_manifest_without_its_model_file(tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", _manifest())
    run = run_cli(["model", "show", str(folder)])
    assert run.code == 0, run.err
    assert "f1" in run.out


CHILD = """
import sys
from sqlfeed.cli.main import main
code = main(sys.argv[1:])
loaded = sorted(m for m in ("tensorflow", "keras", "xgboost") if m in sys.modules)
print("LOADED", ",".join(loaded), "CODE", code)
"""


@pytest.mark.slow  # a fresh interpreter per command
@pytest.mark.parametrize("case", ["no model.keras", "no model.json", "no features"])
def test_the_folder_is_checked_before_the_framework_is_imported(
    case: str, tmp_path: Path, db: str
) -> None:
    folder = FOLDERS[case][0](tmp_path)
    for command, args in _commands(db, folder, tmp_path).items():
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.stdout.split()[-3:] == ["LOADED", "CODE", "2"], (command, done.stdout)
        _one_line(done.stderr, FOLDERS[case][1])


@pytest.mark.slow  # trains a gbdt model and opens Keras
def test_a_model_file_cut_short_is_one_line(tmp_path: Path, db: str) -> None:
    pytest.importorskip("xgboost")
    pytest.importorskip("keras")
    trained = tmp_path / "gbdt"
    sqlfeed.ml.train(
        "SELECT id, f1, y FROM t",
        db,
        label="y",
        out=trained,
        family="gbdt",
        trees=3,
        key="id",
        report=False,
    )
    (trained / "model.json").write_text((trained / "model.json").read_text()[:100])
    keras_folder = _write(tmp_path / "keras", _manifest(), {"model.keras": b"PK\x03\x04cut"})
    for folder, name in ((trained, "model.json"), (keras_folder, "model.keras")):
        for command, args in _commands(db, folder, tmp_path).items():
            run = run_cli(args)
            assert run.code == 2, (command, run.err)
            _one_line(run.err, f"{folder / name} is not a readable model")

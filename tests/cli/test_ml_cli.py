"""``sqlfeed train``, ``evaluate`` and ``model show`` on a small DuckDB file.

One model is trained for the module (linear, 3 epochs, no HTML report): what ``train``
prints, what ``evaluate`` scores (its JSON equals the manifest's validation metrics),
what ``model show`` prints, the SQL from stdin and ``--overwrite`` replacing a model.
Training imports TensorFlow and takes seconds: the tests are slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow

SELECT = "SELECT id, a, c, city, y FROM t"
CITIES = 15
"""Distinct values of ``city``: more than ``model show`` prints of a vocabulary."""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """400 rows: a number, a text with NULLs, a text of 15 values, a yes/no label."""
    path = tmp_path_factory.mktemp("ml_cli") / "t.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE TABLE t AS SELECT i AS id, (i % 17) / 17.0 + (i % 5) * 0.01 AS a, "
            "CASE WHEN i % 11 = 0 THEN NULL WHEN i % 3 = 0 THEN 'red' "
            "WHEN i % 3 = 1 THEN 'green' ELSE 'blue' END AS c, "
            f"'city' || (i % {CITIES}) AS city, "
            "CASE WHEN i % 17 > 8 THEN 'yes' ELSE 'no' END AS y FROM range(400) r(i)"
        )
    return f"duckdb:///{path}"


def _train(db: str, out: Path, *flags: str, sql: str = SELECT, stdin: str | None = None) -> Any:
    args = ["train", "--db", db, "--label", "y", "--key", "id", "--out", str(out)]
    args += ["--family", "linear", "--epochs", "3", "--no-report", *flags, sql]
    return run_cli(args, stdin=stdin)


@pytest.fixture(scope="module")
def trained(db: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The model folder and ``train --format json``'s summary."""
    out = tmp_path_factory.mktemp("models") / "m"
    run = _train(db, out, "--format", "json")
    assert run.code == 0, run.err
    return out, json.loads(run.out)


def _manifest(folder: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return manifest


def test_train_writes_one_folder_and_prints_its_summary(
    trained: tuple[Path, dict[str, Any]],
) -> None:
    folder, summary = trained
    manifest = _manifest(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "model.keras",
        "stats.json",
    ]
    assert [p.name for p in folder.parent.iterdir()] == ["m"]  # no .m.partial-* left
    assert summary["model"] == str(folder)
    assert (summary["task"], summary["family"], summary["label"]) == ("binary", "linear", "y")
    assert summary["classes"] == ["no", "yes"]
    assert summary["features"] == ["a", "c", "city"]
    assert summary["rows"] == manifest["rows"]
    assert sum(summary["rows"].values()) == 400
    assert summary["metrics"] == manifest["metrics"]["validation"]
    assert summary["metrics"]["baseline"]["prediction"] in ("no", "yes")
    assert manifest["options"]["epochs"] == 3


def test_evaluate_json_is_the_manifests_validation_metrics(
    db: str, trained: tuple[Path, dict[str, Any]]
) -> None:
    folder, _ = trained
    run = run_cli(["evaluate", "--db", db, "--model", str(folder), "--format", "json"])
    assert run.code == 0, run.err
    assert json.loads(run.out) == _manifest(folder)["metrics"]["validation"]


def test_evaluate_text_beside_the_baseline(db: str, trained: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = trained
    validation = _manifest(folder)["metrics"]["validation"]
    run = run_cli(["evaluate", "--db", db, "--model", str(folder)])
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0] == f"binary on {validation['rows']} rows"
    assert lines[1].split() == ["metric", "model", "baseline"]
    accuracy = next(line.split() for line in lines if line.startswith("accuracy "))
    assert accuracy == [
        "accuracy",
        f"{validation['accuracy']:.4f}",
        f"{validation['baseline']['accuracy']:.4f}",
    ]
    assert "confusion matrix" in run.out


def test_evaluate_a_given_select(db: str, trained: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = trained
    sql = "SELECT a, c, city, y, 'extra' AS unused FROM t WHERE id < 100"
    run = run_cli(["evaluate", "--db", db, "--model", str(folder), "--format", "json", sql])
    assert run.code == 0, run.err
    result = json.loads(run.out)
    assert (result["rows"], result["sql"]) == (100, sql)
    assert sum(map(sum, result["confusion_matrix"])) == 100


def test_model_show_text(trained: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = trained
    manifest = _manifest(folder)
    run = run_cli(["model", "show", str(folder)])
    assert run.code == 0, run.err
    text = run.out
    assert f"model     {folder}\n" in text
    assert "task      binary (linear)\n" in text
    assert "label     y (string)\n" in text
    assert "classes   'no', 'yes'\n" in text
    assert "split     a hash of 'id', 20% validation" in text
    rows = manifest["rows"]
    assert f"rows      {rows['training']} training, {rows['validation']} validation" in text
    assert "features (3):" in text
    city = next(line for line in text.splitlines() if line.strip().startswith("city "))
    vocabulary = next(f for f in manifest["features"] if f["name"] == "city")["transform"]
    shown = ", ".join(repr(v) for v in vocabulary["vocabulary"][:10])
    assert city.endswith(f"vocabulary of {CITIES} (string): {shown}, ... ({CITIES - 10} more)")
    a = next(line for line in text.splitlines() if line.strip().startswith("a "))
    assert a.split()[1:4] == ["double", "numeric", "mean"]
    assert "+ mask" in a
    assert "validation metrics:\n  binary on " in text
    assert f"training sql:\n  {manifest['training_sql']}\n" in text
    assert f"validation sql:\n  {manifest['validation_sql']}\n" in text
    assert f"keras {manifest['versions']['keras']}" in text
    assert manifest["created"] in text


def test_model_show_json_is_the_manifest(trained: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = trained
    run = run_cli(["model", "show", "--format", "json", str(folder)])
    assert run.code == 0, run.err
    assert json.loads(run.out) == {"path": str(folder), **_manifest(folder)}


def test_model_show_imports_neither_tensorflow_nor_a_driver(
    trained: tuple[Path, dict[str, Any]],
) -> None:
    folder, _ = trained
    script = (
        "import json, sys\n"
        "from sqlfeed.cli.main import main\n"
        f"code = main(['model', 'show', {str(folder)!r}])\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    code, modules = json.loads(run.stdout.strip().splitlines()[-1])
    assert code == 0
    assert not {"tensorflow", "keras", "xgboost", "sklearn"} & set(modules)


def test_sql_from_stdin_and_overwrite_replace_the_model(db: str, tmp_path: Path) -> None:
    out = tmp_path / "m"
    first = _train(db, out, "--seed", "1", sql="-", stdin="SELECT id, a, c, y FROM t")
    assert first.code == 0, first.err
    assert [f["name"] for f in _manifest(out)["features"]] == ["a", "c"]

    again = _train(db, out, sql=SELECT)
    assert again.code == 2
    assert "exists already: pass --overwrite" in again.err

    replaced = _train(db, out, "--overwrite", "--seed", "2", sql="-", stdin=SELECT)
    assert replaced.code == 0, replaced.err
    manifest = _manifest(out)
    assert manifest["seed"] == 2
    assert [f["name"] for f in manifest["features"]] == ["a", "c", "city"]
    assert manifest["query"] == SELECT
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no .m.old-* or .m.partial-* left
    assert replaced.out.startswith(f"model: {out}\ntask: binary (linear), label 'y'")
    assert "validation metrics:\nbinary on " in replaced.out
    progress = replaced.err.splitlines()
    assert progress[0].startswith("split by a hash of 'id' (20% validation): ")
    assert any(line.startswith("epoch 3/3") for line in progress)
    assert progress[-1] == f"wrote {out}"

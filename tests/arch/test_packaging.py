"""sqlfeed installs one import package: a user's own stats.py or dialects.py cannot break it.

The repository keeps stats/ and dialects/ at its top level; they install as sqlfeed.stats and
sqlfeed.dialects. A script beside a user's own ``stats.py`` / ``dialects.py`` (first on
``sys.path``) imports sqlfeed, computes statistics and plans a query as usual, and the
user's modules stay theirs.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import stats, dialects
import sqlfeed
source = sqlfeed.connect("duckdb://")
source.execute("CREATE TABLE t AS SELECT range AS id, range % 3 AS g FROM range(30)")
fs = sqlfeed.compute_stats("SELECT id, g FROM t", source)
assert fs.columns["id"].count == 30, fs.columns["id"]
plan = sqlfeed.plan("SELECT id, g FROM t", source, partitions=3)
assert len(plan.partitions) == 3
assert stats.MINE == "user's" and dialects.MINE == "user's"
import sqlfeed.stats, sqlfeed.dialects
assert sqlfeed.stats.__file__ != stats.__file__
print("ok")
"""


def test_a_users_stats_and_dialects_modules_do_not_shadow_sqlfeeds(tmp_path: Path) -> None:
    for name in ("stats", "dialects"):
        (tmp_path / f"{name}.py").write_text('MINE = "user\'s"\n')
    (tmp_path / "script.py").write_text(SCRIPT)
    run = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("sqlfeed-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sqlfeed"}, tops
    for module in ("sqlfeed/stats/model.py", "sqlfeed/dialects/base.py", "sqlfeed/stats/py.typed"):
        assert module in names

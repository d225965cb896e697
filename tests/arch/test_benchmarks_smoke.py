"""The benchmarks' harness and smoke list: fast checks (``make bench-smoke`` runs them).

Every benchmark module has a smoke run and a ``--smoke`` flag; the harness's agreement
check flags contenders of one group that read different rows, and a goal is marked met or
MISSED on the right side of its bound. Nothing here starts a child process.
"""

from __future__ import annotations

import importlib

import pytest

from benchmarks import harness, smoke


def _result(id: str, rows: int, checksum: int | None, group: str = "g") -> harness.Result:
    result = harness.Result(id, id, group)
    result.runs.append(harness.Run(seconds=1.0, rows=rows, checksum=checksum))
    return result


def test_every_benchmark_has_a_smoke_run() -> None:
    assert set(smoke.benchmarks()) == set(smoke.SMOKES)
    assert set(smoke.LEFT_OUT) <= set(smoke.SMOKES)


@pytest.mark.parametrize("name", sorted(smoke.SMOKES))
def test_every_benchmark_takes_smoke(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    assert "--smoke" in capsys.readouterr().out


def test_agreement_passes_same_rows_and_checksums() -> None:
    results = [_result("a", 10, 55), _result("b", 10, 55), _result("c", 10, None)]
    assert harness.agreement(results) == []


def test_agreement_flags_different_rows() -> None:
    problems = harness.agreement([_result("a", 10, None), _result("b", 9, None)])
    assert problems == ["b read 9 rows, a 10"]


def test_agreement_flags_different_checksums() -> None:
    problems = harness.agreement([_result("a", 10, 55), _result("b", 10, 54)])
    assert problems == ["b checksum 54, a 55"]


def test_agreement_compares_within_a_group_and_skips_partial_readers() -> None:
    partial = _result("pandas", 3, None)
    partial.partial = True
    other_group = _result("x", 7, 1, group="h")
    assert harness.agreement([_result("a", 10, 55), partial, other_group]) == []


def test_goal_marks_met_and_missed() -> None:
    assert harness.Goal("sqlfeed vs peer", 1.2, 1.0).line().startswith("met: ")
    assert harness.Goal("sqlfeed vs peer", 0.8, 1.0).line().startswith("MISSED: ")
    assert harness.Goal("cost", 1.05, 1.1, at_most=True).met
    assert not harness.Goal("not measured", None, 1.0).met


def test_table_aligns_columns() -> None:
    text = harness.table(["name", "n"], [["a", "1"], ["bbb", "22"]], right={1})
    assert text.splitlines() == ["name   n", "----  --", "a      1", "bbb   22"]


def test_missing_optional_package_skips_a_contender() -> None:
    contender = harness.Contender("x", "x", lambda cfg: (0, 0.0, {}), requires=("no_such_mod",))
    assert contender.missing() == "not installed (no_such_mod)"

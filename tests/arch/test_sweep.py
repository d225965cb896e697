"""The rotating sweeps (tests/helpers/sweep.py): consecutive seeds cover every point once."""

from __future__ import annotations

import pytest

from tests.helpers import sweep


def test_consecutive_seeds_check_every_point_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    points = list(range(200))
    monkeypatch.delenv("SQLFEED_SWEEP", raising=False)
    taken = []
    for seed in range(7, 7 + sweep.SHARES):
        monkeypatch.setenv("SQLFEED_SWEEP_SEED", str(seed))
        taken.append(sweep.sample(points, "points", always=[0]))
        assert 0 in taken[-1]  # always
        assert str(seed) in sweep.describe()
    rest = sorted(p for share in taken for p in share if p != 0)
    assert rest == points[1:]  # each other point in exactly one share
    assert all(len(share) > 30 for share in taken)  # dealt evenly enough


def test_full_checks_every_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLFEED_SWEEP", "full")
    assert sweep.sample(list(range(50)), "points") == list(range(50))


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_a_rotation_runs_some_case_every_run_and_every_case_within_the_shares(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    cases = [f"test_x[{name}]" for name in ("sqlite", "postgres", "mysql", "duckdb", "a", "b", "c")]
    cases = cases[:count]
    monkeypatch.delenv("SQLFEED_SWEEP", raising=False)
    seen: list[str] = []
    for seed in range(11, 11 + sweep.SHARES):
        monkeypatch.setenv("SQLFEED_SWEEP_SEED", str(seed))
        share = sweep.rotation(cases, "tests/x.py::test_x")
        assert share  # never none: each run checks the test on some engine
        assert set(share) <= set(cases)
        seen += share
    assert sorted(set(seen)) == sorted(cases)  # all within SHARES consecutive runs
    if count >= sweep.SHARES:
        assert sorted(seen) == sorted(cases)  # each exactly once
    monkeypatch.setenv("SQLFEED_SWEEP", "full")
    assert sweep.rotation(cases, "tests/x.py::test_x") == sorted(cases)

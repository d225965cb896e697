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

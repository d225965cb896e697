"""Sweeps that rotate: each run checks a seeded share of a sweep, successive runs all of it.

A sweep (kill points of the resume contract, the engine corpus x strategies) is too long
to run whole on every ``make test``. Its points are dealt into :data:`SHARES` shares by a
stable hash; a run checks the share ``seed % SHARES``, so :data:`SHARES` runs with
consecutive seeds check every point. The seed is ``SQLFEED_SWEEP_SEED`` when set, else
the day's number (it changes daily, so successive days' CI runs rotate). The seed is
printed in pytest's header and in every failing sweep test's report: rerun the same share
with ``SQLFEED_SWEEP_SEED=N``. ``SQLFEED_SWEEP=full`` (``make test-full``) runs every point.

Three forms: ``@pytest.mark.sweep`` on a parametrized test keeps the cases of the run's share
(collection deselects the others); ``@pytest.mark.rotate`` on a parametrized test (the slow
multi-process fault tests, run once per engine) keeps a rotating share of that test's own cases
that is never empty (:func:`rotation`); and :func:`sample` takes the share of a list of points
inside one test.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

SHARES = 3
"""A run checks one share in this many (the points are dealt evenly by a stable hash)."""


def seed() -> int:
    """``SQLFEED_SWEEP_SEED``, else the number of days since 1970 (today's share)."""
    text = os.environ.get("SQLFEED_SWEEP_SEED", "").strip()
    return int(text) if text else (dt.date.today() - dt.date(1970, 1, 1)).days


def full() -> bool:
    """Whether every point runs (``SQLFEED_SWEEP=full``, as ``make test-full`` sets)."""
    return os.environ.get("SQLFEED_SWEEP", "").strip().lower() == "full"


def share_of(name: str) -> int:
    """The share ``name`` (a point's stable description) is dealt into."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % SHARES


def kept(name: str) -> bool:
    """Whether the point named ``name`` runs in this run."""
    return full() or share_of(name) == seed() % SHARES


def sample(points: Sequence[T], sweep: str, always: Sequence[T] = ()) -> list[T]:
    """The points of ``sweep`` this run checks, in their order; ``always`` run every time."""
    return [p for p in points if p in always or kept(f"{sweep}:{p}")]


def rotation(cases: Sequence[str], test: str) -> list[str]:
    """The cases of the parametrized test ``test`` this run checks: at least one, all of them
    within :data:`SHARES` consecutive seeds, every one with ``SQLFEED_SWEEP=full``.

    Dealt by position (sorted names), not by hash, so the shares are even: with at least
    :data:`SHARES` cases, case ``i`` runs when ``(i + offset) % SHARES`` is this run's share;
    with fewer, one case a run, in turn. The offset is a stable hash of ``test``, so two
    rotated tests do not all take their first engine on the same day.
    """
    ordered = sorted(cases)
    if full() or not ordered:
        return ordered
    turn = seed() + share_of(test)
    if len(ordered) < SHARES:
        return [ordered[turn % len(ordered)]]
    return [c for i, c in enumerate(ordered) if (i + share_of(test)) % SHARES == seed() % SHARES]


def describe() -> str:
    """One line for pytest's header and failure reports."""
    if full():
        return "sweeps: every point (SQLFEED_SWEEP=full)"
    return (
        f"sweeps: share {seed() % SHARES} of {SHARES} (seed {seed()}; rerun it with "
        f"SQLFEED_SWEEP_SEED={seed()}, every point with SQLFEED_SWEEP=full)"
    )

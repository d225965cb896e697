"""Fixtures: real engines (one per test process), loaded with the corpus tables."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import corpus, sweep
from tests.helpers.engines import ENGINES, Engine, EngineUnavailable, open_engine
from tests.helpers.gaps import mark_engine_gaps
from tests.helpers.sources import SourceFactory

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

_engines: dict[str, Engine] = {}
_unavailable: dict[str, str] = {}


def get_engine(name: str) -> Engine:
    """The session's engine ``name``, with the corpus tables loaded; skips if it is down."""
    if name in _unavailable:
        _skip_or_fail(_unavailable[name])
    if name not in _engines:
        try:
            engine = open_engine(name)
        except EngineUnavailable as err:
            _unavailable[name] = str(err)
            _skip_or_fail(str(err))
        engine.create_table("people", corpus.PEOPLE_COLUMNS, corpus.people_rows())
        engine.create_table("orders", corpus.ORDERS_COLUMNS, corpus.orders_rows())
        engine.create_table("dups", corpus.DUPS_COLUMNS, corpus.dups_rows())
        engine.create_table("empty_t", corpus.EMPTY_COLUMNS, [])
        rows = corpus.keyed_rows()
        engine.create_table("keyed", corpus.KEYED_COLUMNS, rows)
        engine.create_table("one_row", corpus.KEYED_COLUMNS, rows[1:2])
        engine.create_table(
            "same_k",
            corpus.KEYED_COLUMNS,
            [(i, 7 if i % 3 else None, None, 1.0, "x") for i in range(40)],
        )
        engine.create_table("empty_keyed", corpus.KEYED_COLUMNS, [])
        _engines[name] = engine
    return _engines[name]


def _skip_or_fail(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"database server unreachable under CI=true: {reason}", pytrace=False)
    pytest.skip(f"database server unreachable: {reason}")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each real engine in turn, loaded with the corpus tables."""
    return get_engine(request.param)


@pytest.fixture
def make_source() -> Iterator[SourceFactory]:
    """Opens sqlfeed sources (an engine's, a URL's, a DuckDB with tables: see
    :mod:`tests.helpers.sources`) and closes them after the test."""
    factory = SourceFactory(get_engine)
    yield factory
    factory.close()


@pytest.fixture
def source(request: pytest.FixtureRequest, make_source: SourceFactory) -> Any:
    """``make_source(*args, **kwargs)`` with the arguments of the test's (or its module's)
    ``@pytest.mark.source(...)``; without one, an in-memory DuckDB."""
    mark = request.node.get_closest_marker("source")
    return make_source(*mark.args, **mark.kwargs) if mark else make_source()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Engine gaps (``@pytest.mark.engine_gap``) become strict xfails of that engine's cases;
    of a ``@pytest.mark.sweep`` test, the cases of this run's share run; of a
    ``@pytest.mark.rotate`` test, its rotating share of its own cases, never none
    (tests/helpers/sweep.py).
    """
    mark_engine_gaps(items)
    dropped = [i for i in items if i.get_closest_marker("sweep") and not sweep.kept(i.nodeid)]
    dropped += rotated_out(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [i for i in items if i not in gone]
    slow_first(items)


def rotated_out(items: list[pytest.Item]) -> list[pytest.Item]:
    """The cases of ``@pytest.mark.rotate`` tests that this run leaves to other runs."""
    tests: dict[str, dict[str, pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("rotate"):
            test = item.nodeid.split("[", 1)[0]
            tests.setdefault(test, {})[item.nodeid] = item
    out = []
    for test, cases in tests.items():
        kept = set(sweep.rotation(list(cases), test))
        out += [item for nodeid, item in cases.items() if nodeid not in kept]
    return out


def slow_first(items: list[pytest.Item]) -> None:
    """The modules holding a ``slow`` test first, each module's tests together and in order.

    xdist hands tests out in this order: the long multi-process tests start while the
    thousands of short ones fill the other workers, instead of one of them running alone
    at the end of the run.
    """
    slow = {i.path for i in items if i.get_closest_marker("slow")}
    items.sort(key=lambda i: i.path not in slow)  # stable: the order within stays


def pytest_configure(config: pytest.Config) -> None:
    """Fix the sweep seed once, so every xdist worker (spawned later) deals the same share.

    And let the children the tests start handle SIGINT: a shell starts a background job
    (``make test &``, nohup) with SIGINT ignored, children inherit that, and the tests of
    an interrupted run (Ctrl-C: exit 130, tables dropped) then tested a process deaf to it.
    A handler is not inherited: the children start with the default.
    """
    os.environ.setdefault("SQLFEED_SWEEP_SEED", str(sweep.seed()))
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header() -> str:
    return sweep.describe()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing sweep test's report says which share ran and how to run it again."""
    report = yield
    if report.failed and (item.get_closest_marker("sweep") or item.get_closest_marker("rotate")):
        report.sections.append(("sweep", sweep.describe()))
    return report


@pytest.fixture(scope="session", autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    for engine in _engines.values():
        engine.close()
    _engines.clear()

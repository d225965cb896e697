"""Fixtures: real engines (one per test process), loaded with the corpus tables."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import corpus
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Engine gaps (``@pytest.mark.engine_gap``) become strict xfails of that engine's cases."""
    mark_engine_gaps(items)


@pytest.fixture(scope="session", autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    for engine in _engines.values():
        engine.close()
    _engines.clear()

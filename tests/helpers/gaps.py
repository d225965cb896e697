"""Engine gaps declared on the tests, run as strict expected failures.

``@pytest.mark.engine_gap("sqlite", reason="...")`` on a test that is parametrized by engine
(the ``engine`` fixture, an ``engine_name`` parameter, or the parameter ``param=`` names)
marks exactly that engine's cases ``xfail(strict=True)``: the test runs there as it does on
every other engine, is expected to fail, and fails the run once it passes (XPASS(strict)),
so a gap that gets fixed fails until its marker goes. More keyword arguments narrow the
gap to cases with those parameter values (a value or a tuple of values; a parameter
whose value has an ``id`` is matched by it): ``engine_gap("sqlite", reason=...,
strategy=("range_int64", "range_float"), table="empty")``. ``raises=`` names the
exception the gap fails with (anything else is a failure).

A gap is something sqlfeed could do on that engine and does not do yet. What an engine
cannot express at all is no gap: such a test runs the engine's real attempt and asserts
the refusal (:func:`tests.helpers.engines.assert_engine_refuses`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tests.helpers.engines import ENGINES

__all__ = ["ENGINE_PARAMS", "mark_engine_gaps"]

ENGINE_PARAMS = ("engine", "engine_name")
"""The parameters that name a test case's engine, unless the marker names one (param=)."""


def mark_engine_gaps(items: Iterable[pytest.Item]) -> int:
    """Mark every case an ``engine_gap`` marker covers as a strict xfail; how many."""
    marked = 0
    for item in items:
        for mark in item.iter_markers("engine_gap"):
            reason = _gap_reason(item, mark)
            if reason is not None:
                raises = mark.kwargs.get("raises")
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason, raises=raises))
                marked += 1
    return marked


def _gap_reason(item: pytest.Item, mark: pytest.Mark) -> str | None:
    """The xfail reason when ``mark`` covers ``item``'s case, else None."""
    options = dict(mark.kwargs)
    engines = _names(options.pop("engine", mark.args[0] if mark.args else None))
    reason = options.pop("reason", None)
    param = options.pop("param", None)
    options.pop("raises", None)
    where = f"{item.nodeid}: engine_gap"
    if not engines or not set(engines) <= set(ENGINES) or not reason:
        raise pytest.UsageError(f"{where} needs engine names out of {ENGINES} and a reason")
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    names = (param,) if param else ENGINE_PARAMS
    engine = next((params[name] for name in names if name in params), None)
    if engine is None:
        raise pytest.UsageError(f"{where}: the test has no engine parameter ({', '.join(names)})")
    if engine not in engines:
        return None
    for name, wanted in options.items():
        if name not in params:
            raise pytest.UsageError(f"{where}: the test has no parameter {name!r}")
        value = params[name]
        seen = (value, getattr(value, "id", value))
        if not any(v == w for v in seen for w in _names(wanted)):
            return None
    return f"engine gap on {engine}: {reason}"


def _names(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, tuple | list) else (value,)

"""The engine_gap marker (tests/helpers/gaps.py) marks exactly the cases it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.helpers.gaps import mark_engine_gaps


@dataclass
class Callspec:
    params: dict[str, Any]


@dataclass
class FakeItem:
    """What mark_engine_gaps reads of a collected test."""

    params: dict[str, Any]
    marks: list[pytest.Mark]
    nodeid: str = "tests/x.py::test_x"
    added: list[pytest.Mark] = field(default_factory=list)

    @property
    def callspec(self) -> Callspec:
        return Callspec(self.params)

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [m for m in self.marks if m.name == name]

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker.mark)


@dataclass
class Case:
    id: str


def test_the_gap_is_a_strict_xfail_of_that_engine_and_those_parameters_only() -> None:
    gap = pytest.mark.engine_gap(
        "sqlite", reason="no text key", raises=KeyError, strategy=("a", "b"), case="c1"
    ).mark
    items = [
        FakeItem({"engine": engine, "strategy": strategy, "case": Case(case)}, [gap])
        for engine in ("duckdb", "sqlite")
        for strategy in ("a", "b", "z")
        for case in ("c1", "c2")
    ]
    assert mark_engine_gaps(items) == 2  # type: ignore[arg-type]
    marked = [(i.params["strategy"], i.params["case"].id) for i in items if i.added]
    assert marked == [("a", "c1"), ("b", "c1")]
    assert all(i.params["engine"] == "sqlite" for i in items if i.added)
    (xfail,) = items[6].added
    assert xfail.name == "xfail"
    assert xfail.kwargs == {
        "strict": True,
        "reason": "engine gap on sqlite: no text key",
        "raises": KeyError,
    }


def test_the_engine_parameter_may_be_named() -> None:
    gap = pytest.mark.engine_gap(engine=("mysql",), reason="r", param="keyed_table").mark
    items = [FakeItem({"keyed_table": e}, [gap]) for e in ("mysql", "postgres")]
    assert mark_engine_gaps(items) == 1  # type: ignore[arg-type]
    assert items[0].added
    assert not items[1].added


@pytest.mark.parametrize(
    ("args", "kwargs", "params", "message"),
    [
        (("oracle",), {"reason": "r"}, {"engine": "sqlite"}, "needs engine names"),
        (("sqlite",), {}, {"engine": "sqlite"}, "and a reason"),
        (("sqlite",), {"reason": "r"}, {"other": 1}, "has no engine parameter"),
        (("sqlite",), {"reason": "r", "table": "t"}, {"engine": "sqlite"}, "no parameter 'table'"),
    ],
)
def test_a_misdeclared_gap_stops_the_collection(
    args: tuple[str, ...], kwargs: dict[str, Any], params: dict[str, Any], message: str
) -> None:
    item = FakeItem(params, [pytest.mark.engine_gap(*args, **kwargs).mark])
    with pytest.raises(pytest.UsageError, match=message):
        mark_engine_gaps([item])  # type: ignore[list-item]

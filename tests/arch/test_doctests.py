"""The examples in the docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = [
    "sqlfeed.sql.parse",
    "sqlfeed.sql.stability",
    "sqlfeed.sql.frame",
    "sqlfeed.sql.grouped",
    "sqlfeed.sql.probes",
    "sqlfeed.sql.partition",
    "sqlfeed.io.sqlite",
    "sqlfeed.plans.model",
    "sqlfeed.plans.range",
    "sqlfeed.shards.datasets",
    "sqlfeed.shards.writer",
    "sqlfeed.shards.join",
    "sqlfeed.feed.feeder",
    "sqlfeed.cli.native",
    "sqlfeed.dialects",
    "sqlfeed.dialects.base",
    "sqlfeed.dialects.sqlite",
    "sqlfeed.dialects.text",
    "sqlfeed.dialects.optional",
    "sqlfeed.errors",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0

"""The examples in the docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sqlfeed.sql.rewrite", "dialects", "dialects.base", "dialects.sqlite"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0

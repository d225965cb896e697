"""A package the command line needs and that is not installed: one line naming the extra."""

from __future__ import annotations

import sys

import pytest

from sqlfeed.cli import demo, torch_demo
from sqlfeed.cli.checks import missing_module_hint, missing_package
from sqlfeed.dialects import MissingDependencyError
from sqlfeed.dialects.optional import EXTRAS, install_hint


def missing(module: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(f"No module named {module!r}", name=module)


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_every_optional_module_names_its_extra(module: str) -> None:
    hint = missing_module_hint(missing(f"{module}.sub"))
    assert hint.startswith(f"the Python package {module} is not installed: ")
    assert f"pip install 'sqlfeed[{EXTRAS[module]}]'" in hint
    assert install_hint(module) in hint


@pytest.mark.parametrize(
    ("module", "url"), [("psycopg2", "postgresql+psycopg://"), ("MySQLdb", "mysql+pymysql://")]
)
def test_a_driver_no_extra_installs_names_the_url_of_the_one_it_does(module: str, url: str) -> None:
    assert f"is not installed: use a {url} URL (pip install 'sqlfeed[" in missing_module_hint(
        missing(module)
    )


def test_a_package_sqlfeed_does_not_know_is_installed_by_its_name() -> None:
    assert missing_module_hint(missing("xlsxwriter")) == (
        "the Python package xlsxwriter is not installed: pip install xlsxwriter"
    )


def test_an_import_error_naming_no_module_says_what_it_says() -> None:
    assert missing_module_hint(ImportError("cannot load\n  libfoo.so")) == (
        "a Python package is missing: cannot load libfoo.so"
    )


def test_missing_package_puts_what_needed_it_first() -> None:
    with pytest.raises(MissingDependencyError) as caught, missing_package("--queue x://"):
        raise missing("pymysql")
    assert str(caught.value) == (
        "--queue x://: the Python package pymysql is not installed: pip install 'sqlfeed[mysql]'"
    )


def test_missing_package_lets_other_errors_through() -> None:
    with pytest.raises(ValueError, match="bad"), missing_package("--queue x://"):
        raise ValueError("bad")


def test_the_demo_without_tensorflow_names_the_tf_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingDependencyError) as caught:
        demo._tensorflow_with_two_cpus()
    assert str(caught.value) == (
        "the demo's Keras model needs tensorflow: pip install 'sqlfeed[tf]'"
    )


def test_the_torch_demo_without_torch_names_the_torch_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError) as caught:
        torch_demo.run_torch_demo("duckdb:///x.db", "SELECT 1", "SELECT 1", print)
    assert str(caught.value) == (
        "the torch demo's PyTorch model needs torch: pip install 'sqlfeed[torch]'"
    )

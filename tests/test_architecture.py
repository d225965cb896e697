"""The code's shape: module and function sizes, and where imports may stand.

docs/architecture.md is the map these checks keep true; import-linter (``make layers``)
checks the layers and cycles themselves.

Run ``python -m tests.test_architecture`` to list the modules over the size limit and the
functions over the length limit, justified or not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sqlfeed", "stats", "dialects")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
JUSTIFIED = "Why this is long:"
"""A module docstring line starting with this says why the module or a function in it is long."""

LAZY_IMPORTS_ALLOWED = frozenset(
    {
        "tensorflow",
        "keras",
        "torch",
        "torchdata",
        "connectorx",
        "adbc_driver_manager",
        "adbc_driver_postgresql",
        "adbc_driver_sqlite",
        "psycopg",
        "pymysql",
        "matplotlib",
        "ray",
        "dask",
    }
)
"""Optional heavy dependencies: the only imports allowed inside a function."""


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _justified(tree: ast.Module) -> bool:
    doc = ast.get_docstring(tree) or ""
    return any(line.strip().startswith(JUSTIFIED) for line in doc.splitlines())


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _length(node: ast.AST) -> int:
    return int(node.end_lineno or node.lineno) - int(node.lineno) + 1  # type: ignore[attr-defined]


def long_modules() -> list[tuple[str, int, bool]]:
    """(module, lines, justified) for every module over the limit."""
    out = []
    for path in _modules():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            out.append((_name(path), lines, _justified(ast.parse(path.read_text()))))
    return out


def long_functions() -> list[tuple[str, int, bool]]:
    """(module:line name, lines, justified) for every function over the limit."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in _functions(tree):
            if _length(node) > MAX_FUNCTION_LINES:
                where = f"{_name(path)}:{node.lineno} {node.name}"
                out.append((where, _length(node), _justified(tree)))
    return out


def lazy_imports() -> list[str]:
    """Imports inside functions of anything but an optional heavy dependency."""
    out = []
    for path in _modules():
        for function in _functions(ast.parse(path.read_text())):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    roots = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    roots = [(node.module or ".").split(".")[0] if node.level == 0 else "."]
                else:
                    continue
                out.extend(
                    f"{_name(path)}:{node.lineno} imports {root} inside {function.name}()"
                    for root in roots
                    if root not in LAZY_IMPORTS_ALLOWED
                )
    return sorted(set(out))


def test_no_module_is_over_the_limit_without_saying_why() -> None:
    unjustified = [f"{name}: {lines} lines" for name, lines, ok in long_modules() if not ok]
    assert not unjustified, (
        f"modules over {MAX_MODULE_LINES} lines; split them or add a '{JUSTIFIED}' line "
        f"to the module docstring: {unjustified}"
    )


def test_no_function_is_over_the_limit_without_saying_why() -> None:
    unjustified = [f"{name}: {lines} lines" for name, lines, ok in long_functions() if not ok]
    assert not unjustified, (
        f"functions over {MAX_FUNCTION_LINES} lines; split them or add a '{JUSTIFIED}' "
        f"line to the module docstring: {unjustified}"
    )


def test_imports_inside_functions_are_only_optional_heavy_dependencies() -> None:
    assert not lazy_imports(), "hoist these to the module top: " + "; ".join(lazy_imports())


@pytest.mark.parametrize("package", ["sql", "io", "plans", "shards", "feed", "dispatch", "cli"])
def test_every_layer_is_a_package_with_a_docstring(package: str) -> None:
    init = ROOT / "sqlfeed" / package / "__init__.py"
    assert init.is_file()
    assert ast.get_docstring(ast.parse(init.read_text())), f"{_name(init)} says what it owns"


def test_the_architecture_map_names_every_layer() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    for package in ("sql", "io", "plans", "shards", "feed", "dispatch", "tf", "cli"):
        assert f"sqlfeed/{package}/" in text, f"docs/architecture.md does not describe {package}"


def main() -> None:
    """Print the long modules and functions, justified or not."""
    for title, rows in (("modules", long_modules()), ("functions", long_functions())):
        limit = MAX_MODULE_LINES if title == "modules" else MAX_FUNCTION_LINES
        print(f"{title} over {limit} lines: {len(rows)}")
        for name, lines, ok in rows:
            print(f"  {name}: {lines} lines{' (justified)' if ok else ''}")


if __name__ == "__main__":
    main()

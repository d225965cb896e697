"""The code's shape: design measures, not layout.

``ruff format`` owns layout, so sizes are counted in statements (a statement is one
``ast.stmt`` node, nested ones included), not physical lines. docs/architecture.md is the
map these checks keep true; import-linter (``make layers``) checks the layers, and
:func:`import_cycles` checks cycles between modules (``if TYPE_CHECKING:`` imports
included: a cycle in the annotations is a cycle in the design).

Other measures: ``# fmt: skip`` only on data tables (a literal assigned to a name), and
engine-name comparisons (``dialect.name == "postgres"``) only in ``dialects/``, the engine
folders of ``sqlfeed/io/`` and ``sqlfeed/cli/`` (its flag texts).

Run ``python -m tests.arch.test_architecture`` to print every measure.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sqlfeed", "stats", "dialects")
MAX_MODULE_STATEMENTS = 400
MAX_FUNCTION_STATEMENTS = 50
JUSTIFIED = "Why this is long:"
"""A module docstring line starting with this says why the module or a function in it is long."""

LAZY_IMPORTS_ALLOWED = frozenset(
    {
        "tensorflow",
        "keras",
        "pyiceberg",
        "deltalake",
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
        "xgboost",
    }
)
"""Optional heavy dependencies: the only imports allowed inside a function."""

LAZY_FOR_A_COLD_READ = frozenset({"sqlfeed.io.rangefs"})
"""Modules a plain read does not need, imported where they are used (issue #38: a process's
first read imports only what it uses): the byte-range file system (fsspec, ~60 ms)."""


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


def statements(node: ast.AST) -> int:
    """The statements inside ``node`` (itself excluded), nested ones included."""
    return sum(isinstance(child, ast.stmt) for child in ast.walk(node)) - isinstance(node, ast.stmt)


def long_modules(limit: int = MAX_MODULE_STATEMENTS) -> list[tuple[str, int, bool]]:
    """(module, statements, justified) for every module over ``limit`` statements."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        if statements(tree) > limit:
            out.append((_name(path), statements(tree), _justified(tree)))
    return out


def long_functions(limit: int = MAX_FUNCTION_STATEMENTS) -> list[tuple[str, int, bool]]:
    """(module:line name, statements, justified) for every function over ``limit``."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in _functions(tree):
            if statements(node) > limit:
                where = f"{_name(path)}:{node.lineno} {node.name}"
                out.append((where, statements(node), _justified(tree)))
    return out


def _is_data_table(node: ast.AST) -> bool:
    """A literal (constants in dicts, lists, tuples, sets) assigned to a name."""
    if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
        return False
    allowed = (ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Constant, ast.UnaryOp, ast.USub)
    allowed += (ast.Load, ast.Name, ast.Attribute)  # names of other constants, enum members
    return all(isinstance(child, allowed) for child in ast.walk(node.value))


def format_skips() -> list[str]:
    """``# fmt: skip`` comments on anything but a data table, in code and tests."""
    out = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        if path.parts[len(ROOT.parts)] not in (*PACKAGES, "tests", "benchmarks"):
            continue
        text = path.read_text()
        if "fmt: skip" not in text:
            continue
        ends = {
            int(node.end_lineno or node.lineno): node
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.stmt)
        }
        for number, line in enumerate(text.splitlines(), 1):
            if line.rstrip().endswith("# fmt: skip") and not _is_data_table(ends.get(number)):
                out.append(f"{_name(path)}:{number}")
    return out


ENGINE_NAMES = frozenset(
    {
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "sqlite",
        "duckdb",
        "bigquery",
        "snowflake",
        "spark",
        "hive",
        "databricks",
        "trino",
        "presto",
        "oracle",
        "tsql",
        "mssql",
        "redshift",
        "clickhouse",
    }
)
"""Engine and dialect names, as ``dialect.name`` and SQLAlchemy spell them."""

ENGINE_PLACES = ("dialects/", "sqlfeed/cli/")
"""Where engine names may be compared; beside them, ``sqlfeed/io/<engine>(.py|/)``."""


def _engine_place(name: str) -> bool:
    parts = name.split("/")
    if name.startswith(ENGINE_PLACES):
        return True
    return parts[:2] == ["sqlfeed", "io"] and parts[2].removesuffix(".py") in ENGINE_NAMES


def _engine_literals(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value.lower() in ENGINE_NAMES else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [name for element in node.elts for name in _engine_literals(element)]
    return []


def engine_comparisons() -> list[str]:
    """Comparisons with an engine's name outside the places that own engine knowledge."""
    out = []
    for path in _modules():
        if _engine_place(_name(path)):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                names = [
                    n for side in (node.left, *node.comparators) for n in _engine_literals(side)
                ]
            elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
                names = _engine_literals(node.pattern.value)
            else:
                continue
            if names:
                out.append(f"{_name(path)}:{getattr(node, 'lineno', 0)} {'/'.join(names)}")
    return out


def _imported(tree: ast.Module, module: str, known: set[str]) -> set[str]:
    """Project modules a module imports at its top level (``TYPE_CHECKING`` blocks included)."""
    out: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If | ast.Try):
            body.extend(node.body + node.orelse)
            body.extend(h for handler in getattr(node, "handlers", []) for h in handler.body)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = module.rsplit(".", node.level)[0] if node.level else ""
            base = ".".join(p for p in (package, node.module or "") if p)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in out if name in known and name != module}


def import_cycles() -> list[list[str]]:
    """Cycles in the graph of module-level imports between project modules."""
    paths = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in _modules()
    }
    known = set(paths)
    graph = {m: _imported(ast.parse(p.read_text()), m, known) for m, p in paths.items()}
    for module in paths:  # a package's __init__ is not an edge of its submodules' cycles
        graph[module] = {n for n in graph[module] if not module.startswith(n + ".")}
    cycles, state = [], dict.fromkeys(graph, 0)

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for name in sorted(graph[module]):
            if state[name] == 1:
                cycles.append([*stack[stack.index(name) :], name])
            elif state[name] == 0:
                visit(name, [*stack, name])
        state[module] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    return cycles


def lazy_imports() -> list[str]:
    """Imports inside functions of anything but an optional heavy dependency."""
    out = []
    for path in _modules():
        for function in _functions(ast.parse(path.read_text())):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [(node.module or ".") if node.level == 0 else "."]
                else:
                    continue
                out.extend(
                    f"{_name(path)}:{node.lineno} imports {name.split('.')[0]} inside "
                    f"{function.name}()"
                    for name in names
                    if name.split(".")[0] not in LAZY_IMPORTS_ALLOWED
                    and name not in LAZY_FOR_A_COLD_READ
                )
    return sorted(set(out))


def test_no_module_is_over_the_limit_without_saying_why() -> None:
    unjustified = [f"{name}: {n} statements" for name, n, ok in long_modules() if not ok]
    assert not unjustified, (
        f"modules over {MAX_MODULE_STATEMENTS} statements; split them or add a "
        f"'{JUSTIFIED}' line to the module docstring: {unjustified}"
    )


def test_no_function_is_over_the_limit_without_saying_why() -> None:
    unjustified = [f"{name}: {n} statements" for name, n, ok in long_functions() if not ok]
    assert not unjustified, (
        f"functions over {MAX_FUNCTION_STATEMENTS} statements; split them or add a "
        f"'{JUSTIFIED}' line to the module docstring: {unjustified}"
    )


def test_the_statement_count_sees_nested_statements() -> None:
    tree = ast.parse("def f(x):\n    if x:\n        return 1\n    return 2\n")
    assert statements(tree.body[0]) == 3
    assert statements(tree) == 4


def test_fmt_skip_is_only_on_data_tables() -> None:
    assert not format_skips(), "let ruff format lay these out: " + ", ".join(format_skips())


def test_the_data_table_rule_tells_tables_from_code() -> None:
    assert _is_data_table(ast.parse("X = {'a': (1, -2), 'b': [None]}").body[0])
    assert not _is_data_table(ast.parse("X = f(1)").body[0])
    assert not _is_data_table(ast.parse("f(1, 2)").body[0])


def test_engine_names_are_compared_only_where_engines_live() -> None:
    found = engine_comparisons()
    assert not found, (
        "engine knowledge belongs in a dialect hook (dialects/) or in sqlfeed/io/<engine>/: "
        + ", ".join(found)
    )


def test_the_engine_comparison_count_sees_every_form() -> None:
    forms = 'a.name == "postgres"\nb in ("mysql", "x")\nmatch c:\n    case "sqlite": pass\n'
    tree = ast.parse(forms)
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Compare | ast.match_case)]
    found = [
        _engine_literals(n.comparators[0])
        if isinstance(n, ast.Compare)
        else _engine_literals(n.pattern.value)  # type: ignore[attr-defined]
        for n in nodes
    ]
    assert found == [["postgres"], ["mysql"], ["sqlite"]]
    assert _engine_place("sqlfeed/io/postgres/readers.py")
    assert _engine_place("sqlfeed/io/mysql.py")
    assert not _engine_place("sqlfeed/io/source.py")
    assert not _engine_place("sqlfeed/plans/context.py")


def test_no_import_cycles() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles (TYPE_CHECKING imports included): " + "; ".join(
        " -> ".join(cycle) for cycle in cycles
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
    """Print every measure: the longest modules and functions, skips, engine names, cycles."""
    for title, rows in (("modules", long_modules(0)), ("functions", long_functions(0))):
        rows.sort(key=lambda row: -row[1])
        limit = MAX_MODULE_STATEMENTS if title == "modules" else MAX_FUNCTION_STATEMENTS
        print(f"longest {title} (limit {limit} statements):")
        for name, n, ok in rows[:5]:
            print(f"  {name}: {n} statements{' (justified)' if ok else ''}")
    for title, found in (
        ("# fmt: skip outside data tables", format_skips()),
        ("engine-name comparisons outside dialects/, io/<engine>, cli/", engine_comparisons()),
        ("import cycles", [" -> ".join(c) for c in import_cycles()]),
    ):
        print(f"{title}: {len(found)}")
        for line in found:
            print(f"  {line}")


if __name__ == "__main__":
    main()

"""Every test that starts child processes the costly way is marked ``slow``.

A child that imports sqlfeed anew (a child script of ``tests/scripts``, a ``spawn`` or
``forkserver`` multiprocessing context, a process pool) or a cluster (Ray, Dask's
``LocalCluster``) costs seconds per test; ``-m "not slow"`` must leave such tests out. The
check reads the test files (AST): a test uses what its body, the module's functions and
constants it names, and the module's fixtures it takes name, transitively. A test counts
as marked when ``pytest.mark.slow`` is on it, its class or its module (``pytestmark``), or
on one of its parameters (``pytest.param(..., marks=pytest.mark.slow)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SCRIPTS = TESTS / "scripts"
CHILD_SCRIPTS = frozenset(p.stem for p in SCRIPTS.glob("*.py")) - {"__init__"}
"""The child-process scripts of ``tests/scripts``."""
SCRIPT_FUNCTIONS = {
    name: {
        node.name
        for node in ast.parse((SCRIPTS / f"{name}.py").read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef)
    }
    for name in CHILD_SCRIPTS
}
"""The functions of each child script (what a test imports from one to run it)."""
POOLS = frozenset({"Pool", "ProcessPoolExecutor", "LocalCluster"})
COSTLY_START_METHODS = frozenset({"spawn", "forkserver"})
QUICK_CHILDREN = {
    "tests/engines/test_concurrent_writes.py::test_static_feeder_reads_one_state": (
        "one SQLite writer process (the sqlite cases only): about 1.5 s a case"
    ),
    "tests/engines/test_concurrent_writes.py::test_every_postgres_reader_reads_one_state": (
        "its writer is a thread (the writing fixture starts a process for SQLite only)"
    ),
    "tests/engines/test_concurrent_writes.py::test_export_writes_one_state": (
        "one SQLite writer process (the sqlite cases only): about 1.5 s a case"
    ),
    "tests/engines/test_concurrent_writes.py::test_several_connections_begin_at_one_state": (
        "one SQLite writer process (the sqlite cases only): about 1 s a case"
    ),
    "tests/engines/test_concurrent_writes.py::"
    "test_a_user_who_may_not_lock_reads_on_one_connection_and_is_told_why": (
        "its writer is a thread (the writing fixture starts a process for SQLite only)"
    ),
}
"""Tests that start a child the costly way and are quick all the same, with the measure."""


def _spawns_here(node: ast.AST, script_names: frozenset[str] = frozenset()) -> set[str]:
    """What in ``node`` itself starts child processes the costly way (``script_names``:
    the child scripts' functions the module imported)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("tests.scripts"):
            found.add(f"from {sub.module} import")
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            if "tests.scripts." in sub.value or sub.value == "scripts":
                found.add(repr(sub.value))
        elif isinstance(sub, ast.Attribute):
            if sub.attr in CHILD_SCRIPTS | POOLS:
                found.add(sub.attr)
            elif sub.attr == "init" and isinstance(sub.value, ast.Name) and sub.value.id == "ray":
                found.add("ray.init")
        elif isinstance(sub, ast.Name) and sub.id in CHILD_SCRIPTS | POOLS | script_names:
            found.add(sub.id)
        elif isinstance(sub, ast.Call) and _attr(sub.func) == "get_context" and sub.args:
            method = sub.args[0]
            if isinstance(method, ast.Constant) and method.value in COSTLY_START_METHODS:
                found.add(f"get_context({method.value!r})")
    return found


def _attr(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _marked_slow(nodes: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(node) for node in nodes)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def unmarked_spawning_tests(source: str, where: str = "") -> list[str]:
    """The tests of one test file that start child processes and are not marked slow,
    each with what starts them."""
    tree = ast.parse(source)
    helpers: dict[str, ast.AST] = {}
    tests: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []
    module_slow = False
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.scripts."):
            functions = SCRIPT_FUNCTIONS.get((node.module or "").rsplit(".", 1)[-1], set())
            imported |= {a.asname or a.name for a in node.names if a.name in functions}
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            module_slow |= "pytestmark" in targets and _marked_slow([node.value])
            helpers.update(dict.fromkeys(targets, node))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            helpers[node.name] = node
            if node.name.startswith("test_"):
                tests.append((node.name, node, False))
        elif isinstance(node, ast.ClassDef):
            helpers[node.name] = node
            class_slow = _marked_slow(node.decorator_list)
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and sub.name.startswith("test_"):
                    tests.append((f"{node.name}::{sub.name}", sub, class_slow))
    spawned: dict[str, set[str]] = {}
    script_names = frozenset(imported)

    def spawns(name: str, seen: frozenset[str]) -> set[str]:
        if name in spawned:
            return spawned[name]
        node = helpers[name]
        found = _spawns_here(node, script_names)
        used = _names(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            used |= {a.arg for a in node.args.args}  # fixtures
        for other in sorted(used & helpers.keys() - seen - {name}):
            found |= spawns(other, seen | {name})
        spawned[name] = found
        return found

    unmarked = []
    for name, node, class_slow in tests:
        if module_slow or class_slow or _marked_slow(node.decorator_list):
            continue
        if name == node.name:
            found = spawns(node.name, frozenset())
        else:
            found = _spawns_here(node, script_names)
        if found:
            unmarked.append(f"{where}::{name} ({', '.join(sorted(found))})")
    return unmarked


def test_the_check_finds_an_unmarked_test_that_starts_a_child_script() -> None:
    source = """
import multiprocessing
import pytest
from tests.scripts import fault_worker

def run_worker():
    fault_worker.main([])

@pytest.fixture
def pool():
    return multiprocessing.get_context("spawn").Pool(2)

def test_plain(): pass
def test_child(): run_worker()
def test_pool(pool): pass
@pytest.mark.slow
def test_child_marked(): run_worker()
@pytest.mark.parametrize("w", [pytest.param(2, marks=pytest.mark.slow)])
def test_child_param_marked(w): run_worker()
def test_fork(): multiprocessing.get_context("fork").Process(target=print).start()
"""
    found = unmarked_spawning_tests(source)
    assert [f.split(" ")[0] for f in found] == ["::test_child", "::test_pool"], found
    module_marked = "import pytest\npytestmark = [pytest.mark.slow]\n" + source
    assert unmarked_spawning_tests(module_marked) == []


def test_every_test_that_starts_child_processes_is_marked_slow() -> None:
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path.parent.name == "arch":
            continue  # these read test files; they run none
        where = str(path.relative_to(TESTS.parent))
        found = unmarked_spawning_tests(path.read_text(encoding="utf-8"), where)
        unmarked += [test for test in found if test.split(" ")[0] not in QUICK_CHILDREN]
    assert not unmarked, "mark these @pytest.mark.slow:\n" + "\n".join(unmarked)

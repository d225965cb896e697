"""MkDocs hook: the Python API reference pages, one per public package.

Each page lists the package's ``__all__`` at build time and renders every name from its
docstrings with mkdocstrings (``::: module.name``, the module being where the name is
defined), so a public name added to ``__all__`` appears without editing the docs.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from mkdocs.structure.files import File, Files

PACKAGES: dict[str, str] = {
    "sqlfeed": "The top-level package: plan, feed, statistics, shardsets, write-back, errors.",
    "sqlfeed.tf": "tf.data / Keras input pipelines (`pip install 'sqlfeed[tf]'`).",
    "sqlfeed.torch": "PyTorch datasets and loaders (`pip install 'sqlfeed[torch]'`).",
    "sqlfeed.ray": "Ray Data datasets and the table datasink (`pip install 'sqlfeed[ray]'`).",
    "sqlfeed.dask": "Dask DataFrames (`pip install 'sqlfeed[dask]'`).",
    "sqlfeed.ml": "Train, evaluate and predict from a SELECT.",
    "sqlfeed.stats": "Feature statistics: the model, pushdown SQL, accumulators, Keras layers.",
}
"""The packages whose ``__all__`` is the public API, with one line about each."""

SKIP = {"__version__", "dask", "ml", "ray", "tf", "torch", "sink"}
"""Names of ``__all__`` that are no API entry (the version, the subpackages)."""


def page_name(package: str) -> str:
    """The page of ``package`` under reference/python/ (``sqlfeed.tf`` -> ``tf.md``)."""
    return (package.split(".", 1)[1] if "." in package else package) + ".md"


def _target(package: str, name: str) -> str:
    """The dotted path mkdocstrings renders ``package.name`` from: where it is defined."""
    module = importlib.import_module(package)
    value = getattr(module, name)
    home = getattr(value, "__module__", None)
    if (inspect.isclass(value) or inspect.isfunction(value)) and home:
        return f"{home}.{getattr(value, '__qualname__', name)}"
    return f"{package}.{name}"


LENIENT: dict[str, str] = {}
"""Objects whose docstring griffe cannot read whole yet, with why: their parameter checks
are off until the docstring is fixed (each is in a file the lead owns; tell them)."""


def _directive(target: str, name: str) -> list[str]:
    lines = [f"::: {target}", "    options:", f"      heading: {name}"]
    if target in LENIENT:
        lines += [
            "      docstring_options:",
            "        warn_unknown_params: false",
            "        warn_missing_types: false",
        ]
    return [*lines, ""]


def _page(package: str, about: str) -> str:
    module = importlib.import_module(package)
    names = [n for n in module.__all__ if n not in SKIP]
    lines = [f"# {package}", "", about, ""]
    lines += [
        f"::: {package}",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "",
    ]
    elsewhere = []
    for name in sorted(names, key=str.lower):
        target = _target(package, name)
        home = "sqlfeed.stats" if target.startswith("sqlfeed.stats.") else "sqlfeed"
        if home != package and home == "sqlfeed.stats":  # stats' names on sqlfeed's page
            elsewhere.append(f"- [`{name}`][{target}]: documented under `{home}`")
            continue
        lines += _directive(target, name)
    if elsewhere:
        lines += ["## Also exported here", "", *elsewhere, ""]
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    """Add ``reference/python/<package>.md`` for every package of :data:`PACKAGES`."""
    for package, about in PACKAGES.items():
        uri = f"reference/python/{page_name(package)}"
        files.append(File.generated(config, uri, content=_page(package, about)))
    return files

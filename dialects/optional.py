"""Optional dependencies: one import helper that names the extra to install.

Every optional package sqlfeed uses (drivers, TensorFlow, PyTorch, Ray, Dask, matplotlib)
is imported through :func:`require` where it is first needed, so a missing one is one
:class:`~sqlfeed.dialects.errors.MissingDependencyError` line saying what needs it and what to
install, the same wording everywhere. :data:`EXTRAS` maps a top-level module to the pip
extra (``setup.cfg``) that installs it.

>>> require("json", "this example").__name__
'json'
>>> require("no_such_mod", "an example")
Traceback (most recent call last):
sqlfeed.dialects.errors.MissingDependencyError: an example needs no_such_mod: pip install ...
>>> install_hint("tensorflow")
"pip install 'sqlfeed[tf]'"
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sqlfeed.dialects.errors import MissingDependencyError

EXTRAS = {
    "psycopg": "postgres",
    "psycopg2": "postgres",
    "pymysql": "mysql",
    "MySQLdb": "mysql",
    "connectorx": "fast",
    "adbc_driver_manager": "fast",
    "adbc_driver_postgresql": "fast",
    "adbc_driver_sqlite": "fast",
    "tensorflow": "tf",
    "keras": "tf",
    "matplotlib": "report",
    "torch": "torch",
    "torchdata": "torch",
    "ray": "ray",
    "dask": "dask",
    "xgboost": "ml",
    "pyiceberg": "lakehouse",
    "deltalake": "lakehouse",
}
"""Top-level module -> the ``sqlfeed[extra]`` that installs it."""


def install_hint(module: str) -> str:
    """What to run to install ``module`` (a top-level module name)."""
    root = module.split(".")[0]
    if root in EXTRAS:
        return f"pip install 'sqlfeed[{EXTRAS[root]}]'"
    return f"pip install {root}"


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module``, or say in one line that ``purpose`` needs it and how to install it.

    Args:
        module: the dotted module to import (``"dask.dataframe"``, ``"tensorflow"``).
        purpose: what needs it, as the start of a sentence (``"Dask DataFrames"``).

    Raises:
        MissingDependencyError: the module (or one it imports) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = (err.name or module).split(".")[0]
        raise MissingDependencyError(
            f"{purpose} needs {missing}: {install_hint(missing)}"
        ) from None

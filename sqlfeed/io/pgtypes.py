"""Deprecated: :mod:`sqlfeed.io.postgres.types` (PostgreSQL's types).

This module name goes in the next release.
"""

from __future__ import annotations

import warnings

from sqlfeed.io.postgres.types import *  # noqa: F403
from sqlfeed.io.postgres.types import __all__ as __all__

warnings.warn(
    "sqlfeed.io.pgtypes is deprecated: import sqlfeed.io.postgres.types",
    DeprecationWarning,
    stacklevel=2,
)

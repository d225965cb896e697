"""Deprecated: :mod:`sqlfeed.io.postgres.copy` (the PostgreSQL copy reader).

This module name goes in the next release.
"""

from __future__ import annotations

import warnings

from sqlfeed.io.postgres.copy import *  # noqa: F403
from sqlfeed.io.postgres.copy import __all__ as __all__

warnings.warn(
    "sqlfeed.io.pgcopy is deprecated: import sqlfeed.io.postgres.copy",
    DeprecationWarning,
    stacklevel=2,
)

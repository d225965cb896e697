"""Deprecated: :mod:`sqlfeed.io.keptconnections` (reader connections kept per thread).

This module name goes in the next release.
"""

from __future__ import annotations

import warnings

from sqlfeed.io.keptconnections import *  # noqa: F403
from sqlfeed.io.keptconnections import __all__ as __all__

warnings.warn(
    "sqlfeed.io.pgsessions is deprecated: import sqlfeed.io.keptconnections",
    DeprecationWarning,
    stacklevel=2,
)

"""Arrow -> NumPy conversion, re-exported: it lives in :mod:`sqlfeed.feed.converter`."""

from __future__ import annotations

from sqlfeed.feed.converter import Converter

__all__ = ["Converter"]

"""The fsspec file system that serves :func:`~sqlfeed.io.ranges.range_url` files to DuckDB.

A module of its own so that fsspec (~60 ms to import) is imported by the reads that name a
byte range, not by every DuckDB read.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec

from sqlfeed.io.ranges import RANGE_PROTOCOL, RangeFile, parse_range_url

__all__ = ["RangeFileSystem"]


class RangeFileSystem(fsspec.AbstractFileSystem):  # type: ignore[misc]
    """The fsspec file system of :func:`range_url` virtual files (read only)."""

    protocol = RANGE_PROTOCOL

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        text = str(path)
        prefix = RANGE_PROTOCOL + "://"
        return text[len(prefix) :] if text.startswith(prefix) else text

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> RangeFile:
        if "r" not in mode or "+" in mode:
            raise PermissionError(f"{RANGE_PROTOCOL} files are read only")
        return RangeFile(*parse_range_url(path))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        real, prefix, start, end = parse_range_url(path)
        if not os.path.isfile(real):
            raise FileNotFoundError(real)
        return {"name": path, "size": prefix + end - start, "type": "file"}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        entry = self.info(path)
        return [entry] if detail else [entry["name"]]

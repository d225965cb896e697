"""``dataset:`` URLs: :func:`sqlfeed.connect` opens a shardset dataset as a DuckDB source.

The package (:mod:`sqlfeed.shards`) registers :func:`open_dataset_url` with
:func:`sqlfeed.io.register_scheme`, so the I/O layer never imports this one.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.io import MEMORY, Source, require_file, url_path
from sqlfeed.shards.datasets import open_dataset

__all__ = ["SCHEME", "open_dataset_url"]

SCHEME = "dataset"
"""The URL scheme of shardset datasets."""


def open_dataset_url(url: str) -> Source:
    """Open a ``dataset:///relative/folder`` or ``dataset:////absolute/folder`` URL.

    SQLAlchemy's slash convention, as ``duckdb:`` and ``sqlite:`` URLs, with
    ``?view=NAME&trace=true``.
    """
    path = url_path(url, SCHEME)
    query = url.partition("?")[2]
    options = {key: values[-1] for key, values in parse_qs(query).items()}
    unknown = sorted(set(options) - {"view", "trace", "validate"})
    if unknown or path == MEMORY:
        raise InvalidArgumentError(
            f"{url!r}: expected dataset:///relative/folder or dataset:////absolute/folder"
            "[?view=NAME&trace=true&validate=false]"
        )
    require_file(path, url, "dataset folder", folder=True)
    flags = {
        k: options.get(k, d).lower() in ("1", "true", "yes")
        for k, d in (("trace", "false"), ("validate", "true"))
    }
    dataset = open_dataset(path, validate=flags["validate"])
    source: Source = dataset.source(name=options.get("view", "dataset"), trace=flags["trace"])
    return source

"""Opening a lease queue by URL: the in-memory queue of this process or a SQL database.

Kept apart from :mod:`sqlfeed.dispatch.queue` (the interface both backends import), so
the interface never imports its implementations.
"""

from __future__ import annotations

from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import LeaseQueue
from sqlfeed.dispatch.sqlqueue import SQLQueue

__all__ = ["open_queue"]

_MEMORY: dict[str, MemoryQueue] = {}
"""The ``memory://NAME`` queues of this process, by name."""


def open_queue(url: str | LeaseQueue | None) -> LeaseQueue:
    """The queue at ``url``: ``memory://NAME`` (this process), or a SQLAlchemy URL.

    Args:
        url: a queue (returned as is), None (``memory://``), ``memory://NAME`` (the same
            queue for every call with that name in this process) or a SQLite, PostgreSQL
            or MySQL/MariaDB URL.

    Returns:
        The lease queue.
    """
    if isinstance(url, LeaseQueue):
        return url
    if url is None or url.startswith("memory://"):
        name = (url or "memory://").removeprefix("memory://")
        return _MEMORY.setdefault(name, MemoryQueue())
    return SQLQueue(url)

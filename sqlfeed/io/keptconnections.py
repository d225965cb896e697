"""Reader connections that live as long as the thread reading with them.

A reader that keeps its connections (PostgreSQL's ``copy`` and ADBC readers, SQLite's
ADBC reader) opens one connection per thread, runs the
session set-up once on it, and reuses it for every partition the thread reads: a
:class:`ThreadConnections` per source and reader. Each read ends its transaction; a read
that failed is rolled back, and one left unfinished while the server may still be sending
its rows (a stop) drops its connection. Connections close when their thread ends, when the
source closes, and are never shared with a forked child (it opens its own). A read holds
its :class:`KeptConnection` until it ends, whichever thread pulls its batches.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from sqlfeed.dialects import InvalidArgumentError

__all__ = ["KeptConnection", "ThreadConnections"]


class KeptConnection:
    """One thread's connection; closed when neither its thread nor a read holds it.

    A read keeps this object (not only its ``connection``) for as long as it runs: a read
    driven from other threads (DuckDB pulling batches) outlives a foreign thread's storage.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.pid = os.getpid()

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None and self.pid == os.getpid():
            with contextlib.suppress(Exception):  # already broken: nothing to release
                connection.close()

    def __del__(self) -> None:
        self.close()


class ThreadConnections:
    """A connection per thread, opened by ``opener`` on first use and reused after.

    Attributes:
        opened: how many connections were opened so far (each ran the session set-up).
    """

    def __init__(self, opener: Callable[[], Any]) -> None:
        self._opener = opener
        self._local = threading.local()
        self._held: weakref.WeakSet[KeptConnection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0

    def get(self) -> KeptConnection:
        """This thread's connection, opened (and set up) if it has none yet."""
        held: KeptConnection | None = getattr(self._local, "held", None)
        if held is not None and held.connection is not None and held.pid == os.getpid():
            if not getattr(held.connection, "closed", False):  # psycopg: closed or broken
                return held
            held.close()
        if self._closed:
            raise InvalidArgumentError(
                "the source is closed (close() was called, or its with block ended): "
                "open another with sqlfeed.connect(...)"
            )
        connection = self._opener()
        held = KeptConnection(connection)
        with self._lock:
            self._held.add(held)
            self.opened += 1
        self._local.held = held
        return held

    def drop(self, kept: KeptConnection) -> None:
        """Close ``kept`` (broken, or a read left unfinished); its thread's next read opens one."""
        if getattr(self._local, "held", None) is kept:
            self._local.held = None
        kept.close()

    def close(self) -> None:
        """Close every thread's connection; no new ones open after this."""
        self._closed = True
        with self._lock:
            held = list(self._held)
        for one in held:
            one.close()

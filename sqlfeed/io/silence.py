"""A watch on connections that wait on their socket: a dead session's wait ends.

A driver waiting for its server's next bytes waits for ever by default (pymysql has no
read timeout, and a plain one cannot tell a dead socket from a long sort before the first
row). A session the server ended while the client did not hear it (a killed connection
whose close was lost on a loaded host or a broken network path, a host gone) then hangs
the read, and the worker holding it, with its lease kept alive by its heartbeats.

:class:`SilenceGuard` watches the connections registered with it (:meth:`SilenceGuard.watch`):
each counts the reads it makes from its socket (:class:`Watch`). One that has been inside
a read with no new byte for :func:`probe_seconds` is probed from a connection of its own:
the server is asked whether the session is still there (a sort or a lock wait: it is, and
the wait goes on). Only the session's own server saying the session is not there, or
:data:`UNREACHABLE_PROBES` probes in a row that cannot reach the server, shut the
connection's socket: the read fails at once as a lost connection, and the caller's own
recovery takes over (a read reconnects and resumes; a consistent read, whose snapshot
cannot move, fails in one line). Any other answer (an error such as too many connections,
another server behind a balancer) changes nothing.

The engine supplies the probe (:data:`Probe`); one daemon thread per process runs them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALIVE",
    "DEFAULT_PROBE_SECONDS",
    "GONE",
    "PROBE_VARIABLE",
    "UNKNOWN",
    "UNREACHABLE",
    "UNREACHABLE_PROBES",
    "Probe",
    "SilenceGuard",
    "Watch",
    "probe_seconds",
]

_log = logging.getLogger("sqlfeed.io")

PROBE_VARIABLE = "SQLFEED_SILENCE_PROBE_SECONDS"
"""Seconds a read may wait with no byte before its session is probed (``0``: never)."""

DEFAULT_PROBE_SECONDS = 30.0

ALIVE, GONE, UNKNOWN, UNREACHABLE = "alive", "gone", "unknown", "unreachable"

UNREACHABLE_PROBES = 3
"""Probes in a row that cannot reach the server before a silent read is given up: a busy
server, slow to accept one probe, is not a dead one."""

Probe = Callable[[], str]
"""Asks the server, on a connection of its own and within its own timeouts, whether the
watched session is there: :data:`ALIVE`; :data:`GONE` only when the probe reached the very
server of the session and it answered that the session is not there; :data:`UNREACHABLE`
(no connection, no answer in time); :data:`UNKNOWN` (any other answer: another server
behind a balancer, an error: nothing is known)."""


def probe_seconds() -> float:
    """:data:`PROBE_VARIABLE` when set (a number of seconds), else :data:`DEFAULT_PROBE_SECONDS`."""
    text = os.environ.get(PROBE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_PROBE_SECONDS
    try:
        value = float(text)
    except ValueError:
        _log.warning(
            "%s=%r is not a number of seconds: using %s",
            PROBE_VARIABLE,
            text,
            DEFAULT_PROBE_SECONDS,
        )
        return DEFAULT_PROBE_SECONDS
    return max(0.0, value)


@dataclass
class Watch:
    """One connection's reading, counted by the driver's read function (:meth:`wrap`)."""

    sock: Callable[[], socket.socket | None]
    """The connection's socket now (None: closed)."""
    probe: Probe
    label: str
    inside: int = 0
    """Reads in progress (0 or 1: a connection is used by one thread at a time)."""
    reads: int = 0
    """Reads begun so far: a change means the connection is moving."""
    seen: tuple[int, float] = field(default=(0, 0.0))
    """(:attr:`reads`, when the guard first saw that count while inside a read)."""
    unreachable: int = 0
    """Probes in a row that could not reach the server."""

    def wrap(self, read: Callable[..., Any]) -> Callable[..., Any]:
        """``read`` counted: the driver's one function that waits for the server's bytes."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            self.inside += 1
            try:
                return read(*args, **kwargs)
            finally:
                self.inside -= 1

        return counted


class SilenceGuard:
    """The process's watch over registered connections (see the module's docstring)."""

    def __init__(self) -> None:
        self._watches: weakref.WeakKeyDictionary[Any, Watch] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.shut = 0
        """Sockets shut so far (for tests and logs)."""

    def watch(self, connection: Any, watch: Watch) -> None:
        """Watch ``connection`` (kept weakly: forgotten when the connection is)."""
        if probe_seconds() <= 0:
            return
        with self._lock:
            self._watches[connection] = watch
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sqlfeed-silence-guard", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            limit = probe_seconds()
            time.sleep(min(1.0, max(0.05, limit / 4)) if limit > 0 else 1.0)
            if limit > 0:
                with contextlib.suppress(Exception):  # the guard itself never dies
                    self.check(limit)

    def check(self, limit: float, now: float | None = None) -> None:
        """Probe every connection inside one read for ``limit`` s; shut those gone."""
        now = time.monotonic() if now is None else now
        with self._lock:
            watches = list(self._watches.values())
        for watch in watches:
            if not watch.inside:
                continue
            count, since = watch.seen
            if count != watch.reads or not since:
                watch.seen = (watch.reads, now)
                continue
            if now - since < limit:
                continue
            verdict = _probed(watch)
            if watch.reads != count or not watch.inside:
                watch.unreachable = 0
                continue  # it moved meanwhile
            watch.unreachable = watch.unreachable + 1 if verdict == UNREACHABLE else 0
            if verdict == GONE or watch.unreachable >= UNREACHABLE_PROBES:
                self._shut(watch, now - since)
                watch.unreachable = 0
            watch.seen = (watch.reads, time.monotonic())  # alive: wait another limit

    def _shut(self, watch: Watch, waited: float) -> None:
        sock = watch.sock()
        if sock is None:
            return
        _log.warning(
            "%s: no byte for %.0fs and the server no longer has the session (or cannot be "
            "reached): closing the connection, as a lost one (%s sets the wait)",
            watch.label,
            waited,
            PROBE_VARIABLE,
        )
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        self.shut += 1


def _probed(watch: Watch) -> str:
    try:
        return watch.probe()
    except Exception as err:  # a probe's own failure says nothing: the next check asks again
        _log.debug("%s: the silence probe failed: %s", watch.label, err)
        return UNKNOWN


GUARD = SilenceGuard()
"""The process's guard."""


def _after_fork() -> None:
    """A forked child starts its own guard, watching none of its parent's connections.

    A parent's read in progress would look silent for ever; a lock a parent's thread held
    is not held in the child.
    """
    GUARD._lock = threading.Lock()
    GUARD._thread = None
    GUARD._watches = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_after_fork)

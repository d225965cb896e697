"""SIGTERM for worker processes: the handler only notes the signal.

Leases go back on the normal path, and the process exits 143 within a deadline whatever it
was doing.

A signal handler runs in the main thread between two bytecodes, possibly while that
thread is inside one of its own queue transactions (holding SQLite's write lock or a row
lock) or inside a lock of a driver or of the connection pool. A handler that talks to the
queue would then wait for itself. So :func:`on_sigterm` installs, once per process:

* a SIGTERM handler that only stores the signal number (no lock, no I/O);
* the signal wake-up fd (:func:`signal.set_wakeup_fd`): the C-level handler writes the
  signal number to a socket at once, even while the main thread is blocked in a driver
  call and cannot run the Python handler yet;
* a watchdog thread reading that socket. On SIGTERM it asks every registered worker to
  stop: each stops at its next safe point (before handing out a batch, while waiting for
  work, between retries), acknowledges what its consumer took, gives its leases back and
  raises ``SystemExit(143)`` out of ``deliveries()``. If the process is still alive
  :data:`RELEASE_MARGIN` seconds before the deadline (the main thread is stuck in a long
  read, in user code, or in a transaction another process blocks), the watchdog gives the
  leases back itself, then ends the process with exit code 143 at the deadline.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import threading
import time
import weakref
from types import FrameType
from typing import Protocol

from sqlfeed.dialects import InvalidArgumentError

__all__ = ["DEADLINE_SECONDS", "RELEASE_MARGIN", "Stoppable", "on_sigterm"]

DEADLINE_SECONDS = 5.0
"""Seconds from SIGTERM to the process's exit, at the latest."""
RELEASE_MARGIN = 1.5
"""Seconds before the deadline at which the watchdog gives back the leases still held."""


class Stoppable(Protocol):
    """What the watchdog needs of a worker."""

    def request_stop(self, signum: int) -> None:
        """Stop at the next safe point; called from the watchdog thread, never a handler."""
        ...

    def give_back(self, timeout: float) -> None:
        """Give back the leases still held, waiting at most ``timeout`` seconds per lease."""
        ...


class _Terminator:
    """The process's SIGTERM handler, wake-up socket and watchdog thread."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.signum = 0
        self.workers: weakref.WeakSet[Stoppable] = weakref.WeakSet()
        self._receive, self._send = socket.socketpair()
        self._receive.setblocking(False)
        self._send.setblocking(False)
        self._thread = threading.Thread(target=self._watch, daemon=True, name="sqlfeed-sigterm")

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handler)
        previous = signal.set_wakeup_fd(self._send.fileno(), warn_on_full_buffer=False)
        if previous != -1:  # someone else's (an asyncio loop): keep it; the watchdog polls
            signal.set_wakeup_fd(previous)
        self._thread.start()

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum  # nothing else: see the module's docstring

    def _watch(self) -> None:
        while not self.signum:
            ready, _, _ = select.select([self._receive], [], [], 0.1)
            if ready:
                try:
                    data = self._receive.recv(256)
                except BlockingIOError:
                    continue
                if signal.SIGTERM in data:
                    self.signum = signal.SIGTERM
        started = time.monotonic()
        workers = list(self.workers)
        for worker in workers:
            worker.request_stop(self.signum)
        time.sleep(max(0.0, self.deadline - RELEASE_MARGIN))
        giving = threading.Thread(
            target=_give_back, args=(workers, RELEASE_MARGIN / 2), daemon=True
        )
        giving.start()
        giving.join(max(0.0, self.deadline - 0.1 - (time.monotonic() - started)))
        os._exit(128 + self.signum)


def _give_back(workers: list[Stoppable], timeout: float) -> None:
    for worker in workers:
        with contextlib.suppress(Exception):  # the process exits next; the leases expire
            worker.give_back(timeout)


_terminator: _Terminator | None = None
_install_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child (a data loader's worker, say) has no watchdog.

    SIGTERM ends it as usual, and its signals must not wake the parent's watchdog through
    the shared socket.
    """
    global _terminator
    if _terminator is not None:
        _terminator = None
        with contextlib.suppress(ValueError):  # forked from a thread other than main
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def on_sigterm(worker: Stoppable, deadline: float = DEADLINE_SECONDS) -> None:
    """Stop ``worker`` on SIGTERM, give its leases back, and exit 143 within ``deadline`` s.

    Installs the process's handler on the first call (the deadline of that call holds for
    every worker of the process); later calls add their worker.

    Raises:
        InvalidArgumentError: not called from the main thread (only it may set handlers).
    """
    global _terminator
    if threading.current_thread() is not threading.main_thread():
        raise InvalidArgumentError("release_on_sigterm() must be called from the main thread")
    with _install_lock:
        if _terminator is None:
            terminator = _Terminator(deadline)
            terminator.install()
            _terminator = terminator
            os.register_at_fork(after_in_child=_forget_in_child)
        _terminator.workers.add(worker)
        if _terminator.signum:  # already terminating: this one stops at once too
            worker.request_stop(_terminator.signum)

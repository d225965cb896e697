"""A TCP proxy in front of a database server that can go silent, as a dead peer does.

:class:`SilentProxy` forwards every connection made to its port to the server; while
:meth:`~SilentProxy.silence` is on, it holds what either side sends without a word (no
reset, no close): a client reading its socket then waits as it would on a server whose
host froze or whose network went away. Closing the proxy ends every connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

__all__ = ["SilentProxy"]


class SilentProxy:
    """Forwards ``127.0.0.1:port`` to ``host:upstream``; silent while :attr:`silent` is set.

    ``port``: the port to listen on (0: one the system picks).
    """

    def __init__(self, host: str, upstream: int, port: int = 0) -> None:
        self._target = (host, upstream)
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self.silent = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._frozen: set[int] = set()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def silence(self) -> None:
        """From now on nothing passes either way (until :meth:`speak`)."""
        self.silent.set()

    def freeze_connections(self) -> None:
        """The connections open now go silent for good (a path that died: a killed
        session's close never arrives); new ones flow."""
        self._frozen.update(id(one) for one in self._sockets)

    def speak(self) -> None:
        """Forward again (what was held goes on its way)."""
        self.silent.clear()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            for one, other in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(one, other), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(65536)
                while (self.silent.is_set() or id(source) in self._frozen) and (
                    not self._closed.is_set()
                ):
                    time.sleep(0.02)  # held: the other side hears nothing
                if not data or self._closed.is_set():
                    break
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for one in self._sockets:
            with contextlib.suppress(OSError):
                one.close()

    def __enter__(self) -> SilentProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

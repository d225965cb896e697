"""A byte relay that lets a process in its own network namespace reach the test database.

For the multi-host test (``tests/dispatch/test_multihost.py``): a worker in a network namespace
sees only its own loopback, as on another host. Inside the namespace,
``python tests/scripts/netns_relay.py PORT SOCKET`` listens on ``127.0.0.1:PORT`` and relays each
connection to the Unix socket ``SOCKET`` (a file, which crosses network namespaces); in
the test process, :func:`serve` relays that socket to the database's TCP address. Every
byte stays on this machine. The relays stop when the test stops them (or is killed).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy ``source`` to ``target`` until either end closes; then close both."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


def serve(
    listener: socket.socket, connect: Callable[[], socket.socket], stop: threading.Event
) -> None:
    """Accept connections on ``listener`` and relay each to a new ``connect()``, until ``stop``."""
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        client.settimeout(None)
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()
    listener.close()


def unix_connector(path: str) -> Callable[[], socket.socket]:
    """A function connecting to the Unix socket ``path``."""

    def connect() -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        return conn

    return connect


def main() -> None:
    """``PORT SOCKET``: relay ``127.0.0.1:PORT`` (in this namespace) to ``SOCKET``."""
    port, path = int(sys.argv[1]), sys.argv[2]
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    serve(listener, unix_connector(path), threading.Event())


if __name__ == "__main__":
    main()

"""The silence guard's decisions (:mod:`sqlfeed.io.silence`), on a socket pair: only a
connection inside one read with no new byte for the limit is probed, and only a session
the probe finds gone has its socket shut (the MariaDB cases: tests/io/test_silent_reads.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from sqlfeed.io import silence


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def _watched(
    guard: silence.SilenceGuard, sock: socket.socket, verdicts: list[str]
) -> tuple[silence.Watch, list[str]]:
    asked: list[str] = []

    def probe() -> str:
        asked.append("probe")
        return verdicts.pop(0)

    watch = silence.Watch(lambda: sock, probe, "test read")
    guard._watches[sock] = watch  # registered without the guard's thread: checks run here
    return watch, asked


def test_a_silent_read_is_probed_and_shut_only_when_its_session_is_gone(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _ = pair
    guard = silence.SilenceGuard()
    watch, asked = _watched(guard, ours, [silence.ALIVE, silence.UNKNOWN, silence.GONE])
    watch.reads, watch.inside = 1, 1  # inside a read
    guard.check(5, now=100.0)  # first seen
    guard.check(5, now=104.0)
    assert asked == []  # not silent long enough
    guard.check(5, now=105.5)
    assert asked == ["probe"]  # alive: a long sort, left alone
    assert guard.shut == 0
    watch.seen = (watch.reads, 100.0)
    guard.check(5, now=106.0)  # the server answered with an error: it is alive
    assert (asked, guard.shut) == (["probe", "probe"], 0)
    watch.seen = (watch.reads, 100.0)
    guard.check(5, now=106.0)
    assert guard.shut == 1
    ours.settimeout(1)
    assert ours.recv(1) == b""  # shut: a read blocked on it ends at once


def test_a_read_that_moves_or_a_connection_at_rest_is_never_probed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _ = pair
    guard = silence.SilenceGuard()
    watch, asked = _watched(guard, ours, [silence.GONE])
    watch.reads, watch.inside = 1, 0  # between reads: the consumer is busy
    for now in (100.0, 200.0, 300.0):
        guard.check(5, now=now)
    watch.inside = 1
    for now in (400.0, 404.0, 408.0, 412.0):
        watch.reads += 1  # a new packet every 4 s: moving
        guard.check(5, now=now)
    assert (asked, guard.shut) == ([], 0)


def test_the_probe_period_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(silence.PROBE_VARIABLE, raising=False)
    assert silence.probe_seconds() == silence.DEFAULT_PROBE_SECONDS
    monkeypatch.setenv(silence.PROBE_VARIABLE, "2.5")
    assert silence.probe_seconds() == 2.5
    monkeypatch.setenv(silence.PROBE_VARIABLE, "0")
    assert silence.probe_seconds() == 0  # never: connections are not even watched
    monkeypatch.setenv(silence.PROBE_VARIABLE, "soon")
    assert silence.probe_seconds() == silence.DEFAULT_PROBE_SECONDS


def test_a_server_that_cannot_be_reached_is_given_up_only_after_probes_in_a_row(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A busy server slow to accept one probe is not a dead one: only
    ``UNREACHABLE_PROBES`` unreachable verdicts in a row shut the read; an answer between
    them starts the count again."""
    ours, _ = pair
    guard = silence.SilenceGuard()
    verdicts = [silence.UNREACHABLE, silence.UNREACHABLE, silence.ALIVE]
    verdicts += [silence.UNREACHABLE] * silence.UNREACHABLE_PROBES
    watch, asked = _watched(guard, ours, verdicts)
    watch.reads, watch.inside = 1, 1
    guard.check(5, now=100.0)
    for _ in range(3 + silence.UNREACHABLE_PROBES - 1):
        watch.seen = (watch.reads, 100.0)
        guard.check(5, now=106.0)
    assert (len(asked), guard.shut) == (3 + silence.UNREACHABLE_PROBES - 1, 0)
    watch.seen = (watch.reads, 100.0)
    guard.check(5, now=106.0)
    assert guard.shut == 1


def test_a_forked_child_watches_none_of_its_parents_connections(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _ = pair
    silence.GUARD._watches[ours] = silence.Watch(lambda: ours, lambda: silence.GONE, "parent")
    try:
        child = os.fork()
        if child == 0:  # the child: nothing of the parent's is watched
            os._exit(0 if len(silence.GUARD._watches) == 0 else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ours in silence.GUARD._watches  # the parent's own are kept
    finally:
        silence.GUARD._watches.pop(ours, None)

"""A queue call's retries (:func:`sqlfeed.dispatch.sessions.retrying`) on a loaded machine.

Under load a try can outlast the call's whole retry budget: a queue session descheduled
inside its transaction is ended by the server (PostgreSQL's idle-in-transaction timeout),
and the one try took 5.5 s of a 3 s budget. A lost connection is tried again on a new
connection (``job create`` failed on 'server closed the connection unexpectedly, still
failing after 1 tries' while a dozen processes opened a queue at once); a lock that stays
held still fails as busy after the budget.
"""

from __future__ import annotations

import time

import pytest

from sqlfeed.dialects import EngineError
from sqlfeed.dispatch.queue import QueueBusyError
from sqlfeed.dispatch.sessions import MIN_TRIES, retrying


def _failing(message: str, fails: int, seconds: float) -> tuple[list[int], object]:
    tries: list[int] = []

    def action() -> str:
        tries.append(1)
        if len(tries) <= fails:
            time.sleep(seconds)  # one try longer than the whole budget
            error = EngineError(f"queue q: {message}")
            error.transient = True  # type: ignore[attr-defined]
            raise error
        return "done"

    return tries, action


def test_a_lost_connection_is_tried_again_after_a_try_longer_than_the_budget() -> None:
    lost = "server closed the connection unexpectedly"
    tries, action = _failing(lost, fails=MIN_TRIES - 1, seconds=0.3)
    assert retrying(action, (), 0.1) == "done"  # type: ignore[arg-type]
    assert len(tries) == MIN_TRIES


def test_a_connection_lost_every_time_still_ends_in_a_busy_error() -> None:
    tries, action = _failing("server closed the connection unexpectedly", 99, 0.05)
    with pytest.raises(QueueBusyError, match=f"after {MIN_TRIES} tries"):
        retrying(action, (), 0.01)  # type: ignore[arg-type]
    assert len(tries) == MIN_TRIES


def test_a_lock_held_longer_than_the_budget_fails_as_busy_after_one_try() -> None:
    tries, action = _failing("Lock wait timeout exceeded; try restarting transaction", 9, 0.2)
    with pytest.raises(QueueBusyError, match="after 1 tries"):
        retrying(action, (), 0.1)  # type: ignore[arg-type]
    assert len(tries) == 1

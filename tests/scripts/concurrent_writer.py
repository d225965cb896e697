"""The writes of tests/engines/test_concurrent_writes.py: transactions that keep the table's total.

Each transaction moves value between two rows (the total never changes), or inserts or
deletes a pair of rows whose values cancel out. Light on imports: a SQLite writer runs it
in a process of its own (:func:`write_sqlite`), started with ``spawn``.
"""

from __future__ import annotations

import random
import sqlite3
import time
from typing import Any

ROWS = 3_000
"""The rows that always exist (ids 0 .. ROWS - 1)."""
DEADLINE = 60.0
"""Seconds a writer runs at most."""


class Transactions:
    """The writer's state: its random numbers and the pairs it inserted."""

    def __init__(self, table: str, seed: int) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self.pairs: list[tuple[int, int]] = []
        self.next_id = 10 * ROWS

    def one(self, connection: Any) -> None:
        """Run and commit one transaction on ``connection`` (a DB-API connection)."""
        cursor = connection.cursor()
        t = self.table
        roll = self.rng.random()
        if roll < 0.15 or (roll < 0.3 and not self.pairs):
            a, self.next_id = self.next_id, self.next_id + 2
            value = self.rng.randint(1, 50)
            cursor.execute(f"INSERT INTO {t} VALUES ({a}, {value}, 0, '{'n' * 150}')")
            cursor.execute(f"INSERT INTO {t} VALUES ({a + 1}, {-value}, 0, '{'n' * 150}')")
            self.pairs.append((a, a + 1))
        elif roll < 0.3:
            a, b = self.pairs.pop(self.rng.randrange(len(self.pairs)))
            cursor.execute(f"DELETE FROM {t} WHERE id IN ({a}, {b})")
        else:
            a, b = self.rng.sample(range(ROWS), 2)
            amount = self.rng.randint(1, 9)
            cursor.execute(f"UPDATE {t} SET val = val - {amount}, ver = ver + 1 WHERE id = {a}")
            cursor.execute(f"UPDATE {t} SET val = val + {amount}, ver = ver + 1 WHERE id = {b}")
        cursor.close()
        connection.commit()


def write_sqlite(path: str, table: str, seed: int, commits: Any, stop: Any, errors: Any) -> None:
    """Commit transactions on the SQLite file ``path`` until ``stop`` (or the deadline),
    counting them in ``commits``; an error goes to ``errors``."""
    writes = Transactions(table, seed)
    connection = sqlite3.connect(path, timeout=30)
    deadline = time.monotonic() + DEADLINE
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            writes.one(connection)
            with commits.get_lock():
                commits.value += 1
    except BaseException as err:  # reported by the test
        errors.put(repr(err))
    finally:
        connection.close()

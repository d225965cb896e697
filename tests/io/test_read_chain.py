"""The one fallback chain (``sqlfeed.io.readers.read_in_order``) never delivers a row twice.

Readers here are small stand-ins with the real ``Reader`` interface, so each rule of the
chain is shown on exactly the failure it is about; the engine tests
(``tests/io/test_readers_protocol.py``) show the same rules with the real drivers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from sqlfeed.io.readers import Reader, ReadRequest, StaleConnection, read_in_order

SCHEMA = pa.schema([("x", pa.int64())])


class _Owner:
    """What a reader holds a weak reference to."""


OWNER = _Owner()


def _batch(*values: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.int64())], schema=SCHEMA)


class Scripted(Reader):
    """Yields its batches, raising ``stale`` (a StaleConnection) after ``fail_after`` of them,
    ``stale_times`` times in all."""

    name = "scripted"

    def __init__(self, batches: list[pa.RecordBatch], fail_after: int, stale_times: int) -> None:
        super().__init__(OWNER)
        self.script, self.fail_after, self.stale_times, self.calls = (
            batches,
            fail_after,
            stale_times,
            0,
        )

    def carries(self, request: ReadRequest) -> bool:
        return True

    def batches(self, request: ReadRequest) -> Iterator[pa.RecordBatch]:
        self.calls += 1
        for i, batch in enumerate(self.script):
            if i == self.fail_after and self.calls <= self.stale_times:
                raise StaleConnection(ConnectionError("server closed the connection"))
            yield batch


def _rows(readers: list[Reader]) -> list[int]:
    request = ReadRequest("SELECT x FROM t", SCHEMA)
    return [v for b in read_in_order("postgres", readers, request) for v in b.column(0).to_pylist()]


def test_a_stale_connection_before_the_first_row_is_retried_once() -> None:
    reader = Scripted([_batch(1, 2), _batch(3)], fail_after=0, stale_times=1)
    assert _rows([reader]) == [1, 2, 3]
    assert reader.calls == 2


def test_a_stale_connection_twice_is_the_drivers_error() -> None:
    reader = Scripted([_batch(1)], fail_after=0, stale_times=2)
    with pytest.raises(ConnectionError, match="server closed"):
        _rows([reader])


def test_a_stale_connection_after_a_batch_is_never_retried() -> None:
    # a retry would read the query again from its first row: rows 1 and 2 twice
    reader = Scripted([_batch(1, 2), _batch(3)], fail_after=1, stale_times=1)
    delivered: list[int] = []

    def read() -> None:
        request = ReadRequest("SELECT x FROM t", SCHEMA)
        for batch in read_in_order("postgres", [reader], request):
            delivered.extend(batch.column(0).to_pylist())

    with pytest.raises(ConnectionError, match="server closed"):
        read()
    assert delivered == [1, 2]
    assert reader.calls == 1

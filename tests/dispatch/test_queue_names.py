"""Job and worker names are compared byte for byte on every queue backend.

MySQL/MariaDB's default collations ignore case and trailing spaces: ``ISO-A`` named job
``iso-a`` (a worker consumed another job's partitions, a delete removed another job).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import sqlfeed
from sqlfeed.dialects import get_dialect
from sqlfeed.dispatch.memory import MemoryQueue
from sqlfeed.dispatch.queue import JobSpec, Lease, LeaseQueue, UnknownJobError
from sqlfeed.dispatch.sqlqueue import SQLQueue
from sqlfeed.dispatch.sqlschema import name_columns, queue_tables
from tests.dispatch.test_leases import BACKENDS, queue_url
from tests.dispatch.test_queue_tables import Fresh, _fresh
from tests.helpers.cli import run_cli

pytestmark = pytest.mark.source(tables={"t": "SELECT range AS id FROM range(1000)"})


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LeaseQueue]:
    backend = request.param
    opened: LeaseQueue = (
        MemoryQueue() if backend == "memory" else SQLQueue(queue_url(backend, tmp_path))
    )
    yield opened
    opened.close()


def _spec(source: sqlfeed.Source, name: str, partitions: int) -> JobSpec:
    plan = sqlfeed.plan("SELECT id FROM t", source, partitions=partitions, strategy="ctid")
    return JobSpec(name, plan)


def _names() -> list[str]:
    """Three job names one collation or another confuses: case, a trailing space."""
    base = f"iso-{uuid.uuid4().hex[:8]}"
    return [base, base.upper(), f"{base} "]


def test_mysql_and_mariadb_name_columns_are_binary_and_no_pad() -> None:
    mysql = get_dialect("mysql")
    assert mysql.queue_name_collation("10.11.6-MariaDB-0+deb12u1") == "utf8mb4_nopad_bin"
    assert mysql.queue_name_collation("8.0.36") == "utf8mb4_0900_bin"
    for byte_wise in ("postgres", "sqlite"):  # their default collations compare bytes
        assert get_dialect(byte_wise).queue_name_collation("") is None
        assert get_dialect(byte_wise).queue_collations_sql(["sqlfeed_jobs"]) is None


def test_jobs_differing_in_case_or_trailing_spaces_stay_apart(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    names = _names()
    for i, name in enumerate(names):  # each its own definition: a clash would be refused
        queue.create_job(_spec(source, name, partitions=2 + i))
    assert [queue.job(n).plan.num_partitions for n in names] == [2, 3, 4]
    lease = queue.acquire(names[1], "w")
    assert isinstance(lease, Lease)
    assert lease.job == names[1]
    assert [queue.status(n).per_epoch[0]["leased"] for n in names] == [0, 1, 0]
    queue.record(names[0], 1, "w", [])
    queue.record(names[2], 2, "w", [])
    assert [queue.checkpoints(n) for n in names] == [[1], [], [2]]
    queue.delete(names[1])
    with pytest.raises(UnknownJobError):
        queue.job(names[1])
    assert [queue.status(n).partitions for n in (names[0], names[2])] == [2, 4]
    assert queue.checkpoints(names[0]) == [1]


def test_workers_differing_in_case_or_trailing_spaces_stay_apart(
    queue: LeaseQueue, source: sqlfeed.Source
) -> None:
    spec = queue.create_job(_spec(source, f"job-{uuid.uuid4().hex[:8]}", partitions=4))
    workers = ["w", "W", "w "]
    leases = [queue.acquire(spec.name, w) for w in workers]
    assert all(isinstance(lease, Lease) for lease in leases)
    seen = {row["worker"] for row in queue.status(spec.name).workers}
    assert seen == set(workers)
    assert sorted(w for w, _, _ in queue.leases(spec.name)) == sorted(workers)


def test_cli_commands_name_only_their_own_job(tmp_path: Path, source: sqlfeed.Source) -> None:
    """``job delete --job ISO-A`` and ``worker --job ISO-A`` on a MariaDB queue holding
    ``iso-a``: no such job (before, iso-a was deleted, or its partitions consumed)."""
    url = queue_url("mysql", tmp_path)
    queue = SQLQueue(url)
    name = _names()[0]
    try:
        queue.create_job(_spec(source, name, partitions=2))
        for other, says in ((name.upper(), "no job named"), (f"{name} ", "is not a job name")):
            deleted = run_cli(["job", "delete", "--queue", url, "--job", other])
            assert deleted.code == 2, deleted
            assert f"{other!r}" in deleted.err, deleted.err
            assert says in deleted.err, deleted.err
            worker = ["worker", "--queue", url, "--job", other, "--db", "duckdb:///:memory:"]
            consumed = run_cli(worker)
            assert consumed.code == 2, consumed
            assert f"{other!r}" in consumed.err, consumed.err
            assert says in consumed.err, consumed.err
        status = queue.status(name)
        assert status.per_epoch[0]["pending"] == 2
    finally:
        queue.delete(name)
        queue.close()


def _collations(url: str) -> set[str]:
    """The collations of the name columns of the MariaDB queue at ``url``."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            rows = c.exec_driver_sql(
                "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = DATABASE()"
            ).all()
    finally:
        engine.dispose()
    wanted = {(c.table.name, c.name) for c in name_columns(queue_tables())}
    return {str(n) for t, c, n in rows if (t, c) in wanted}


def _make_old(url: str) -> None:
    """Give the name columns of the queue at ``url`` the server's default collation, as
    an older sqlfeed made them."""
    engine = sa.create_engine(url)
    old = queue_tables("utf8mb4_general_ci")
    try:
        with engine.begin() as c:
            for table in old.sorted_tables:
                columns = [col for col in name_columns(old) if col.table is table]
                ddl = ", ".join(
                    f"MODIFY {sa.schema.CreateColumn(col).compile(dialect=c.dialect)}"
                    for col in columns
                )
                c.exec_driver_sql(f"ALTER TABLE {table.name} {ddl}")
    finally:
        engine.dispose()


def test_an_old_mariadb_queue_gets_byte_wise_names_once(
    tmp_path: Path, source: sqlfeed.Source
) -> None:
    fresh: Fresh
    with _fresh("mysql", tmp_path) as fresh:
        url, _ = fresh
        made = SQLQueue(url)
        name = _names()[0]
        made.create_job(_spec(source, name, partitions=2))
        made.close()
        _make_old(url)
        assert _collations(url) == {"utf8mb4_general_ci"}
        reader = SQLQueue(url)  # any opening updates it, under the lock
        try:
            assert _collations(url) == {"utf8mb4_nopad_bin"}
            assert reader.status(name).partitions == 2  # its jobs kept
            reader.create_job(_spec(source, name.upper(), partitions=3))
            assert reader.job(name).plan.num_partitions == 2
        finally:
            reader.close()
        with pytest.MonkeyPatch.context() as patch:  # nothing left to change
            patch.setattr(SQLQueue, "_build", lambda _: pytest.fail("updated twice"))
            SQLQueue(url).close()

"""Elastic workers on separate "hosts" that share only the queue URL and the data URL.

Each host is a process tree with a working folder, HOME and TMPDIR of its own and, when
this machine allows it (root and ``ip netns``), a network namespace of its own: its
workers see only their own loopback, where a relay (``tests/scripts/netns_relay.py``) forwards
``127.0.0.1:15432`` to the test's PostgreSQL. Without namespaces the hosts are plain
processes. Two hosts run with their wall clocks an hour ahead and behind: leases are
timed by the database's clock, so the skew must change nothing, and the queue's records
of every worker must carry the database's time, not the worker's.

A job of 12 hash partitions x 2 epochs is created on one host; three workers start on
three others, one leaves (SIGTERM) once it has written a batch and a fourth joins then.
Every epoch's batches, gathered from all the hosts' folders, must be exactly the query's
rows, and every partition done once per epoch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import get_engine
from tests.helpers.engines import POSTGRES_URL, Engine
from tests.scripts.netns_relay import serve

pytestmark = [pytest.mark.slow, pytest.mark.engine]

RELAY = Path(__file__).resolve().parents[1] / "scripts" / "netns_relay.py"
NS_PORT = 15432
SKEW_SECONDS = 3600.0
PARTITIONS, EPOCHS = 12, 2

SITECUSTOMIZE = """\
import os, time
_skew = float(os.environ["SQLFEED_TEST_CLOCK_SKEW"])
_time, _time_ns = time.time, time.time_ns
time.time = lambda: _time() + _skew
time.time_ns = lambda: _time_ns() + int(_skew * 1e9)
with open(os.environ["SQLFEED_TEST_CLOCK_LOG"], "w") as log:
    log.write(repr(time.time()))
"""
"""Imported at interpreter start on a skewed host: its wall clock is off by the skew."""


@dataclass
class Host:
    """A simulated host: a folder, an environment, and how to reach the database."""

    name: str
    folder: Path
    db_netloc: str
    prefix: list[str] = field(default_factory=list)
    """``ip netns exec NS`` when the host has a network namespace of its own."""
    skew: float = 0.0

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SQLFEED_TEST_CLOCK")}
        env.update(HOME=str(self.folder), TMPDIR=str(self.folder / "tmp"))
        env.pop("PYTHONPATH", None)
        if self.skew:
            clock = self.folder / "clock"
            clock.mkdir(exist_ok=True)
            (clock / "sitecustomize.py").write_text(SITECUSTOMIZE)
            env.update(
                PYTHONPATH=str(clock),
                SQLFEED_TEST_CLOCK_SKEW=str(self.skew),
                SQLFEED_TEST_CLOCK_LOG=str(self.folder / "clock.log"),
            )
        return env

    def sqlfeed(self, *args: str) -> subprocess.Popen[str]:
        """Start ``sqlfeed ARGS`` on this host."""
        command = [*self.prefix, sys.executable, "-m", "sqlfeed", *args]
        return subprocess.Popen(
            command,
            cwd=self.folder,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str) -> str:
        proc = self.sqlfeed(*args)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"sqlfeed {args[:2]} on {self.name} failed: {err}"
        return out

    def batches(self) -> list[Path]:
        return sorted((self.folder / "out").glob("epoch=*/part-*.parquet"))


@contextlib.contextmanager
def hosts(count: int, skews: dict[int, float]) -> Iterator[tuple[list[Host], bool]]:
    """``count`` hosts (network namespaces when possible) and whether they are namespaced."""
    pg = urlparse(POSTGRES_URL)
    with contextlib.ExitStack() as stack:
        root = Path(tempfile.mkdtemp(prefix="sqlfeed-mh-"))
        stack.callback(shutil.rmtree, root, True)
        namespaced = _try_namespaces(stack, root, count, pg.hostname or "127.0.0.1", pg.port)
        user = pg.netloc.rpartition("@")[0]
        made = []
        for i in range(count):
            folder = root / f"host{i}"
            (folder / "tmp").mkdir(parents=True)
            if namespaced:
                netloc = f"{user}@127.0.0.1:{NS_PORT}"
                prefix = ["ip", "netns", "exec", namespaced[i]]
            else:
                netloc, prefix = pg.netloc, []
            made.append(Host(f"host{i}", folder, netloc, prefix, skews.get(i, 0.0)))
        yield made, bool(namespaced)


def _try_namespaces(
    stack: contextlib.ExitStack, root: Path, count: int, db_host: str, db_port: int | None
) -> list[str]:
    """Make ``count`` namespaces, each with a relay to the database; [] when not allowed."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    tag = uuid.uuid4().hex[:6]
    names = [f"sqlfeed-{tag}-{i}" for i in range(count)]
    for name in names:
        made = subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False)
        if made.returncode != 0:
            return []
        stack.callback(subprocess.run, ["ip", "netns", "delete", name], check=False)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    path = str(root / "pg.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    stop = threading.Event()
    address = (db_host, db_port or 5432)
    relay = threading.Thread(
        target=serve,
        args=(listener, lambda: socket.create_connection(address), stop),
        daemon=True,
    )
    relay.start()
    stack.callback(stop.set)
    for name in names:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, str(RELAY), str(NS_PORT), path],
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(_stop, proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    return names


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def _db_clock(engine: Engine) -> float:
    return float(engine.rows("SELECT EXTRACT(EPOCH FROM clock_timestamp())")[0][0])


def _wait_for_a_batch(host: Host, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not host.batches() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _epoch_rows(workers: list[Host], epoch: int) -> Counter[tuple[Any, ...]]:
    """The rows of ``epoch`` over every host's files, each (partition, batch) once.

    A batch handed out but not acknowledged when its worker left is delivered again, to
    another worker: both copies must be the same rows.
    """
    seen: dict[str, pa.Table] = {}
    for host in workers:
        for path in (host.folder / "out" / f"epoch={epoch}").glob("part-*.parquet"):
            table = pq.read_table(path)
            if path.name in seen:
                assert seen[path.name].equals(table), f"{path.name} differs between hosts"
            seen[path.name] = table
    rows: Counter[tuple[Any, ...]] = Counter()
    for table in seen.values():
        rows.update(tuple(r.values()) for r in table.to_pylist())
    return rows


def test_workers_on_separate_hosts_share_only_the_queue_and_the_data() -> None:
    engine = get_engine("postgres")
    rows = [(i, None if i % 9 == 0 else (i * 7919) % 1000 - 500, i * -0.5) for i in range(3000)]
    engine.create_table("mh_events", [("id", "bigint"), ("k", "bigint"), ("v", "float")], rows)
    sql = f"SELECT id, k, v FROM {engine.qualify('mh_events')}"
    expected = Counter(engine.rows(sql))
    job = f"mh-{uuid.uuid4().hex[:8]}"
    skews = {2: SKEW_SECONDS, 3: -SKEW_SECONDS}
    with hosts(5, skews) as (machines, namespaced):
        coordinator, leaver, ahead, behind, joiner = machines
        data = f"postgresql+psycopg://{coordinator.db_netloc}/{urlparse(POSTGRES_URL).path[1:]}"
        queue = f"{data}?options=-csearch_path%3D{engine.schema}"
        started = _db_clock(engine)
        created = json.loads(
            coordinator.run(
                "job",
                "create",
                "--queue",
                queue,
                "--job",
                job,
                "--db",
                data,
                "--strategy",
                "hash",
                "-m",
                str(PARTITIONS),
                "--epochs",
                str(EPOCHS),
                "--lease-ttl",
                "5",
                "--format",
                "json",
                sql,
            )
        )
        assert created["partitions"] == PARTITIONS

        def work(host: Host) -> subprocess.Popen[str]:
            return host.sqlfeed(
                "worker",
                "--queue",
                queue,
                "--job",
                job,
                "--db",
                data,
                "--out",
                "out",
                "--batch-size",
                "50",
                "--worker-id",
                host.name,
                "--format",
                "json",
            )

        procs = {host.name: work(host) for host in (leaver, ahead, behind)}
        try:
            _wait_for_a_batch(leaver, procs[leaver.name], timeout=60)
            procs[leaver.name].send_signal(signal.SIGTERM)  # leaves (gives its lease back)
            procs[joiner.name] = work(joiner)  # joins late
            outputs = {name: proc.communicate(timeout=240) for name, proc in procs.items()}
        finally:
            for proc in procs.values():
                _stop(proc)
        ended = _db_clock(engine)
        for name in (ahead.name, behind.name, joiner.name):
            assert procs[name].returncode == 0, f"{name}: {outputs[name][1]}"
            assert json.loads(outputs[name][0])["worker"] == name

        status = json.loads(
            coordinator.run("job", "status", "--queue", queue, "--job", job, "--format", "json")
        )
        assert status["complete"]
        assert [e["done"] for e in status["per_epoch"]] == [PARTITIONS] * EPOCHS
        workers = [leaver, ahead, behind, joiner]
        for epoch in range(EPOCHS):
            assert _epoch_rows(workers, epoch) == expected, f"epoch {epoch}"

        # The database's clock, not the hosts': the skewed hosts' wall clocks were an hour
        # off, yet the queue recorded every worker's times within the run on the database.
        for host in (ahead, behind):
            own_clock = float((host.folder / "clock.log").read_text())
            assert abs(own_clock - started - host.skew) < 300
        recorded = {w["worker"]: w for w in status["workers"]}
        assert {ahead.name, behind.name, joiner.name} <= set(recorded)
        for name, record in recorded.items():
            assert started - 1 <= record["joined"] <= record["seen"] <= ended + 1, name
        assert sum(r["rows"] for r in recorded.values()) >= EPOCHS * len(rows)
    print(f"hosts in network namespaces: {namespaced}")

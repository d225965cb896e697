"""Least privilege: every read path works for a SELECT-only user; a refused write is one line.

On PostgreSQL and MariaDB, a user made for the test with SELECT on the test schema alone
plans, counts, samples, exports to files, computes statistics and feeds batches. A write
it may not make (``export --into``, ``predict --into``) fails in one line naming the
privilege it needs, never as an internal error; so does a PostgreSQL role whose
transactions are read-only (``default_transaction_read_only``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from sqlfeed import Feeder
from sqlfeed.dialects import EngineError
from sqlfeed.sink import write_table
from tests.conftest import get_engine
from tests.helpers.cli import run_cli
from tests.helpers.engines import Engine
from tests.security.roles import database_user

SERVERS = ["postgres", "mysql"]
PASSWORD = "r/o@:?#%pw"


def _table(engine: Engine) -> str:
    engine.create_table(
        "readable",
        [("id", "int"), ("k", "int"), ("x", "float"), ("y", "int")],
        [(i, i % 4, i / 3, i % 2) for i in range(200)],
    )
    return engine.qualify("readable")


@pytest.mark.slow  # every read command, a job and its worker, against two servers
@pytest.mark.parametrize("server", SERVERS)
def test_every_read_path_works_for_a_select_only_user(server: str, tmp_path: Path) -> None:
    engine = get_engine(server)
    sql = f"SELECT id, k, x, y FROM {_table(engine)}"
    with database_user(engine, PASSWORD) as url:
        runs = {
            "plan": ["plan", "--db", url, "--format", "json", sql],
            "plan by range": ["plan", "--db", url, "--key", "id", "--format", "json", sql],
            "count": ["count", "--db", url, sql],
            "sample": ["sample", "--db", url, "--format", "json", sql],
            "export parquet": ["export", "--db", url, "--out", str(tmp_path / "o.parquet"), sql],
            "export csv": ["export", "--db", url, "--out", str(tmp_path / "o.csv"), sql],
            "stats": ["stats", "--db", url, "--out", str(tmp_path / "s.json"), sql],
            "job": [
                *("job", "create", "--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "j"),
                *("--db", url, sql),
            ],
            "worker": [
                *("worker", "--queue", f"sqlite:///{tmp_path / 'q.db'}", "--job", "j"),
                *("--db", url, "--out", str(tmp_path / "w")),
            ],
        }
        for name, args in runs.items():
            run = run_cli(args)
            assert run.code == 0, (name, run.err)
        assert run_cli(runs["count"]).out.strip() == "200"
        stats = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
        assert stats, stats
        feeder = Feeder(sql, url, partitions=4, batch_size=64)
        assert sum(len(batch) for batch in feeder) == 200


@pytest.mark.parametrize("server", SERVERS)
def test_export_into_as_a_select_only_user_names_the_privilege(server: str) -> None:
    engine = get_engine(server)
    sql = f"SELECT id, x FROM {_table(engine)}"
    grant = "GRANT CREATE ON SCHEMA" if server == "postgres" else "GRANT CREATE, INSERT"
    listed = (
        "SELECT table_name FROM information_schema.tables "
        f"WHERE table_schema = '{engine.schema}' AND table_name LIKE 'sqlfeed%%'"
    )
    before = sorted(engine.rows(listed))  # other tests of the session may have made a queue here
    with database_user(engine, PASSWORD) as url:
        for into in ("copied", f"{engine.schema}.copied"):
            run = run_cli(["export", "--db", url, "--into", into, "-m", "2", sql])
            assert run.code == 1, run.err
            lines = run.err.strip().splitlines()
            assert len(lines) == 1, run.err
            assert lines[0].startswith("sqlfeed: engine error: creating the staging table"), lines
            assert grant in lines[0], lines[0]
            assert engine.schema in lines[0], lines[0]  # the schema the grant is on
            assert "internal error" not in run.err, run.err
    assert sorted(engine.rows(listed)) == before  # no staging table made


def test_a_read_only_postgres_role_is_told_so() -> None:
    engine = get_engine("postgres")
    sql = f"SELECT id, x FROM {_table(engine)}"
    with database_user(engine, PASSWORD, writes=True) as url:
        user = url.partition("://")[2].partition(":")[0]
        engine.execute(f"ALTER ROLE {user} SET default_transaction_read_only = on")
        read = run_cli(["count", "--db", url, sql])
        assert (read.code, read.out.strip()) == (0, "200"), read.err
        run = run_cli(["export", "--db", url, "--into", f"{engine.schema}.copied", sql])
        assert run.code == 1, run.err
        assert len(run.err.strip().splitlines()) == 1, run.err
        assert "default_transaction_read_only" in run.err, run.err
        assert "internal error" not in run.err, run.err


@pytest.mark.parametrize("server", SERVERS)
def test_the_python_api_raises_the_same_line(server: str) -> None:
    engine = get_engine(server)
    with database_user(engine, PASSWORD) as url, pytest.raises(EngineError) as refused:
        write_table(pa.table({"a": [1, 2]}), url, f"{engine.schema}.made")
    assert "was refused" in str(refused.value), refused.value

"""Every fenced Python and shell example of README.md and docs/ runs (``make test``).

Each page runs as one session in a folder of its own (:mod:`tests.docs.run_blocks`):
Python blocks share a namespace, shell and console blocks run in bash with the project's
``.venv/bin`` first on PATH, console output is checked. The test servers' URLs as the
docs write them (``postgresql://postgres@127.0.0.1:5432/test``,
``mysql+pymysql://root@127.0.0.1:3306/test``) are pointed at a database made for the page
on the servers of ``SQLFEED_TEST_POSTGRES_URL`` / ``SQLFEED_TEST_MYSQL_URL`` (the suite's
defaults), dropped afterwards. A block that cannot run says why (``<!-- not-run: ... -->``,
see :mod:`tests.docs.blocks`); the pages run in subprocesses, so they are marked slow.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import IN_CI
from tests.docs.blocks import ROOT, Block, blocks, examples, pages
from tests.helpers.engines import MYSQL_URL, POSTGRES_URL

DOC_POSTGRES = re.compile(r"postgresql(\+psycopg)?://postgres@127\.0\.0\.1:5432/test\b")
DOC_MYSQL = re.compile(r"mysql\+pymysql://root@127\.0\.0\.1:3306/test\b")
TIMEOUT = 600

RUNNABLE = [p for p in pages() if any(b.not_run is None for b in examples(p))]


def _unreachable(what: str, err: Exception) -> None:
    reason = f"{what} unreachable: {err}"
    if IN_CI:
        pytest.fail(f"database server unreachable under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _postgres_db(name: str) -> Iterator[str]:
    """A new PostgreSQL database ``name`` on the test server; its URL."""
    import psycopg

    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        _unreachable("PostgreSQL", err)
    with conn:
        conn.execute(f"CREATE DATABASE {name}")
        try:
            yield urlparse(POSTGRES_URL)._replace(path=f"/{name}").geturl()
        finally:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _mysql_db(name: str) -> Iterator[str]:
    """A new MariaDB/MySQL database ``name`` on the test server; its pymysql URL."""
    import pymysql

    url = urlparse(MYSQL_URL)
    try:
        conn = pymysql.connect(
            host=url.hostname,
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            autocommit=True,
            connect_timeout=5,
        )
    except pymysql.err.OperationalError as err:
        _unreachable("MySQL/MariaDB", err)
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        try:
            yield f"mysql+pymysql://{url.netloc}/{name}"
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")


def _payload(runnable: list[Block], urls: dict[re.Pattern[str], str]) -> list[dict[str, str]]:
    def point(code: str) -> str:
        for pattern, url in urls.items():
            code = pattern.sub(url, code)
        return code

    return [
        {
            "where": b.where,
            "kind": b.kind or "",
            "code": point(b.code),
            **({"expected": b.expected} if b.expected is not None else {}),
        }
        for b in runnable
    ]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's examples run in order, with the output they show."""
    runnable = [b for b in examples(page) if b.not_run is None]
    text = "".join(b.code for b in runnable)
    name = f"sqlfeed_docs_{uuid.uuid4().hex[:10]}"
    with _databases(text, name) as urls:
        (tmp_path / "blocks.json").write_text(json.dumps(_payload(runnable, urls)))
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "COLUMNS": "100",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            [sys.executable, str(ROOT / "tests/docs/run_blocks.py"), "blocks.json"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    assert done.returncode == 0, done.stdout[-6000:]


class _databases:
    """The test servers' databases a page's code names, made and dropped around it."""

    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name
        self.gens: list[Iterator[str]] = []

    def __enter__(self) -> dict[re.Pattern[str], str]:
        urls: dict[re.Pattern[str], str] = {}
        for pattern, make in ((DOC_POSTGRES, _postgres_db), (DOC_MYSQL, _mysql_db)):
            if pattern.search(self.text):
                gen = make(self.name)
                urls[pattern] = next(gen)
                self.gens.append(gen)
        return urls

    def __exit__(self, *exc: object) -> None:
        for gen in self.gens:
            next(gen, None)


def test_every_example_runs_or_says_why() -> None:
    """Each example block runs, or carries a non-empty not-run reason."""
    unexplained = [
        b.where for p in pages() for b in examples(p) if b.not_run is not None and not b.not_run
    ]
    assert not unexplained, f"not-run without a reason: {unexplained}"


def test_expected_output_follows_a_python_block() -> None:
    """An expected-output mark is folded into the Python block before it, never left over."""
    stray = []
    for p in pages():
        lines = p.read_text().split("\n")
        for i, line in enumerate(lines):
            if line.strip() == "<!-- expected-output -->":
                before = [b for b in examples(p) if b.line < i + 1]
                if not before or before[-1].kind != "python" or before[-1].expected is None:
                    stray.append(f"{p.relative_to(ROOT)}:{i + 1}")
    assert not stray, f"expected-output marks with no Python block before them: {stray}"


def test_every_output_block_is_compared_or_says_why() -> None:
    """A block showing output after an example is its compared output, or says why not.

    (The lakehouse guide once printed 8866 where the query returns 8858: an output block
    nothing compared.)
    """
    unchecked = []
    for p in pages():
        found = blocks(p)
        for before, block in itertools.pairwise(found):
            shows_output = block.kind is None and before.kind is not None
            if shows_output and not (block.not_compared or "").strip():
                unchecked.append(block.where)
    assert not unchecked, (
        f"output blocks neither compared (expected-output after a Python block, or a console "
        f"block) nor marked <!-- not-compared: why -->: {unchecked}"
    )


def counts() -> tuple[int, int]:
    """(examples executed, examples marked not-run) over README.md and docs/."""
    all_blocks = [b for p in pages() for b in examples(p)]
    return sum(b.not_run is None for b in all_blocks), sum(
        b.not_run is not None for b in all_blocks
    )


if __name__ == "__main__":
    ran, skipped = counts()
    print(f"{ran} examples executed, {skipped} marked not-run")
    for p in pages():
        for b in examples(p):
            if b.not_run is not None:
                print(f"  not-run {b.where}: {b.not_run}")

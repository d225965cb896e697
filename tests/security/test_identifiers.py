"""Names are identifiers, never SQL (issue #36 item 6).

Every name option of the command line (``--into``, ``--key``, ``--label``, ``--keep``,
``--schema``/``--scratch``, ``--job``, ``--watermark``) and a table name given in Python
(``write_table``) is read by one rule: ``name`` or ``schema.name``, each part a plain name
or quoted verbatim. A hostile value (a comment, a semicolon, a quote, a third part) is
refused in one line naming the option, before anything connects: the canary table it aims
at survives untouched, on DuckDB, SQLite, PostgreSQL and MariaDB. A legal name holding a
quote round-trips: the table literally named ``it's`` is made and read back.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed.dialects import get_dialect
from sqlfeed.errors import InvalidArgumentError
from sqlfeed.sql.names import column_name, column_names, job_name, name_parts, table_name
from tests.helpers.cli import Run, run_cli
from tests.helpers.engines import ENGINES
from tests.security.canary import Canary, canary

__all__ = ["canary"]  # the fixture, used by name

HOSTILE_TABLES = [
    "{t} -- copy",
    "{t}; DROP TABLE {t}",
    "{t}#copy",
    "{t} /* copy */",
    "{t}'",
    "{t}`x",
    '{t}"',
    "x.y.{t}",
    "{t} copy",
    "{t}.",
]
"""``--into`` values aimed at the canary ``{t}`` (its qualified name)."""

HOSTILE_COLUMNS = ["id -- x", "id; DROP TABLE {t}", "id#x", "{t}.id", "id)", "id'", '"id']
"""Column option values (``--key``, ``--label``, ``--keep``, ``--watermark``)."""

HOSTILE_SCHEMAS = ["s; DROP TABLE {t}", "s -- x", "s.{t}", "s'"]
"""``--schema``/``--scratch`` values."""

HOSTILE_JOBS = ["j; DROP TABLE {t}", "j -- x", "j'", 'j"', "j /* x */", ""]
"""``--job`` values."""


def _one_line_refusal(run: Run, flag: str) -> str:
    assert run.code == 2, (run.code, run.out, run.err)
    line = run.err.strip()
    assert "\n" not in line, run.err
    assert line.startswith("sqlfeed: error:"), line
    assert flag in line, line
    assert "Traceback" not in line, line
    assert "internal error" not in line, line
    return line


# -- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("data.victim -- copy", "a comment ('--') after 'data.victim'"),
        ("victim#copy", "a comment ('#') after 'victim'"),
        ("victim /* x */", "a comment ('/*')"),
        ("victim; DROP TABLE victim", "a ';' (a second statement)"),
        ("data.it's", 'to keep it, quote the part: data."it\'s"'),
        ("a.b.c", "more than 2 parts"),
        ('"unclosed', 'the quote " is not closed'),
        ('""', "an empty quoted part"),
        ("1abc", 'quote the part: "1abc"'),
        ("a.", "nothing after the last '.'"),
        ("", "it is empty"),
    ],
)
def test_a_table_name_that_is_not_exactly_a_name_is_refused(text: str, problem: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        table_name(text, "postgres", "--into")
    message = str(caught.value)
    assert message.startswith(f"--into {text!r} is not a table name: "), message
    assert problem in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "dialect", "rendered"),
    [
        ("victim", "postgres", "victim"),
        ("data.Mixed", "postgres", "data.Mixed"),  # unquoted: the engine's case rule
        ('data."it\'s"', "postgres", 'data."it\'s"'),
        ('data."it\'s"', "mysql", "data.`it's`"),
        ('"a""b".`c``d`', "postgres", '"a""b"."c`d"'),
        ('"a""b".`c``d`', "mysql", '`a"b`.`c``d`'),
        ('"x -- y; z"', "sqlite", '"x -- y; z"'),
        ("select", "mysql", "`select`"),  # sqlglot quotes a word the engine reserves
        ("out", "sqlite", "out"),
        ("  data.t  ", "duckdb", "data.t"),
        ("données.été", "duckdb", "données.été"),
    ],
)
def test_a_name_is_rendered_as_exactly_that_name(text: str, dialect: str, rendered: str) -> None:
    assert table_name(text, dialect).sql(dialect=get_dialect(dialect).sqlglot_dialect) == rendered


def test_quoted_parts_are_taken_verbatim() -> None:
    parts = name_parts('"my.schema"."it\'s -- ok"')
    assert [(p.name, p.quoted) for p in parts] == [("my.schema", True), ("it's -- ok", True)]
    assert column_names('id, "order id", `a,b`') == ["id", "order id", "a,b"]
    assert column_name('"Id"') == "Id"
    assert job_name("nightly-2024.06@3") == "nightly-2024.06@3"


@pytest.mark.parametrize("text", ["id.x", "id,x", "id x", "id--", "id;"])
def test_a_column_is_one_name(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a name"):
        column_name(text, "--label")


@pytest.mark.parametrize("text", ["j; DROP TABLE t", "j -- x", "j'", 'j"', "", "j" * 201])
def test_a_job_name_is_letters_digits_and_a_few_marks(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a job name"):
        job_name(text, "--job")


# -- every option, against a canary table, on every engine ----------------------------------


def _commands(c: Canary, tmp: Path) -> list[tuple[str, list[str], list[str]]]:
    """(flag, hostile values, the command line with ``{h}`` where the value goes)."""
    select = f"SELECT id, v FROM {c.name}"
    db = ["--db", c.url]
    queue = ["--queue", f"sqlite:///{tmp / 'queue.db'}"]
    predict = ["predict", *db, "--model", str(tmp / "model")]
    into = ["--into", f"{c.schema}.out_t" if c.schema else "out_t"]
    return [
        ("--into", HOSTILE_TABLES, ["export", *db, "--into", "{h}", "--mode", "replace", select]),
        ("--into", HOSTILE_TABLES, [*predict, "--into", "{h}", "--mode", "replace", select]),
        ("--key", HOSTILE_COLUMNS, ["export", *db, *into, "--key", "{h}", select]),
        ("--key", HOSTILE_COLUMNS, ["plan", *db, "--key", "{h}", select]),
        ("--key", HOSTILE_COLUMNS, [*predict, *into, "--key", "{h}", select]),
        ("--keep", HOSTILE_COLUMNS, [*predict, *into, "--keep", "{h}", select]),
        ("--label", HOSTILE_COLUMNS, ["stats", *db, "--label", "{h}", select]),
        ("--label", HOSTILE_COLUMNS, ["train", *db, "--label", "{h}", "--out", "m", select]),
        (
            "--watermark",
            HOSTILE_COLUMNS,
            ["job", "create", *queue, "--job", "j", "--follow", "--watermark", "{h}", *db, select],
        ),
        ("--schema", HOSTILE_SCHEMAS, ["scratch", "list", *db, "--schema", "{h}"]),
        (
            "--scratch",
            HOSTILE_SCHEMAS,
            ["plan", *db, "--strategy", "materialize", "--scratch", "{h}", select],
        ),
        ("--job", HOSTILE_JOBS, ["job", "status", *queue, "--job", "{h}"]),
        ("--job", HOSTILE_JOBS, ["export", *db, *into, *queue, "--job", "{h}", select]),
    ]


@pytest.mark.parametrize("engine_name", ENGINES)
def test_every_name_option_refuses_hostile_names_and_spares_the_canary(
    canary: Canary, tmp_path: Path
) -> None:
    before = canary.tables()
    tried = 0
    for flag, values, argv in _commands(canary, tmp_path):
        for value in values:
            hostile = value.format(t=canary.name)
            run = run_cli([hostile if a == "{h}" else a for a in argv])
            line = _one_line_refusal(run, flag)
            assert repr(hostile.strip()) in line or "is not a job name" in line, line
            tried += 1
    assert tried > 80
    assert canary.intact()
    assert canary.tables() == before  # nothing made either
    assert not (tmp_path / "queue.db").exists()  # nothing connected to the queue


@pytest.mark.parametrize("engine_name", ENGINES)
def test_write_table_refuses_a_hostile_table_name(canary: Canary) -> None:
    data = pa.table({"id": [9], "v": ["z"]})
    for value in HOSTILE_TABLES:
        hostile = value.format(t=canary.name)
        with pytest.raises(InvalidArgumentError, match="is not a table name") as caught:
            sqlfeed.write_table(data, canary.url, hostile, mode="replace")
        assert "\n" not in str(caught.value)
    assert canary.intact()


# -- legal names with quotes round-trip -------------------------------------------------------


IT_S = "it's"

QUOTED_NAMES = {
    '"it\'s"': "it's",
    '"say ""hi"""': 'say "hi"',
    "`back``tick`": "back`tick",
    '"x -- y; z"': "x -- y; z",
    '"Mixed Case"': "Mixed Case",
}
"""A quoted ``--into`` part -> the table's name, literally."""


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_quoted_name_is_made_and_read_back_literally(canary: Canary) -> None:
    for given, literal in QUOTED_NAMES.items():
        into = f"{canary.schema}.{given}" if canary.schema else given
        select = f"SELECT id, v FROM {canary.name}"
        run = run_cli(["export", "--db", canary.url, "--into", into, "--key", "id", select])
        assert run.code == 0, (given, run.err)
        assert literal in canary.tables(), (literal, canary.tables())
        assert sorted(canary.rows(f"SELECT id, v FROM {canary.qualified(literal)}")) == [
            (1, "a"),
            (2, "b"),
            (3, "c"),
        ]
        canary.execute(f"DROP TABLE {canary.qualified(literal)}")
    data = pa.table({"id": [7]})
    named = f'{canary.schema}."{IT_S}"' if canary.schema else f'"{IT_S}"'
    sqlfeed.write_table(data, canary.url, named, key=["id"])
    assert canary.rows(f"SELECT id FROM {canary.qualified(IT_S)}") == [(7,)]
    canary.execute(f"DROP TABLE {canary.qualified(IT_S)}")
    assert canary.intact()

"""The commands' argument parsers: argparse and nothing heavier, so ``--help`` is instant.

One module per command group (:data:`sqlfeed.cli.main.COMMANDS` names them) adds its
parsers with ``register(commands)``. A parser names its handler (and the check of a URL
option) with :func:`later`: the command's own module, with the drivers, Arrow and sqlglot
it imports, is imported only when the command runs, after :mod:`sqlfeed.cli.prechecks`
has checked its SELECT. ``--help`` and a usage error import none of it. What the parsers
share is here: ``--db``/``--dialect``, the SQL argument, the planning options, column
lists, the flag names errors use (:func:`name_flags`), and the library's tables the flags
offer (``tests/cli/test_cli_startup.py`` keeps each equal to the library's own).
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from typing import Any

__all__ = [
    "DB_VARIABLE",
    "DEFAULT_TOP_K",
    "EXPORT_FORMATS",
    "FAMILIES",
    "ORDERS",
    "RESHARD_FORMATS",
    "SAMPLE_METHODS",
    "SCRATCH_PREFIX",
    "SINK_MODES",
    "STRATEGIES",
    "TASKS",
    "Later",
    "add_allow_side_effects",
    "add_as_of",
    "add_db",
    "add_follow_options",
    "add_plan_file",
    "add_plan_options",
    "add_sql",
    "add_target",
    "column_list",
    "db_url",
    "dialect_names",
    "later",
    "name_flags",
]

# -- the library's tables the flags offer (tests/cli/test_cli_startup.py checks them) ------

STRATEGIES = ("auto", "hash", "range", "ctid", "materialize", "fragments")
""":data:`sqlfeed.plans.STRATEGIES`."""
SAMPLE_METHODS = ("limit", "bernoulli", "hash")
""":data:`sqlfeed.sql.SAMPLE_METHODS`."""
EXPORT_FORMATS = ("parquet", "csv", "jsonl")
""":data:`sqlfeed.feed.EXPORT_FORMATS`."""
SINK_MODES = ("create", "replace", "append")
""":data:`sqlfeed.sink.MODES`."""
ORDERS = ("shuffle", "lpt", "index")
""":data:`sqlfeed.dispatch.ORDERS`."""
RESHARD_FORMATS = ("parquet", "csv", "jsonl", "tar")
""":data:`sqlfeed.shards.reshard.RESHARD_FORMATS`."""
TASKS = ("auto", "binary", "multiclass", "regression", "classification")
""":data:`sqlfeed.ml.options.TASKS`."""
FAMILIES = ("linear", "dnn", "wide_deep", "gbdt")
""":data:`sqlfeed.ml.options.FAMILIES`."""
DEFAULT_TOP_K = 1000
""":data:`sqlfeed.stats.model.DEFAULT_TOP_K`."""
SCRATCH_PREFIX = "sqlfeed_"
""":data:`sqlfeed.plans.materialize.SCRATCH_PREFIX`."""
_DIALECT_NAMES = (
    "bigquery",
    "clickhouse",
    "duckdb",
    "mysql",
    "oracle",
    "postgres",
    "snowflake",
    "spark",
    "sqlite",
    "trino",
    "tsql",
)


def dialect_names() -> list[str]:
    """:func:`sqlfeed.dialects.dialect_names`: the engines ``--dialect`` names."""
    return list(_DIALECT_NAMES)


# -- functions imported when they are called -------------------------------------------------


class Later:
    """The function ``"module:name"``, imported when it is first called.

    A parser's handler is one (and the check of a URL option): building the parsers,
    ``--help`` and a usage error import nothing of the command.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.__name__ = target.partition(":")[2]  # argparse names a type= by it
        self._function: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Import the function (once) and call it."""
        if self._function is None:
            module, _, name = self.target.partition(":")
            self._function = getattr(importlib.import_module(module), name)
        return self._function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"later({self.target!r})"


def later(target: str) -> Later:
    """The function ``"module:name"``; a command module's as ``"query:_cmd_plan"``.

    >>> later("query:_cmd_plan")
    later('sqlfeed.cli.query:_cmd_plan')
    """
    module = target.partition(":")[0]
    return Later(target if "." in module else f"sqlfeed.cli.{target}")


db_url = later("checks:db_url")
""":func:`sqlfeed.cli.checks.db_url`, the ``type=`` of every URL option: it reads
``env:NAME`` and ``@FILE`` and checks the scheme once the option is given."""


# -- the flags several commands share ----------------------------------------------------------


def add_target(parser: argparse.ArgumentParser, *, dialect: bool) -> None:
    """Add ``--db URL`` (required), or ``--db`` or ``--dialect NAME`` if ``dialect``.

    ``--db`` defaults to ``$SQLFEED_DB`` (:func:`add_db`); ``--dialect``
    given, that default is not used.
    """
    what = "database URL (SQLAlchemy form, duckdb:///file.duckdb, iceberg:, delta:)"
    if dialect:
        where = parser.add_mutually_exclusive_group()
        add_db(where, help=what, required=False)
        where.add_argument(
            "--dialect",
            metavar="NAME",
            action=_DialectInstead,
            help=f"rewrite without a database, for one of: "
            f"{', '.join(dialect_names())} (default duckdb)",
        )
    else:
        add_db(parser, help=what)
    add_as_of(parser)


class _DialectInstead(argparse.Action):
    """``--dialect NAME``: no database, not even ``$SQLFEED_DB`` (``--db``'s default)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.db = None


def add_as_of(parser: argparse.ArgumentParser) -> None:
    """Add ``--as-of SNAPSHOT|TIME``: a lakehouse table read at a snapshot (time travel)."""
    parser.add_argument(
        "--as-of",
        metavar="SNAPSHOT|TIME",
        help="an iceberg:/delta: table read at this snapshot id (Delta: version), or at the "
        "snapshot current at this time (ISO, or 13 digits: milliseconds since the epoch)",
    )


def add_sql(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``SQL`` argument (see :func:`sqlfeed.cli.prechecks.read_sql`).

    Optional when the command takes a saved plan instead (``--plan``, see
    :func:`add_plan_options`).
    """
    saved = "--plan" in parser._option_string_actions
    parser.add_argument(
        "sql",
        metavar="SQL",
        nargs="?" if saved else None,
        help="the SELECT; '-' reads it from stdin, '@file.sql' from a file"
        + (" (none with --plan)" if saved else ""),
    )


def column_list(text: str) -> list[str]:
    """The column names of one ``--key``/``--sort``/``--group-by`` value, split at commas.

    Raises:
        argparse.ArgumentTypeError: a name is empty (argparse turns it into a usage error;
            a handler calling this itself gets an :class:`InvalidArgumentError` instead).
    """
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"empty column name in {text!r}: give the names separated by single commas"
        )
    return names


def add_plan_options(parser: argparse.ArgumentParser, sample_rows: int | None = None) -> None:
    """Add the planning options that plan, export and job create share.

    Args:
        parser: the command's parser.
        sample_rows: the default of ``--sample-rows``; None: no such option (0 rows).
    """
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--partitions",
        "-m",
        type=int,
        metavar="M",
        help="number of partitions (default: from --target-rows, else 16)",
    )
    size.add_argument(
        "--target-rows",
        type=int,
        metavar="N",
        help="rows per partition: M = ceil(COUNT / N), at least 4 x --workers (needs --db)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="W",
        help="expected number of workers: at least 4 x W partitions (default 1)",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="auto",
        help="hash: any query; range: ranges of --key; ctid: physical row ranges of one table "
        "(PostgreSQL ctid, DuckDB and SQLite rowid); materialize: run once into --scratch; "
        "fragments: the shard files, row groups and stripes of --db dataset:///DIR; auto: the "
        "cheapest that applies (all but hash need --db)",
    )
    parser.add_argument(
        "--scratch",
        metavar="SCHEMA",
        help="a schema sqlfeed may create a table in, for --strategy materialize (default "
        "on PostgreSQL and MySQL: sqlfeed_scratch, created when allowed; auto materializes "
        "an expensive query there)",
    )
    parser.add_argument(
        "--key",
        action="append",
        type=column_list,
        metavar="COL",
        help="output column to hash (or to range on); repeat or separate with "
        "commas for several (default: all output columns)",
    )
    if sample_rows is None:
        parser.set_defaults(sample_rows=0)
    else:
        parser.add_argument(
            "--sample-rows",
            type=int,
            default=sample_rows,
            metavar="N",
            help=f"rows in the sample query (default {sample_rows})",
        )
    parser.add_argument(
        "--allow-unstable",
        action="store_true",
        help="partition a query whose result may change between runs anyway",
    )
    add_allow_side_effects(parser)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse an ORDER BY that may tie (a LIMIT's, a window's) instead of completing "
        "it with tie-breakers (the plan's reason says what was completed with what)",
    )
    add_plan_file(parser)


def add_allow_side_effects(parser: argparse.ArgumentParser) -> None:
    """Add ``--allow-side-effects``: the query may call functions with side effects.

    Those of the dialect's :attr:`~sqlfeed.dialects.Dialect.SIDE_EFFECT_FUNCTIONS`: they
    write, or reach outside the database.
    """
    parser.add_argument(
        "--allow-side-effects",
        action="store_true",
        help="let the query call functions that write or reach outside the database "
        "(dblink, lo_create, LOAD_FILE, ...; refused by default): each partition calls them, "
        "a retried one again",
    )


DB_VARIABLE = "SQLFEED_DB"
"""The environment variable ``--db`` defaults to (itself a URL, ``env:NAME`` or ``@PATH``)."""


def add_db(
    parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup,
    *,
    help: str,
    required: bool = True,
) -> None:
    """Add ``--db URL``, defaulting to :data:`DB_VARIABLE` (then not required) when it is set.

    The URL may be ``env:NAME`` or ``@PATH`` (see :func:`db_url`).
    """
    default = os.environ.get(DB_VARIABLE, "").strip() or None
    parser.add_argument(
        "--db",
        metavar="URL",
        type=db_url,
        required=required and default is None,
        default=default,
        help=f"{help}; env:NAME or @FILE read it from a variable or a file (default: "
        f"${DB_VARIABLE})",
    )


def name_flags(parser: argparse.ArgumentParser, **aliases: str) -> None:
    """Let errors raised under this command name its flags, not Python's parameter names.

    Each option's destination (``lease_ttl``) maps to its long flag (``--lease-ttl``);
    ``aliases`` add the library's own names and phrases (``top_k="--top-k"``,
    ``shard rows="--shard-rows"``, passed through a dict). See
    :func:`sqlfeed.cli.checks.cli_wording`.
    """
    names: dict[str, str] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in ("help", "version"):
            names.setdefault(action.dest, longs[0])
    names.update(aliases)
    parser.set_defaults(flag_names=names)


def add_follow_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--follow``, ``--new-only`` and ``--watermark COLUMN`` to ``job create``."""
    parser.add_argument(
        "--follow",
        action="store_true",
        help="a job per epoch (JOB@0, JOB@1, ...), each planned when it begins over the "
        "table as it is then: an iceberg:/delta: table's latest snapshot, pinned; workers "
        "(sqlfeed worker --job JOB) read the epochs in turn",
    )
    parser.add_argument(
        "--new-only",
        action="store_true",
        help="with --follow over an iceberg:/delta: table: each epoch after the first reads "
        "only the rows appended since the previous epoch's snapshot (implies --follow)",
    )
    parser.add_argument(
        "--watermark",
        metavar="COLUMN",
        help="follow any table by a monotone output column (an identity key, an insertion "
        "time): each epoch reads the rows above the previous epoch's maximum, up to the "
        "maximum when it begins (implies --follow)",
    )


def add_plan_file(parser: argparse.ArgumentParser, *, job: bool = False) -> None:
    """Add ``--plan FILE`` (``job``: the worker's check of its job's plan)."""
    parser.add_argument(
        "--plan",
        metavar="FILE",
        help=(
            "refuse to work unless the job's plan is this saved plan (same fingerprint)"
            if job
            else "use this saved plan (sqlfeed plan --db URL --format json > FILE) instead "
            "of planning: no SQL argument nor planning options then; --db is still needed "
            "and must be of the plan's engine; a saved materialize plan's scratch table is "
            "left in place (sqlfeed scratch drop)"
        ),
    )

"""The ``sqlfeed`` command line.

Exit codes: 0 success, 2 bad input (one line on stderr, nothing run on the database),
1 the engine failed. Machine-readable output with ``--format json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from dialects import (
    Dialect,
    EngineError,
    InvalidArgumentError,
    SqlfeedError,
    dialect_for,
    dialect_names,
    get_dialect,
)

if TYPE_CHECKING:
    from sqlfeed.sql import ParsedQuery

EXIT_OK = 0
EXIT_ENGINE = 1
EXIT_BAD_INPUT = 2

DEFAULT_SAMPLE_ROWS = 10_000
STRATEGIES = ("auto", "hash", "range", "ctid", "materialize", "fragments")
RESHARD_SHARD_FORMATS = ("parquet", "csv", "jsonl", "tar")


class _Parser(argparse.ArgumentParser):
    """argparse with sqlfeed's one-line error format (exit code 2 as well)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"sqlfeed: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sqlfeed`` command."""
    from sqlfeed import __version__

    parser = _Parser(
        prog="sqlfeed",
        description="Feed machine-learning training straight from a SQL SELECT.",
    )
    parser.add_argument("--version", action="version", version=f"sqlfeed {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    plan = commands.add_parser(
        "plan",
        help="split a SELECT into partition queries (count, sample, partitions)",
        description=(
            "Split a SELECT into M partition queries whose results add up to exactly the "
            "query's result, plus its COUNT and sample queries. Without --db nothing is run: "
            "the SQL is only rewritten for --dialect. With --db the output column names are "
            "read from the database (a LIMIT 0 query), and --target-rows counts the rows."
        ),
    )
    _add_target(plan, dialect=True)
    _add_plan_options(plan, sample_rows=DEFAULT_SAMPLE_ROWS)
    plan.add_argument(
        "--format",
        choices=("json", "sql"),
        default="json",
        help="json (default): the whole plan; sql: the partition queries, one "
        "per line, each ending with ';'",
    )
    _add_sql(plan)
    plan.set_defaults(run=_cmd_plan)

    count = commands.add_parser(
        "count",
        help="count the rows a SELECT returns",
        description="Run SELECT COUNT(*) over the query on the database and print the number.",
    )
    _add_target(count, dialect=False)
    count.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help='text (default): the number; json: {"count": N, "sql": ...}',
    )
    _add_sql(count)
    count.set_defaults(run=_cmd_count)

    sample = commands.add_parser(
        "sample",
        help="print a sample of a SELECT's rows",
        description="Run the query's sample query (see 'plan') and print the rows.",
    )
    _add_target(sample, dialect=False)
    sample.add_argument("--rows", type=int, default=10, metavar="N", help="at most N rows")
    sample.add_argument(
        "--method",
        choices=("limit", "bernoulli", "hash"),
        default="limit",
        help="limit: the first rows; bernoulli: the engine's TABLESAMPLE; hash: a "
        "deterministic share of the rows (bernoulli and hash need --fraction)",
    )
    sample.add_argument("--fraction", type=float, help="share of rows to keep, in (0, 1]")
    sample.add_argument("--seed", type=int, default=0, help="seed of a bernoulli sample")
    sample.add_argument("--format", choices=("table", "csv", "json"), default="table")
    _add_sql(sample)
    sample.set_defaults(run=_cmd_sample)

    export_ = commands.add_parser(
        "export",
        help="write a SELECT's rows to Parquet, CSV or JSONL, in parallel",
        description=(
            "Plan the query, read its partitions in parallel and write them to --out: a "
            "file (.parquet, .csv, .jsonl) or a folder of part files, one per partition. "
            "The output appears atomically: written aside, renamed into place when done."
        ),
    )
    _add_target(export_, dialect=False)
    export_.add_argument("--out", required=True, metavar="PATH", help="output file or folder")
    export_.add_argument(
        "--as",
        dest="file_format",
        choices=("parquet", "csv", "jsonl"),
        help="file format (default: from the file name, else parquet)",
    )
    _add_plan_options(export_)
    export_.add_argument("--readers", type=int, default=2, help="partitions read at once")
    export_.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    export_.add_argument(
        "--format", choices=("text", "json"), default="text", help="how to print the summary"
    )
    _add_sql(export_)
    export_.set_defaults(run=_cmd_export)

    stats_ = commands.add_parser(
        "stats",
        help="feature statistics of a SELECT's columns, as JSON (and an HTML report)",
        description=(
            "Per column: row and NULL counts, distinct count, min, max, mean, variance and "
            "quantile boundaries (numeric), top-k vocabulary with counts (categorical). "
            "Computed by the engine (pushdown), over a sample (--sample / --fraction), or "
            "by mergeable accumulators over the streamed rows (--accumulate)."
        ),
    )
    _add_target(stats_, dialect=False)
    stats_.add_argument("--out", required=True, metavar="PATH", help="the statistics JSON")
    stats_.add_argument("--html", metavar="PATH", help="also write an HTML report here")
    stats_.add_argument("--sample", type=int, metavar="N", help="compute over N sampled rows")
    stats_.add_argument(
        "--method",
        choices=("limit", "bernoulli", "hash"),
        default="limit",
        help="how to sample (with --sample or --fraction)",
    )
    stats_.add_argument("--fraction", type=float, help="share of rows to sample, in (0, 1]")
    stats_.add_argument(
        "--accumulate",
        action="store_true",
        help="stream the rows and accumulate (mergeable, partition by partition)",
    )
    stats_.add_argument("--label", metavar="COL", help="the label column")
    stats_.add_argument("--buckets", type=int, default=10, help="quantile buckets (default 10)")
    stats_.add_argument("--top-k", type=int, default=20, help="vocabulary size (default 20)")
    stats_.add_argument(
        "--kind",
        action="append",
        default=[],
        metavar="COL=KIND",
        help="numeric, categorical or skip for a column (repeatable)",
    )
    stats_.add_argument("--format", choices=("text", "json"), default="text")
    _add_sql(stats_)
    stats_.set_defaults(run=_cmd_stats)

    job = commands.add_parser(
        "job",
        help="create, inspect or reset a job: a plan handed out to elastic workers",
        description="A job is a plan, a number of epochs and a seed, in a lease queue.",
    )
    job_commands = job.add_subparsers(dest="job_command", metavar="ACTION", parser_class=_Parser)
    job_commands.required = True
    create = job_commands.add_parser(
        "create",
        help="plan a query and create the job (idempotent: the same job may be created again)",
    )
    _add_job_target(create)
    create.add_argument("--db", metavar="URL", required=True, help="where the query runs")
    _add_plan_options(create)
    create.add_argument("--epochs", type=int, default=1)
    create.add_argument("--seed", type=int, default=0)
    create.add_argument("--lease-ttl", type=float, default=60.0, metavar="SECONDS")
    create.add_argument(
        "--order",
        choices=("shuffle", "lpt", "index"),
        default="shuffle",
        help="hand-out order within an epoch (default shuffle: seeded)",
    )
    create.add_argument(
        "--even-batches",
        metavar="REPLICAS",
        type=int,
        help="every one of REPLICAS synchronous workers delivers the same number of batches "
        "per epoch (needs --batch-size); the rows left over are dropped",
    )
    create.add_argument("--batch-size", type=int, metavar="N", help="rows per batch")
    create.add_argument(
        "--snapshot",
        action="store_true",
        help="PostgreSQL: every worker reads inside one snapshot taken now, so all partitions "
        "see the same data under concurrent writes; this command then stays running, holding "
        "the snapshot, until every epoch is done",
    )
    create.add_argument("--format", choices=("text", "json"), default="text")
    _add_sql(create)
    create.set_defaults(run=_cmd_job_create)
    for action, helptext in (
        ("status", "per-epoch done/leased/pending and per-worker counts and throughput"),
        ("reset", "make every partition pending again, from the start"),
        ("delete", "remove the job from the queue"),
    ):
        sub = job_commands.add_parser(action, help=helptext)
        _add_job_target(sub)
        if action == "status":
            sub.add_argument("--format", choices=("table", "json"), default="table")
        sub.set_defaults(run=_cmd_job_other, action=action)

    worker = commands.add_parser(
        "worker",
        help="pull a job's partitions and read them (joins and leaves at any time)",
        description=(
            "Take leases on the job's partitions until every epoch is done, reading each "
            "partition; with --out, write every batch to DIR/epoch=E/part-P-B.parquet. "
            "SIGTERM gives the current lease back at once."
        ),
    )
    _add_job_target(worker)
    worker.add_argument("--db", metavar="URL", required=True, help="where the query runs")
    worker.add_argument("--out", metavar="DIR", help="write the batches here")
    worker.add_argument("--batch-size", type=int, metavar="N")
    worker.add_argument("--worker-id", metavar="ID", help="unique name (default host:pid:rand)")
    worker.add_argument("--format", choices=("text", "json"), default="text")
    worker.set_defaults(run=_cmd_worker)

    reshard_ = commands.add_parser(
        "reshard",
        help="shuffle or sort a query's rows into a new shardset of a target shard size",
        description=(
            "Run the query once (DuckDB by default: it may read files, e.g. "
            "read_parquet('in/*.parquet'), or tar shards registered with --tar), shuffle "
            "(seeded, global) or sort its rows in DuckDB, out of core (spilling to disk "
            "beyond --memory-limit), and cut them into shards of --shard-rows rows or "
            "about --shard-size bytes (within 10%; the last may be smaller). The output is "
            "a shardset (shard files and manifest.json) that appears atomically."
        ),
    )
    reshard_.add_argument(
        "--db",
        metavar="URL",
        help="where the query runs (default: an in-memory DuckDB); rows from other "
        "engines are streamed into DuckDB for the shuffle or sort",
    )
    reshard_.add_argument("--out", required=True, metavar="DIR", help="the shardset to create")
    order = reshard_.add_mutually_exclusive_group()
    order.add_argument("--shuffle", type=int, metavar="SEED", help="global seeded shuffle")
    order.add_argument(
        "--sort",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="sort by these columns ('col' or 'col desc'; several, or comma-separated); "
        "ties keep the query's order",
    )
    size = reshard_.add_mutually_exclusive_group()
    size.add_argument("--shard-rows", type=int, metavar="N", help="rows per shard")
    size.add_argument(
        "--shard-size",
        metavar="SIZE",
        help="bytes per shard: 256MB, 1GB (powers of 1000) or 512MiB (powers of 1024)",
    )
    reshard_.add_argument(
        "--group-by",
        nargs="+",
        action="extend",
        metavar="KEY",
        help="rows with equal values of these columns are never split across shards",
    )
    reshard_.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB's memory limit (2GB, or 60%% of the RAM); beyond it DuckDB spills to disk",
    )
    reshard_.add_argument("--threads", type=int, metavar="N", help="DuckDB's threads")
    reshard_.add_argument(
        "--temp-dir",
        metavar="PATH",
        help="where DuckDB spills and the extracted rows go (default: beside --out)",
    )
    reshard_.add_argument(
        "--format",
        action="append",
        choices=(*RESHARD_SHARD_FORMATS, "text", "json"),
        default=[],
        help="the shard format (parquet, default; csv, jsonl, or tar: WebDataset-style "
        "records) and/or how to print the metrics (text, default; json); give it twice for "
        "both, e.g. --format tar --format json",
    )
    reshard_.add_argument(
        "--as",
        dest="shard_format",
        choices=RESHARD_SHARD_FORMATS,
        help="the shard format (the same as --format parquet|csv|jsonl|tar)",
    )
    reshard_.add_argument(
        "--uid",
        metavar="COL",
        help="the uid column (unique, not NULL); default: uid, else __key__, else a new "
        "BIGINT column uid numbering the output rows 0..n-1",
    )
    reshard_.add_argument(
        "--tar",
        action="append",
        default=[],
        metavar="NAME=GLOB",
        help="register view NAME over tar shards (one row per record: __key__ plus a binary "
        "column per member extension), e.g. --tar images='raw/*.tar' (repeatable)",
    )
    reshard_.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    reshard_.add_argument(
        "--allow-unstable",
        action="store_true",
        help="reshard a query whose result may change between runs anyway",
    )
    reshard_.add_argument(
        "sql",
        nargs="?",
        metavar="SQL",
        help="the SELECT; '-' reads it from stdin, '@file.sql' from a file (it may also "
        "directly follow --sort or --group-by keys)",
    )
    reshard_.set_defaults(run=_cmd_reshard)

    shardset = commands.add_parser(
        "shardset",
        help="validate or describe a dataset of shardsets",
        description=(
            "A dataset is a folder of shardsets (feature columns in shard.NNNNN.<format> "
            "files plus a UID column, with a manifest.json); query it with "
            "--db dataset:///DIR."
        ),
    )
    shardset_commands = shardset.add_subparsers(
        dest="shardset_command", metavar="ACTION", parser_class=_Parser
    )
    shardset_commands.required = True
    check = shardset_commands.add_parser(
        "validate",
        help="check every shardset rule; exit 2 and list the problems if one is broken",
        description=(
            "Check a dataset: the UID column is in every shardset, UIDs are unique within "
            "a shardset, a sample present in several shardsets is in the same shard index "
            "in each, shard files are readable and match the manifest, and a feature lives "
            "in one shardset. Prints every problem (shardset, shard, a few UIDs and the "
            "count); exits 2 when there is one."
        ),
    )
    check.add_argument("dir", metavar="DIR", help="the dataset (or one shardset) folder")
    check.add_argument(
        "--shallow",
        action="store_true",
        help="check manifests, file presence and Parquet/ORC footers only (do not read "
        "every file: no UID checks)",
    )
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.set_defaults(run=_cmd_shardset_validate)
    info = shardset_commands.add_parser(
        "info",
        help="show shardsets, columns, shard and row counts, and which is main and why",
        description=(
            "Describe a dataset from its manifests: each shardset's format, shards, rows, "
            "bytes, creation time and columns; the main shardset (fewest samples, ties to "
            "the oldest) and why; the joined columns."
        ),
    )
    info.add_argument("dir", metavar="DIR", help="the dataset (or one shardset) folder")
    info.add_argument("--format", choices=("text", "json"), default="text")
    info.set_defaults(run=_cmd_shardset_info)

    demo = commands.add_parser(
        "demo",
        help="run the main job end to end on an embedded DuckDB",
        description=(
            "Create demo tables in an in-memory DuckDB, compute feature statistics and Keras "
            "preprocessing layers, plan the training SELECT, start a job with two elastic "
            "workers and train a Keras model from it (two synchronous replicas), then print "
            "the validation metric and the feed throughput."
        ),
    )
    demo.add_argument("--rows", type=int, default=200_000, help="rows in the demo table")
    demo.add_argument("--partitions", "-m", type=int, default=16, metavar="M")
    demo.set_defaults(run=_cmd_demo)
    return parser


def _column_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty column name in {text!r}")
    return names


def _add_plan_options(parser: argparse.ArgumentParser, sample_rows: int | None = None) -> None:
    """The planning options that plan, export and job create share."""
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
        "(PostgreSQL ctid, DuckDB rowid); materialize: run once into --scratch; fragments: "
        "the shard files, row groups and stripes of --db dataset:///DIR; auto: the "
        "cheapest that applies (all but hash need --db)",
    )
    parser.add_argument(
        "--scratch",
        metavar="SCHEMA",
        help="a schema sqlfeed may create a table in, for --strategy materialize",
    )
    parser.add_argument(
        "--key",
        action="append",
        type=_column_list,
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


def _add_job_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        metavar="URL",
        default="sqlite:///sqlfeed-queue.db",
        help="the lease queue: sqlite:///file.db (default "
        "sqlite:///sqlfeed-queue.db), or a PostgreSQL or MySQL URL",
    )
    parser.add_argument("--job", "--name", dest="job", required=True, metavar="NAME")


def _add_target(parser: argparse.ArgumentParser, *, dialect: bool) -> None:
    if dialect:
        where = parser.add_mutually_exclusive_group()
        where.add_argument(
            "--db", metavar="URL", help="database URL (SQLAlchemy form, or duckdb:///file.duckdb)"
        )
        where.add_argument(
            "--dialect",
            metavar="NAME",
            help=f"rewrite without a database, for one of: "
            f"{', '.join(dialect_names())} (default duckdb)",
        )
    else:
        parser.add_argument(
            "--db",
            metavar="URL",
            required=True,
            help="database URL (SQLAlchemy form, or duckdb:///file.duckdb)",
        )


def _add_sql(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sql", metavar="SQL", help="the SELECT; '-' reads it from stdin, '@file.sql' from a file"
    )


def read_sql(argument: str, stdin: TextIO | None = None) -> str:
    """The SQL text of a command-line argument: itself, ``-`` for stdin, ``@path`` for a file."""
    if argument == "-":
        return (stdin or sys.stdin).read()
    if argument.startswith("@"):
        path = Path(argument[1:])
        try:
            return path.read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidArgumentError(f"cannot read SQL from {path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise InvalidArgumentError(f"cannot read SQL from {path}: not UTF-8 text") from None
    return argument


def _cmd_plan(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.sql import count_sql, partition_sqls, sample_sql

    engine = dialect_for(args.db) if args.db else get_dialect(args.dialect or "duckdb")
    parsed = _validated_query(args, engine)
    if not args.db or parsed.output_width is not None:
        # Checks the key against the output columns the SQL text names.
        partition_sqls(parsed, 1, key=args.key, allow_unstable=True)
    if args.db:
        plan = _db_plan(args, parsed)
        document = plan.to_dict()
        document.pop("schema", None)
        statements = [p.sql for p in plan.partitions]
    else:
        if args.strategy not in ("auto", "hash"):
            raise InvalidArgumentError(f"--strategy {args.strategy} needs --db to look at the data")
        m = args.partitions or max(16, 4 * args.workers)
        statements = partition_sqls(parsed, m, key=args.key, allow_unstable=args.allow_unstable)
        document = {
            "dialect": engine.name,
            "strategy": "hash",
            "reason": "hash partitions over "
            + (f"key {', '.join(args.key)}" if args.key else "all output columns")
            + " (without --db, hash is the only strategy)",
            "key": args.key,
            "columns": parsed.output_names,
            "rows": None,
            "count_sql": count_sql(parsed),
            "sample_sql": sample_sql(parsed, args.sample_rows),
            "partitions": [{"index": i, "sql": q} for i, q in enumerate(statements)],
        }
    if args.format == "sql":
        for statement in statements:
            out.write(statement + ";\n")
        return
    json.dump(document, out, indent=2)
    out.write("\n")


def _db_plan(args: argparse.Namespace, parsed: Any) -> Any:
    from sqlfeed.plans.planner import plan

    return plan(
        parsed,
        args.db,
        partitions=args.partitions,
        target_rows=args.target_rows or 100_000,
        strategy=args.strategy,
        key=args.key,
        workers=args.workers,
        scratch=args.scratch,
        allow_unstable=args.allow_unstable,
        sample_rows=args.sample_rows,
    )


def _validated_query(args: argparse.Namespace, engine: Dialect) -> ParsedQuery:
    """The command's SQL, parsed and checked, and its plan options checked: before any I/O."""
    from sqlfeed.sql import check_stable, parse

    sql = read_sql(args.sql)
    args.key = _keys(args.key)
    _check_plan_sizes(args)
    parsed = parse(sql, engine)
    if not args.allow_unstable:
        check_stable(parsed)
    return parsed


def _check_plan_sizes(args: argparse.Namespace) -> None:
    _positive(args.workers, "--workers")
    _positive(args.sample_rows, "--sample-rows", zero=True)
    if args.partitions is not None:
        _positive(args.partitions, "--partitions")
    if args.target_rows is not None:
        _positive(args.target_rows, "--target-rows")
        if not args.db:
            raise InvalidArgumentError("--target-rows needs --db to count the rows; or give -m")


def _keys(groups: list[list[str]] | None) -> list[str] | None:
    return [name for names in groups for name in names] if groups else None


def _cmd_sample(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.io.sources import connect
    from sqlfeed.sql import parse, sample_sql

    sql = read_sql(args.sql)
    _positive(args.rows, "--rows", zero=True)
    parsed = parse(sql, dialect_for(args.db))
    query = sample_sql(
        parsed, args.rows, method=args.method, fraction=args.fraction, seed=args.seed
    )
    with connect(args.db) as source:
        table = source.read_table(query)
    _print_table(table, args.format, out)


def _print_table(table: Any, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        json.dump(table.to_pylist(), out, default=str, indent=1)
        out.write("\n")
    elif fmt == "csv":
        import io

        import pyarrow.csv as pacsv

        buffer = io.BytesIO()
        pacsv.write_csv(table, buffer)
        out.write(buffer.getvalue().decode("utf-8"))
    else:
        out.write(table.to_pandas().to_string(index=False) + "\n")


def _cmd_export(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.cli.progress import ProgressBar
    from sqlfeed.feed.export import export
    from sqlfeed.io.sources import connect

    _positive(args.readers, "--readers")
    parsed = _validated_query(args, dialect_for(args.db))
    target = Path(args.out)
    if target.exists() and not args.overwrite:
        raise InvalidArgumentError(f"{target} exists; pass --overwrite to replace it")
    plan = _db_plan(args, parsed)
    with connect(args.db) as source:
        bar = ProgressBar(plan.num_partitions)
        try:
            summary = export(
                plan,
                source,
                target,
                format=args.file_format,
                readers=args.readers,
                overwrite=args.overwrite,
                on_partition=bar.update,
            )
        finally:
            bar.close()
    summary.update(strategy=plan.strategy, partitions=plan.num_partitions)
    if args.format == "json":
        json.dump(summary, out)
        out.write("\n")
    else:
        out.write(
            f"wrote {summary['rows']} rows to {summary['path']} ({summary['format']}, "
            f"{summary['files']} file(s), {plan.num_partitions} {plan.strategy} partitions)\n"
        )


def _cmd_job_create(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.dispatch.queue import JobSpec, open_queue

    _positive(args.epochs, "--epochs")
    parsed = _validated_query(args, dialect_for(args.db))
    queue = open_queue(args.queue)
    plan = _db_plan(args, parsed)
    rows = None
    if args.even_batches is not None:
        _positive(args.even_batches, "--even-batches")
        if args.batch_size is None:
            raise InvalidArgumentError("--even-batches needs --batch-size")
        rows = plan.rows
        if rows is None:
            from sqlfeed.io.sources import connect

            rows = connect(args.db).count(parsed, columns=list(plan.columns))
    holder = None
    if args.snapshot:
        from sqlfeed.io.sources import connect

        holder = connect(args.db).export_snapshot()
    spec = queue.create_job(
        JobSpec(args.job, plan, epochs=args.epochs, seed=args.seed, lease_ttl=args.lease_ttl,
                order=args.order, snapshot=holder.snapshot if holder else None,
                even_batches=args.even_batches is not None, replicas=args.even_batches,
                batch_size=args.batch_size if args.even_batches else None, rows=rows)
    )  # fmt: skip
    summary = {
        "job": spec.name,
        "fingerprint": spec.plan.fingerprint,
        "strategy": spec.plan.strategy,
        "partitions": spec.plan.num_partitions,
        "epochs": spec.epochs,
    }
    if args.format == "json":
        json.dump(summary, out)
        out.write("\n")
    else:
        out.write(
            f"job {spec.name}: {spec.plan.num_partitions} {spec.plan.strategy} partitions x "
            f"{spec.epochs} epoch(s), plan {spec.plan.fingerprint}\n"
        )
    if holder is not None:
        import time

        out.write(f"holding snapshot {holder.snapshot} until the job is complete\n")
        out.flush()
        with holder:
            while not queue.status(spec.name).complete:
                time.sleep(1.0)


def _cmd_job_other(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.dispatch.queue import open_queue

    queue = open_queue(args.queue)
    if args.action == "reset":
        queue.reset(args.job)
        out.write(f"job {args.job}: every partition pending again\n")
        return
    if args.action == "delete":
        queue.job(args.job)
        queue.delete(args.job)
        out.write(f"job {args.job}: deleted\n")
        return
    status = queue.status(args.job)
    if args.format == "json":
        json.dump(status.to_dict(), out, indent=2)
        out.write("\n")
        return
    out.write(f"job {status.name}: {status.partitions} partitions, {status.epochs} epoch(s)"
              f"{', complete' if status.complete else ''}\n")  # fmt: skip
    out.write("epoch      done    leased   pending   dropped\n")
    for e in status.per_epoch:
        out.write(
            f"{e['epoch']:>5} {e['done']:>9} {e['leased']:>9} {e['pending']:>9} {e['dropped']:>9}\n"
        )
    if status.workers:
        out.write("worker                              batches        rows     rows/s\n")
        for w in status.workers:
            out.write(f"{w['worker'][:34]:<34} {w['batches']:>9} {w['rows']:>11} "
                      f"{w['rows_per_second']:>10.0f}\n")  # fmt: skip


def _cmd_worker(args: argparse.Namespace, out: TextIO) -> None:
    import time

    from sqlfeed.dispatch.worker import Worker

    if args.batch_size is not None:
        _positive(args.batch_size, "--batch-size")
    target = Path(args.out) if args.out else None
    started = time.perf_counter()
    rows = batches = 0
    with Worker(args.queue, args.job, args.db, worker_id=args.worker_id,
                batch_size=args.batch_size) as worker:  # fmt: skip
        worker.release_on_sigterm()
        for delivery in worker.deliveries():
            if target is not None:
                _write_delivery(target, delivery)
            rows += delivery.batch.num_rows
            batches += 1
    elapsed = time.perf_counter() - started
    summary = {"worker": worker.worker_id, "batches": batches, "rows": rows,
               "seconds": round(elapsed, 3)}  # fmt: skip
    if args.format == "json":
        json.dump(summary, out)
        out.write("\n")
    else:
        out.write(f"worker {worker.worker_id}: {rows} rows in {batches} batches "
                  f"({elapsed:.1f}s)\n")  # fmt: skip


def _write_delivery(folder: Path, delivery: Any) -> None:
    """DIR/epoch=E/part-P-B.parquet, written aside and renamed (a redelivery overwrites)."""
    import os
    import uuid

    import pyarrow.parquet as pq

    directory = folder / f"epoch={delivery.epoch}"
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"part-{delivery.partition:05d}-{delivery.offset:06d}.parquet"
    temporary = directory / f".{final.name}.{uuid.uuid4().hex[:8]}"
    pq.write_table(pa_table(delivery.batch), temporary)
    os.replace(temporary, final)


def pa_table(batch: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches([batch])


def _cmd_stats(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.cli.progress import ProgressBar
    from sqlfeed.feed.statistics import compute_stats
    from sqlfeed.sql import parse
    from stats.model import StatsSpec

    sql = read_sql(args.sql)
    kinds = {}
    for item in args.kind:
        name, sep, kind = item.partition("=")
        if not sep:
            raise InvalidArgumentError(f"--kind takes COL=KIND, not {item!r}")
        kinds[name] = kind
    spec = StatsSpec(kinds=kinds, label=args.label, buckets=args.buckets, top_k=args.top_k)
    parsed = parse(sql, dialect_for(args.db))
    sampling = args.sample is not None or args.fraction is not None
    if args.accumulate and sampling:
        raise InvalidArgumentError("--accumulate reads every row; drop --sample/--fraction")
    method = "accumulate" if args.accumulate else "sample" if sampling else "pushdown"
    steps = ProgressBar(0, what="steps")
    done = [0]

    def progress(step: str) -> None:
        done[0] += 1
        steps.update(done[0], 0)

    try:
        result = compute_stats(parsed, args.db, spec=spec, method=method, sample_rows=args.sample,
                               sample_method=args.method, fraction=args.fraction,
                               progress=progress)  # fmt: skip
    finally:
        steps.close()
    result.save(args.out)
    if args.html:
        from stats.report import html_report

        Path(args.html).write_text(html_report(result), encoding="utf-8")
    if args.format == "json":
        json.dump({"out": args.out, "html": args.html, "rows": result.rows,
                   "method": result.method, "columns": list(result.columns)}, out)  # fmt: skip
        out.write("\n")
    else:
        out.write(f"statistics of {len(result.columns)} columns over {result.rows} rows "
                  f"({result.method}) written to {args.out}\n")  # fmt: skip


def _cmd_count(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.io.sources import connect
    from sqlfeed.sql import count_sql, parse

    sql = read_sql(args.sql)
    parsed = parse(sql, dialect_for(args.db))
    with connect(args.db) as source:
        columns = source.output_columns(parsed) if parsed.output_width is None else None
        count_query = count_sql(parsed, columns=columns)
        rows = source.count(parsed, columns=columns)
    if args.format == "json":
        json.dump({"count": rows, "sql": count_query}, out)
        out.write("\n")
    else:
        out.write(f"{rows}\n")


def _reshard_sql(args: argparse.Namespace) -> None:
    """Take the SQL back from ``--sort a b SQL`` or ``--group-by k SQL`` (nargs='+')."""
    import re

    looks_like_sql = re.compile(r"^\s*(select|with|values|from|table|\()\b", re.IGNORECASE)
    for name in ("group_by", "sort"):
        keys = getattr(args, name)
        if args.sql is None and keys:
            last = keys[-1]
            if last == "-" or last.startswith("@") or looks_like_sql.match(last):
                args.sql = keys.pop()
    if args.sql is None:
        raise InvalidArgumentError("give the SELECT to reshard (or '-' for stdin, '@file.sql')")
    for name, flag in (("sort", "--sort"), ("group_by", "--group-by")):
        if getattr(args, name) == []:
            raise InvalidArgumentError(f"{flag} needs at least one column")


def _cmd_reshard(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.cli.progress import ProgressBar
    from sqlfeed.shards.reshard import reshard

    _reshard_sql(args)
    shard_formats = [f for f in args.format if f in RESHARD_SHARD_FORMATS]
    shown = [f for f in args.format if f not in RESHARD_SHARD_FORMATS]
    if args.shard_format:
        shard_formats.append(args.shard_format)
    if len(set(shard_formats)) > 1 or len(set(shown)) > 1:
        raise InvalidArgumentError(
            "--format takes one shard format (parquet, csv, jsonl, tar) and one output "
            f"format (text, json), got {', '.join(args.format + shard_formats[len(args.format) :])}"
        )
    tar = {}
    for item in args.tar:
        name, sep, pattern = item.partition("=")
        if not sep or not name or not pattern:
            raise InvalidArgumentError(
                f"--tar takes NAME=GLOB, like images='raw/*.tar', not {item!r}"
            )
        if name in tar:
            raise InvalidArgumentError(f"--tar {name} is given twice")
        tar[name] = pattern

    class PercentBar(ProgressBar):
        """``[#####.....] 45% sort``: a phase only DuckDB's estimate measures."""

        def update(self, done: int, rows: int) -> None:
            if self.enabled:
                filled = 30 * min(done, 100) // 100
                self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done:3d}% {self.what}")
                self.stream.flush()

    bars: dict[str, ProgressBar] = {}
    words = {"extract": "extracted", "sort": "sorted", "write": "written"}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:  # a new phase: one bar each
            for other in bars.values():
                other.close()
            bars.clear()
            if total == 100 and phase != "write":
                bar = PercentBar(100, what=phase)
            else:
                bar = ProgressBar(total, what=f"rows {words.get(phase, phase)}")
            bars[phase] = bar
        if isinstance(bar, PercentBar):
            bar.update(100 * done // total if total else 0, 0)
        else:
            bar.total = total
            bar.update(done, done)

    try:
        metrics = reshard(
            read_sql(args.sql),
            args.db,
            out=args.out,
            shuffle=args.shuffle,
            sort=_keys([_column_list(key) for key in args.sort or []]),
            shard_rows=args.shard_rows,
            shard_size=args.shard_size,
            group_by=_keys([_column_list(key) for key in args.group_by or []]),
            memory_limit=args.memory_limit,
            threads=args.threads,
            temp_dir=args.temp_dir,
            format=shard_formats[0] if shard_formats else "parquet",
            uid=args.uid,
            tar=tar or None,
            overwrite=args.overwrite,
            allow_unstable=args.allow_unstable,
            progress=progress,
        )
    finally:
        for bar in bars.values():
            bar.close()
    if shown and shown[0] == "json":
        json.dump(metrics.to_dict(), out)
        out.write("\n")
    else:
        out.write(metrics.summary() + "\n")


def _cmd_shardset_validate(args: argparse.Namespace, out: TextIO) -> None:
    from dialects import ShardsetError
    from sqlfeed.shards.datasets import validate

    report = validate(args.dir, deep=not args.shallow)
    if args.format == "json":
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
    elif report.ok:
        out.write(
            f"{args.dir}: valid ({report.shardsets} shardsets, {report.shards} shards, "
            f"{report.rows} rows{', shallow check' if args.shallow else ''})\n"
        )
    else:
        for problem in report.problems:
            out.write(f"{problem}\n")
    if not report.ok:
        count = len(report.problems)
        raise ShardsetError(f"{args.dir}: {count} problem{'s' * (count > 1)} found")


def _cmd_shardset_info(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.shards.datasets import open_dataset

    dataset = open_dataset(args.dir, validate=False)
    main = dataset.main
    shardsets = [
        {
            "name": s.name,
            "format": s.format,
            "shards": len(s.manifest.shards),
            "rows": s.rows,
            "bytes": s.manifest.bytes,
            "created": s.manifest.created,
            "columns": s.manifest.features,
            "main": s is main,
        }
        for s in dataset.shardsets
    ]
    if args.format == "json":
        info = {
            "path": str(dataset.path),
            "uid": dataset.uid,
            "main": main.name,
            "main_reason": dataset.main_reason,
            "columns": dataset.columns,
            "shardsets": shardsets,
        }
        out.write(json.dumps(info, indent=2) + "\n")
        return
    out.write(f"dataset {dataset.path} (uid column: {dataset.uid})\n")
    out.write(f"main shardset: {main.name} ({dataset.main_reason})\n\n")
    header = ("shardset", "format", "shards", "rows", "bytes", "created", "columns")
    rows = [
        (
            ("* " if s["main"] else "  ") + str(s["name"]),
            str(s["format"]),
            str(s["shards"]),
            str(s["rows"]),
            str(s["bytes"]),
            str(s["created"])[:19],
            ", ".join(s["columns"]),  # type: ignore[arg-type]
        )
        for s in shardsets
    ]
    widths = [max(len(r[i]) for r in [("  " + header[0], *header[1:]), *rows]) for i in range(7)]
    for row in [("  " + header[0], *header[1:]), *rows]:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
        )
    out.write(f"\njoined columns: {', '.join(dataset.columns)}\n")


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> None:
    from sqlfeed.cli.demo import run_demo

    _positive(args.rows, "--rows")
    _positive(args.partitions, "--partitions")
    run_demo(rows=args.rows, partitions=args.partitions, out=out)


def _positive(value: int, flag: str, zero: bool = False) -> None:
    if value < (0 if zero else 1):
        raise InvalidArgumentError(f"{flag} must be {'>= 0' if zero else '>= 1'}, got {value}")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit code."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    try:
        args.run(args, stream)
    except EngineError as err:
        print(f"sqlfeed: engine error: {err}", file=sys.stderr)
        return EXIT_ENGINE
    except SqlfeedError as err:
        print(f"sqlfeed: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("sqlfeed: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


def entry_point() -> None:
    """The console script."""
    sys.exit(main())

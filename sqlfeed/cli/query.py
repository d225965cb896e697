"""The query commands: ``sqlfeed plan``, ``sqlfeed count`` and ``sqlfeed sample``."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from sqlfeed import connect, count_sql, parse, partition_sqls, sample_sql
from sqlfeed.cli.common import (
    engine_columns,
    names_known,
    plan_on_db,
    positive,
    read_sql,
    validated_query,
    warn,
    write_json,
    write_table,
)
from sqlfeed.dialects import InvalidArgumentError, UnsupportedError, dialect_for, get_dialect
from sqlfeed.feed import unequal_shares
from sqlfeed.feed.textout import shown
from sqlfeed.io import redact_url
from sqlfeed.io.arrow import renamed_columns
from sqlfeed.plans.prepare import notes
from sqlfeed.sql import complete_orders


def _cmd_plan(args: argparse.Namespace, out: TextIO) -> None:
    """``sqlfeed plan``: the plan as JSON, or its partition queries."""
    engine = dialect_for(args.db) if args.db else get_dialect(args.dialect or "duckdb")
    if not args.db and args.strategy not in ("auto", "hash"):
        raise InvalidArgumentError(f"--strategy {args.strategy} needs --db to look at the data")
    parsed = validated_query(args, engine)
    if not args.db or names_known(parsed):
        # Checks the key against the output columns the SQL text names; with --db and
        # names only the engine knows (*, unnamed, repeated), the planner asks for them.
        partition_sqls(parsed, 1, key=args.key, allow_unstable=True)
    document: dict[str, Any]
    if args.db:
        planned = plan_on_db(args, parsed)
        if renamed := renamed_columns(planned.columns, planned.arrow_schema()):
            warn(renamed)
        document = planned.to_dict()
        document.pop("schema", None)
        statements = [p.sql for p in planned.partitions]
        _warn_unequal_shares(planned.num_partitions, args.workers)
        if planned.scratch_table:
            schema, _, table = planned.scratch_table.rpartition(".")  # auto may pick the schema
            warn(
                f"the partitions read the scratch table {planned.scratch_table}; drop it "
                f"when done: sqlfeed scratch drop --db {redact_url(args.db)} --schema "
                f"{args.scratch or schema} {table}"
            )
    else:
        m = args.partitions or max(16, 4 * args.workers)
        _warn_unequal_shares(m, args.workers)
        statements = partition_sqls(
            parsed, m, key=args.key, allow_unstable=args.allow_unstable, strict=args.strict
        )
        completed = [] if args.strict else complete_orders(parsed).completed
        document = {
            "dialect": engine.name,
            "strategy": "hash",
            "reason": "hash partitions over "
            + (f"key {', '.join(args.key)}" if args.key else "all output columns")
            + " (without --db, hash is the only strategy)"
            + notes(completed, "", m, m, "hash"),
            "key": args.key,
            "columns": parsed.output_names,
            "rows": None,
            "estimated_rows": None,
            "count_sql": count_sql(parsed),
            "sample_sql": sample_sql(parsed, args.sample_rows),
            "partitions": [{"index": i, "sql": q} for i, q in enumerate(statements)],
        }
    if args.format == "sql":
        for statement in statements:
            out.write(statement + ";\n")
        return
    write_json(out, document, indent=2)


def _warn_unequal_shares(partitions: int, workers: int) -> None:
    """One stderr line when ``--workers`` ranks would get unequal shares of the partitions."""
    if workers > 1 and partitions % workers:
        warn(
            f"{unequal_shares(partitions, workers)} (sqlfeed job create --even-batches "
            f"{workers} --batch-size N)"
        )


def _cmd_count(args: argparse.Namespace, out: TextIO) -> None:
    """``sqlfeed count``: run the query's COUNT on ``--db``."""
    sql = read_sql(args.sql)
    parsed = parse(sql, dialect_for(args.db), allow_side_effects=args.allow_side_effects)
    with connect(args.db) as source:
        columns = engine_columns(source, parsed)
        count_query = count_sql(parsed, columns=columns)
        rows = source.count(parsed, columns=columns)
    if args.format == "json":
        write_json(out, {"count": rows, "sql": count_query})
    else:
        out.write(f"{rows}\n")


def _cmd_sample(args: argparse.Namespace, out: TextIO) -> None:
    """``sqlfeed sample``: run the query's sample query on ``--db`` and print the rows."""
    sql = read_sql(args.sql)
    positive(args.rows, "--rows", zero=True)
    positive(args.seed, "--seed", zero=True)
    check_sample_method(args.method, args.fraction)
    parsed = parse(sql, dialect_for(args.db), allow_side_effects=args.allow_side_effects)
    engine = parsed.dialect
    if args.method == "bernoulli" and (args.fraction or 0) < 1 and not engine.TABLESAMPLE_BERNOULLI:
        raise UnsupportedError(
            f"{engine.name} has no row-level TABLESAMPLE; use --method hash (deterministic) "
            "or --method limit"
        )

    def query(columns: list[str] | None) -> str:
        return sample_sql(
            parsed,
            args.rows,
            method=args.method,
            fraction=args.fraction,
            seed=args.seed,
            columns=columns,
        )

    if names_known(parsed):
        sample = query(None)  # a method the engine lacks is refused before connecting
        with connect(args.db) as source:
            table = source.read_table(sample)
        names: list[str | None] | None = parsed.output_names
    else:
        with connect(args.db) as source:
            columns = source.output_columns(parsed)
            table = source.read_table(query(columns))
            names = list(columns)
    if renamed := renamed_columns(names, table.schema):
        warn(renamed)
    # durations as ISO 8601 text, binary as \x hex, CSV lists and structs as JSON text
    write_table(shown(table, csv=args.format == "csv"), args.format, out)


def check_sample_method(method: str, fraction: float | None, flag: str = "--fraction") -> None:
    """``--method`` and ``--fraction`` agree: limit takes none, bernoulli and hash one in (0, 1].

    Raises:
        InvalidArgumentError: they do not.
    """
    if method == "limit":
        if fraction is not None:
            raise InvalidArgumentError(
                f"{flag} needs --method hash or --method bernoulli (--method limit takes "
                "the first rows)"
            )
        return
    if fraction is None:
        raise InvalidArgumentError(
            f"--method {method} needs {flag}, the share of rows to keep, in (0, 1]"
        )
    if not 0 < fraction <= 1:  # NaN too
        raise InvalidArgumentError(f"{flag} must be in (0, 1], got {fraction}")

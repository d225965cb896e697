"""Apache Spark SQL, Hive and Databricks."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.spark import Spark as SqlglotSpark
from sqlglot.generators.spark import SparkGenerator

from sqlfeed.dialects.base import Dialect, conv_md5_head


class SqlfeedSpark(SqlglotSpark):
    """sqlglot's Spark, with Spark's own seed keyword: ``TABLESAMPLE (...) REPEATABLE (n)``.

    sqlglot renders ``SEED (n)``, which Spark's grammar does not accept.
    """

    class Generator(SparkGenerator):
        TABLESAMPLE_SEED_KEYWORD = "REPEATABLE"


class Spark(Dialect):
    """Spark: ``pmod(xxhash64(...), M)``; xxhash64 is NULL-safe (NULL hashes to the seed)."""

    name = "spark"
    aliases = ("hive", "databricks", "sparksql")
    sqlglot_dialect = "sqlfeedspark"  # SqlfeedSpark, registered with sqlglot by its name
    HASH_FUNCTION = "xxhash64"
    TABLESAMPLE_BERNOULLI = True
    TABLESAMPLE_SEED = True
    GROUPING_SETS = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this="xxhash64", expressions=args)

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """``CAST(CONV(SUBSTRING(MD5(t), 1, 7), 16, 10) AS BIGINT)``."""
        return conv_md5_head(text)

    def bucket_of_hash(self, hashed: exp.Expr, m: int) -> exp.Expr:
        # pmod is Spark's non-negative modulo: one call instead of ((h % m) + m) % m.
        return exp.Anonymous(this="pmod", expressions=[hashed, exp.Literal.number(m)])

    def tablesample(self, table: exp.Expr, percent: float, seed: int | None) -> exp.Expr:
        super().tablesample(table, percent, seed)
        sample = table.args["sample"]
        sample.set("method", None)
        return table

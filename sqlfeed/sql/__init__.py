"""The SQL layer: pure sqlglot rewriting, no I/O.

Modules, bottom to top: ``syntax`` (read-only questions about a tree), ``arguments``
(shared argument checks), ``render`` (one render, many queries; the check that a
rendering keeps the user's meaning), ``parse`` (parsing and validation), ``verbatim``
(the user's own text as a wrap embeds it), ``keys`` (unique keys: which ORDER BYs are
total), ``windows`` (what a window function's result depends on; the aggregates that
depend on row order), ``order`` (completing ORDER BYs that may tie), ``stability`` (whether a query
returns the same rows every run), ``frame`` (a SELECT over the query's rows that a WHERE
can be added to), ``grouped`` (when a range of a grouping column may filter a GROUP BY
before it groups), ``probes`` (count, sample and schema queries) and ``partition`` (hash,
range and physical partition queries). Import the public names from here.
"""

from sqlfeed.sql.arguments import MAX_PARTITIONS, check_partition_count
from sqlfeed.sql.frame import single_table
from sqlfeed.sql.grouped import grouped_output, grouped_table
from sqlfeed.sql.keys import only_base_table
from sqlfeed.sql.order import OrderCompletion, complete_orders
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.partition import (
    bounds_sql,
    deterministic,
    literal,
    numbered_sql,
    partition_sql,
    partition_sqls,
    partitions_for,
    physical_partition_sqls,
    range_partition_sqls,
    range_pushdown,
)
from sqlfeed.sql.probes import (
    HASH_SAMPLE_BUCKETS,
    SAMPLE_METHODS,
    count_sql,
    relation_sql,
    sample_sql,
    schema_sql,
)
from sqlfeed.sql.render import Template
from sqlfeed.sql.stability import check_stable, unstable_reasons
from sqlfeed.sql.syntax import function_name
from sqlfeed.sql.verbatim import rendering_problem

__all__ = [
    "HASH_SAMPLE_BUCKETS",
    "MAX_PARTITIONS",
    "SAMPLE_METHODS",
    "OrderCompletion",
    "ParsedQuery",
    "Template",
    "bounds_sql",
    "check_partition_count",
    "check_stable",
    "complete_orders",
    "count_sql",
    "deterministic",
    "function_name",
    "grouped_output",
    "grouped_table",
    "literal",
    "numbered_sql",
    "only_base_table",
    "parse",
    "partition_sql",
    "partition_sqls",
    "partitions_for",
    "physical_partition_sqls",
    "range_partition_sqls",
    "range_pushdown",
    "relation_sql",
    "rendering_problem",
    "sample_sql",
    "schema_sql",
    "single_table",
    "unstable_reasons",
]

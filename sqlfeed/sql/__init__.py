"""The SQL layer: pure sqlglot rewriting, no I/O.

Parsing and validation, stability analysis, and the count, sample and partition
queries built from a SELECT.
"""

from sqlfeed.sql.rewrite import (
    HASH_SAMPLE_BUCKETS,
    SAMPLE_METHODS,
    ParsedQuery,
    bounds_sql,
    check_stable,
    count_sql,
    literal,
    numbered_sql,
    parse,
    partition_sql,
    partition_sqls,
    partitions_for,
    physical_partition_sqls,
    range_partition_sqls,
    relation_sql,
    sample_sql,
    schema_sql,
    single_table,
    unstable_reasons,
)

__all__ = [
    "HASH_SAMPLE_BUCKETS",
    "SAMPLE_METHODS",
    "ParsedQuery",
    "bounds_sql",
    "check_stable",
    "count_sql",
    "literal",
    "numbered_sql",
    "parse",
    "partition_sql",
    "partition_sqls",
    "partitions_for",
    "physical_partition_sqls",
    "range_partition_sqls",
    "relation_sql",
    "sample_sql",
    "schema_sql",
    "single_table",
    "unstable_reasons",
]

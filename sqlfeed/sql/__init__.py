"""The SQL layer: pure sqlglot rewriting, no I/O.

Modules, bottom to top: ``syntax`` (read-only questions about a tree), ``arguments``
(shared argument checks), ``parse`` (parsing and validation), ``stability`` (whether a
query returns the same rows every run), ``frame`` (a SELECT over the query's rows that a
WHERE can be added to), ``probes`` (count, sample and schema queries) and ``partition``
(hash, range and physical partition queries). Import the public names from here.
"""

from sqlfeed.sql.frame import single_table
from sqlfeed.sql.parse import ParsedQuery, parse
from sqlfeed.sql.partition import (
    bounds_sql,
    literal,
    numbered_sql,
    partition_sql,
    partition_sqls,
    partitions_for,
    physical_partition_sqls,
    range_partition_sqls,
)
from sqlfeed.sql.probes import (
    HASH_SAMPLE_BUCKETS,
    SAMPLE_METHODS,
    count_sql,
    relation_sql,
    sample_sql,
    schema_sql,
)
from sqlfeed.sql.stability import check_stable, unstable_reasons

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

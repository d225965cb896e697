"""Google BigQuery."""

from __future__ import annotations

from sqlglot import exp

from sqlfeed.dialects.base import Dialect, md5_hex_head


class BigQuery(Dialect):
    """BigQuery: ``FARM_FINGERPRINT(TO_JSON_STRING(STRUCT(...)))``, a signed INT64.

    ``TO_JSON_STRING`` writes NULL as ``null``, so the fingerprint input is never NULL.
    BigQuery's TABLESAMPLE is SYSTEM (block) sampling only, and CTEs cannot rename columns.
    """

    name = "bigquery"
    sqlglot_dialect = "bigquery"
    HASH_FUNCTION = "FARM_FINGERPRINT"
    CTE_COLUMN_LIST = False

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        struct = exp.Struct(expressions=args)
        as_json = exp.Anonymous(this="TO_JSON_STRING", expressions=[struct])
        return exp.Anonymous(this="FARM_FINGERPRINT", expressions=[as_json])

    def md5_head(self, text: exp.Expr) -> exp.Expr | None:
        """BigQuery's MD5 head: ``CAST(CONCAT('0x', SUBSTRING(TO_HEX(MD5(t)), 1, 7)) AS INT64)``.

        BigQuery's MD5 is bytes (sqlglot writes the hex form), and it casts 0x hex to INT64.
        """
        hexed = exp.Concat(expressions=[exp.Literal.string("0x"), md5_hex_head(exp.MD5(this=text))])
        return exp.cast(hexed, exp.DataType.Type.BIGINT)

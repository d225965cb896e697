"""MySQL and MariaDB."""

from __future__ import annotations

from sqlglot import exp

from dialects.base import Dialect


class MySQL(Dialect):
    """MySQL / MariaDB: ``CRC32(CONCAT_WS(sep, ...))``.

    ``CONCAT_WS`` skips NULL arguments (it returns NULL only for a NULL separator), so the
    hash input is never NULL; ``ISNULL(x)`` is added before each value so that NULL and
    the empty string hash apart. CRC32 is unsigned 32-bit. Derived tables cannot rename
    their columns, but CTEs can (MySQL 8, MariaDB 10.2).
    """

    name = "mysql"
    aliases = ("mariadb",)
    sqlglot_dialect = "mysql"
    HASH_FUNCTION = "CRC32"
    HASH_IS_UNSIGNED = True

    def collation_tiebreak(self, arg: exp.Expr) -> exp.Expr | None:
        """``CAST(x AS BINARY)``: the default collations hold 'a' = 'A' = 'a ' in ORDER BY."""
        return exp.cast(arg, exp.DataType.build("BINARY", dialect="mysql"))

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        parts: list[exp.Expr] = [exp.Literal.string("|")]
        for arg in args:
            parts.append(exp.Anonymous(this="ISNULL", expressions=[arg.copy()]))
            parts.append(arg)
        return exp.Anonymous(
            this="CRC32", expressions=[exp.Anonymous(this="CONCAT_WS", expressions=parts)]
        )

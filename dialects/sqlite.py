"""SQLite, with a deterministic hash function registered on the connection."""

from __future__ import annotations

import struct
import zlib
from typing import Any

from sqlglot import exp

from dialects.base import Dialect

HASH_FUNCTION_NAME = "sqlfeed_hash"
"""The SQL name under which :func:`row_hash` is registered on a SQLite connection."""


def row_hash(*values: Any) -> int:
    """A stable, non-negative 32-bit hash of a row's values (SQLite has no hash function).

    Stable across processes and Python versions (unlike ``hash()``, which is salted),
    and distinguishes NULL from every value and each storage class from the others.

    >>> row_hash(1, None, "a") == row_hash(1, None, "a")
    True
    >>> row_hash(None) != row_hash("")
    True
    """
    crc = 0
    for value in values:
        if value is None:
            chunk = b"\x00"
        elif isinstance(value, int):
            # SQLite integers are 64-bit signed; the byte form keeps 1 and 1.0 apart.
            chunk = b"\x01" + struct.pack("<q", value)
        elif isinstance(value, float):
            chunk = b"\x02" + struct.pack("<d", value)
        elif isinstance(value, str):
            chunk = b"\x03" + value.encode("utf-8", "surrogatepass")
        else:
            chunk = b"\x04" + bytes(value)
        crc = zlib.crc32(struct.pack("<I", len(chunk)) + chunk, crc)
    return crc


class SQLite(Dialect):
    """SQLite: :func:`row_hash` registered as a deterministic SQL function."""

    name = "sqlite"
    aliases = ("sqlite3",)
    sqlglot_dialect = "sqlite"
    HASH_FUNCTION = HASH_FUNCTION_NAME
    HASH_IS_UNSIGNED = True

    def hash_expression(self, args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this=HASH_FUNCTION_NAME, expressions=args)

    def integer_division(self, dividend: exp.Expr, divisor: exp.Expr) -> exp.Expr:
        """``a / b``: SQLite divides integers as integers (sqlglot's form goes through REAL)."""
        return exp.Div(this=dividend, expression=divisor, typed=True)

    def register_functions(self, connection: Any) -> None:
        """Register ``sqlfeed_hash`` on a ``sqlite3`` connection (or one that wraps it)."""
        connection.create_function(HASH_FUNCTION_NAME, -1, row_hash, deterministic=True)

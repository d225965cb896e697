"""MySQL and MariaDB: :class:`MySQLSource` (pymysql's unbuffered cursor) and its column types.

pymysql is optional and imported when a read needs its ``SSCursor``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sqlfeed.io.sqlalchemy import SQLAlchemySource

__all__ = ["MySQLSource", "mysql_description_schema"]

# MySQL field type codes -> Arrow types; text/blob types are told apart by their values.
_MYSQL_TYPES: dict[int, pa.DataType] = {
    1: pa.int8(),
    2: pa.int16(),
    3: pa.int32(),
    4: pa.float32(),
    5: pa.float64(),
    7: pa.timestamp("us"),
    8: pa.int64(),
    9: pa.int32(),
    10: pa.date32(),
    11: pa.duration("us"),
    12: pa.timestamp("us"),
    13: pa.int16(),
    16: pa.int64(),
    245: pa.string(),
}
_MYSQL_UNSIGNED = {1: pa.uint8(), 2: pa.uint16(), 3: pa.uint32(), 8: pa.uint64(), 9: pa.uint32()}
_MYSQL_DECIMAL = (0, 246)
_MYSQL_UNSIGNED_FLAG = 32


class MySQLSource(SQLAlchemySource):
    """MySQL/MariaDB through SQLAlchemy; pymysql streams with an unbuffered (server-side) cursor."""

    def _description_schema(self, cursor: Any) -> pa.Schema | None:
        if self.driver == "pymysql":
            return mysql_description_schema(cursor)
        return None

    def _streaming_cursor(self, connection: Any, batch_rows: int) -> Any:
        if self.driver != "pymysql":
            return super()._streaming_cursor(connection, batch_rows)
        import pymysql.cursors

        return connection.driver_connection.cursor(pymysql.cursors.SSCursor)


def mysql_description_schema(cursor: Any) -> pa.Schema | None:
    """Arrow types from a pymysql cursor's field metadata; ``null`` for types to infer.

    Args:
        cursor: an executed pymysql cursor (its result's field type codes and flags).

    Returns:
        The schema, or None when the cursor has no field metadata.
    """
    result = getattr(cursor, "_result", None)
    fields_meta = getattr(result, "fields", None)
    if not fields_meta:
        return None
    fields = []
    for meta, description in zip(fields_meta, cursor.description, strict=True):
        code = meta.type_code
        unsigned = bool(meta.flags & _MYSQL_UNSIGNED_FLAG)
        if code in _MYSQL_DECIMAL:
            precision, scale = description[4], description[5]
            arrow_type = (
                pa.decimal128(precision, scale) if precision and precision <= 38 else pa.float64()
            )
        elif unsigned and code in _MYSQL_UNSIGNED:
            arrow_type = _MYSQL_UNSIGNED[code]
        else:
            arrow_type = _MYSQL_TYPES.get(code, pa.null())
        fields.append(pa.field(description[0], arrow_type))
    return pa.schema(fields)

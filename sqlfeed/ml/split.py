"""The deterministic train/validation split: a hash bucket of a key, the same on every engine.

A row goes to validation when the bucket of its key is below ``round(fraction * buckets)``,
else to training. The bucket is computed by the engine, from the row's own values only, with
arithmetic every engine does alike, so a model's split (its manifest's :meth:`Split.rule`)
re-applied on another engine, or next year, selects the same rows:

* an **integer key** (any width, unsigned, a decimal of scale 0), and a **date** or a
  **timestamp** key as its days or microseconds since 1970: ``x = ((k % P) + P) % P`` with
  ``P = 2**31 - 1``, then two rounds of ``x = (x * A + B) % P`` (every product below
  ``2**62``, so no engine's 64-bit integers overflow), and the bucket ``x % buckets``.
  Keys ``k`` and ``k + P`` share their bucket.
* a **text key**: the first 7 hex digits of the MD5 of its UTF-8 text, as an integer
  (:meth:`~sqlfeed.dialects.Dialect.md5_head`), modulo ``buckets``. SQLite has no MD5: there an
  integer key is needed.
* **the whole row** (``key=None``): the MD5 of the columns' texts joined by ``|``, each value
  written ``+<text>`` and NULL as ``-`` (so NULL differs from every text); integers,
  decimals, text, booleans (``1``/``0``), dates and timestamps (as days and microseconds
  since 1970) are written alike on every engine, but a float's text differs between
  engines (``0.1`` or ``0.10000000000000001``), so a row with a float column may land in
  another bucket elsewhere: a key is the portable choice.

A NULL key has no bucket: its rows all go to **training** (the validation split holds
only rows it can name again). A float key is refused: its text differs between engines.

>>> Split("id", 0.2).rule()
{'key': 'id', 'fraction': 0.2, 'buckets': 1000, 'hash': 'sqlfeed-split-1'}
>>> Split("id", 0.2).bucket(42), Split("name", 0.2).bucket("ada")
(321, 31)
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from sqlfeed.dialects import Dialect, InvalidArgumentError
from sqlfeed.io import connect
from sqlfeed.sql import ParsedQuery, deterministic
from sqlfeed.sql.frame import Frame

__all__ = ["HASH_SCHEME", "Split", "band_sql", "bucket_expression", "split_sql"]

HASH_SCHEME = "sqlfeed-split-1"
"""The name and version of the bucket scheme above, recorded in every :meth:`Split.rule`."""

PRIME = 2_147_483_647
"""``2**31 - 1``: the modulus of the integer hash (products of two residues fit 62 bits)."""

ROUNDS = ((1_103_515_245, 12_345), (1_664_525, 1_013_904_223))
"""The integer hash's rounds ``x = (x * A + B) % PRIME``, each ``A`` and ``B`` below 2**31."""

MD5_DIGITS = 7
"""Hex digits of the MD5 a text's bucket is taken from (an integer below 2**28)."""

MAX_BUCKETS = 1_000_000
"""The most buckets a split may have (far below 2**28, so MD5's buckets stay even)."""

NULL_TEXT = "-"
"""A NULL column in a whole row's text (every value is written with a leading ``+``)."""

VALUE_PREFIX = "+"
SEPARATOR = "|"

_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Split:
    """A deterministic train/validation split of a query's rows.

    Args:
        key: an output column of the query whose value decides the row's bucket (an
            integer, text, date or timestamp column); None: the whole row.
        fraction: the validation share, strictly between 0 and 1.
        buckets: the resolution of the split; ``fraction`` is rounded to ``1 / buckets``.

    Raises:
        InvalidArgumentError: a fraction out of (0, 1), too few or too many buckets, or a
            fraction that rounds to no bucket (or to all of them).
    """

    key: str | None
    fraction: float
    buckets: int = 1000

    def __post_init__(self) -> None:
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise InvalidArgumentError(
                f"the split key must be a column name or None (the whole row), not {self.key!r}"
            )
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)):
            raise InvalidArgumentError(
                f"the validation fraction must be a number in (0, 1), not {self.fraction!r}"
            )
        if not 0 < self.fraction < 1:
            raise InvalidArgumentError(
                f"the validation fraction must be in (0, 1), got {self.fraction!r}: "
                "e.g. 0.2 for a fifth of the rows"
            )
        if isinstance(self.buckets, bool) or not isinstance(self.buckets, int):
            raise InvalidArgumentError(f"split buckets must be an integer, not {self.buckets!r}")
        if not 2 <= self.buckets <= MAX_BUCKETS:
            raise InvalidArgumentError(
                f"split buckets must be in [2, {MAX_BUCKETS}], got {self.buckets}"
            )
        if not 0 < self.threshold < self.buckets:
            raise InvalidArgumentError(
                f"a validation fraction of {self.fraction!r} is {self.threshold} of "
                f"{self.buckets} buckets: use a fraction of at least {1 / self.buckets!r} and "
                f"at most {1 - 1 / self.buckets!r}, or more buckets"
            )

    @property
    def threshold(self) -> int:
        """The validation buckets: ``bucket < threshold`` is validation."""
        return round(float(self.fraction) * self.buckets)

    def rule(self) -> dict[str, Any]:
        """The split as JSON for a model's manifest (:meth:`from_rule` reads it back)."""
        return {
            "key": self.key,
            "fraction": float(self.fraction),
            "buckets": self.buckets,
            "hash": HASH_SCHEME,
        }

    @classmethod
    def from_rule(cls, rule: Mapping[str, Any]) -> Split:
        """The split a :meth:`rule` describes.

        Raises:
            InvalidArgumentError: a hash scheme this sqlfeed does not know (a newer one
                wrote it), or a rule that lacks a field.
        """
        scheme = rule.get("hash")
        if scheme != HASH_SCHEME:
            raise InvalidArgumentError(
                f"the split's hash scheme {scheme!r} is unknown to this sqlfeed (it knows "
                f"{HASH_SCHEME!r}): upgrade sqlfeed to the version that wrote the model"
            )
        missing = [field for field in ("key", "fraction", "buckets") if field not in rule]
        if missing:
            raise InvalidArgumentError(f"the split rule lacks {', '.join(missing)}: {dict(rule)}")
        return cls(rule["key"], rule["fraction"], rule["buckets"])

    def bucket(self, value: Any) -> int:
        """The bucket of a key value, as the engines compute it (``buckets`` for None).

        Integers, dates (days since 1970), timestamps (microseconds since 1970; an aware
        one in UTC) and text; for checks and for splitting rows outside a database.

        Raises:
            InvalidArgumentError: a value of another type (a float, bytes...).
        """
        if value is None:
            return self.buckets
        if isinstance(value, str):
            return int(hashlib.md5(value.encode("utf-8")).hexdigest()[:MD5_DIGITS], 16) % (
                self.buckets
            )
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
            value = (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        elif isinstance(value, dt.date):
            value = (value - _EPOCH).days
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(
                f"a split key value must be an integer, text, date or timestamp, not "
                f"{type(value).__name__}"
            )
        x = value % PRIME  # Python's % is already non-negative
        for a, b in ROUNDS:
            x = (x * a + b) % PRIME
        return x % self.buckets


def split_sql(query: str | ParsedQuery, source: Any, split: Split) -> tuple[str, str]:
    """The training and the validation SELECT of the query's rows, in the source's dialect.

    ``SELECT * FROM (<query>) AS _sqlfeed_q WHERE <bucket> >= n`` and ``... < n``, with
    ``n = round(fraction * buckets)``: together they return every row of the query once
    (the query's own ORDER BYs that may tie completed first, so it returns the same rows
    every run). Only the query's output columns and types are asked of the database.

    Args:
        query: the SELECT, as text or parsed.
        source: anything :func:`sqlfeed.connect` takes (a Source, a URL, a connection).
        split: the key, fraction and buckets.

    Returns:
        ``(training_sql, validation_sql)``.

    Raises:
        InvalidArgumentError: a key that is not an output column, a float (or other
            unportable) key, or a text key or whole row on an engine without MD5.
        UnstableQueryError: the query may return other rows on another run.
    """
    frame, bucket = _framed(query, source, split)
    threshold = exp.Literal.number(split.threshold)
    training = frame.with_condition(exp.GTE(this=bucket, expression=threshold))
    validation = frame.with_condition(exp.LT(this=bucket.copy(), expression=threshold.copy()))
    return frame.render(training), frame.render(validation)


def band_sql(query: str | ParsedQuery, source: Any, split: Split, low: int, high: int) -> str:
    """The SELECT of the query's rows whose bucket is in ``[low, high)``.

    Of the split's ``buckets``; a NULL key's bucket is ``buckets``: a slice of a split's
    rows, e.g. the part of the training split kept out of fitting for early stopping.

    Raises:
        InvalidArgumentError: as :func:`split_sql`, or a band outside ``[0, buckets]``.
    """
    if not 0 <= low < high <= split.buckets + 1:
        raise InvalidArgumentError(
            f"a band of buckets must be within [0, {split.buckets + 1}), not [{low}, {high})"
        )
    frame, bucket = _framed(query, source, split)
    inside = exp.and_(
        exp.GTE(this=bucket, expression=exp.Literal.number(low)),
        exp.LT(this=bucket.copy(), expression=exp.Literal.number(high)),
    )
    return frame.render(frame.with_condition(inside))


def _framed(query: str | ParsedQuery, source: Any, split: Split) -> tuple[Frame, exp.Expr]:
    """The query's frame (stable, its output columns known) and the bucket expression."""
    owned = isinstance(source, str)
    src = connect(source)
    try:
        parsed = src.parse(query)
        columns = src.output_columns(parsed)
        schema = src.schema(parsed)
    finally:
        if owned:
            src.close()
    engine: Dialect = src.dialect
    parsed = deterministic(parsed, engine, columns, allow_unstable=False, strict=False)
    frame = Frame.build(parsed, columns, pushdown=False)
    if frame.columns is None:  # the engine reported the names: never unknown here
        raise AssertionError("the split's frame does not know the query's output columns")
    return frame, bucket_expression(split, frame.columns, columns, schema, engine)


def bucket_expression(
    split: Split,
    columns: Sequence[exp.Expr],
    names: Sequence[str],
    schema: pa.Schema,
    dialect: Dialect,
) -> exp.Expr:
    """The bucket of a row, an integer in [0, buckets] (``buckets``: a NULL key).

    Args:
        split: the key and the buckets.
        columns: expressions for the query's output columns, in order.
        names: their names, as the engine reports them.
        schema: their Arrow types.
        dialect: the engine the expression is for.

    Raises:
        InvalidArgumentError: as :func:`split_sql`.
    """
    if split.key is None:
        return _row_bucket(columns, schema, dialect, split.buckets)
    position = _key_position(split.key, names)
    return _key_bucket(columns[position], schema.field(position), dialect, split.buckets)


def _key_position(key: str, columns: Sequence[str]) -> int:
    """The output position of ``key`` (exact name first, then case-insensitive)."""
    matches = [i for i, c in enumerate(columns) if c == key] or [
        i for i, c in enumerate(columns) if c.casefold() == key.casefold()
    ]
    if not matches:
        raise InvalidArgumentError(
            f"split key {key!r} is not a column of the query (its columns: {', '.join(columns)})"
        )
    if len(matches) > 1:
        raise InvalidArgumentError(
            f"split key {key!r} names {len(matches)} columns of the query: alias them apart"
        )
    return matches[0]


def _key_bucket(column: exp.Expr, field: pa.Field, engine: Dialect, buckets: int) -> exp.Expr:
    """The bucket of a key column; ``buckets`` (training) where the key is NULL."""
    kind = field.type
    name = field.name
    if pa.types.is_floating(kind):
        raise InvalidArgumentError(
            f"split key {name!r} is a float ({kind}): its text and rounding differ between "
            "engines, so its rows would split differently elsewhere; use an integer or text key"
        )
    number: exp.Expr | None = None
    if pa.types.is_integer(kind) or (pa.types.is_decimal(kind) and kind.scale == 0):
        number = column
    elif pa.types.is_date(kind):
        number = _required(engine.epoch_days(column), name, engine, "days since 1970 of a date")
    elif pa.types.is_timestamp(kind):
        number = _required(
            engine.epoch_microseconds(column), name, engine, "microseconds since 1970"
        )
    if number is not None:
        hashed = _integer_hash(number, buckets)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        hashed = _text_hash(_text(column), engine, buckets)
    else:
        raise InvalidArgumentError(
            f"split key {name!r} is of type {kind}, which sqlfeed cannot hash alike on every "
            "engine: use an integer, text, date or timestamp key"
        )
    return exp.Coalesce(this=hashed, expressions=[exp.Literal.number(buckets)])


def _required(value: exp.Expr | None, name: str, engine: Dialect, what: str) -> exp.Expr:
    if value is None:
        raise InvalidArgumentError(
            f"sqlfeed knows no {what} on {engine.TITLE or engine.name} to hash split key "
            f"{name!r} by: use an integer or text key"
        )
    return value


def _integer_hash(number: exp.Expr, buckets: int) -> exp.Expr:
    """``x = ((k % P) + P) % P``, the rounds, ``x % buckets``.

    64-bit arithmetic that never overflows (``k % P`` in the key's own type, then BIGINT).
    """
    prime = exp.Literal.number(PRIME)
    residue = exp.cast(_mod(number.copy(), PRIME), exp.DataType.Type.BIGINT)
    x: exp.Expr = _mod(exp.Add(this=residue, expression=prime), PRIME)
    for a, b in ROUNDS:
        product = exp.Mul(this=x, expression=exp.Literal.number(a))
        x = _mod(exp.Add(this=product, expression=exp.Literal.number(b)), PRIME)
    return _mod(x, buckets)


def _mod(value: exp.Expr, modulus: int) -> exp.Expr:
    return exp.Mod(this=exp.paren(value, copy=False), expression=exp.Literal.number(modulus))


def _text_hash(text: exp.Expr, engine: Dialect, buckets: int) -> exp.Expr:
    head = engine.md5_head(text)
    if head is None:
        raise InvalidArgumentError(
            f"{engine.TITLE or engine.name} has no md5 to split by a text key or by the whole "
            "row: pass key=<an integer column>"
        )
    return _mod(head, buckets)


def _text(column: exp.Expr) -> exp.Expr:
    return exp.cast(column.copy(), exp.DataType.Type.TEXT)


def _row_bucket(
    columns: Sequence[exp.Expr], schema: pa.Schema, engine: Dialect, buckets: int
) -> exp.Expr:
    """The bucket of the whole row: MD5 of its columns' texts (see the module's docstring)."""
    if engine.md5_head(exp.null()) is None:  # refuse before building anything
        _text_hash(exp.null(), engine, buckets)
    joined: exp.Expr | None = None
    for column, field in zip(columns, schema, strict=True):
        piece = exp.Case(
            ifs=[exp.If(this=exp.Is(this=column.copy(), expression=exp.null()), true=_null())],
            default=exp.DPipe(
                this=exp.Literal.string(VALUE_PREFIX),
                expression=_value_text(column, field.type, engine),
                safe=True,
            ),
        )
        if joined is None:
            joined = piece
        else:
            joined = exp.DPipe(
                this=exp.DPipe(this=joined, expression=exp.Literal.string(SEPARATOR), safe=True),
                expression=piece,
                safe=True,
            )
    assert joined is not None  # a query has at least one column
    return _text_hash(joined, engine, buckets)


def _null() -> exp.Expr:
    return exp.Literal.string(NULL_TEXT)


def _value_text(column: exp.Expr, kind: pa.DataType, engine: Dialect) -> exp.Expr:
    """A non-NULL value's text, written alike on every engine where its type allows."""
    if pa.types.is_boolean(kind):
        return exp.Case(
            ifs=[exp.If(this=column.copy(), true=exp.Literal.string("1"))],
            default=exp.Literal.string("0"),
        )
    number = None
    if pa.types.is_date(kind):
        number = engine.epoch_days(column.copy())
    elif pa.types.is_timestamp(kind):
        number = engine.epoch_microseconds(column.copy())
    if number is not None:
        return _text(exp.cast(number, exp.DataType.Type.BIGINT))
    return _text(column)

"""SQLFlow's statements: ``SELECT ... TO TRAIN | TO EVALUATE | TO PREDICT ...``.

SQLFlow (``sql-machine-learning/sqlflow``, its language guide) extends a SELECT with a
clause that says what to do with its rows::

    SELECT * FROM iris TO TRAIN DNNClassifier
        WITH model.hidden_units=[10, 10], train.epoch=10
        COLUMN sepal_length, petal_length
        LABEL class INTO my_model
    SELECT * FROM iris TO EVALUATE my_model WITH validation.metrics="Accuracy" LABEL class
    SELECT * FROM iris TO PREDICT iris.class USING my_model

:func:`parse_statement` splits such a statement into the SELECT (the exact source text
before the ``TO`` token) and the clause, with sqlglot's tokenizer of the engine's dialect:
a ``TO TRAIN`` inside a string, a quoted name, a comment or parentheses is part of the
SELECT. The clause is read by a small recursive-descent parser over the tokens of
SQLFlow's own language, where ``'...'`` and ``"..."`` are strings and ```...``` a
quoted name. The SELECT itself is validated later, as every query is, by the caller.

Model families: ``dnn``, ``linear``, ``wide_deep``, ``gbdt`` and SQLFlow's names for them
(``DNNClassifier``, ``LinearRegressor``, ``DNNLinearCombinedClassifier``,
``BoostedTreesClassifier``, ``xgboost.gbtree``, ...; case aside). A ``...Regressor`` sets
the task ``regression``. A ``...Classifier`` trains a classifier: with ``model.n_classes``
the task is ``binary`` (2) or ``multiclass`` (more); without it the task is
``classification`` (binary or multiclass by the label's values, never a regression;
:meth:`Statement.check_label_type` refuses a floating-point label before training).

A model path is a quoted string or a name (``INTO m`` is the folder ``m``; a dotted name
``INTO models.m`` is the folder ``models.m``, as written).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import pyarrow as pa
import sqlglot
from sqlglot import Token, TokenType
from sqlglot.errors import TokenError
from sqlglot.tokens import Tokenizer

from sqlfeed.dialects import Dialect, get_dialect
from sqlfeed.errors import InvalidArgumentError, ParseError, SqlfeedError, UnsupportedError
from sqlfeed.ml.options import TrainOptions

__all__ = ["FAMILIES", "WITH_KEYS", "Statement", "parse_statement"]

KINDS = ("TRAIN", "EVALUATE", "PREDICT", "EXPLAIN")
"""The words after ``TO`` that start SQLFlow's clause."""

_CLASSIFIER = "classifier"

FAMILIES: dict[str, tuple[str, str]] = {
    "dnn": ("dnn", "auto"),
    "linear": ("linear", "auto"),
    "wide_deep": ("wide_deep", "auto"),
    "gbdt": ("gbdt", "auto"),
    "DNNClassifier": ("dnn", _CLASSIFIER),
    "DNNRegressor": ("dnn", "regression"),
    "LinearClassifier": ("linear", _CLASSIFIER),
    "LinearRegressor": ("linear", "regression"),
    "DNNLinearCombinedClassifier": ("wide_deep", _CLASSIFIER),
    "DNNLinearCombinedRegressor": ("wide_deep", "regression"),
    "BoostedTreesClassifier": ("gbdt", _CLASSIFIER),
    "BoostedTreesRegressor": ("gbdt", "regression"),
    "xgboost.gbtree": ("gbdt", "auto"),
}
"""A model name after ``TO TRAIN`` (case aside) -> (family, task); the task ``classifier``
becomes ``auto``, ``binary`` or ``multiclass`` (see the module's docstring)."""

_FAMILY_OF = {name.casefold(): found for name, found in FAMILIES.items()}

WITH_KEYS: dict[str, tuple[str, str]] = {
    "model.hidden_units": ("hidden_units", "ints"),
    "train.epoch": ("epochs", "int"),
    "train.batch_size": ("batch_size", "int"),
    "model.learning_rate": ("learning_rate", "number"),
    "optimizer.learning_rate": ("learning_rate", "number"),
    "eta": ("learning_rate", "number"),
    "train.seed": ("seed", "int"),
    "validation.fraction": ("validation", "number"),
    "validation.key": ("key", "name"),
    "model.n_classes": ("n_classes", "int"),
    "num_class": ("n_classes", "int"),
    "model.n_estimators": ("trees", "int"),
    "train.num_boost_round": ("trees", "int"),
    "model.max_depth": ("max_depth", "int"),
    "max_depth": ("max_depth", "int"),
    "model.top_k": ("top_k", "int"),
    "model.buckets": ("buckets", "int"),
    "objective": ("objective", "name"),
}
"""``TO TRAIN``'s WITH keys (case-folded) -> (what they set, the kind of value): a
:class:`~sqlfeed.ml.options.TrainOptions` field, or ``n_classes``/``objective``, which
set the task (XGBoost's names as SQLFlow's ``xgboost.gbtree`` takes them)."""

EVALUATE_KEYS: dict[str, tuple[str, str]] = {"validation.metrics": ("metrics", "names")}
"""``TO EVALUATE``'s WITH keys: the metrics to print (a comma-separated string)."""

OBJECTIVES = {
    "binary:logistic": "binary",
    "multi:softprob": "multiclass",
    "multi:softmax": "multiclass",
    "reg:squarederror": "regression",
}
"""XGBoost's ``objective`` values (as SQLFlow passes them) -> the task."""

_QUOTED = frozenset(
    {TokenType.STRING, TokenType.IDENTIFIER, TokenType.NATIONAL_STRING, TokenType.RAW_STRING}
)


class _ClauseTokenizer(Tokenizer):
    """The tokens of SQLFlow's clause: ``'...'`` and ``"..."`` strings, ```...``` names."""

    QUOTES: ClassVar[list[str | tuple[str, str]]] = ["'", '"']
    IDENTIFIERS: ClassVar[list[str | tuple[str, str]]] = ["`"]


@dataclass
class Statement:
    """A parsed SQLFlow statement.

    Attributes:
        kind: ``train``, ``evaluate`` or ``predict``.
        select: the SELECT, the exact source text before ``TO``.
        family: the model family (``train``).
        task: ``auto``, ``binary``, ``multiclass``, ``regression`` or ``classification``
            (``train``).
        options: TrainOptions field -> value, from WITH and COLUMN (``train``).
        label: the LABEL column (``train``, ``evaluate``).
        model_path: the model folder: INTO (``train``), after EVALUATE, USING (``predict``).
        into: ``evaluate``'s INTO table, if given.
        predict_column: ``predict``'s ``table.col`` or ``col``.
        classifier: a ``...Classifier`` name: a regression task is refused.
        n_classes: ``model.n_classes`` when given (it sets the task binary or multiclass,
            which training checks against the label's values).
        metrics: ``evaluate``'s ``validation.metrics`` names, if given.
    """

    kind: str
    select: str
    family: str | None = None
    task: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    model_path: str | None = None
    into: str | None = None
    predict_column: str | None = None
    classifier: bool = False
    n_classes: int | None = None
    metrics: tuple[str, ...] | None = None

    def train_options(self, **fields: Any) -> TrainOptions:
        """The :class:`~sqlfeed.ml.options.TrainOptions` of a ``TO TRAIN`` statement.

        Args:
            **fields: further fields (``overwrite``, ``checkpoint_dir``, ...).

        Raises:
            InvalidArgumentError: a value TrainOptions refuses.
        """
        if self.kind != "train" or self.family is None or self.task is None:
            raise InvalidArgumentError(f"TO {self.kind.upper()} trains nothing: no options")
        return TrainOptions(family=self.family, task=self.task, **self.options, **fields)

    def check_label_type(self, label_type: pa.DataType) -> None:
        """Refuse a classifier on a floating-point label, before anything trains.

        Raises:
            InvalidArgumentError: a ``...Classifier`` with a float label.
        """
        if self.classifier and (
            pa.types.is_floating(label_type) or pa.types.is_decimal(label_type)
        ):
            raise InvalidArgumentError(
                f"a classifier needs class labels, and LABEL {self.label} is {label_type}: "
                "use a ...Regressor, or cast the label to an integer or text in the SELECT"
            )


def parse_statement(text: str, dialect: str | Dialect | None = None) -> Statement:
    """Split and parse a SQLFlow statement ``SELECT ... TO TRAIN|EVALUATE|PREDICT ...``.

    Args:
        text: the statement.
        dialect: the engine's dialect (name or object; default duckdb), whose tokenizer
            tells the SELECT's strings, names and comments from its words.

    Returns:
        The statement; its SELECT is not validated here (the caller parses it with the source).

    Raises:
        ParseError: no TO clause, an empty SELECT, or a clause that does not parse (the
            message says where).
        InvalidArgumentError: an unknown model name or WITH key, or a value of the wrong kind.
        UnsupportedError: ``TO EXPLAIN``.
    """
    engine = get_dialect(dialect or "duckdb")
    try:
        tokens = list(sqlglot.Dialect.get_or_raise(engine.sqlglot_dialect).tokenize(text))
    except TokenError as err:
        raise ParseError(f"cannot split the statement into tokens ({err})") from None
    start = _clause_start(text, tokens)
    select = text[:start].strip()
    if not any(t.start < start for t in tokens):
        raise ParseError(
            "nothing before TO: give the SELECT whose rows it uses", *_where(text, start)
        )
    try:
        clause = _ClauseTokenizer().tokenize(text[start:])
    except TokenError as err:
        raise ParseError(f"cannot read the TO clause ({err})", *_where(text, start)) from None
    return _Clause(text, start, clause).statement(select)


def _clause_start(text: str, tokens: list[Token]) -> int:
    """The offset of the top-level ``TO`` that starts the clause."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.SEMICOLON:
            following = tokens[i + 1 :]
            if any(_word(t) == "TO" for t in following):
                raise ParseError(
                    "the SELECT ends at ';' before its TO clause: remove the ';'",
                    *_where(text, token.start),
                )
        elif (
            depth == 0
            and _word(token) == "TO"
            and i + 1 < len(tokens)
            and _word(tokens[i + 1]) in KINDS
            and not (i > 0 and _word(tokens[i - 1]) == "SIMILAR")
        ):
            return token.start
    raise ParseError(
        "no TO TRAIN, TO EVALUATE or TO PREDICT clause: add TO TRAIN <model> ... LABEL "
        "<column> INTO <path> (a plain SELECT's rows: sqlfeed sample, or sqlfeed export)"
    )


def _word(token: Token) -> str | None:
    """The upper-case text of an unquoted token (None for strings and quoted names)."""
    return None if token.token_type in _QUOTED else token.text.upper()


def _where(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Clause:
    """A recursive-descent parser over the tokens of the TO clause."""

    def __init__(self, text: str, offset: int, tokens: list[Token]) -> None:
        self.text = text
        self.offset = offset
        self.tokens = [t for t in tokens if t.token_type != TokenType.SEMICOLON]
        ends = [t for t in tokens if t.token_type == TokenType.SEMICOLON]
        if ends and any(t.start > ends[0].start for t in self.tokens):
            self.fail("the statement ends at ';' with more after it: remove the ';'", ends[0])
        self.pos = 0

    # -- the token stream --------------------------------------------------------------

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def at(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and _word(token) in words

    def take(self, what: str) -> Token:
        token = self.peek()
        if token is None:
            self.fail(f"expected {what}, found the end of the statement", None)
        self.pos += 1
        return token

    def expect(self, word: str, what: str) -> None:
        if not self.at(word):
            self.fail(f"expected {what}, found {self.found()}", self.peek())
        self.pos += 1

    def found(self) -> str:
        token = self.peek()
        return "the end of the statement" if token is None else repr(self.source(token))

    def source(self, token: Token) -> str:
        return self.text[self.offset + token.start : self.offset + token.end + 1]

    def fail(
        self, message: str, token: Token | None, error: type[SqlfeedError] = ParseError
    ) -> NoReturn:
        offset = len(self.text.rstrip()) if token is None else self.offset + token.start
        line, col = _where(self.text, offset)
        if error is ParseError:
            raise ParseError(message, line, col)
        raise error(f"{message} at line {line}, column {col}")

    # -- the grammar ---------------------------------------------------------------------

    def statement(self, select: str) -> Statement:
        self.expect("TO", "TO")
        kind = self.take("TRAIN, EVALUATE or PREDICT")
        word = _word(kind)
        if word == "EXPLAIN":
            self.fail(
                "TO EXPLAIN is not supported: sqlfeed trains, evaluates and predicts "
                "(TO TRAIN, TO EVALUATE, TO PREDICT)",
                kind,
                UnsupportedError,
            )
        parse: Callable[[Statement], None] = getattr(self, f"parse_{str(word).lower()}")
        statement = Statement(kind=str(word).lower(), select=select)
        parse(statement)
        if self.peek() is not None:
            self.fail(f"unexpected {self.found()} after the end of the statement", self.peek())
        return statement

    def parse_train(self, statement: Statement) -> None:
        """``TO TRAIN <model> [WITH ...] [COLUMN a, ...] LABEL <col> INTO <path>``."""
        model = self.peek()
        name = self.dotted("a model name after TO TRAIN (dnn, linear, wide_deep, gbdt)")
        family, task = self.family(name, model)
        settings = self.with_list(WITH_KEYS) if self.at("WITH") else {}
        if self.at("COLUMN"):
            self.pos += 1
            settings["features"] = (tuple(self.columns()), self.peek())
        statement.label = self.label("TO TRAIN")
        self.expect("INTO", f"INTO <model path> after LABEL {statement.label}")
        statement.model_path = self.path("INTO")
        statement.family = family
        statement.classifier = task == _CLASSIFIER
        self.resolve(statement, task, settings)

    def parse_evaluate(self, statement: Statement) -> None:
        """``TO EVALUATE <path> [WITH validation.metrics="..."] LABEL <col> [INTO <table>]``."""
        statement.model_path = self.path("TO EVALUATE")
        settings = self.with_list(EVALUATE_KEYS) if self.at("WITH") else {}
        if "metrics" in settings:
            statement.metrics = settings["metrics"][0]
        statement.label = self.label("TO EVALUATE")
        if self.at("INTO"):
            self.pos += 1
            statement.into = self.dotted("a table name after INTO")

    def parse_predict(self, statement: Statement) -> None:
        """``TO PREDICT <table>.<col> | <col> USING <path> [WITH ...]``."""
        statement.predict_column = self.dotted("the result column after TO PREDICT (table.col)")
        self.expect("USING", f"USING <model path> after TO PREDICT {statement.predict_column}")
        statement.model_path = self.path("USING")
        if self.at("WITH"):
            self.with_list({})

    def label(self, after: str) -> str:
        if not self.at("LABEL"):
            self.fail(f"{after} needs LABEL <column>: found {self.found()}", self.peek())
        self.pos += 1
        return self.name("the label column after LABEL")

    def family(self, name: str, token: Token | None) -> tuple[str, str]:
        found = _FAMILY_OF.get(name.casefold())
        if found is None:
            self.fail(
                _unknown(f"model {name!r}", name.casefold(), FAMILIES), token, InvalidArgumentError
            )
        return found

    def name(self, what: str) -> str:
        token = self.take(what)
        if token.token_type in _QUOTED or _is_name(token.text):
            return token.text
        return self.fail(f"expected {what}, found {self.source(token)!r}", token)

    def dotted(self, what: str) -> str:
        parts = [self.name(what)]
        while (token := self.peek()) is not None and token.token_type == TokenType.DOT:
            self.pos += 1
            parts.append(self.name(what))
        return ".".join(parts)

    def path(self, after: str) -> str:
        token = self.peek()
        if token is not None and token.token_type == TokenType.STRING:
            self.pos += 1
            if not token.text.strip():
                self.fail(f"an empty model path after {after}", token)
            return token.text
        return self.dotted(f"a model path after {after} ('models/m' or a name)")

    def columns(self) -> list[str]:
        names = [self.column()]
        while (token := self.peek()) is not None and token.token_type == TokenType.COMMA:
            self.pos += 1
            names.append(self.column())
        return names

    def column(self) -> str:
        name = self.name("a column name after COLUMN")
        token = self.peek()
        if token is not None and token.token_type == TokenType.L_PAREN:
            self.fail(
                f"COLUMN takes column names, not {name}(...): sqlfeed derives each column's "
                "transform from exact statistics of the training rows",
                self.tokens[self.pos - 1],
                InvalidArgumentError,
            )
        return name

    def with_list(self, keys: dict[str, tuple[str, str]]) -> dict[str, tuple[Any, Token | None]]:
        """``WITH key=value, ...``: what each key sets -> (its value, the key's token)."""
        self.pos += 1
        settings: dict[str, tuple[Any, Token | None]] = {}
        while True:
            token = self.peek()
            key = self.dotted("a key=value after WITH")
            if key.casefold() not in keys:
                known = "none" if not keys else None
                message = _unknown(f"WITH key {key!r}", key.casefold(), keys, known)
                self.fail(message, token, InvalidArgumentError)
            target, kind = keys[key.casefold()]
            if target in settings:
                self.fail(f"WITH sets {target} twice ({key})", token, InvalidArgumentError)
            self.expect("=", f"= after {key}")
            settings[target] = (self.value_of(kind, key), token)
            if (comma := self.peek()) is None or comma.token_type != TokenType.COMMA:
                return settings
            self.pos += 1

    def value_of(self, kind: str, key: str) -> Any:
        token = self.peek()
        value = self.value()
        if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if (
            kind == "ints"
            and isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return tuple(value)
        if kind == "name" and isinstance(value, str) and value.strip():
            return value
        if kind == "names" and isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        expected = {
            "int": "an integer",
            "number": "a number",
            "ints": "a list of integers like [64, 32]",
            "name": "a name or a string",
            "names": 'a string like "Accuracy,AUC"',
        }[kind]
        return self.fail(
            f"{key} takes {expected}, not {self.source_of(token)}", token, InvalidArgumentError
        )

    def source_of(self, first: Token | None) -> str:
        if first is None:
            return "nothing"
        last = self.tokens[self.pos - 1]
        return self.text[self.offset + first.start : self.offset + last.end + 1]

    def value(self) -> Any:
        """A WITH value: a number, a string, a name, a boolean or a [list]."""
        token = self.take("a value")
        kind = token.token_type
        if kind in (TokenType.DASH, TokenType.PLUS):
            number = self.take("a number")
            if number.token_type != TokenType.NUMBER:
                return self.fail(f"expected a number, found {self.source(number)!r}", number)
            value = _number(number.text)
            return -value if kind == TokenType.DASH else value
        if kind == TokenType.NUMBER:
            return _number(token.text)
        if kind in (TokenType.TRUE, TokenType.FALSE):
            return kind == TokenType.TRUE
        if kind == TokenType.L_BRACKET:
            return self.items()
        if kind in _QUOTED:
            return token.text
        if _is_name(token.text):
            self.pos -= 1
            return self.dotted("a value")
        return self.fail(f"expected a value, found {self.source(token)!r}", token)

    def items(self) -> list[Any]:
        values: list[Any] = []
        while not ((token := self.peek()) is not None and token.token_type == TokenType.R_BRACKET):
            if values:
                if token is None or token.token_type != TokenType.COMMA:
                    return self.fail(f"expected ',' or ']' in a list, found {self.found()}", token)
                self.pos += 1
            values.append(self.value())
        self.pos += 1
        return values

    def resolve(
        self, statement: Statement, task: str, settings: dict[str, tuple[Any, Token | None]]
    ) -> None:
        """The task from the model name, ``n_classes`` and ``objective``; the options."""
        n_classes = settings.pop("n_classes", None)
        objective = settings.pop("objective", None)
        if objective is not None:
            value, token = objective
            chosen = OBJECTIVES.get(str(value).casefold())
            if chosen is None:
                self.fail(
                    _unknown(f"objective {value!r}", str(value), OBJECTIVES),
                    token,
                    InvalidArgumentError,
                )
            if task not in ("auto", chosen) and not (
                task == _CLASSIFIER and chosen != "regression"
            ):
                self.fail(
                    f"objective {value!r} contradicts the model name", token, InvalidArgumentError
                )
            task = chosen
        if n_classes is not None:
            count, token = n_classes
            if count < 2:
                self.fail(f"n_classes must be at least 2, got {count}", token, InvalidArgumentError)
            if task == "regression":
                self.fail(
                    "n_classes is for a classifier, not a regression", token, InvalidArgumentError
                )
            wanted = "binary" if count == 2 else "multiclass"
            if task not in ("auto", _CLASSIFIER, wanted):
                self.fail(
                    f"n_classes={count} contradicts the task {task}", token, InvalidArgumentError
                )
            statement.n_classes = count
            task = wanted
        statement.task = "classification" if task == _CLASSIFIER else task
        statement.options = {name: value for name, (value, _) in settings.items()}


def _is_name(text: str) -> bool:
    """Whether ``text`` is an unquoted name (letters, digits, ``_`` and ``$``, no digit first)."""
    return bool(text) and not text[0].isdigit() and all(c.isalnum() or c in "_$" for c in text)


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def _unknown(what: str, given: str, known: dict[str, Any], listed: str | None = None) -> str:
    """``unknown WHAT: did you mean X? (known: ...)``."""
    folded = {name.casefold(): name for name in known}
    close = difflib.get_close_matches(given.casefold(), list(folded), n=1, cutoff=0.6)
    hint = f"did you mean {folded[close[0]]}? " if close else ""
    return f"unknown {what}: {hint}(known: {listed or ', '.join(known)})"

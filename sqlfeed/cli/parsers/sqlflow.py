"""The parsers of ``sqlfeed sql`` (handlers in :mod:`sqlfeed.cli.sqlflow`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import add_target, later
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

HELP = "train, evaluate or predict from SQLFlow's SELECT ... TO TRAIN / TO EVALUATE / TO PREDICT"
"""The command's help line (also in :data:`sqlfeed.cli.main.COMMANDS`)."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``sql`` command."""
    parser = commands.add_parser(
        "sql",
        help=HELP,
        description=(
            "Run a SQLFlow statement: a SELECT followed by TO TRAIN <model> [WITH k=v, ...] "
            "[COLUMN a, b] LABEL <col> INTO <path>, TO EVALUATE <path> [WITH "
            'validation.metrics="..."] LABEL <col>, or TO PREDICT <table.col> USING <path>. '
            "Models: dnn, linear, wide_deep, gbdt and SQLFlow's DNNClassifier, DNNRegressor, "
            "LinearClassifier, LinearRegressor, DNNLinearCombinedClassifier/Regressor, "
            "BoostedTreesClassifier/Regressor, xgboost.gbtree. WITH keys: model.hidden_units, "
            "train.epoch, train.batch_size, model.learning_rate, train.seed, "
            "validation.fraction, validation.key, model.n_classes, model.n_estimators, "
            "model.max_depth, model.top_k, model.buckets. TO PREDICT writes the SELECT's "
            "columns and the prediction into table.col, replacing the table atomically, "
            "exactly once (sqlfeed predict); a selected column named col is kept and the "
            "prediction named predicted_col."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--overwrite", action="store_true", help="TO TRAIN: replace an existing model folder"
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="TO TRAIN: keep checkpoints here; the same command run again resumes",
    )
    parser.add_argument(
        "statement",
        metavar="STATEMENT",
        help="SELECT ... TO TRAIN|EVALUATE|PREDICT ...; '-' reads it from stdin, '@file.sql' "
        "from a file",
    )
    parser.set_defaults(handler=later("sqlflow:_cmd_sql"))

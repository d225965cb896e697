"""The parsers of ``sqlfeed train``, ``evaluate`` and ``model show``.

Their handlers are in :mod:`sqlfeed.cli.ml`.
"""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import FAMILIES, TASKS, add_target, column_list, later, name_flags
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]

HELP = {
    "train": "train a model on a SELECT's rows: one folder with its preprocessing inside",
    "evaluate": "a model's metrics on its validation split or on a SELECT, beside a baseline",
    "model": "show what a model folder holds: task, features and transforms, metrics, SQL",
}
"""The commands' help lines (also in :data:`sqlfeed.cli.main.COMMANDS`)."""


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``train``, ``evaluate`` and ``model`` commands."""
    _register_train(commands)
    _register_evaluate(commands)
    model = commands.add_parser(
        "model",
        help=HELP["model"],
        description="Inspect a model folder written by sqlfeed train.",
    )
    actions = model.add_subparsers(
        dest="model_command", metavar="ACTION", parser_class=CommandParser
    )
    actions.required = True
    show = actions.add_parser(
        "show",
        help="task, label and classes, features with their transforms, metrics, SQL, versions",
        description=(
            "Print a model folder's manifest: task, family, label and classes, each feature "
            "with its type and transform (vocabularies truncated), the validation metrics, "
            "the training and validation SQL and the split rule, rows, versions and the "
            "time it was made. Reads manifest.json only: no database, no TensorFlow."
        ),
    )
    show.add_argument("folder", metavar="DIR", help="the model folder (sqlfeed train --out)")
    show.add_argument("--format", choices=("text", "json"), default="text")
    show.set_defaults(handler=later("ml:_cmd_model_show"))


def _register_train(commands: argparse._SubParsersAction[CommandParser]) -> None:
    parser = commands.add_parser(
        "train",
        help=HELP["train"],
        description=(
            "Split the SELECT's rows by a hash of --key (or of the whole row) into a "
            "training and a validation split, the same on every engine; compute exact "
            "statistics of the training split in the database; train a Keras model with "
            "its preprocessing inside (linear, dnn, wide_deep) or XGBoost's boosted trees "
            "(gbdt); write one folder: the model, manifest.json, stats.json, stats.html. "
            "Progress goes to stderr, the summary to stdout."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument("--label", required=True, metavar="COL", help="the label column")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="the model folder to write (must not exist)"
    )
    parser.add_argument("--task", choices=TASKS, help="default auto: from the label's values")
    parser.add_argument("--family", choices=FAMILIES, help="the model (default dnn)")
    parser.add_argument(
        "--hidden-units", metavar="N,N", help="hidden layers of dnn/wide_deep (default 64,32)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        metavar="N",
        help="default: about 2,000 steps (3 to 200 epochs); dnn and wide_deep on up to 200,000 "
        "training rows then stop early on a fifth of them kept out",
    )
    parser.add_argument("--batch-size", type=int, metavar="N", help="rows per step (default 256)")
    parser.add_argument(
        "--learning-rate", type=float, metavar="X", help="default: the family's own"
    )
    parser.add_argument(
        "--dropout",
        type=float,
        metavar="F",
        help="share of units dropped after each hidden layer while training (default 0.2)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="synchronous replicas (GPUs, else the CPU split), each fed by its own elastic "
        "worker of a job (default 1)",
    )
    parser.add_argument(
        "--class-weight",
        metavar="W",
        help="'balanced', or a JSON object of label value to weight: '{\"yes\": 3}'",
    )
    parser.add_argument("--seed", type=int, metavar="N", help="weights, shuffle, XGBoost (0)")
    parser.add_argument(
        "--key", metavar="COL", help="integer or text column the split hashes (default the row)"
    )
    parser.add_argument(
        "--validation", type=float, metavar="F", help="validation share, in (0, 1) (0.2)"
    )
    parser.add_argument(
        "--features", type=column_list, metavar="A,B", help="the feature columns (default all)"
    )
    parser.add_argument("--skip", type=column_list, metavar="A,B", help="columns left out")
    parser.add_argument("--top-k", type=int, metavar="N", help="vocabulary size (default 100)")
    parser.add_argument(
        "--buckets", type=int, metavar="N", help="quantile buckets of wide_deep (default 10)"
    )
    parser.add_argument("--trees", type=int, metavar="N", help="gbdt boosting rounds (100)")
    parser.add_argument("--max-depth", type=int, metavar="N", help="gbdt tree depth (6)")
    parser.add_argument("--partitions", "-m", type=int, metavar="M", help="partitions per read")
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="keep checkpoints here: the same command run again resumes where it stopped",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    parser.add_argument(
        "--no-report", action="store_true", help="write no stats.html (saves seconds)"
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "sql", metavar="SQL", help="the SELECT; '-' reads it from stdin, '@file.sql' from a file"
    )
    parser.set_defaults(handler=later("ml:_cmd_train"), precheck="stable_select")
    name_flags(parser)


def _register_evaluate(commands: argparse._SubParsersAction[CommandParser]) -> None:
    parser = commands.add_parser(
        "evaluate",
        help=HELP["evaluate"],
        description=(
            "Score a model on the rows of a SELECT (its features and its label), or, "
            "without one, on the validation split its manifest records. Binary: accuracy, "
            "precision, recall, F1, ROC AUC, PR AUC, log loss, confusion matrix; "
            "multiclass: accuracy, macro/weighted F1, confusion matrix; regression: MAE, "
            "RMSE, R2; each beside a trivial baseline's. With --predictions instead of "
            "--model: the same metrics of a table of predictions (sqlfeed predict --into), "
            "computed as aggregates in the engine, beside a baseline of its own labels."
        ),
    )
    add_target(parser, dialect=False)
    parser.add_argument("--model", metavar="DIR", help="the model folder (sqlfeed train --out)")
    parser.add_argument(
        "--predictions",
        metavar="TABLE",
        help="a table holding a label and a predicted column to score (no --model, no SQL)",
    )
    parser.add_argument("--label", metavar="COL", help="--predictions: the true values' column")
    parser.add_argument(
        "--predicted", metavar="COL", help="--predictions: the predicted values' column"
    )
    parser.add_argument(
        "--task", metavar="TASK", help="--predictions: binary, multiclass or regression"
    )
    parser.add_argument(
        "--probability",
        metavar="COL",
        help="--predictions, binary: the positive class's probability column (default "
        "<predicted>_prob when the table has it): log loss, ROC AUC, PR AUC; multiclass: "
        "the start of the per-class columns' names, PREFIX<class> (default <predicted>_prob_, "
        "as predict --proba writes them): log loss",
    )
    parser.add_argument("--partitions", "-m", type=int, metavar="M", help="partitions to read")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "sql",
        metavar="SQL",
        nargs="?",
        help="the SELECT to score ('-': stdin, '@file.sql': a file); none: the model's "
        "validation split",
    )
    parser.set_defaults(handler=later("ml:_cmd_evaluate"), precheck="stable_select")
    name_flags(parser)

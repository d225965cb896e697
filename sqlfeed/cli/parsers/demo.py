"""The parsers of ``sqlfeed demo`` (handlers in :mod:`sqlfeed.cli.demo`)."""

from __future__ import annotations

import argparse

from sqlfeed.cli.parsers import later
from sqlfeed.cli.parsing import CommandParser

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[CommandParser]) -> None:
    """Add the ``demo`` command."""
    parser = commands.add_parser(
        "demo",
        help="run the main job end to end on an embedded DuckDB",
        description=(
            "Create demo tables in an in-memory DuckDB and train a model from a SELECT over "
            "them with sqlfeed.ml (a hash split, exact statistics, a Keras dnn with its "
            "preprocessing inside, two synchronous replicas each fed by an elastic worker of "
            "a job), then print the validation metrics and the feed throughput."
        ),
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the demo table")
    parser.add_argument("--partitions", "-m", type=int, default=16, metavar="M")
    parser.add_argument(
        "--framework",
        choices=("tf", "torch"),
        default="tf",
        help="tf (default): the Keras job above; torch: train a PyTorch model from a "
        "DuckDB file through a DataLoader with two worker processes",
    )
    parser.set_defaults(handler=later("demo:_cmd_demo"))

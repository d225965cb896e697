"""``python -m sqlfeed``: the same as the ``sqlfeed`` console script."""

from sqlfeed.cli import entry_point

entry_point()

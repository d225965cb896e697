"""``python -m sqlfeed``: the same as the ``sqlfeed`` console script."""

from sqlfeed.cli.main import entry_point

entry_point()

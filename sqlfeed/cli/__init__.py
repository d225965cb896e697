"""The ``sqlfeed`` command line (:mod:`sqlfeed.cli.main`), one module per command group."""

"""Shared test helpers: engines, corpora, the CLI runner, the resume contract."""

"""Child processes the tests start (python -m tests.scripts.NAME)."""

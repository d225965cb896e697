"""The code's shape and the docstrings' examples."""

# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv and install the project into it; nothing is needed beforehand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck layers pytest fast bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/sqlfeed demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

layers: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

test: lint typecheck layers pytest

# Local loop: everything but the slow multi-process / large-data tests.
fast: lint typecheck layers
	$(BIN)/python -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.partition_overhead

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

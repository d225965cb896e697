# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv and install the project into it; nothing is needed beforehand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The CPU build of PyTorch: an exact pin (any other spec may fetch the CUDA build, several GB).
TORCH := torch==2.13.0 torchdata==0.11.0
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck layers pytest bench-smoke docs fast bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

# make test also installs the test tools and the heavy integrations (PyTorch, Ray, Dask);
# make demo does not need them.
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[all,test,torch,ray,dask,ml,lakehouse,docs]' $(TORCH)
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

demo: $(STAMP)
	$(BIN)/sqlfeed demo

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

layers: $(TEST_STAMP)
	$(BIN)/lint-imports

pytest: $(TEST_STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

# Every benchmark at a tiny scale (TPC-H SF 0.01, one round): it runs and its contenders
# read the same rows (benchmarks/smoke.py; about a minute on 2 idle cores).
bench-smoke: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.smoke

# The documentation site (docs/, mkdocs.yml) into build/site: strict, so a broken link, a missing
# reference or a docstring warning fails the build.
docs: $(TEST_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck layers pytest bench-smoke docs

# Local loop: everything but the slow multi-process / large-data tests.
fast: lint typecheck layers
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "not slow" $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.partition_overhead

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The two set-up commands of the README: `make demo` and `make test`.
# Both create .venv and install the project into it; nothing is needed beforehand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# Every package make demo and make test install, transitive ones included, is pinned by this
# lock (pip constraints; `make lock` refreshes it). The extras make test installs:
LOCK := constraints-py311.txt
EXTRAS := all,test,torch,ray,dask,ml,lakehouse,docs
PIP := $(BIN)/python -m pip install --quiet --constraint $(LOCK)
# make lock's PyTorch: the CPU build, an exact pin (a newer torch may be a CUDA build, several GB).
TORCH := torch==2.13.0 torchdata==0.11.0
PYTEST_ARGS ?=

.PHONY: install demo test test-full lint typecheck layers pytest bench-smoke docs fast bench clean lock

$(STAMP): setup.cfg pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e '.[all]'
	touch $(STAMP)

# make test also installs the test tools and the heavy integrations (PyTorch, Ray, Dask);
# make demo does not need them. The lock pins torch to the CPU build's version.
$(TEST_STAMP): $(STAMP)
	$(PIP) -e '.[$(EXTRAS)]'
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

# --max-worker-restart=0: a worker that crashes (a segfault in native code) fails the run at once.
# Replaced, it would hang the whole run at 99% with every worker idle (pytest-xdist 3.8's
# loadgroup scheduler re-queues the dead worker's finished groups: pytest-xdist#1323, #1378).
XDIST := -n 2 --dist loadgroup --max-worker-restart=0

pytest: $(TEST_STAMP)
	$(BIN)/python -m pytest $(XDIST) --durations=25 $(PYTEST_ARGS)

# Every benchmark at a tiny scale (TPC-H SF 0.01, one round): it runs and its contenders
# read the same rows (benchmarks/smoke.py; about a minute on 2 idle cores).
bench-smoke: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.smoke

# The documentation site (docs/, mkdocs.yml) into build/site: strict, so a broken link, a missing
# reference or a docstring warning fails the build.
docs: $(TEST_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck layers pytest bench-smoke docs

# make test with every point of every sweep (a plain run checks a rotating share of the
# resume kill points and the engine corpus: tests/helpers/sweep.py).
test-full:
	SQLFEED_SWEEP=full $(MAKE) test

# Local loop: everything but the slow multi-process / large-data tests.
fast: lint typecheck layers
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.partition_overhead

# Refresh the lock: the newest versions setup.cfg allows, installed into a fresh venv, frozen
# into $(LOCK); prints what changed. Run make test before committing the new lock.
lock:
	rm -rf build/lock-venv
	$(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python -m pip install --quiet --upgrade pip
	build/lock-venv/bin/python -m pip install --quiet '.[$(EXTRAS)]' $(TORCH)
	$(PYTHON) .ci/lock.py --python build/lock-venv/bin/python --lock $(LOCK)
	rm -rf build/lock-venv

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

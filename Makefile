# Quick start: `make run` opens the app, `make test` runs the whole suite headless.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test drills lint bench bench-pg screenshot clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(PY) -m desktop_queue $(ARGS)

test: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy desktop_queue
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

# The five fault drills of the production guide (seed 003) and the power-cut drill, alone
# (make test runs them too).
drills: $(STAMP_TEST)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest tests/drills -m drill $(PYTEST_ARGS)

bench: $(STAMP_TEST)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/store.py $(ARGS)
	$(PY) benchmarks/lifecycle_cpu.py

# The PostgreSQL backend against procrastinate and pgqueuer on one server (needs PostgreSQL's binaries).
bench-pg: $(STAMP_TEST)
	$(PY) -m pip install --quiet -e '.[bench,postgres]'
	$(PY) benchmarks/pg.py $(ARGS)

screenshot: $(STAMP_RUN)
	QT_QPA_PLATFORM=offscreen $(PY) scripts/screenshot.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis

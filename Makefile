# Two commands get a newcomer from a fresh clone to a result:
#   make demo   -- creates .venv, installs gtvmodel, runs the main demo (paper 001 VI-A SBM)
#   make test   -- creates .venv, installs gtvmodel with test extras, runs the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo_sbm.py

test: $(STAMP)
	$(PY) -m ruff check gtvmodel tests examples benchmarks
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

lint: $(STAMP)
	$(PY) -m ruff check gtvmodel tests examples benchmarks

bench: $(STAMP)
	$(PY) benchmarks/bench_compile.py

clean:
	rm -rf $(VENV) out .pytest_cache

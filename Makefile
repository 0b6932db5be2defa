# Two commands get a newcomer from a fresh clone to a result:
#   make demo   -- creates .venv, installs gtvmodel, runs the main demo (paper 001 VI-A SBM)
#   make test   -- creates .venv, installs gtvmodel with test extras, runs the test suite
#   make typecheck -- mypy on the numerical kernels (gtvmodel/kernels/, [tool.mypy]); in make test
#   make docs   -- the documentation site (Sphinx, warnings are errors) in out/docs/index.html
#   make test-min -- the suite on the lowest supported Python and dependency floors
#                    (ci/min-versions.txt) in out/venv-min
#   make notebooks -- the teaching notebooks (docs/teaching.md): opens Jupyter if installed,
#                     otherwise executes them all and writes the results to out/notebooks/
#   make release-lessons -- student notebooks, solutions and autograders in out/lessons/
#   make grade -- grades every solution (full marks) and student notebook (zero) with Otter
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
# the lowest supported Python (requires-python) for test-min; override with MIN_PYTHON=path
MIN_PYTHON ?= python3.10
MIN_VENV   ?= out/venv-min
# the tests test-min runs (default: the whole default suite, as CI runs it: .ci/run step 4)
MIN_TESTS  ?=
# pytest-xdist workers of make test and test-min (one module per worker at a time: module
# fixtures and caches stay in one process); PYTEST_WORKERS=0 runs the suite in one process
PYTEST_WORKERS ?= 2
XDIST      := -n $(PYTEST_WORKERS) --dist loadfile

.PHONY: demo test test-all test-min lint typecheck bench docs notebooks grade release-lessons clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo_sbm.py

test: $(STAMP)
	$(PY) -m ruff check gtvmodel tests examples benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -q $(XDIST)

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

test-min:
	$(MIN_PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -m pip install --quiet -c ci/min-versions.txt -e '.[test]'
	$(MIN_VENV)/bin/python -m pip list --format=freeze | grep -iE '^(cvxpy|clarabel|numpy|scipy|networkx|matplotlib|tqdm|scikit-learn|array-api-compat|numba)=='
	$(MIN_VENV)/bin/python -m pytest -q $(XDIST) $(MIN_TESTS)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs out/docs
	@echo "documentation: out/docs/index.html"

lint: $(STAMP)
	$(PY) -m ruff check gtvmodel tests examples benchmarks

typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/bench_compile.py

notebooks: $(STAMP)
	@if $(PY) -c "import jupyterlab" 2>/dev/null; then \
		$(PY) -m jupyterlab examples/notebooks; \
	elif $(PY) -c "import notebook" 2>/dev/null; then \
		$(PY) -m notebook examples/notebooks; \
	else \
		echo "Jupyter is not installed (pip install jupyterlab to open the notebooks);"; \
		echo "executing every notebook with nbclient instead:"; \
		$(PY) examples/notebooks/_run.py out/notebooks; \
	fi

$(VENV)/.teaching: $(STAMP)
	$(PY) -m pip install --quiet -e '.[teaching]'
	touch $(VENV)/.teaching

release-lessons: $(VENV)/.teaching
	$(PY) examples/notebooks/_release.py out/lessons

grade: $(VENV)/.teaching
	$(PY) examples/notebooks/_grade.py out/lessons

clean:
	rm -rf $(VENV) out .pytest_cache

"""The teaching notebooks (issue 13) run top to bottom, and their exercises are checked.

Every ``.ipynb`` under ``examples/notebooks/`` (student versions) and
``examples/notebooks/solutions/`` is executed with ``nbclient`` in a ``python3`` kernel
(``MPLBACKEND=Agg``, the repository first on ``PYTHONPATH``, a temporary working directory;
several notebooks at a time, each in its own kernel);
any error in a cell without the tag ``raises-exception`` fails the test.  In a student version
every tagged cell (an exercise's ``assert`` cell) must have raised: the placeholder answer
fails its check, which shows that the check rejects a wrong answer.  A solution version has no
tagged cell, so all its asserts pass.  The committed files carry no outputs, every student
notebook has a solution twin, and the notebooks are what ``examples/notebooks/_build.py``
generates from their sources.  Every executed notebook ends with a grading cell
(``_grade.grading_cell``) that runs the lesson's autograder tests, public checks and hidden
tests, on the notebook's variables -- with Otter-Grader where it is installed (the
``teaching`` extra), else as plain cells with the same points: a solution must get full
marks, a student version zero.  The kernels run with ``_run.kernel_config()``
(encrypted messages), so none warns about plain TCP.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import time
from pathlib import Path
from types import ModuleType

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "notebooks"
STUDENT = sorted(FOLDER.glob("*.ipynb"))
SOLUTION = sorted((FOLDER / "solutions").glob("*.ipynb"))
ALL = STUDENT + SOLUTION
CHECK_TAG = "raises-exception"
#: wall-clock limit per notebook, kernel start-up included (issue 13: <= 60 s each)
LIMIT_S = 60.0


#: Otter-Grader present: the executed notebooks are graded by it (else by plain cells)
HAVE_OTTER = importlib.util.find_spec("otter") is not None


@functools.cache
def _script(name: str) -> ModuleType:
    """One of the scripts next to the notebooks (``_build``, ``_run``, ``_grade``)."""
    spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _name(path: Path) -> str:
    return str(path.relative_to(FOLDER))


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def test_there_are_notebooks():
    assert STUDENT, "no notebook in examples/notebooks/"


@pytest.mark.parametrize("path", ALL, ids=_name)
def test_committed_without_outputs(path):
    nb = _read(path)
    dirty = [k for k, c in enumerate(nb.cells) if c.cell_type == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{_name(path)}: cells {dirty} have outputs or execution counts"


@pytest.mark.parametrize("path", STUDENT, ids=_name)
def test_student_notebook_has_a_solution_twin(path):
    twin = FOLDER / "solutions" / path.name
    assert twin.exists(), f"{_name(path)} has no solution in solutions/{path.name}"
    student, solution = _read(path), _read(twin)
    checks = [c.source for c in student.cells if CHECK_TAG in _tags(c)]
    assert checks, f"{_name(path)}: no exercise check cell (tag {CHECK_TAG!r})"
    assert all(c.source in [s.source for s in solution.cells] for c in student.cells
               if CHECK_TAG in _tags(c)), "the solution must run the same checks"


def test_every_solution_has_a_student_version():
    orphans = sorted({p.name for p in SOLUTION} - {p.name for p in STUDENT})
    assert not orphans, f"solutions without a student notebook: {orphans}"


def test_notebooks_match_their_generator():
    """The committed notebooks are what ``_build.py`` writes from ``_lessons/`` (edit the
    sources, then run ``python examples/notebooks/_build.py``)."""
    for path, text in _script("_build").notebooks().items():
        assert path.exists(), f"{path.name} is generated but not committed"
        assert path.read_text(encoding="utf-8") == text, (
            f"{_name(path)} differs from its source: run python examples/notebooks/_build.py")


#: notebooks executed at the same time, each in its own fresh kernel.  A kernel's start and the
#: notebook's imports (ipykernel, CVXPY, matplotlib: about 1.5 s of a 2-3 s notebook) wait
#: partly on messages between processes, so running several at once shortens the whole even on
#: two cores: the fourteen notebooks took 38-47 s four at a time against 51-76 s one after the
#: other on the 2-core sandbox (load 1-6, benchmarks/RESULTS.md).
CONCURRENT = 4


async def _execute_async(path: Path, workdir: Path, slots: asyncio.Semaphore, tests: dict):
    async with slots:  # the time is taken once a slot is free: the kernel start is in it
        nb = _read(path)
        if tests:  # grade in the same kernel: the lesson's Otter tests on its variables
            nb.cells.append(nbformat.v4.new_code_cell(
                _script("_grade").grading_cell(tests[path.stem], otter=HAVE_OTTER)))
        client = nbclient.NotebookClient(nb, timeout=LIMIT_S, kernel_name="python3",
                                         config=_script("_run").kernel_config(),
                                         resources={"metadata": {"path": str(workdir)}})
        start = time.perf_counter()
        await client.async_execute()  # raises CellExecutionError on an error in an untagged cell
        return nb, time.perf_counter() - start


async def _execute_all(paths: list[Path], workdirs: list[Path], tests: dict) -> list:
    slots = asyncio.Semaphore(CONCURRENT)
    runs = [_execute_async(p, w, slots, tests) for p, w in zip(paths, workdirs, strict=True)]
    return await asyncio.gather(*runs, return_exceptions=True)


@pytest.fixture(scope="module")
def executed(request, tmp_path_factory) -> dict:
    """``path -> (executed notebook, seconds)`` (or the exception its execution raised) for
    every notebook whose ``test_notebook_executes`` case was collected: each executed once,
    in a fresh kernel with ``MPLBACKEND=Agg`` and the checkout first on ``PYTHONPATH`` (as in a
    fresh clone) and a temporary working directory of its own, ``CONCURRENT`` at a time, and
    graded at the end (``test_notebook_grades``)."""
    paths = [item.callspec.params["path"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_notebook_executes"
             and item.module is request.module]
    workdirs = [tmp_path_factory.mktemp("notebook") for _ in paths]
    tests = _script("_build").write_autograder_tests(tmp_path_factory.mktemp("autograder"))
    with pytest.MonkeyPatch.context() as mp:  # the kernels inherit this environment
        mp.setenv("MPLBACKEND", "Agg")
        mp.setenv("PYTHONPATH", str(ROOT))
        results = asyncio.run(_execute_all(paths, workdirs, tests))
    return dict(zip(paths, results, strict=True))


@pytest.mark.parametrize("path", ALL, ids=_name)
def test_notebook_executes(path, executed):
    outcome = executed[path]
    if isinstance(outcome, BaseException):  # e.g. CellExecutionError: the cell and its error
        raise outcome
    nb, seconds = outcome
    assert seconds <= LIMIT_S, f"{_name(path)} took {seconds:.1f} s (limit {LIMIT_S:.0f} s)"
    tagged = [c for c in nb.cells if CHECK_TAG in _tags(c)]
    if path.parent == FOLDER:  # a student version: every check must fail on the placeholder
        silent = [c.source.splitlines()[0] for c in tagged
                  if not any(o.get("output_type") == "error" for o in c.outputs)]
        assert not silent, f"{_name(path)}: check cells passed on the placeholder: {silent}"
        errors = [(c.source.splitlines()[0], o) for c in tagged for o in c.outputs
                  if o.get("output_type") == "error"]
        raw = [(first, f"{o.ename}: {o.evalue}") for first, o in errors
               if o.ename != "AssertionError" or not o.evalue.strip()]
        assert not raw, (f"{_name(path)}: a check must stop on the placeholder with an "
                         f"AssertionError saying what to do first, not: {raw}")
    else:
        assert not tagged, f"{_name(path)}: a solution must not tag cells {CHECK_TAG!r}"


@pytest.mark.parametrize("path", ALL, ids=_name)
def test_notebook_grades(path, executed):
    """Graded by the lesson's autograder tests (the public checks and the hidden tests; by
    Otter where installed): a solution gets full marks, a student version (placeholders) zero,
    exercise by exercise."""
    outcome = executed[path]
    if isinstance(outcome, BaseException):
        pytest.skip("the notebook did not run (test_notebook_executes reports why)")
    grades = _script("_grade").read_grades(outcome[0])
    assert grades and all(possible > 0 for _, possible in grades.values()), grades
    solution = path.parent != FOLDER
    wrong = {q: g for q, g in grades.items() if g[0] != (g[1] if solution else 0)}
    what = "solution below full marks" if solution else "points for placeholders"
    assert not wrong, f"{_name(path)}: {what}: {wrong}"

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
generates from their sources.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

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
    spec = importlib.util.spec_from_file_location("_build", FOLDER / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for path, text in build.notebooks().items():
        assert path.exists(), f"{path.name} is generated but not committed"
        assert path.read_text(encoding="utf-8") == text, (
            f"{_name(path)} differs from its source: run python examples/notebooks/_build.py")


#: notebooks executed at the same time, each in its own fresh kernel.  A kernel's start and the
#: notebook's imports (ipykernel, CVXPY, matplotlib: about 1.5 s of a 2-3 s notebook) wait
#: partly on messages between processes, so running several at once shortens the whole even on
#: two cores: the fourteen notebooks took 38-47 s four at a time against 51-76 s one after the
#: other on the 2-core sandbox (load 1-6, benchmarks/RESULTS.md).
CONCURRENT = 4


async def _execute_async(path: Path, workdir: Path, slots: asyncio.Semaphore):
    async with slots:  # the time is taken once a slot is free: the kernel start is in it
        nb = _read(path)
        client = nbclient.NotebookClient(nb, timeout=LIMIT_S, kernel_name="python3",
                                         resources={"metadata": {"path": str(workdir)}})
        start = time.perf_counter()
        await client.async_execute()  # raises CellExecutionError on an error in an untagged cell
        return nb, time.perf_counter() - start


async def _execute_all(paths: list[Path], workdirs: list[Path]) -> list:
    slots = asyncio.Semaphore(CONCURRENT)
    runs = [_execute_async(p, w, slots) for p, w in zip(paths, workdirs, strict=True)]
    return await asyncio.gather(*runs, return_exceptions=True)


@pytest.fixture(scope="module")
def executed(request, tmp_path_factory) -> dict:
    """``path -> (executed notebook, seconds)`` (or the exception its execution raised) for
    every notebook whose ``test_notebook_executes`` case was collected: each executed once,
    in a fresh kernel with ``MPLBACKEND=Agg`` and the checkout first on ``PYTHONPATH`` (as in a
    fresh clone) and a temporary working directory of its own, ``CONCURRENT`` at a time."""
    paths = [item.callspec.params["path"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_notebook_executes"
             and item.module is request.module]
    workdirs = [tmp_path_factory.mktemp("notebook") for _ in paths]
    with pytest.MonkeyPatch.context() as mp:  # the kernels inherit this environment
        mp.setenv("MPLBACKEND", "Agg")
        mp.setenv("PYTHONPATH", str(ROOT))
        results = asyncio.run(_execute_all(paths, workdirs))
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
    else:
        assert not tagged, f"{_name(path)}: a solution must not tag cells {CHECK_TAG!r}"

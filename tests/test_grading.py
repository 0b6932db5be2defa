"""Grading the teaching notebooks (docs/teaching.md, "Grading"): the autograder tests, the
student release and Otter-Grader's ``otter run`` end to end.

``tests/test_notebooks.py`` grades every executed notebook (solutions full marks, student
versions zero); this file checks what a course hands out and what it grades with: the student
release holds no solution and no hidden test, every graded exercise has a hidden test and
points, the generated Otter test files load with those points, and ``otter run`` with a
generated autograder gives a solution full marks and its student version zero (skipped where
Otter-Grader, the ``teaching`` extra, is not installed).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "notebooks"
HAVE_OTTER = importlib.util.find_spec("otter") is not None
needs_otter = pytest.mark.skipif(not HAVE_OTTER,
                                 reason="Otter-Grader is not installed (the teaching extra)")


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _script("_build")
SOURCES = BUILD.lesson_sources()


def _lines(texts: list[str]) -> set[str]:
    """Source lines without comments, of some length (a shared ``import numpy as np`` does
    not count)."""
    code = (line.split("#")[0].strip() for text in texts for line in text.splitlines())
    return {line for line in code if len(line) > 30}


def _teacher_only(cells: list[tuple]) -> set[str]:
    """Lines only the teacher may see: of solution answers and hidden tests, less the lines
    that the public cells (text, code, checks, placeholders) share with them."""
    secret = _lines([c[2] for c in cells if c[0] in ("answer", "open")]
                    + [c[1] for c in cells if c[0] == "hidden"])
    public = _lines([c[-1] if c[0] in ("md", "code", "exercise") else c[1] for c in cells
                     if c[0] in ("md", "code", "exercise", "check", "answer", "open")])
    return secret - public


def test_release_holds_no_solution_and_no_hidden_test(tmp_path):
    release = _script("_release")
    written = release.write_notebooks(tmp_path)
    assert len(written["student"]) == len(SOURCES) == len(written["solutions"])
    for src in SOURCES:
        cells = BUILD.load_cells(src)
        student = (tmp_path / "student" / f"{src.stem[1:]}.ipynb").read_text(encoding="utf-8")
        text = "\n".join(c.source for c in nbformat.reads(student, as_version=4).cells)
        secret = _teacher_only(cells)
        assert secret, f"{src.stem}: no solution line to look for"
        leaked = [line for line in secret if line in text]
        assert not leaked, f"{src.stem}: the student release shows {leaked[:3]}"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_every_exercise_has_points_and_a_hidden_test(src):
    cells = BUILD.load_cells(src)
    cases = BUILD.test_cases(src)
    graded = {name for name, tests in BUILD.exercises(cells).items() if tests}
    assert graded and set(cases) == graded, f"{src.stem}: graded exercises {sorted(graded)}"
    for name, tests in cases.items():
        assert any(hidden for _, _, hidden, _ in tests), f"{src.stem} {name}: no hidden test"
        assert all(points > 0 for _, points, _, _ in tests), f"{src.stem} {name}: points"
        for label, _, _, source in tests:
            compile(source, label, "exec")            # a syntax error would score 0 silently


@needs_otter
def test_otter_loads_the_test_files_with_their_points(tmp_path):
    from otter.test_files.exception_test import ExceptionTestFile

    folders = BUILD.write_autograder_tests(tmp_path)
    for src in SOURCES:
        lesson = src.stem[1:]
        cases = json.loads((tmp_path / f"{lesson}.json").read_text(encoding="utf-8"))
        for name, tests in cases.items():
            test = ExceptionTestFile.from_file(str(folders[lesson] / f"{name}.py"))
            assert test.name == name
            assert [(c.name, c.points, c.hidden) for c in test.test_cases] == [
                (label, points, hidden) for label, points, hidden, _ in tests]


@needs_otter
def test_otter_run_grades_a_solution_full_and_its_student_version_zero(tmp_path):
    """``otter run`` (what ``make grade`` and a teacher run) with the generated autograder of
    lesson 03: each notebook executed from the top in a fresh kernel, then graded."""
    lesson = "03_duality_flows"
    autograder = _script("_release").write_autograders(tmp_path)[lesson]
    grade = _script("_grade").grade
    score, possible = grade(FOLDER / "solutions" / f"{lesson}.ipynb", autograder)
    assert possible > 0 and score == possible
    score, possible = grade(FOLDER / f"{lesson}.ipynb", autograder)
    assert possible > 0 and score == 0

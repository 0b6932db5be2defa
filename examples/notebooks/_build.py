"""Generate the teaching notebooks and their autograder tests from ``_lessons/`` (issue 13).

Each ``_lessons/lNN_<name>.py`` holds ``CELLS``, a list of cells:

* ``("md", text)`` -- a Markdown cell;
* ``("code", source)`` -- a code cell, the same in both versions;
* ``("exercise", name, text)`` -- the Markdown prompt of a graded exercise ``name`` (``"q1"``,
  ...); the cells after it, up to the next exercise, belong to it, and the prompt gets a line
  with its points;
* ``("answer", student, solution)`` -- an exercise's answer cell: the student version holds
  ``student`` (a visible placeholder such as ``answer = None  # your code here``), the
  solution version ``solution``;
* ``("check", source[, points])`` -- the exercise's public ``assert`` cell (1 point unless
  given).  In the student version it carries the cell tag ``raises-exception``, so that the
  notebook runs top to bottom (Jupyter and nbclient go on past a tagged cell that raises); the
  solution version has no tag and must pass;
* ``("hidden", source, points)`` -- a hidden test: in no notebook, only in the autograder;
* ``("open", student, solution)`` -- the Markdown answer cell of an open question (graded by
  hand; no test): a placeholder in the student version, a model answer in the solution.

``python examples/notebooks/_build.py`` writes ``examples/notebooks/<name>.ipynb`` (student)
and ``examples/notebooks/solutions/<name>.ipynb`` (solution), without outputs.  The committed
``.ipynb`` files are what a student opens; ``tests/test_notebooks.py`` checks they are what this
script generates from the sources.  :func:`autograder_tests` writes the same checks, and the
hidden tests, as Otter-Grader test files (one per exercise, points per test case), which
``_release.py`` packs into an autograder and ``_grade.py`` runs (docs/teaching.md, "Grading").
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "_lessons"
SOLUTIONS = HERE / "solutions"
CHECK_TAG = "raises-exception"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def lesson_sources() -> list[Path]:
    """The lesson source files, in lesson order."""
    return sorted(SOURCES.glob("l[0-9][0-9]_*.py"))


def load_cells(path: Path) -> list[tuple]:
    """The ``CELLS`` list of one lesson source file."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CELLS


def _cell(kind: str, source: str, cell_id: str, tags: list[str] | None = None):
    """One nbformat cell without outputs (``execution_count`` null), with a stable id."""
    source = source.strip("\n")
    cell = (nbformat.v4.new_markdown_cell(source) if kind == "md"
            else nbformat.v4.new_code_cell(source))
    cell["id"] = cell_id
    if tags:
        cell["metadata"]["tags"] = tags
    return cell


def _points(cell: tuple) -> float:
    """The points of a ``check`` (default 1) or ``hidden`` cell."""
    kind, *parts = cell
    return float(parts[1]) if len(parts) > 1 else 1.0


def exercises(cells: list[tuple]) -> dict[str, list[tuple]]:
    """``name -> [check and hidden cells]`` of every graded exercise, in lesson order.  An
    exercise without tests (an open question) maps to ``[]``; a check before the first
    exercise is an error."""
    result: dict[str, list[tuple]] = {}
    current = None
    for k, cell in enumerate(cells):
        if cell[0] == "exercise":
            current = cell[1]
            if current in result:
                raise ValueError(f"cell {k}: exercise {current!r} appears twice")
            result[current] = []
        elif cell[0] in ("check", "hidden"):
            if current is None:
                raise ValueError(f"cell {k}: a {cell[0]!r} cell before the first exercise")
            result[current].append(cell)
    return result


def _prompt(text: str, tests: list[tuple]) -> str:
    """An exercise's Markdown with a last line giving its points."""
    if not tests:
        return text.strip("\n") + "\n\n*Open question: no automatic test; graded by hand.*"
    public = sum(_points(c) for c in tests if c[0] == "check")
    hidden = sum(_points(c) for c in tests if c[0] == "hidden")
    return (text.strip("\n") + f"\n\n*Points: {public + hidden:g} ({public:g} for the check "
            f"below, {hidden:g} for hidden tests run when the lesson is graded).*")


def build(cells: list[tuple], solution: bool, prefix: str) -> nbformat.NotebookNode:
    """The student (``solution=False``) or solution notebook of one lesson."""
    tests = exercises(cells)
    out = []
    for k, (kind, *parts) in enumerate(cells):
        cid = f"{prefix}-{k:02d}"
        if kind == "answer":
            out.append(_cell("code", parts[1] if solution else parts[0], cid))
        elif kind == "open":
            out.append(_cell("md", parts[1] if solution else parts[0], cid))
        elif kind == "check":
            out.append(_cell("code", parts[0], cid, None if solution else [CHECK_TAG]))
        elif kind == "exercise":
            out.append(_cell("md", _prompt(parts[1], tests[parts[0]]), cid))
        elif kind in ("md", "code"):
            out.append(_cell(kind, parts[0], cid))
        elif kind != "hidden":
            raise ValueError(f"cell {k}: unknown kind {kind!r}")
    nb = nbformat.v4.new_notebook(cells=out)
    nb["metadata"] = {"kernelspec": dict(KERNELSPEC),
                      "language_info": {"name": "python"}}
    return nb


def _literal(source: str) -> str:
    """``source`` as a parenthesized Python string literal, one line of code per line."""
    lines = source.strip("\n").split("\n")
    return "(\n" + "".join(f"        {line + chr(10)!r}\n" for line in lines) + "    )"


def test_cases(path: Path) -> dict[str, list[tuple[str, float, bool, str]]]:
    """``exercise -> [(label, points, hidden, source)]`` of one lesson source: the test cases
    of its autograder, one per check or hidden cell (exercises with at least one test)."""
    result = {}
    for name, tests in exercises(load_cells(path)).items():
        if tests:
            result[name] = [(f"{name} {'hidden test' if c[0] == 'hidden' else 'check'} {k}",
                             _points(c), c[0] == "hidden", c[1].strip("\n"))
                            for k, c in enumerate(tests, 1)]
    return result


def test_file(lesson: str, name: str, cases: list[tuple[str, float, bool, str]]) -> str:
    """The Otter-Grader test file (exception-based format) of one exercise: every test case
    (:func:`test_cases`) run as a notebook cell would be (on a copy of the notebook's global
    variables), worth its points."""
    total = sum(points for _, points, _, _ in cases)
    parts = [f'"""Lesson {lesson}, exercise {name}: {total:g} points.  Generated by\n'
             'examples/notebooks/_build.py from the lesson source; do not edit."""\n\n'
             "from otter.test_files import test_case\n\n"
             "OK_FORMAT = False\n\n"
             f"name = {name!r}\n"
             f"points = {total:g}\n\n\n"
             "def _run(source, env, label):\n"
             '    """Execute a test as a notebook cell, on a copy of the notebook\'s globals."""\n'
             "    exec(compile(source, label, \"exec\"), dict(env))\n"]
    for k, (label, points, hidden, source) in enumerate(cases, 1):
        parts.append(f"\n\n@test_case(name={label!r}, points={points:g}, hidden={hidden})\n"
                     f"def test_{k}(env):\n"
                     f"    source = {_literal(source)}\n"
                     f"    _run(source, env, {label!r})\n")
    return "".join(parts)


def autograder_tests(path: Path) -> dict[str, str]:
    """``file name -> text`` of the Otter test files of one lesson source."""
    lesson = path.stem[1:]
    return {f"{name}.py": test_file(lesson, name, cases)
            for name, cases in test_cases(path).items()}


def write_autograder_tests(folder: Path) -> dict[str, Path]:
    """Write every lesson's Otter test files to ``folder/<lesson>/`` and its test cases as
    JSON to ``folder/<lesson>.json`` (for a grader without Otter); return ``lesson ->
    folder/<lesson>``."""
    result = {}
    for src in lesson_sources():
        target = folder / src.stem[1:]
        target.mkdir(parents=True, exist_ok=True)
        for fname, text in autograder_tests(src).items():
            (target / fname).write_text(text, encoding="utf-8")
        target.with_suffix(".json").write_text(json.dumps(test_cases(src), indent=1),
                                               encoding="utf-8")
        result[src.stem[1:]] = target
    return result


def notebooks() -> dict[Path, str]:
    """Every notebook this script writes: path -> JSON text."""
    result = {}
    for src in lesson_sources():
        name = src.stem[1:]  # l01_gtvmin... -> 01_gtvmin...
        cells = load_cells(src)
        for solution, folder in ((False, HERE), (True, SOLUTIONS)):
            nb = build(cells, solution, name[:2])
            nbformat.validate(nb)
            result[folder / f"{name}.ipynb"] = nbformat.writes(nb) + "\n"
    return result


def main() -> None:
    """Write every notebook (student and solution versions)."""
    SOLUTIONS.mkdir(exist_ok=True)
    for path, text in notebooks().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    sys.exit(main())

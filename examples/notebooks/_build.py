"""Generate the teaching notebooks from their sources in ``_lessons/`` (issue 13).

Each ``_lessons/lNN_<name>.py`` holds ``CELLS``, a list of cells:

* ``("md", text)`` -- a Markdown cell;
* ``("code", source)`` -- a code cell, the same in both versions;
* ``("answer", student, solution)`` -- an exercise's answer cell: the student version holds
  ``student`` (a visible placeholder such as ``answer = None  # your code here``), the
  solution version ``solution``;
* ``("check", source)`` -- the exercise's ``assert`` cell.  In the student version it carries
  the cell tag ``raises-exception``, so that the notebook runs top to bottom (Jupyter and
  nbclient go on past a tagged cell that raises); the solution version has no tag and must pass.

``python examples/notebooks/_build.py`` writes ``examples/notebooks/<name>.ipynb`` (student)
and ``examples/notebooks/solutions/<name>.ipynb`` (solution), without outputs.  The committed
``.ipynb`` files are what a student opens; ``tests/test_notebooks.py`` checks they are what this
script generates from the sources.
"""

from __future__ import annotations

import importlib.util
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


def build(cells: list[tuple], solution: bool, prefix: str) -> nbformat.NotebookNode:
    """The student (``solution=False``) or solution notebook of one lesson."""
    out = []
    for k, (kind, *parts) in enumerate(cells):
        cid = f"{prefix}-{k:02d}"
        if kind == "answer":
            out.append(_cell("code", parts[1] if solution else parts[0], cid))
        elif kind == "check":
            out.append(_cell("code", parts[0], cid, None if solution else [CHECK_TAG]))
        elif kind in ("md", "code"):
            out.append(_cell(kind, parts[0], cid))
        else:
            raise ValueError(f"cell {k}: unknown kind {kind!r}")
    nb = nbformat.v4.new_notebook(cells=out)
    nb["metadata"] = {"kernelspec": dict(KERNELSPEC),
                      "language_info": {"name": "python"}}
    return nb


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

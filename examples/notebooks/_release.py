"""Write a course release of the teaching notebooks (``make release-lessons``).

``python examples/notebooks/_release.py [OUTDIR]`` (default ``out/lessons/``) writes

* ``OUTDIR/student/`` -- what students get: the student notebooks (placeholders, public checks;
  no solution, no hidden test), the only folder to hand out;
* ``OUTDIR/solutions/`` -- the solution notebooks (for the teacher);
* ``OUTDIR/autograder/<lesson>.zip`` -- one Otter-Grader autograder per lesson (the public
  checks and the hidden tests, with their points; ``otter generate``), for
  ``otter run -a <lesson>.zip submission.ipynb`` or an Otter-based grading service; the test
  files are also left unpacked in ``OUTDIR/autograder/<lesson>/``.

The autograders need Otter-Grader (``pip install -e '.[teaching]'``); without it the student and
solution folders are still written and the script says what is missing.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import _build  # noqa: E402  (the generator next to this script)

#: ``otter_config.json`` of every autograder: Python, no PDF, no zipped submissions
OTTER_CONFIG = {"lang": "python", "pdf": False, "zips": False}


def write_notebooks(outdir: Path) -> dict[str, list[Path]]:
    """The student and solution notebooks, as generated from ``_lessons/``, under
    ``outdir/student/`` and ``outdir/solutions/``."""
    written: dict[str, list[Path]] = {"student": [], "solutions": []}
    for path, text in _build.notebooks().items():
        kind = "solutions" if path.parent == _build.SOLUTIONS else "student"
        target = outdir / kind / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written[kind].append(target)
    return written


def write_autograders(folder: Path) -> dict[str, Path]:
    """``lesson -> folder/<lesson>.zip``: every lesson's Otter test files (written to
    ``folder/<lesson>/``) packed by ``otter generate`` with :data:`OTTER_CONFIG`."""
    from otter.generate import main as otter_generate

    zips = {}
    for lesson, tests in _build.write_autograder_tests(folder).items():
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "otter_config.json"
            config.write_text(json.dumps(OTTER_CONFIG), encoding="utf-8")
            zips[lesson] = folder / f"{lesson}.zip"
            otter_generate(tests_dir=str(tests), output_path=str(zips[lesson]),
                           config=str(config), no_requirements=True, no_environment=True)
    return zips


def main(argv: list[str]) -> int:
    """Write the release; 1 if Otter-Grader is missing (the notebooks are written anyway)."""
    outdir = Path(argv[0]) if argv else ROOT / "out" / "lessons"
    for kind in ("student", "solutions", "autograder"):
        shutil.rmtree(outdir / kind, ignore_errors=True)
    written = write_notebooks(outdir)
    print(f"{len(written['student'])} student notebooks in {outdir / 'student'}, "
          f"{len(written['solutions'])} solutions in {outdir / 'solutions'}")
    if importlib.util.find_spec("otter") is None:
        print("Otter-Grader is not installed (pip install -e '.[teaching]'): no autograder",
              file=sys.stderr)
        return 1
    zips = write_autograders(outdir / "autograder")
    print(f"{len(zips)} autograders in {outdir / 'autograder'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

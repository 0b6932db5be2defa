"""Grade the teaching notebooks with Otter-Grader (``make grade``; docs/teaching.md, "Grading").

``python examples/notebooks/_grade.py [OUTDIR]`` writes every lesson's autograder
(:func:`_release.write_autograders`: the checks and the hidden tests of ``_lessons/``, as
Otter test files, packed by ``otter generate``) to ``OUTDIR/autograder/`` (default
``out/lessons/``), grades every solution and every student notebook with ``otter run`` (each
notebook executed from the top in a fresh kernel, then every test run on its variables) and
prints one line per notebook: its score out of the points.  It exits with 1 unless every
solution gets full marks and every student version (the placeholders) gets zero: the check
that the tests accept the solutions and reject the unanswered exercises.  Grade students'
submissions the same way: ``otter run -a OUTDIR/autograder/<lesson>.zip submission.ipynb``.

:func:`grading_cell` is the in-kernel variant ``tests/test_notebooks.py`` appends to a notebook
it executes anyway: the same test files, run by Otter on the notebook's variables (or, where
Otter is not installed, the same test cases run as plain cells, with the same points).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: marks the line of :func:`grading_cell`'s output that holds the scores
GRADES = "OTTER-GRADES "


def grading_cell(tests_dir: Path, otter: bool = True) -> str:
    """Source of a code cell that grades the notebook it ends, on the notebook's variables,
    and prints ``GRADES {exercise: [score, possible]}``: with ``otter``, every Otter test file
    of ``tests_dir`` run by Otter; without, the same test cases (``tests_dir.json``) run as
    cells, each worth its points when it raises nothing."""
    if otter:
        return (
            "import json as _json, pathlib as _pathlib\n"
            "from otter.test_files.exception_test import ExceptionTestFile as _TestFile\n"
            "_grades = {}\n"
            f"for _path in sorted(_pathlib.Path({str(tests_dir)!r}).glob('*.py')):\n"
            "    _test = _TestFile.from_file(str(_path))\n"
            "    _test.run(globals())\n"
            "    _grades[_test.name] = [_test.score, _test.possible]\n"
            f"print({GRADES!r} + _json.dumps(_grades))\n")
    return (
        "import json as _json, pathlib as _pathlib\n"
        "_grades = {}\n"
        f"_cases = _json.loads(_pathlib.Path({str(tests_dir.with_suffix('.json'))!r})"
        ".read_text())\n"
        "for _name, _tests in _cases.items():\n"
        "    _grades[_name] = [0.0, sum(_t[1] for _t in _tests)]\n"
        "    for _label, _points, _hidden, _source in _tests:\n"
        "        try:\n"
        "            exec(compile(_source, _label, 'exec'), dict(globals()))\n"
        "        except Exception:\n"
        "            continue\n"
        "        _grades[_name][0] += _points\n"
        f"print({GRADES!r} + _json.dumps(_grades))\n")


def read_grades(nb) -> dict[str, list[float]]:
    """The scores :func:`grading_cell` printed in an executed notebook."""
    for cell in reversed(nb.cells):
        for out in cell.get("outputs", []):
            for line in out.get("text", "").splitlines():
                if line.startswith(GRADES):
                    return json.loads(line[len(GRADES):])
    raise ValueError("no grades in the notebook (was the grading cell run?)")


@contextlib.contextmanager
def _quiet(log: Path):
    """Send this process's and its children's (the kernel's) stdout and stderr to ``log``:
    Otter prints its logo and tables, the kernel its start-up messages."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def grade(notebook: Path, autograder: Path) -> tuple[float, float]:
    """``(score, possible)`` of one notebook, graded by ``otter run`` (its output hidden, and
    shown when grading fails)."""
    from otter.run import main as otter_run

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "otter.log"
        try:
            with _quiet(log):
                results = otter_run(str(notebook), autograder=str(autograder),
                                    output_dir=None, no_logo=True)
        except Exception:
            print(log.read_text()[-4000:], file=sys.stderr)
            raise
    return float(results.total), float(results.possible)


def main(argv: list[str]) -> int:
    """Grade every solution and student notebook; 1 unless solutions get full marks and
    student versions zero."""
    sys.path.insert(0, str(HERE))
    import _release

    outdir = Path(argv[0]) if argv else ROOT / "out" / "lessons"
    zips = _release.write_autograders(outdir / "autograder")
    jobs = [(HERE / "solutions" / f"{name}.ipynb", z, "solution") for name, z in zips.items()]
    jobs += [(HERE / f"{name}.ipynb", z, "student") for name, z in zips.items()]
    with ProcessPoolExecutor(max_workers=2) as pool:
        scores = list(pool.map(grade, [j[0] for j in jobs], [j[1] for j in jobs]))
    wrong = []
    for (path, _, kind), (score, possible) in zip(jobs, scores, strict=True):
        expected = possible if kind == "solution" else 0.0
        ok = score == expected and possible > 0
        wrong += [] if ok else [path.name]
        print(f"{kind:<9} {path.stem:<40} {score:5.1f} / {possible:4.1f}"
              f"{'' if ok else f'   expected {expected:g}'}")
    print("all solutions get full marks, all student versions zero" if not wrong
          else f"unexpected scores: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

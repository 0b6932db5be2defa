"""Command line interface: ``gtvmodel certify PROBLEM WEIGHTS [--flows FLOWS] [--tol T] [--json]``
and ``gtvmodel reproduce NAME [--seeds K] [--quick] [--jobs J] [--out DIR] [--json]`` and
``gtvmodel lessons DIR [--force]``.

Checks a candidate solution produced anywhere (any language) against a problem file
(:mod:`gtvmodel.io`, ``docs/file_format.md``) and prints its certificate
(:mod:`gtvmodel.certificates.certificate`).

Exit codes (also in ``gtvmodel certify --help``): ``0`` the gap is at most
``tol * max(1, |P(W)|)``; ``1`` it is larger (or infinite: infeasible weights, flows that could
not be repaired); ``2`` bad input (unreadable or inconsistent files, bad arguments: a
non-numeric, NaN, infinite or out-of-range ``--tol``, ``--feas-tol`` or ``--radius``, an unknown
option, a missing argument); ``3`` a numerical failure while evaluating the dual (or any other
unexpected failure: never ``1``, which is a verdict).  No tracebacks: every error is exactly one
line on stderr.

Text files from other tools (``.csv``, ``.txt``) may carry a header row and an index column
(``0..rows-1`` or the node labels): both are recognized (:func:`gtvmodel.io.load_array`), or
named with ``--skip-header`` / ``--index-col``.  When given flows do not certify but their
negation does, the output says so (a probable sign convention mismatch: ``u_e`` flows from the
edge's first node ``model.edges[e][0]`` to its second), and ``--json`` (with ``--flows``)
carries ``"probable_flow_sign_flip": true`` (``false`` otherwise); without ``--flows`` it is
exactly :meth:`Certificate.to_dict`.

``reproduce`` runs a registered experiment of the papers (:mod:`gtvmodel.experiments`; NAME one
of its registry or ``all``), prints the paper-vs-ours table and the checks of the expected
outcomes (``--json``: the results as JSON instead), and writes each figure as PNG (at
:data:`gtvmodel.experiments.DPI` dots per inch) and the numbers as JSON into ``--out``
(default ``out``).  Exit ``0`` when every check holds, ``1`` when one fails, ``2`` on bad input.

``lessons`` writes the teaching notebooks (``docs/teaching.md``), shipped in the wheel, and
their worked solutions (``DIR/solutions/``) into ``DIR``; it refuses to overwrite a file unless
``--force`` (exit ``2``).

Start-up: ``--help`` and ``--version`` import only the exceptions and numpy (the package's
names load on first use); ``certify`` imports the engines (CVXPY, SciPy, networkx: about 1 s)
and never matplotlib; ``reproduce`` imports the experiments (and matplotlib).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path

from . import __version__
from ._validate import check_option, check_scalar
from .errors import GTVError, ParameterError, SolverError

__all__ = ["main"]


def _one_line(message: object) -> str:
    """A message as one line (stderr gets exactly one line per error)."""
    return " ".join(str(message).splitlines())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2 like argparse, but with one stderr line
        print(f"gtvmodel: error: {_one_line(message)} (see {self.prog} --help)",
              file=sys.stderr)
        raise SystemExit(2)


def _bounded(v: float, name: str, strict: bool) -> float:
    """``v`` finite and ``> 0`` (``strict``) or ``>= 0``; :class:`ParameterError` otherwise."""
    return check_scalar(v, name, min_val=0.0,
                        include_boundaries="neither" if strict else "both")


def _number(name: str, strict: bool) -> Callable[[str], float]:
    """argparse type: a finite float ``> 0`` (``strict``) or ``>= 0``."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        try:
            return _bounded(v, name, strict)
        except ParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


EXIT_CODES = """exit codes:
  0  certified: the gap is at most tol * max(1, |P(W)|)
  1  not certified: the gap is larger (or infinite: infeasible weights, flows that could not
     be repaired)
  2  bad input: unreadable or inconsistent files, bad arguments (--tol, --feas-tol, --radius,
     an unknown option, a missing argument)
  3  a numerical failure while evaluating the dual, or any other internal failure
every error is one line on stderr"""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gtvmodel", description="Networked federated learning by GTV "
                "minimization: tools for problem and solution files.", epilog=EXIT_CODES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"gtvmodel {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("certify", help="certify candidate weights (and flows) for a problem",
                       description="Print a certified duality gap for WEIGHTS on PROBLEM; exit "
                       "0 if the relative gap is at most --tol, 1 otherwise, 2 on bad input, "
                       "3 on a numerical failure.", epilog=EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("problem", help="problem file (.npz, written by GTVModel.save)")
    c.add_argument("weights", help="weights (n x d): .npz, .npy, .csv or .txt (text: a header "
                   "row and an index column of 0..n-1 or the node labels are recognized)")
    c.add_argument("--flows", help="edge flows (|E| x d, model edge order); built from the "
                   "weights if omitted")
    c.add_argument("--skip-header", action="store_true", default=None,
                   help="text files: the first row is a header (default: detected, a first "
                   "row that is not numeric)")
    c.add_argument("--index-col", action="store_true", default=None,
                   help="text files: the first column is an index (default: detected, one "
                   "extra column holding 0..rows-1 or the node labels)")
    c.add_argument("--tol", type=_number("--tol", strict=True), default=1e-6,
                   help="relative gap tolerance gap <= tol * max(1, |P|), finite and > 0 "
                   "(default 1e-6)")
    c.add_argument("--feas-tol", type=_number("--feas-tol", strict=False), default=1e-8,
                   help="relative tolerance on node constraints and dual residuals, finite "
                   "and >= 0 (default 1e-8)")
    c.add_argument("--radius", type=_number("--radius", strict=False), default=None,
                   help="assume ||w*_i||_inf <= RADIUS (finite, >= 0) for the residual "
                   "charges instead of the radii certify() chooses")
    c.add_argument("--json", action="store_true", help="print the certificate as JSON")
    r = sub.add_parser("reproduce", help="run an experiment of the papers: table, figures, "
                       "JSON", description="Run a registered experiment (one of "
                       f"{', '.join(EXPERIMENTS)}, or all), print the paper's numbers next to "
                       "ours and the checks of the expected outcomes, and write the figures "
                       "(PNG) and numbers (JSON) into --out; each completed stage is reported "
                       "on stderr (a bar on a terminal, else one line) and its numbers written "
                       "to --out/NAME.partial.json.  Exit 0 when every check holds, 1 "
                       "otherwise, 2 on bad input.")
    r.add_argument("name", help=f"experiment name ({', '.join(EXPERIMENTS)}) or 'all'")
    r.add_argument("--seeds", type=_count("--seeds"), default=3,
                   help="number of seeds (data draws), seeds 0..K-1 (default 3)")
    r.add_argument("--quick", action="store_true", help="shrunk sizes: seconds per experiment")
    r.add_argument("--jobs", type=_count("--jobs"), default=1,
                   help="run this many stages (seeds, points) at once, each in its own "
                   "process; the results do not depend on it (default 1)")
    r.add_argument("--out", default="out", help="directory for the PNG and JSON files "
                   "(default: out)")
    r.add_argument("--json", action="store_true", help="print the results as JSON instead of "
                   "the tables")
    le = sub.add_parser("lessons", help="write the teaching notebooks into a directory",
                        description="Write the teaching notebooks (and their solutions, in "
                        "DIR/solutions) into DIR; open them with Jupyter.  Exit 0 on success, "
                        "2 if a file exists (without --force) or DIR cannot be written.")
    le.add_argument("dir", help="target directory (created if missing)")
    le.add_argument("--force", action="store_true", help="overwrite existing notebooks")
    return p


def _lessons_source() -> Path:
    """Where the teaching notebooks are: ``gtvmodel/_lessons`` in an installed wheel (package
    data, see setup.py), ``examples/notebooks`` in a source checkout."""
    here = Path(__file__).resolve().parent
    for where in (here / "_lessons", here.parent / "examples" / "notebooks"):
        if any(where.glob("*.ipynb")):
            return where
    raise GTVError("the teaching notebooks are not installed with this copy of gtvmodel")


def _lessons(args: argparse.Namespace) -> int:
    src = _lessons_source()
    files = sorted(src.glob("*.ipynb")) + sorted(src.glob("solutions/*.ipynb"))
    out = Path(args.dir)
    targets = [out / f.relative_to(src) for f in files]
    clash = [str(t) for t in targets if t.exists()]
    if clash and not args.force:
        raise ParameterError(f"lessons: {clash[0]} exists ({len(clash)} of the "
                             f"{len(targets)} notebooks do); pass --force to overwrite")
    try:
        for f, t in zip(files, targets, strict=True):
            t.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, t)
    except OSError as exc:
        raise ParameterError(f"lessons: cannot write into {out}: {exc}") from None
    print(f"wrote {len(targets)} notebooks into {out} (solutions in {out / 'solutions'})")
    return 0


#: The experiments' names for ``reproduce --help``, written here so that the help does not
#: import the experiments (``tests/test_experiments.py`` checks them against the registry,
#: :func:`gtvmodel.experiments.names`).
EXPERIMENTS = ("001-sbm", "001-chain", "001-star", "000-table1", "001-table1", "001-digits",
               "001-weather")


def _count(name: str) -> Callable[[str], int]:
    """argparse type: an integer ``>= 1``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") \
                from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {v}")
        return v

    parse.__name__ = name
    return parse


def _reproduce(args: argparse.Namespace) -> int:
    # the experiments import the engines and matplotlib: only this command loads them
    # (tests/test_layout.py allows this deferred import, as the one of certify)
    experiments = import_module("gtvmodel.experiments")
    names = experiments.names() if args.name == "all" else [
        check_option(args.name, "NAME", experiments.names() + ["all"], where="reproduce")]
    results = []
    progress = experiments.Progress(out=Path(args.out), jobs=args.jobs)
    for name in names:
        res = experiments.run(name, seeds=args.seeds, quick=args.quick, progress=progress)
        paths = res.save(args.out, dpi=experiments.DPI)
        (Path(args.out) / f"{name}.partial.json").unlink(missing_ok=True)  # now complete
        results.append(res)
        if not args.json:
            print(res.table())
            print(f"wrote {', '.join(str(p) for p in paths)} (PNG at {experiments.DPI} dpi)")
            print(flush=True)
    if args.json:
        out = [r.to_dict() for r in results]
        print(json.dumps(out[0] if args.name != "all" else out, indent=2))
    return 0 if all(r.success for r in results) else 1


def _certify(args: argparse.Namespace) -> int:
    # the argparse types checked these already; checked again so _certify stands on its own
    for name, v, strict in (("--tol", args.tol, True), ("--feas-tol", args.feas_tol, False),
                            ("--radius", args.radius, False)):
        if v is not None:
            _bounded(v, name, strict)
    # the engines (CVXPY, SciPy, ...) are imported only by the command that needs them, so
    # that --help and --version start in milliseconds (tests/test_layout.py allows this one
    # deferred import)
    io = import_module("gtvmodel.io")
    model = io.load_model(args.problem)
    text = {"skip_header": args.skip_header, "index_col": args.index_col}
    W = io.load_weights(args.weights, model, **text)
    U = io.load_flows(args.flows, model, **text) if args.flows else None
    # with --flows the verdict is on the flows given: no flows recovered from W replace them
    options = {"tol": args.tol, "feas_tol": args.feas_tol, "radius": args.radius,
               "recover": U is None}
    cert = model.certify(W, U, **options)
    ok = cert.success  # certified at --tol (the tol given to certify)
    # given flows that fail while their negation certifies: a sign convention mismatch
    flip = bool(U is not None and not ok and model.certify(W, -U, **options).success)
    if args.json and U is None:
        print(cert.to_json())  # exactly Certificate.to_dict()
    elif args.json:  # given flows: plus whether their negation would certify
        out = json.loads(cert.to_json())
        out["probable_flow_sign_flip"] = flip
        print(json.dumps(out, indent=2))
    else:
        print(cert.summary())
        print(f"certified              {ok}  (relative gap {cert.relative_gap:.3g} vs tol "
              f"{args.tol:g})")
        if flip:
            print("probable flow sign flip: the negated flows certify (gtvmodel's u_e flows "
                  "from model.edges[e][0] to model.edges[e][1]); pass the flows with the "
                  "opposite sign")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gtvmodel`` command; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # bad arguments (2, one stderr line) or --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command == "certify":
            return _certify(args)
        if args.command == "reproduce":
            return _reproduce(args)
        if args.command == "lessons":
            return _lessons(args)
    except SolverError as exc:
        print(f"gtvmodel: solver failure: {_one_line(exc)}", file=sys.stderr)
        return 3
    except GTVError as exc:  # FileFormatError, ParameterError, DataError, ...: bad input
        print(f"gtvmodel: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # pragma: no cover - output piped into e.g. `head`
        return 1
    except Exception as exc:  # noqa: BLE001 - an internal failure must not read as a verdict
        print(f"gtvmodel: internal error: {type(exc).__name__}: {_one_line(exc)}",
              file=sys.stderr)
        return 3
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

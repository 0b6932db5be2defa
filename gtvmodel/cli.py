"""Command line interface: ``gtvmodel certify PROBLEM WEIGHTS [--flows FLOWS] [--tol T] [--json]``.

Checks a candidate solution produced anywhere (any language) against a problem file
(:mod:`gtvmodel.io`, ``docs/file_format.md``) and prints its certificate
(:mod:`gtvmodel.certificate`).

Exit codes: ``0`` the gap is at most ``tol * max(1, |P(W)|)``; ``1`` it is larger (or infinite:
infeasible weights, flows that could not be repaired); ``2`` bad input (unreadable or
inconsistent files, bad arguments); ``3`` a numerical failure while evaluating the dual.
No tracebacks: errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .errors import FileFormatError, GTVError, SolverError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits with 2 too; keep one format
        self.print_usage(sys.stderr)
        print(f"gtvmodel: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gtvmodel", description="Networked federated learning by GTV "
                "minimization: tools for problem and solution files.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("certify", help="certify candidate weights (and flows) for a problem",
                       description="Print a certified duality gap for WEIGHTS on PROBLEM; exit "
                       "0 if the relative gap is at most --tol, 1 otherwise, 2 on bad input.")
    c.add_argument("problem", help="problem file (.npz, written by GTVModel.save)")
    c.add_argument("weights", help="weights (n x d): .npz, .npy, .csv or .txt")
    c.add_argument("--flows", help="edge flows (|E| x d, model edge order); built from the "
                   "weights if omitted")
    c.add_argument("--tol", type=float, default=1e-6,
                   help="relative gap tolerance gap <= tol * max(1, |P|) (default 1e-6)")
    c.add_argument("--feas-tol", type=float, default=1e-8,
                   help="relative tolerance on node constraints and dual residuals")
    c.add_argument("--radius", type=float, default=None,
                   help="radius R of the residual charges (default 10 max(1, |W|_inf))")
    c.add_argument("--json", action="store_true", help="print the certificate as JSON")
    return p


def _certify(args: argparse.Namespace) -> int:
    from .io import load_flows, load_model, load_weights

    if not args.tol >= 0 or not args.feas_tol >= 0:
        raise FileFormatError(f"--tol and --feas-tol must be >= 0 (got {args.tol}, "
                              f"{args.feas_tol})")
    model = load_model(args.problem)
    W = load_weights(args.weights, model)
    U = load_flows(args.flows, model) if args.flows else None
    cert = model.certify(W, U, tol=args.tol, feas_tol=args.feas_tol, radius=args.radius)
    ok = cert.certifies(args.tol)
    if args.json:
        print(json.dumps(cert.as_dict(), indent=2))
    else:
        print(cert.summary())
        print(f"certified              {ok}  (relative gap {cert.relative_gap:.3g} vs tol "
              f"{args.tol:g})")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gtvmodel`` command; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "certify":
            return _certify(args)
    except SolverError as exc:
        print(f"gtvmodel: solver failure: {exc}", file=sys.stderr)
        return 3
    except GTVError as exc:  # FileFormatError, DataError, ...: bad input
        print(f"gtvmodel: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # pragma: no cover - output piped into e.g. `head`
        return 1
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

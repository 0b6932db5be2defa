"""Time to a certified relative gap <= 1e-10: ``gm.solve_exact`` (its default route choice)
against the exact solve a CVXPY user writes (issue 28).

The reference is the independent anchor script ``exact_vectorized.py`` (given by ``--anchor``;
it does not import gtvmodel): one vectorized CVXPY problem (``cp.sum_squares`` of a block
sparse matrix plus ``lambda sum_e ||(D W)_e||``) solved by Clarabel (``tol_gap_* = 1e-10``,
``tol_feas = 1e-9``) and by SCS (``eps_* = 1e-9``).  Problems: its 2-block SBM (expected degree
10 inside a block, 0.25 across; d = 2, m = 5, lambda = 0.1) at the given sizes with ``Norm2``
and ``Norm1``, and a k x k grid (two halves with w = (2, 2) and (-2, 2), same data model).

Every repeat runs the three methods one after the other (interleaved), each timed from its
data to its answer: the anchor's solvers from building the CVXPY problem, gtvmodel from
``GTVModel.from_edges`` (model build, compile, solve, certificate, polish).  Each answer is
certified by ``gm.certify``: the anchor's weights alone, gtvmodel's with its own flows
(``Solution.certificate``).  Reported: median (min-max) seconds, the certified relative gaps,
``gtvmodel / best anchor solver`` (medians; the best among those certified to 1e-10), the
median (min-max) of the per-repeat ratios to that solver, the route and the phases of
gtvmodel's last run.  BLAS, OpenMP and Clarabel threads pinned to one.

Run:  PYTHONPATH=. python benchmarks/bench_exact_routes.py --anchor PATH/exact_vectorized.py
          [--sizes 300 1000 2000 5000] [--penalties norm2 norm1] [--grid 100] [--reps 3]
          [--routes clarabel scs interior polish] [--phases 300]
(``PYTHONPATH=.`` from the checkout's root: the script's folder, not the working directory,
is first on ``sys.path``, so without it an installed gtvmodel is imported.)

``--phases N`` only profiles ``solve_exact`` on the ``N``-node SBM (``Norm2``), the default
route against ``method="interior"`` (the full Clarabel ladder): seconds per call in each phase
(cProfile's cumulative times, so the phases overlap where one calls another).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import os
import pstats
import time
import warnings

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import networkx as nx
import numpy as np

import gtvmodel as gm

TARGET = 1e-10


def load_anchor(path: str):  # noqa: ANN201
    """The anchor script as a module (its ``sbm_edges`` and ``solve_cvxpy``)."""
    spec = importlib.util.spec_from_file_location("exact_vectorized", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def problem(anchor, kind: str, n: int, seed: int = 0):  # noqa: ANN001, ANN201
    """``(n, edges, X, y)``: the anchor's SBM, or a ``k x k`` grid (``n = k``) with its data
    model."""
    rng = np.random.default_rng(seed)
    if kind == "sbm":
        sizes = [n // 2, n - n // 2]
        edges = anchor.sbm_edges(sizes, 10.0 / sizes[0], 0.25 / sizes[0], rng)
        wb = np.repeat([[2.0, 2.0], [-2.0, 2.0]], sizes, axis=0)
    else:
        k, n = n, n * n
        G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k), ordering="sorted")
        edges = np.array(sorted((min(a, b), max(a, b)) for a, b in G.edges), dtype=np.int64)
        left = (np.arange(n) // k) < k // 2
        wb = np.where(left[:, None], [[2.0, 2.0]], [[-2.0, 2.0]])
    X = rng.standard_normal((n, 5, 2))
    y = np.einsum("nmd,nd->nm", X, wb) + 0.1 * rng.standard_normal((n, 5))
    return n, edges, X, y


def run_gtv(n: int, edges: np.ndarray, X: np.ndarray, y: np.ndarray, penalty: str,  # noqa: ANN201
            **kw):
    """``(seconds, model, solution)`` of one ``solve_exact(**kw)`` from the raw data."""
    t0, c0 = time.perf_counter(), time.process_time()
    model = gm.GTVModel.from_edges(n, edges, dim=2, lam=0.1,
                                   penalty=gm.Norm2() if penalty == "norm2" else gm.Norm1())
    model.set_data(X, y, "squared")
    sol = gm.solve_exact(model, **kw)
    sol.info["bench_cpu_seconds"] = time.process_time() - c0  # this process's CPU time
    return time.perf_counter() - t0, model, sol


def case(anchor, kind: str, n: int, penalty: str, reps: int,  # noqa: ANN001
         scs: bool = True, routes: tuple[str, ...] = ()) -> dict:
    """One problem, ``reps`` interleaved repeats of the methods (the anchor's SCS only with
    ``scs``; gtvmodel also with ``solver=`` each of ``routes``)."""
    n, edges, X, y = problem(anchor, kind, n)
    p = 2 if penalty == "norm2" else 1
    solvers = {"clarabel": ("CLARABEL", dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                                             tol_feas=1e-9, max_iter=500)),
               "scs": ("SCS", dict(eps_abs=1e-9, eps_rel=1e-9, max_iters=100_000))}
    if not scs:
        del solvers["scs"]
    times: dict[str, list[float]] = {k: [] for k in (*solvers, "gtvmodel",
                                                     *(f"gtvmodel {r}" for r in routes))}
    weights: dict[str, np.ndarray] = {}
    loads, cpu = [], []
    for _ in range(reps):
        loads.append(os.getloadavg()[0])
        for name, (solver, opts) in solvers.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                W, t, _, status, _ = anchor.solve_cvxpy(X, y, edges, 0.1, p, solver, opts)
            times[name].append(t)
            weights[name] = W
        t, model, sol = run_gtv(n, edges, X, y, penalty)
        times["gtvmodel"].append(t)
        cpu.append(sol.info["bench_cpu_seconds"])
        for route in routes:
            kw = ({"method": "interior"} if route == "interior" else {"polish": True}
                  if route == "polish" else {"solver": route.upper()})
            t, _, other = run_gtv(n, edges, X, y, penalty, **kw)
            assert other.certificate.relative_gap <= TARGET, (route, other.info)
            times[f"gtvmodel {route}"].append(t)
    gaps = {name: gm.certify(model, W).relative_gap for name, W in weights.items()}
    gaps.setdefault("scs", float("nan"))
    times.setdefault("scs", [float("nan")])
    gaps["gtvmodel"] = sol.certificate.relative_gap
    return {"kind": kind, "n": n, "E": len(edges), "penalty": penalty, "times": times,
            "gaps": gaps, "route": sol.info["route"], "timings": sol.timings,
            "aimed_failures": len(sol.info.get("aimed_failures", [])),
            "polish": sol.info.get("polish", {}).get("status"), "load": (min(loads),
                                                                            max(loads)),
            "cpu": cpu}


#: The phases of one ``solve_exact`` call that :func:`phases` reports: a label and the
#: functions (file suffix, name) whose cumulative time it is.
PHASES = (
    ("model build (from_edges, set_data)", (("model.py", "from_edges"),
                                            ("declaration.py", "set_data"))),
    ("route choice", (("exact.py", "_zero_accepts"), ("exact.py", "scs_accepts"),
                      ("exact.py", "_first_order_accepts"))),
    ("Algorithm 1 (route first_order_polish)", (("algorithm.py", "solve_primal_dual"),)),
    ("compile (CVXPY expressions)", (("compile.py", "compile_primal"),)),
    ("CVXPY canonicalization", (("problem.py", "get_problem_data"),)),
    ("SCS setup (factorization)", (("scs/__init__.py", "__init__"),)),
    ("SCS iterations", (("~", "<method 'solve' of 'scs.SCS' objects>"),)),
    ("Clarabel (setup and iterations)", (("_solver.py", "solve_via_data"),
                                         ("clarabel_conif.py", "solve_via_data"))),
    ("certificates", (("certificate.py", "certify"),)),
    ("polish", (("polish.py", "polish"),)),
    ("uniqueness", (("uniqueness.py", "uniqueness"),)),
)


def profile_phases(anchor, n: int, calls: int, kw: dict) -> dict[str, float]:  # noqa: ANN001
    """Seconds per call of each of :data:`PHASES` (cProfile, cumulative, ``calls`` calls of
    ``run_gtv`` on the ``n``-node SBM with ``Norm2``), plus the total."""
    data = problem(anchor, "sbm", n)
    run_gtv(*data, "norm2", **kw)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(calls):
        run_gtv(*data, "norm2", **kw)
    prof.disable()
    total = (time.perf_counter() - t0) / calls
    stats = pstats.Stats(prof).stats
    out = {}
    for label, funcs in PHASES:
        out[label] = sum(v[3] for (f, _, name), v in stats.items()
                         if any(f.endswith(suffix) and name == fn for suffix, fn in funcs)
                         ) / calls
    out["total (profiled)"] = total
    return out


def fmt(ts: list[float]) -> str:
    return f"{np.median(ts):.3g} ({min(ts):.3g}-{max(ts):.3g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anchor", required=True, help="path of exact_vectorized.py")
    ap.add_argument("--sizes", type=int, nargs="*", default=[300, 1000, 2000, 5000])
    ap.add_argument("--penalties", nargs="*", default=["norm2", "norm1"])
    ap.add_argument("--grid", type=int, nargs="*", default=[100], help="grid side k")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--routes", nargs="*", default=[],
                    choices=["clarabel", "scs", "interior", "polish"],
                    help="also time gtvmodel's route of these solvers (solver=...), "
                         "method='interior' (the full Clarabel ladder of earlier versions), "
                         "or polish=True (every answer polished)")
    ap.add_argument("--phases", type=int, default=0, metavar="N",
                    help="only profile solve_exact on the N-node SBM (auto against "
                         "method='interior'): seconds per phase")
    ap.add_argument("--grid-scs", action="store_true",
                    help="also run the anchor's SCS on grids (slow there: off by default)")
    ap.add_argument("--big-reps", type=int, default=None,
                    help="repeats for problems above 2,000 nodes (default --reps)")
    a = ap.parse_args()
    anchor = load_anchor(a.anchor)
    # lazy imports and the compiled kernels' first compilation out of the timings (numba
    # caches them on disk: in a fresh checkout the first polish took 0.7 s more, compiling
    # the certificate's repair of flows slightly outside their balls, which polish leaves
    # up to polish.CAPACITY_EXCESS)
    _, model, sol = run_gtv(*problem(anchor, "sbm", 50)[:4], "norm2")
    gm.certify(model, sol.weights, sol.flows * (1 + 1e-7), project="never", recover=False)
    if a.phases:
        rows = {name: profile_phases(anchor, a.phases, a.reps, kw) for name, kw in (
            ("auto", {}), ("method='interior'", {"method": "interior"}))}
        print(f"| phase (s per call, n = {a.phases}, load {os.getloadavg()[0]:.1f}) | "
              + " | ".join(rows) + " |")
        print("|---|" + "---|" * len(rows))
        for label in next(iter(rows.values())):
            print(f"| {label} | " + " | ".join(f"{r[label]:.3f}" for r in rows.values()) + " |")
        return
    cases = [("sbm", n, pen) for n in a.sizes for pen in a.penalties] + [
        ("grid", k, pen) for k in a.grid for pen in a.penalties[:1]]
    print("| problem | n | E | load | anchor Clarabel 1e-10 | anchor SCS 1e-9 | gtvmodel "
          "solve_exact | route | ratio to best certified anchor | per-repeat ratio | "
          "certified rel. gap: Clarabel / SCS / gtvmodel | gtvmodel phases (last run) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, n, pen in cases:
        reps = a.reps if (n if kind == "sbm" else n * n) <= 2000 or a.big_reps is None \
            else a.big_reps
        r = case(anchor, kind, n, pen, reps, scs=kind == "sbm" or a.grid_scs,
                 routes=tuple(a.routes))
        t, g = r["times"], r["gaps"]
        ok = [k for k in ("clarabel", "scs") if g[k] <= TARGET]
        best = min((np.median(t[k]) for k in ok), default=float("nan"))
        ratio = np.median(t["gtvmodel"]) / best
        # per repeat: gtvmodel over the anchor's solver of the best median, same repeat
        fastest = min(ok, key=lambda k: np.median(t[k]), default=None)
        per = (np.array(t["gtvmodel"]) / np.array(t[fastest]) if fastest is not None
               else np.array([np.nan]))
        phases = ", ".join(f"{k} {v:.2f}" for k, v in r["timings"].items())
        note = f"; {r['aimed_failures']} aimed run(s) missed" if r["aimed_failures"] else ""
        note += f"; CPU {fmt(r['cpu'])}"  # gtvmodel's, per call: preemption shows in wall only
        for k in a.routes:
            other = np.array(t[f"gtvmodel {k}"])
            note += f"; {k}: {fmt(other)}" + (
                f", per-repeat ratio {np.median(other / np.array(t[fastest])):.2f}"
                if fastest is not None else "")
        print(f"| {kind} {pen} | {r['n']} | {r['E']} | {r['load'][0]:.1f}-{r['load'][1]:.1f} | "
              f"{fmt(t['clarabel'])} | {fmt(t['scs'])} | {fmt(t['gtvmodel'])} | {r['route']}"
              f" (polish {r['polish']}{note}) | {ratio:.2f} | {np.median(per):.2f} "
              f"({per.min():.2f}-{per.max():.2f}) | {g['clarabel']:.1e} / "
              f"{g['scs']:.1e} / {g['gtvmodel']:.1e} | {phases} |", flush=True)


if __name__ == "__main__":
    main()

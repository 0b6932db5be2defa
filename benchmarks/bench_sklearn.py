"""Benchmark: choosing lambda with the scikit-learn estimators (issue 32) -- ``GTVRegressorCV``
(one compiled ``lam_path`` per fold, lambda a CVXPY Parameter) vs ``GridSearchCV`` over
``GTVRegressor`` (a clone, a compilation and a solve per fold and lambda, then a refit).

Paper 001 VI-A's SBM (``datasets.sbm(sizes=(S, S), m=5, sigma=0.5, seed=0)``, ``d = 2``, an
intercept column added by the estimators), the same 8 lambda values (``GTVRegressorCV``'s
default grid: log-spaced in ``[1e-3, 1] * lambda_crit``) and 5 folds for both; the folds differ
(the CV estimator balances every node's rows over the folds, GridSearchCV's KFold cuts the
shuffled rows), so the selected lambda may differ too; both are printed.  Repeats alternate
the two routes; medians, min-max.

Run: ``.venv/bin/python benchmarks/bench_sklearn.py [--size 20] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import _pin_threads  # noqa: F401  (first: pins BLAS threads before numpy loads)
import numpy as np
from sklearn.model_selection import GridSearchCV, KFold

import gtvmodel as gm
from gtvmodel import datasets


def rows(data: datasets.NetworkedData) -> tuple[np.ndarray, np.ndarray]:
    ids = np.concatenate([np.full(len(data.y[v]), v) for v in data.X])
    X = np.column_stack([ids, np.vstack([data.X[v] for v in data.X])])
    return X, np.concatenate([data.y[v] for v in data.X])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = datasets.sbm(sizes=(args.size, args.size), m=5, sigma=0.5, seed=0)
    X, y = rows(data)
    graph = data.graph
    cv_times, grid_times = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        cv = gm.GTVRegressorCV(graph, lams=8, cv=5).fit(X, y)
        cv_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        grid = GridSearchCV(gm.GTVRegressor(graph), {"lam": list(cv.lams_)},
                            cv=KFold(5, shuffle=True, random_state=0)).fit(X, y)
        grid_times.append(time.perf_counter() - t)
    ratio = [g / c for g, c in zip(grid_times, cv_times, strict=True)]
    print(f"SBM {args.size}+{args.size} nodes, {len(X)} rows, 8 lambda x 5 folds, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"GTVRegressorCV   median {statistics.median(cv_times):.2f} s "
          f"(min {min(cv_times):.2f}, max {max(cv_times):.2f}), lam_ = {cv.lam_:.4g}")
    print(f"GridSearchCV     median {statistics.median(grid_times):.2f} s "
          f"(min {min(grid_times):.2f}, max {max(grid_times):.2f}), "
          f"best lam = {grid.best_params_['lam']:.4g} (41 fits)")
    print(f"ratio GridSearchCV / CV: median {statistics.median(ratio):.2f} "
          f"(min {min(ratio):.2f}, max {max(ratio):.2f})")


if __name__ == "__main__":
    main()

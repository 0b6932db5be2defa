"""Certified duality gap (34) against time, one curve per solver and one panel per dataset,
from a benchopt result file of ``benchmark_gtv`` (parquet or csv).

Run: ``python plot_results.py RESULT.parquet [--out gap_vs_time.png]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def load(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def plot(df: pd.DataFrame, out: Path) -> Path:
    datasets = sorted(df["dataset_name"].unique())
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4.2),
                             squeeze=False)
    for ax, name in zip(axes[0], datasets, strict=True):
        part = df[df["dataset_name"] == name]
        for solver, rows in part.groupby("solver_name"):
            rows = rows.groupby("stop_val")[["time", "objective_certified_gap"]].median()
            # in iteration order (benchopt times each run separately; on a busy machine a
            # longer run can take less time, so sorting by time would zigzag)
            ax.loglog(rows["time"].clip(lower=1e-4),
                      rows["objective_certified_gap"].clip(lower=1e-12), "o-", ms=3,
                      label=solver)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("certified gap (34)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("result", type=Path)
    ap.add_argument("--out", type=Path, default=Path("gap_vs_time.png"))
    args = ap.parse_args()
    print(plot(load(args.result), args.out))


if __name__ == "__main__":
    main()

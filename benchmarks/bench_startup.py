"""Start-up time of the command line (docs/file_format.md): wall seconds of ``gtvmodel
--version`` and ``gtvmodel --help`` (run as ``python -m gtvmodel``, a fresh interpreter each
time, so interpreter start-up is included), and of ``python -c pass`` and ``import numpy``
beside them for reference; medians of the repeats, interleaved.  Also whether matplotlib,
cvxpy or scipy were imported.

Run:  python benchmarks/bench_startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import _pin_threads  # noqa: F401  (pins threads in the children too: they inherit the env)

CASES = {
    "python -c pass": ["-c", "pass"],
    "import numpy": ["-c", "import numpy"],
    "gtvmodel --version": ["-m", "gtvmodel", "--version"],
    "gtvmodel --help": ["-m", "gtvmodel", "--help"],
}
PROBE = ("import sys, runpy; sys.argv = ['gtvmodel', '--version']\n"
         "try:\n    runpy.run_module('gtvmodel', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "print(sorted(m for m in ('matplotlib', 'cvxpy', 'scipy') if m in sys.modules))")


def wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeats):
        for name, argv in CASES.items():
            times[name].append(wall(argv))
    for name, ts in times.items():
        print(f"{name:<20} median {statistics.median(ts):.3f} s  (min {min(ts):.3f}, max "
              f"{max(ts):.3f})")
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    print(f"heavy modules imported by --version: {out}")


if __name__ == "__main__":
    main()

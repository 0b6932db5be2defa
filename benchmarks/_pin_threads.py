"""Pin BLAS/OpenMP threads and Clarabel's threads to one before numpy, scipy or a solver is
imported (issue 17): ratios then compare formulations, not thread schedules on a busy machine.

Clarabel 0.11 has a thread option, ``max_threads`` (default 0: as many as the machine has); it
applies to its ``faer`` linear solver, which ``direct_solve_method="auto"`` picks on larger
problems (the 1000-node SBM of bench_compile.py: "direct / faer ... (2 threads)" in its
verbose log on this 2-core machine; small problems use ``qdldl``, always one thread).  faer runs
on rayon's global pool, so ``RAYON_NUM_THREADS=1`` pins it without passing an option to every
solve (the log then says "(1 thread)").  Import this module first in every benchmark script; an
explicitly set variable is kept.  ``THREADS`` records the settings in effect, for the printed
reports.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

THREADS = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS", "RAYON_NUM_THREADS")}

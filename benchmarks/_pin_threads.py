"""Pin BLAS/OpenMP threads to one before numpy, scipy or a solver is imported (issue 17):
ratios then compare formulations, not thread schedules on a busy machine.  Clarabel itself has
no thread option (it runs its own factorization single-threaded unless built with a parallel
linear solver).  Import this module first in every benchmark script; an explicitly set variable
is kept.  ``THREADS`` records the settings in effect, for the printed reports.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

THREADS = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                      "MKL_NUM_THREADS")}

"""Algorithm 1 (preconditioned primal-dual message passing): the loop and step rules
(:mod:`~gtvmodel.primal_dual.algorithm`) and the grouped node updates PU (32)
(:mod:`~gtvmodel.primal_dual.prox`).
"""

from .algorithm import (
    EdgeUpdate,
    FixedSteps,
    History,
    NodeUpdate,
    PrimalDualResult,
    ResidualBalancing,
    solve_primal_dual,
)

__all__ = ["solve_primal_dual", "PrimalDualResult", "ResidualBalancing", "FixedSteps",
           "NodeUpdate", "EdgeUpdate", "History"]

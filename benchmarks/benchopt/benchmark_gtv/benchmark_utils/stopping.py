"""The stopping rule of the iterative solvers: benchopt's sufficient-progress criterion on the
certified gap (34) rather than on the objective value, which primal-dual methods do not
decrease monotonically (Condat-Vu's first iterates raise ``P(w)`` while the flows build up)."""

from benchopt.stopping_criterion import SufficientProgressCriterion


def gap_progress() -> SufficientProgressCriterion:
    """Stop after 7 successive runs without progress of ``certified_gap``."""
    return SufficientProgressCriterion(patience=7, strategy="iteration",
                                       key_to_monitor="certified_gap")

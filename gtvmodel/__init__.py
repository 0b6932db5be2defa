"""gtvmodel: networked federated learning by generalized total variation (GTV) minimization.

Describe a GTV problem (16) over a ``networkx`` graph with :class:`GTVModel`, library losses,
penalties and constraints (or any CVXPY expression), and solve it exactly with
:func:`solve_exact` (or the model's shortcut methods); :func:`solve_dual`,
:func:`solve_primal_dual` and :func:`certify` are the other engines.  Every result derives from
:class:`Result` (``weight``, ``flow``, ``status``, ``success``, ``timings``, ``to_dict``).
Conventions and errata: ``docs/conventions.md``.
"""

from .certificates.certificate import Certificate, certify
from .declaration import ModelDeclaration, ModelStructure
from .errors import (
    AccuracyWarning,
    ConstraintError,
    DataError,
    FileFormatError,
    GraphError,
    GTVError,
    InfeasibleError,
    LossError,
    ParameterError,
    PartitionError,
    PenaltyError,
    SolverError,
    UnknownNodeError,
    UnsupportedError,
)
from .graph import EmpiricalGraph
from .model import GTVModel
from .primal_dual import PrimalDualResult, ResidualBalancing, solve_primal_dual
from .results import Result
from .solution import Solution
from .solve import conic
from .solve.dual import DualSolution, solve_dual
from .solve.exact import solve_exact
from .terms.constraints import Box, Constraint, NonNeg, NormBall, SymbolicConstraint
from .terms.losses import (
    AbsoluteLoss,
    HingeLoss,
    HuberLoss,
    LogisticLoss,
    Loss,
    QuadraticLoss,
    SquaredLoss,
    SymbolicLoss,
    ZeroLoss,
)
from .terms.penalties import Norm1, Norm2, NormInf, NormP, Penalty, QuadForm, SquaredNorm2
from .terms.softmax import SoftmaxLoss
from .theory import (
    ClusterReport,
    RecoveryReport,
    check_well_connected,
    cluster_graph,
    consensus_threshold,
    verify_recovery,
)

__version__ = "0.1.0"

__all__ = [
    "GTVModel",
    "EmpiricalGraph",
    "ModelDeclaration",
    "ModelStructure",
    # results: one vocabulary (weight, flow, status, success, timings, to_dict)
    "Result",
    "Solution",
    "solve_exact",
    "solve_dual",
    # Algorithm 1 (primal-dual message passing)
    "solve_primal_dual",
    "PrimalDualResult",
    "ResidualBalancing",
    "DualSolution",
    "Certificate",
    "certify",
    "conic",
    # losses
    "Loss",
    "SquaredLoss",
    "LogisticLoss",
    "HingeLoss",
    "HuberLoss",
    "AbsoluteLoss",
    "ZeroLoss",
    "QuadraticLoss",
    "SymbolicLoss",
    "SoftmaxLoss",
    # penalties
    "Penalty",
    "Norm2",
    "Norm1",
    "NormInf",
    "NormP",
    "SquaredNorm2",
    "QuadForm",
    # constraints
    "Constraint",
    "Box",
    "NonNeg",
    "NormBall",
    "SymbolicConstraint",
    # errors
    "GTVError",
    "AccuracyWarning",
    "GraphError",
    "UnknownNodeError",
    "DataError",
    "LossError",
    "ConstraintError",
    "PenaltyError",
    "ParameterError",
    "InfeasibleError",
    "SolverError",
    "UnsupportedError",
    "FileFormatError",
    "PartitionError",
    # theory (Theorem 2 of paper 001)
    "ClusterReport",
    "RecoveryReport",
    "check_well_connected",
    "consensus_threshold",
    "cluster_graph",
    "verify_recovery",
]

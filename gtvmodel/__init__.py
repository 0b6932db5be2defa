"""gtvmodel: networked federated learning by generalized total variation (GTV) minimization.

Describe a GTV problem (16) over a ``networkx`` graph with :class:`GTVModel`, library losses,
penalties and constraints (or any CVXPY expression), and solve it exactly with
:func:`solve_exact` (or the model's shortcut methods); :func:`solve_dual`,
:func:`solve_primal_dual` and :func:`certify` are the other engines.  Every result derives from
:class:`Result` (``weight``, ``flow``, ``status``, ``success``, ``timings``, ``to_dict``).
Conventions and errata: ``docs/conventions.md``.

The names below are loaded on first use (PEP 562): ``import gtvmodel`` itself imports only the
exceptions, so the command line starts in milliseconds for ``--help`` and ``--version``;
``gtvmodel.GTVModel`` and the others import CVXPY and the engines the first time they are
read.  ``_EXPORTS`` maps each public name to its module (``tests/test_layout.py`` reads it as
the package's imports).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .errors import (
    AccuracyWarning,
    ConstraintError,
    DataError,
    DistributedError,
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
    WorkerLostError,
)

__version__ = "0.1.0"

#: public name -> the module defining it (a module itself where the name is one)
_EXPORTS: dict[str, str] = {
    "BaselineResult": "gtvmodel.baselines.result",
    "Certificate": "gtvmodel.certificates.certificate",
    "certify": "gtvmodel.certificates.certificate",
    "ModelDeclaration": "gtvmodel.declaration",
    "ModelStructure": "gtvmodel.declaration",
    "EmpiricalGraph": "gtvmodel.graph",
    "GTVModel": "gtvmodel.model",
    "PrimalDualResult": "gtvmodel.primal_dual",
    "ResidualBalancing": "gtvmodel.primal_dual",
    "solve_primal_dual": "gtvmodel.primal_dual",
    "Result": "gtvmodel.results",
    "Solution": "gtvmodel.solution",
    "DualSolution": "gtvmodel.duality.dual",
    "solve_dual": "gtvmodel.duality.dual",
    "solve_exact": "gtvmodel.solve.exact",
    "solve_direct": "gtvmodel.solve.direct",
    "direct_method": "gtvmodel.solve.direct",
    "Box": "gtvmodel.terms.constraints",
    "Constraint": "gtvmodel.terms.constraints",
    "NonNeg": "gtvmodel.terms.constraints",
    "NormBall": "gtvmodel.terms.constraints",
    "SymbolicConstraint": "gtvmodel.terms.constraints",
    "AbsoluteLoss": "gtvmodel.terms.losses",
    "HingeLoss": "gtvmodel.terms.losses",
    "HuberLoss": "gtvmodel.terms.losses",
    "LogisticLoss": "gtvmodel.terms.losses",
    "Loss": "gtvmodel.terms.losses",
    "QuadraticLoss": "gtvmodel.terms.losses",
    "SquaredLoss": "gtvmodel.terms.losses",
    "SymbolicLoss": "gtvmodel.terms.losses",
    "ZeroLoss": "gtvmodel.terms.losses",
    "Norm1": "gtvmodel.terms.penalties",
    "Norm2": "gtvmodel.terms.penalties",
    "NormInf": "gtvmodel.terms.penalties",
    "NormP": "gtvmodel.terms.penalties",
    "Penalty": "gtvmodel.terms.penalties",
    "QuadForm": "gtvmodel.terms.penalties",
    "SquaredNorm2": "gtvmodel.terms.penalties",
    "SoftmaxLoss": "gtvmodel.terms.softmax",
    "PoissonLoss": "gtvmodel.terms.poisson",
    "multi_output_squared_loss": "gtvmodel.terms.matrix",
    "NuclearNorm": "gtvmodel.terms.matrix",
    "ClusterReport": "gtvmodel.theory",
    "RecoveryReport": "gtvmodel.theory",
    "check_well_connected": "gtvmodel.theory",
    "cluster_graph": "gtvmodel.theory",
    "consensus_threshold": "gtvmodel.theory",
    "verify_recovery": "gtvmodel.theory",
    "conic": "gtvmodel.duality.conic",  # a module
    "predict": "gtvmodel.scores",
    "node_scores": "gtvmodel.scores",
    "LamPath": "gtvmodel.path",
    "lam_path": "gtvmodel.path",
    "Comparison": "gtvmodel.comparison",
    "compare": "gtvmodel.comparison",
    "solve_distributed": "gtvmodel.primal_dual.distributed",
    "DistributedResult": "gtvmodel.primal_dual.distributed",
    "Checkpoint": "gtvmodel.primal_dual.distributed",
    "solve_torch": "gtvmodel.primal_dual.torch_backend",
    "NumpyBackend": "gtvmodel.primal_dual.backends",
    "TorchBackend": "gtvmodel.primal_dual.torch_backend",
    "DaskBackend": "gtvmodel.primal_dual.distributed",
    "GTVRegressor": "gtvmodel.sklearn",
    "GTVClassifier": "gtvmodel.sklearn",
    "GTVRegressorCV": "gtvmodel.sklearn",
    "GTVClassifierCV": "gtvmodel.sklearn",
    "CertifiedEvaluator": "gtvmodel.flower",
}

_SUBMODULES = frozenset({"baselines", "certificates", "datasets", "experiments", "graphs", "io",
                          "plot", "primal_dual", "solve", "terms", "theory"})


def __getattr__(name: str) -> Any:
    """Load a public name (or a submodule: ``gtvmodel.theory``) on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        if name in _SUBMODULES:
            return import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mod = import_module(module)
    value = mod if module.endswith(f".{name}") else getattr(mod, name)
    globals()[name] = value  # later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    """The public names, the public subpackages and the module's dunders (``__version__``):
    not the helpers this file imports (``Any``, ``import_module``) nor the private modules."""
    dunders = {k for k in globals() if k.startswith("__") and k.endswith("__")}
    return sorted(set(__all__) | _SUBMODULES | dunders)


__all__ = [
    "GTVModel",
    "EmpiricalGraph",
    "ModelDeclaration",
    "ModelStructure",
    # results: one vocabulary (weight, flow, status, success, timings, to_dict)
    "Result",
    "Solution",
    "solve_exact",
    "solve_direct",
    "direct_method",
    "solve_dual",
    # Algorithm 1 (primal-dual message passing)
    "solve_primal_dual",
    "PrimalDualResult",
    "ResidualBalancing",
    "DualSolution",
    "BaselineResult",
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
    "PoissonLoss",
    "multi_output_squared_loss",
    # penalties
    "Penalty",
    "Norm2",
    "Norm1",
    "NormInf",
    "NormP",
    "SquaredNorm2",
    "NuclearNorm",
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
    # prediction, lambda paths and comparisons (issue 10)
    "predict",
    "node_scores",
    "lam_path",
    "LamPath",
    "compare",
    "Comparison",
    # Algorithm 1 on Dask (issue 14)
    "solve_distributed",
    "DistributedResult",
    "Checkpoint",
    "DistributedError",
    "WorkerLostError",
    # Algorithm 1 on PyTorch tensors (issue 16 item 6)
    "solve_torch",
    "NumpyBackend",
    "TorchBackend",
    "DaskBackend",
    # scikit-learn estimators and Flower's server-side evaluation (issue 32)
    "GTVRegressor",
    "GTVClassifier",
    "GTVRegressorCV",
    "GTVClassifierCV",
    "CertifiedEvaluator",
]

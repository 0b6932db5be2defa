"""Node losses ``L_i`` of GTV minimization (16).

Each loss is one object that knows its CVXPY expression, its numeric value, its gradient where
smooth, and its curvature constants (smoothness ``beta_i``, strong convexity ``alpha``).  Data-fit
losses are means over the node's ``m_i`` samples of a separable row loss,
``L(w) = (1/m) sum_r ell(x_r^T w, y_r)``; each row formula is written once (numpy and CVXPY) and
used both for a single node and, stacked into sparse block matrices, for all nodes of one loss
class at once (:class:`LossBatch`).

Every library loss takes optional regularizers ``l1=eta`` (adds ``eta ||w||_1``) and ``l2=kappa``
(adds ``kappa ||w||_2^2``).

Library: :class:`SquaredLoss`, :class:`LogisticLoss` (labels +-1), :class:`HingeLoss` (labels +-1),
:class:`HuberLoss`, :class:`AbsoluteLoss`, :class:`ZeroLoss` (a node without data),
:class:`QuadraticLoss` (convex clustering ``||w - a||^2``).  Arbitrary DCP expressions are wrapped
in :class:`SymbolicLoss` by :meth:`gtvmodel.GTVModel.set_loss`.

The package's modules, in import order: ``facts`` (:class:`LossFacts`, the per-instance
facts replacing class flags), ``conjugates`` (conjugate formulas), ``batch`` (the batch core
:class:`LossBatch` and the optional capabilities as protocols), ``base`` (:class:`Loss`),
``datafit`` (:class:`RowLoss`, and :class:`DataFitLoss`: a row loss composed into a
loss), ``library`` and ``simple`` (the library losses and rows), ``batches`` (their
batches).  Every name is re-exported here
and its ``__module__`` set to this package, so pickles name ``gtvmodel.terms.losses`` as
before the split.
"""

from __future__ import annotations

from ...kernels.boxqp import dual_active_set_prox
from .base import Loss, _cvxpy_prox, _solve_conjugate
from .batch import (
    CAPABILITIES,
    ConjugateGroup,
    ConjugateGroups,
    DiagonalQuadratic,
    ExactProx,
    Hessians,
    LossBatch,
    NodePart,
    NullSpace,
    SublevelRadii,
    scatter_rows,
    smooth_gradients,
    supports,
)
from .batches import (
    DataFitBatch,
    PiecewiseLinearBatch,
    QuadraticBatch,
    SampleBatch,
    SquaredBatch,
    ZeroBatch,
    _datafit_part,
    _squared_conjugate_split,
    grouped_gram,  # kernels.linalg's, as batches imports it (the import order is kept)
    newton_conjugates,
)
from .conjugates import (
    _absorbed_row_duals,
    _clip,
    _grouped_grams,
    _pinv_sym,
    _soft,
    datafit_conjugate_split,
    l2_conjugate_cvx,
    quadratic_conjugate_cvx,
    quadratic_conjugate_rows,
    squared_maximizers,
    sum_rows_by,
    zero_conjugate_rows,
)
from .datafit import DataFitLoss, RowLoss, _rows_sum_cvx
from .facts import LossFacts
from .library import (
    AbsoluteLoss,
    AbsoluteRow,
    HingeLoss,
    HingeRow,
    HuberLoss,
    HuberRow,
    LogisticLoss,
    LogisticRow,
    SquaredLoss,
    SquaredRow,
)
from .simple import QuadraticLoss, SymbolicLoss, ZeroLoss

__all__ = [
    "Loss",
    "DataFitLoss",
    "SquaredLoss",
    "LogisticLoss",
    "HingeLoss",
    "HuberLoss",
    "AbsoluteLoss",
    "ZeroLoss",
    "QuadraticLoss",
    "SymbolicLoss",
    "LossBatch",
    "ZeroBatch",
    "QuadraticBatch",
    "SampleBatch",
    "DataFitBatch",
    "SquaredBatch",
    "PiecewiseLinearBatch",
    "dual_active_set_prox",
    "NodePart",
    "ConjugateGroup",
    "smooth_gradients",
    "LossFacts",
    "RowLoss",
    "SquaredRow",
    "LogisticRow",
    "HingeRow",
    "AbsoluteRow",
    "HuberRow",
    "ExactProx",
    "ConjugateGroups",
    "SublevelRadii",
    "Hessians",
    "NullSpace",
    "DiagonalQuadratic",
    "CAPABILITIES",
    "supports",
]


#: Names the engines import from here besides ``__all__`` (re-exported, rehomed).
_OTHERS = (_absorbed_row_duals, _clip, _cvxpy_prox, _datafit_part, _grouped_grams, _pinv_sym,
           _rows_sum_cvx, _soft, _solve_conjugate, _squared_conjugate_split, scatter_rows,
           newton_conjugates, datafit_conjugate_split, grouped_gram, l2_conjugate_cvx,
           quadratic_conjugate_cvx, quadratic_conjugate_rows, squared_maximizers, sum_rows_by,
           zero_conjugate_rows)


def _rehome() -> None:
    """Set ``__module__`` of the subpackage's classes and functions to this package (the name
    pickles and error messages have always used)."""
    for obj in [*(globals()[n] for n in __all__), *_OTHERS]:
        if getattr(obj, "__module__", "").startswith(__name__ + "."):
            obj.__module__ = __name__


_rehome()

"""scikit-learn estimators for GTV minimization (16): networked regression and classification.

:class:`GTVRegressor` and :class:`GTVClassifier` fit one linear model ``w_i`` per node of an
empirical graph by GTV minimization (16) (paper 001, "Networked Federated Learning", Eq. (16)),

    min_w  sum_i L_i(w_i) + lam sum_{e = {i, j}} A_e phi(w_i - w_j),

with the squared loss (39) (regression; ``loss="huber"``/``"absolute"`` also) or the logistic
loss (two classes) / the softmax loss (more classes) at each node, and :class:`GTVRegressorCV`,
:class:`GTVClassifierCV` select ``lam`` by K-fold cross-validation over a compiled
:func:`~gtvmodel.lam_path` (``lambda`` is a CVXPY Parameter: one compilation per fold, not one
per fold and ``lambda``).

**Node identity: column 0 of X.**  Each row of ``X`` names its node in column ``node_column``
(default 0); the remaining columns are the features ``x_r``.  This is what works unchanged with
:class:`~sklearn.model_selection.GridSearchCV`, :func:`~sklearn.model_selection.cross_val_score`
and :class:`~sklearn.pipeline.Pipeline`: the splitters cut rows, so every row keeps its node,
without metadata routing (a ``nodes=`` fit parameter must be requested with
``set_fit_request`` and passed as ``params=`` to every meta-estimator, and ``predict`` has no
such parameter in a ``Pipeline``).  In a pipeline, transform the features only, e.g. with
``ColumnTransformer([("node", "passthrough", [0]), ("x", StandardScaler(), slice(1, None))])``.
Node labels are numbers: the labels of ``graph`` (integers, looked up by value, so ``3.0``
names node ``3``).

``graph`` is a :class:`networkx.Graph` (edge attribute ``weight`` = ``A_e``, default 1) whose
nodes may include nodes without samples (their ``w_i`` is set by the graph alone; predictions
for them are then available); ``graph=None`` uses the chain (path graph) through the node labels
seen in ``fit`` in increasing order: the one-dimensional total variation of the fused lasso and
prox-tv, where the labels are positions (time steps, sites along a line).
``fit_intercept=True`` appends a constant feature, so the per-node intercept is part of ``w_i``
and coupled by the penalty like the other weights.

Fitted attributes: ``nodes_`` (the node labels, model order), ``coef_`` (``(n, p)``; ``(n, p,
K)`` for the softmax loss), ``intercept_`` (``(n,)``/``(n, K)``), ``result_`` (the solver's
result), ``certified_gap_`` (its certified duality gap (34), an upper bound on ``P(w) - P*``),
``objective_`` (``P(w)`` of (16)), ``model_`` (the :class:`~gtvmodel.GTVModel`; ``model_`` and
``result_`` are not pickled).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
from scipy.special import expit, softmax
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y

from ._validate import check_int, check_option, check_scalar
from .errors import DataError, ParameterError, UnknownNodeError, UnsupportedError
from .model import GTVModel
from .path import lam_path
from .primal_dual import solve_primal_dual
from .solve.exact import solve_exact
from .terms.penalties import Norm1, Norm2, NormInf, Penalty, SquaredNorm2
from .terms.softmax import SoftmaxLoss
from .theory import consensus_threshold

__all__ = ["GTVRegressor", "GTVClassifier", "GTVRegressorCV", "GTVClassifierCV", "lam_scale"]

#: The penalties ``phi`` by name (or pass a :class:`~gtvmodel.terms.penalties.Penalty`).
PENALTIES = {"norm2": Norm2, "norm1": Norm1, "norminf": NormInf, "squared": SquaredNorm2}
#: The regression losses by name (:meth:`GTVModel.set_data`'s kinds).
REGRESSION_LOSSES = ("squared", "huber", "absolute")
METHODS = ("exact", "primal_dual")


def _penalty(penalty: Any, where: str) -> Penalty:
    if isinstance(penalty, Penalty):
        return penalty
    return PENALTIES[check_option(penalty, "penalty", PENALTIES, where=where)]()


class _GTVBase(BaseEstimator):
    """The shared fit: rows split into node labels and features, one model, one solve."""

    _loss_where = "GTVEstimator"

    def __init__(self, graph: nx.Graph | None = None, lam: float = 1.0, *,
                 penalty: Any = "norm2", fit_intercept: bool = True, node_column: int = 0,
                 method: str = "exact", solver_options: dict | None = None):
        self.graph = graph
        self.lam = lam
        self.penalty = penalty
        self.fit_intercept = fit_intercept
        self.node_column = node_column
        self.method = method
        self.solver_options = solver_options

    # ------------------------------------------------------------ rows
    def _split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(node labels (M,), features (M, p [+1]))`` of validated rows."""
        where = type(self).__name__
        col = check_int(self.node_column, "node_column", min_val=0, where=where)
        if col >= X.shape[1]:
            raise DataError(f"{where}: node_column={col} but X has {X.shape[1]} column(s); "
                            "column node_column of X holds each row's node label")
        F = np.delete(X, col, axis=1)
        if self.fit_intercept:
            F = np.hstack([F, np.ones((X.shape[0], 1))])
        if F.shape[1] == 0:
            raise DataError(f"{where}: X has only the node column and fit_intercept=False: "
                            "no features to fit")
        return X[:, col], F

    def _graph(self, ids: np.ndarray) -> nx.Graph:
        if self.graph is not None:
            if not isinstance(self.graph, nx.Graph):
                raise ParameterError(f"{type(self).__name__}: graph must be a networkx.Graph or "
                                     f"None, got {type(self.graph).__name__}")
            return self.graph
        return nx.path_graph(np.unique(ids).tolist())

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Each row's node position in ``nodes_`` (each distinct label looked up once)."""
        uniq, inverse = np.unique(ids, return_inverse=True)
        found = np.fromiter((self._index_.get(v, -1) for v in uniq.tolist()), dtype=np.int64,
                            count=uniq.size)
        if (found < 0).any():
            bad = uniq.tolist()[int(np.flatnonzero(found < 0)[0])]
            raise UnknownNodeError(f"{type(self).__name__}: X names node {bad!r} (column "
                                   f"{self.node_column}), which is not in the fitted graph")
        return found[inverse.reshape(-1)]

    def _build(self, ids: np.ndarray, F: np.ndarray, y: np.ndarray, graph: nx.Graph,
               lam: float) -> GTVModel:
        where = type(self).__name__
        # d = p K for the softmax loss (w_i is the (p, K) matrix flattened in C order)
        model = GTVModel(graph, F.shape[1] * self._n_outputs(),
                         penalty=_penalty(self.penalty, where), lam=lam)
        loss, options = self._loss_spec()
        if loss is SoftmaxLoss:  # d = p K != the number of columns: one loss per node
            model.set_losses({v: SoftmaxLoss(Fv, yv, **options)
                              for v, (Fv, yv) in _by_node(ids, F, y).items()})
        else:
            model.set_data(F, y, loss, node_index=ids, **options)
        return model

    def _solve(self, model: GTVModel) -> Any:
        where = type(self).__name__
        method = check_option(self.method, "method", METHODS, where=where)
        options = dict(self.solver_options or {})
        if method == "exact":
            return solve_exact(model, **options)
        return solve_primal_dual(model, **options)

    def _prepare(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, nx.Graph]:
        X, y = check_X_y(X, y, y_numeric=self._y_numeric)
        self.n_features_in_ = X.shape[1]
        y = self._encode(y)
        ids, F = self._split(X)
        graph = self._graph(ids)
        return ids, F, y, graph

    def _store(self, model: GTVModel, result: Any) -> None:
        self.model_ = model
        self.result_ = result
        self.nodes_ = np.empty(model.num_nodes, dtype=object)
        self.nodes_[:] = model.nodes
        self._index_ = {v: k for k, v in enumerate(model.nodes)}
        cert = getattr(result, "certificate", None)
        self.certified_gap_ = float(getattr(result, "gap", np.nan) if cert is None
                                    else cert.gap)
        W = np.asarray(result.weights, dtype=float)
        self.objective_ = float(model.objective(W))
        K = self._n_outputs()
        W = W.reshape(W.shape[0], -1, K) if K > 1 else W[:, :, None]
        if self.fit_intercept:
            coef, intercept = W[:, :-1, :], W[:, -1, :]
        else:
            coef, intercept = W, np.zeros((W.shape[0], K))
        self.coef_ = coef if K > 1 else coef[:, :, 0]
        self.intercept_ = intercept if K > 1 else intercept[:, 0]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without ``model_`` and ``result_`` (they hold compiled solver state); the
        coefficients, ``certified_gap_`` and ``objective_`` travel, so ``predict`` works after
        unpickling."""
        state = dict(super().__getstate__())
        state.pop("model_", None)
        state.pop("result_", None)
        return state

    def fit(self, X: Any, y: Any) -> _GTVBase:
        """Fit the node models by GTV minimization (16) at ``lam``.

        ``X``: ``(M, 1 + p)`` rows, column ``node_column`` the node label; ``y``: ``(M,)``.
        """
        where = type(self).__name__
        lam = check_scalar(self.lam, "lam", min_val=0.0, where=where)
        ids, F, y, graph = self._prepare(X, y)
        model = self._build(ids, F, y, graph, lam)
        self._store(model, self._solve(model))
        return self

    def _decision(self, X: Any) -> np.ndarray:
        """``x_r^T w_{i(r)} + b_{i(r)}``: ``(M,)``, or ``(M, K)`` for the softmax loss."""
        check_is_fitted(self, "coef_")
        X = check_array(X)
        if X.shape[1] != self.n_features_in_:
            raise DataError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                            f"expecting {self.n_features_in_} features as input (the node "
                            f"column {self.node_column} and the features)")
        ids, F = self._split(X)
        if self.fit_intercept:
            F = F[:, :-1]
        pos = self._positions(ids)
        if self.coef_.ndim == 3:
            return np.einsum("rp,rpk->rk", F, self.coef_[pos]) + self.intercept_[pos]
        return np.einsum("rp,rp->r", F, self.coef_[pos]) + self.intercept_[pos]


class GTVRegressor(RegressorMixin, _GTVBase):
    """Networked linear regression by GTV minimization (16) (module docstring).

    Parameters
    ----------
    graph : networkx.Graph or None
        The empirical graph (``A_e`` from the edge attribute ``weight``); None: the chain
        through the sorted node labels of the training rows.
    lam : float
        ``lambda >= 0`` of (16).
    penalty : {"norm2", "norm1", "norminf", "squared"} or Penalty
        ``phi`` (``"squared"``: ``||.||_2^2``, graph Laplacian smoothing).
    loss : {"squared", "huber", "absolute"}
        The node loss ``L_i`` as a mean over the node's rows (``(1/m_i) ||y - X w||^2`` for
        ``"squared"``, (39)).
    fit_intercept : bool
        Append a constant feature (one intercept per node, coupled by ``phi``).
    node_column : int
        The column of ``X`` holding each row's node label.
    method : {"exact", "primal_dual"}
        :func:`~gtvmodel.solve_exact` or Algorithm 1 (:func:`~gtvmodel.solve_primal_dual`).
    solver_options : dict or None
        Keyword arguments of that solver.

    Raises
    ------
    ParameterError
        In ``fit``: ``lam`` negative, infinite or NaN; ``penalty``, ``loss`` or ``method`` not
        one of the names above; ``node_column`` not an integer ``>= 0``; ``graph`` neither a
        ``networkx.Graph`` nor None.
    DataError
        In ``fit``: ``node_column`` not a column of ``X``; no feature column left (only the
        node column and ``fit_intercept=False``).  In ``predict``: ``X`` with another number
        of columns than in ``fit``.
    UnknownNodeError
        A row of ``X`` names a node label that is not a node of ``graph`` (``fit``) or of the
        fitted model (``predict``).
    SolverError
        The solver rejects ``solver_options`` or fails (:func:`~gtvmodel.solve_exact`).
    ValueError
        scikit-learn's checks: ``X`` or ``y`` with NaN or inf entries (``check_X_y``);
        ``predict`` before ``fit`` (``NotFittedError``).

    Examples
    --------
    Two nodes on an edge, each with its own line ``y = a x``; column 0 is the node:

    >>> import networkx as nx, numpy as np
    >>> from gtvmodel.sklearn import GTVRegressor
    >>> X = np.array([[0, 1.0], [0, 2.0], [1, 1.0], [1, 2.0]])
    >>> y = np.array([1.0, 2.0, 3.0, 6.0])
    >>> est = GTVRegressor(nx.path_graph(2), lam=0.0, fit_intercept=False).fit(X, y)
    >>> np.round(est.coef_, 6).tolist(), np.round(est.predict([[1, 3.0]]), 6).tolist()
    ([[1.0], [3.0]], [9.0])
    """

    _y_numeric = True

    def __init__(self, graph: nx.Graph | None = None, lam: float = 1.0, *,
                 penalty: Any = "norm2", loss: str = "squared", fit_intercept: bool = True,
                 node_column: int = 0, method: str = "exact",
                 solver_options: dict | None = None):
        super().__init__(graph, lam, penalty=penalty, fit_intercept=fit_intercept,
                         node_column=node_column, method=method, solver_options=solver_options)
        self.loss = loss

    def _encode(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=float)

    def _n_outputs(self) -> int:
        return 1

    def _loss_spec(self) -> tuple[Any, dict[str, Any]]:
        return check_option(self.loss, "loss", REGRESSION_LOSSES,
                            where=type(self).__name__), {}

    def predict(self, X: Any) -> np.ndarray:
        """``x_r^T w_i + b_i`` for each row ``r`` at its node ``i`` (column ``node_column``)."""
        return self._decision(X)


class GTVClassifier(ClassifierMixin, _GTVBase):
    """Networked linear classification by GTV minimization (16): the logistic loss for two
    classes, the softmax loss (:class:`~gtvmodel.SoftmaxLoss`) for more (module docstring).

    ``classes_`` holds the sorted class labels; the binary model's ``w_i`` scores
    ``classes_[1]`` positive.

    Parameters
    ----------
    graph : networkx.Graph or None
        The empirical graph (``A_e`` from the edge attribute ``weight``); None: the chain
        through the sorted node labels of the training rows.
    lam : float
        ``lambda >= 0`` of (16).
    penalty : {"norm2", "norm1", "norminf", "squared"} or Penalty
        ``phi`` (``"squared"``: ``||.||_2^2``, graph Laplacian smoothing).
    fit_intercept : bool
        Append a constant feature (one intercept per node, coupled by ``phi``); with ``K > 2``
        classes one intercept per node and class.
    node_column : int
        The column of ``X`` holding each row's node label.
    method : {"exact", "primal_dual"}
        :func:`~gtvmodel.solve_exact` or Algorithm 1 (:func:`~gtvmodel.solve_primal_dual`).
    solver_options : dict or None
        Keyword arguments of that solver.

    Raises
    ------
    ParameterError
        In ``fit``: ``lam`` negative, infinite or NaN; ``penalty`` or ``method`` not one of
        the names above; ``node_column`` not an integer ``>= 0``; ``graph`` neither a
        ``networkx.Graph`` nor None.
    DataError
        In ``fit``: ``y`` with a single class; ``node_column`` not a column of ``X``; no
        feature column left (only the node column and ``fit_intercept=False``).  In
        ``predict``: ``X`` with another number of columns than in ``fit``.
    UnknownNodeError
        A row of ``X`` names a node label that is not a node of ``graph`` (``fit``) or of the
        fitted model (``predict``).
    SolverError
        The solver rejects ``solver_options`` or fails (:func:`~gtvmodel.solve_exact`).
    ValueError
        scikit-learn's checks: ``X`` or ``y`` with NaN or inf entries (``check_X_y``);
        continuous targets (``check_classification_targets``); ``predict`` before ``fit``
        (``NotFittedError``).

    Examples
    --------
    >>> import networkx as nx, numpy as np
    >>> from gtvmodel.sklearn import GTVClassifier
    >>> X = np.array([[0, -1.0], [0, 1.0], [1, -1.0], [1, 1.0]])
    >>> clf = GTVClassifier(nx.path_graph(2), lam=0.1).fit(X, ["a", "b", "b", "a"])
    >>> clf.predict(X).tolist()  # node 1's labels are flipped: its own sign
    ['a', 'b', 'b', 'a']
    """

    _y_numeric = False

    def _encode(self, y: np.ndarray) -> np.ndarray:
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise DataError(f"{type(self).__name__}: y has one class ({self.classes_[0]!r}); "
                            "a classifier needs at least two")
        return codes.reshape(-1).astype(float)

    def _n_outputs(self) -> int:
        return 1 if self.classes_.size == 2 else int(self.classes_.size)

    def _loss_spec(self) -> tuple[Any, dict[str, Any]]:
        if self.classes_.size == 2:
            return "logistic", {}
        return SoftmaxLoss, {"n_classes": int(self.classes_.size)}

    def decision_function(self, X: Any) -> np.ndarray:
        """``x_r^T w_i + b_i``: ``(M,)`` (positive: ``classes_[1]``) or ``(M, K)``."""
        return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``(M, K)`` (the logistic / softmax link of the scores)."""
        t = self._decision(X)
        if t.ndim == 1:
            p = expit(t)
            return np.column_stack([1.0 - p, p])
        return softmax(t, axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row at its node."""
        t = self._decision(X)
        k = (t >= 0.0).astype(np.int64) if t.ndim == 1 else np.argmax(t, axis=1)
        return self.classes_[k]


# =====================================================================  cross-validation
def _folds(pos: np.ndarray, k: int, seed: Any) -> np.ndarray:
    """A fold index per row, balanced within every node: the rows of node ``i`` in a random
    order get folds ``o_i, o_i + 1, ...`` (mod ``k``) from a random offset ``o_i``, so every
    fold holds ``floor`` or ``ceil`` of ``m_i / k`` of each node's rows (one sort, no loop)."""
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(pos.size), pos))
    counts = np.bincount(pos)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(pos.size, dtype=np.int64)
    rank[order] = np.arange(pos.size) - starts[pos[order]]
    offset = rng.integers(0, k, size=counts.size)
    return (rank + offset[pos]) % k


def _by_node(ids: np.ndarray, F: np.ndarray, y: np.ndarray) -> dict[Any, tuple[Any, Any]]:
    """``{label: (F_i, y_i)}`` of rows (one sort and one split)."""
    uniq, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    cuts = np.cumsum(np.bincount(inverse, minlength=uniq.size))[:-1]
    return dict(zip(uniq.tolist(), zip(np.split(F[order], cuts), np.split(y[order], cuts),
                                       strict=True), strict=True))


def lam_scale(model: GTVModel) -> float:
    """A scale of ``lambda`` for ``model`` (the top of the CV estimators' default grid): the
    consensus threshold ``lambda_crit`` (:func:`gtvmodel.theory.consensus_threshold`) where
    it is defined and finite (a strongly convex pooled loss; a connected graph, or components
    whose gradients balance); otherwise (logistic and softmax losses, disconnected graphs)
    ``sum_i ||grad L_i(0)||_2 / min_e A_e``, a scale of the gradients the flows must carry (it
    bounds ``lambda_crit`` from above when the pooled minimizer is ``w_bar = 0`` and the
    penalty is ``||.||_2``; a grid end, not a threshold)."""
    try:
        crit = float(consensus_threshold(model))
    except UnsupportedError:
        crit = np.inf
    if np.isfinite(crit):
        return crit
    G = model.loss_gradients(np.zeros((model.num_nodes, model.dim)))
    weights = model.edge_weights
    return float(np.linalg.norm(G, axis=1).sum() / (weights.min() if weights.size else 1.0))


class _GTVCVMixin:
    """``lam`` chosen by K-fold cross-validation over one compiled path per fold."""

    def _lam_grid(self, model: GTVModel) -> tuple[np.ndarray, float]:
        where = type(self).__name__
        if isinstance(self.lams, (int, np.integer)) and not isinstance(self.lams, bool):
            count = check_int(int(self.lams), "lams", min_val=1, where=where)
            crit = lam_scale(model)
            ratio = check_scalar(self.lam_min_ratio, "lam_min_ratio", min_val=0.0,
                                 max_val=1.0, where=where)
            if ratio <= 0.0:
                raise ParameterError(f"{where}: lam_min_ratio must be > 0, got {ratio}")
            return crit * np.logspace(np.log10(ratio), 0.0, count), crit
        lams = np.asarray(self.lams, dtype=float)
        if lams.ndim != 1 or lams.size == 0 or not np.all(np.isfinite(lams)) or (lams < 0).any():
            raise ParameterError(f"{where}: lams must be an int or a non-empty 1-D sequence of "
                                 f"finite lambda >= 0, got {self.lams!r}")
        return lams, float("nan")

    def fit(self, X: Any, y: Any) -> Any:
        """Cross-validate ``lam`` over ``lams`` and refit on all rows at the best one.

        Fitted attributes beyond the plain estimator's: ``lam_`` (selected), ``lams_`` (the
        grid), ``lam_crit_`` (the grid's top, :func:`lam_scale`, when built from ``lams=L``; NaN
        for explicit ``lams``),
        ``cv_error_`` (``(cv, L)`` mean validation error over the nodes with held-out rows:
        MSE for regression, ``1 - accuracy`` for classification), ``mean_cv_error_`` (``(L,)``).
        Ties go to the larger ``lambda``.
        """
        where = type(self).__name__
        k = check_int(self.cv, "cv", min_val=2, where=where)
        ids, F, y, graph = self._prepare(X, y)
        full = self._build(ids, F, y, graph, 1.0)
        lams, crit = self._lam_grid(full)
        pos = full.empirical_graph.row_positions(ids, "X[:, node_column]")
        fold = _folds(pos, k, self.random_state)
        errors = np.full((k, lams.size), np.nan)
        options = dict(self.solver_options or {})
        method = check_option(self.method, "method", METHODS, where=where)
        for f in range(k):  # one compiled path per fold
            tr, va = fold != f, fold == f
            if not tr.any() or not va.any():
                continue
            model = self._build(ids[tr], F[tr], y[tr], graph, 1.0)
            path = lam_path(model, lams, method=method, certify=False,
                            validation=_by_node(ids[va], F[va], y[va]), **options)
            errors[f] = path.validation_error
        if not np.isfinite(errors).any():
            raise DataError(f"{where}: no fold has both training and held-out rows "
                            f"(cv={k}, {ids.size} rows)")
        mean = np.nanmean(errors, axis=0)
        best = np.flatnonzero(mean <= np.nanmin(mean) * (1 + 1e-12) + 1e-15)
        self.lam_ = float(lams[best[np.argmax(lams[best])]])
        self.lams_, self.lam_crit_, self.cv_error_, self.mean_cv_error_ = lams, crit, errors, mean
        full.lam = self.lam_
        self._store(full, self._solve(full))
        return self


class GTVRegressorCV(_GTVCVMixin, GTVRegressor):
    """:class:`GTVRegressor` with ``lam`` selected by K-fold cross-validation (validation MSE).

    Each node's rows are split into ``cv`` folds (every node keeps training rows where it has
    more than one); each fold solves one :func:`~gtvmodel.lam_path` (compiled once, ``lambda``
    a Parameter), and the refit at the selected ``lam_`` reuses nothing but the data.  ``lam``
    is not a parameter: it is chosen (``lam_``).

    Parameters
    ----------
    graph : networkx.Graph or None
        The empirical graph (``A_e`` from the edge attribute ``weight``); None: the chain
        through the sorted node labels of the training rows.
    lams : int or sequence of float
        An int ``L``: ``L`` log-spaced values from ``lam_min_ratio * lambda_crit`` to
        ``lambda_crit`` (``lam_scale`` of the full data: the consensus threshold of
        :func:`~gtvmodel.consensus_threshold`, above which the consensus solution is
        optimal, where it is finite); a sequence: the ``lambda >= 0`` values.
    lam_min_ratio : float
        The smallest grid value as a fraction of ``lambda_crit``, in ``(0, 1]``.
    cv : int
        Number of folds (``>= 2``).
    random_state : int, numpy Generator or None
        Seed of the per-node fold assignment (``numpy.random.default_rng``).
    penalty : {"norm2", "norm1", "norminf", "squared"} or Penalty
        ``phi`` (``"squared"``: ``||.||_2^2``, graph Laplacian smoothing).
    loss : {"squared", "huber", "absolute"}
        The node loss ``L_i`` as a mean over the node's rows (``"squared"``: (39)).
    fit_intercept : bool
        Append a constant feature (one intercept per node, coupled by ``phi``).
    node_column : int
        The column of ``X`` holding each row's node label.
    method : {"exact", "primal_dual"}
        The solver of every path point and of the refit: :func:`~gtvmodel.solve_exact` or
        Algorithm 1 (:func:`~gtvmodel.solve_primal_dual`).
    solver_options : dict or None
        Keyword arguments of that solver.

    Raises
    ------
    ParameterError
        In ``fit``: ``cv`` not an integer ``>= 2``; ``lams`` neither an int ``>= 1`` nor a
        non-empty 1-D sequence of finite values ``>= 0``; ``lam_min_ratio`` outside ``(0,
        1]``; ``penalty``, ``loss`` or ``method`` not one of the names above;
        ``node_column`` not an integer ``>= 0``; ``graph`` neither a
        ``networkx.Graph`` nor None.
    DataError
        In ``fit``: ``node_column`` not a column of ``X``; no feature column left;
        no fold with both training and held-out rows (e.g. fewer rows than needed).  In
        ``predict``: ``X`` with another number of columns than in ``fit``.
    UnknownNodeError
        A row of ``X`` names a node label that is not a node of ``graph`` (``fit``) or of the
        fitted model (``predict``).
    SolverError
        The solver rejects ``solver_options`` or fails.
    ValueError
        scikit-learn's checks: ``X`` or ``y`` with NaN or inf entries (``check_X_y``);
        ``predict`` before ``fit`` (``NotFittedError``).

    Examples
    --------
    Two nodes with the lines ``y = x`` and ``y = 3 x``: a small ``lambda`` predicts the
    held-out rows better than consensus:

    >>> import networkx as nx, numpy as np
    >>> from gtvmodel.sklearn import GTVRegressorCV
    >>> X = np.array([[0, 1.0], [0, 2.0], [0, 3.0], [0, 4.0],
    ...               [1, 1.0], [1, 2.0], [1, 3.0], [1, 4.0]])
    >>> y = np.array([1.0, 2.0, 3.0, 4.0, 3.0, 6.0, 9.0, 12.0])
    >>> est = GTVRegressorCV(nx.path_graph(2), lams=[1e-3, 10.0], cv=2,
    ...                      fit_intercept=False).fit(X, y)
    >>> est.lam_, np.round(est.coef_, 2).tolist()
    (0.001, [[1.0], [3.0]])
    """

    def __init__(self, graph: nx.Graph | None = None, *, lams: Any = 8,
                 lam_min_ratio: float = 1e-3, cv: int = 5, random_state: Any = 0,
                 penalty: Any = "norm2", loss: str = "squared", fit_intercept: bool = True,
                 node_column: int = 0, method: str = "exact",
                 solver_options: dict | None = None):
        # every parameter set as given, no other attribute (scikit-learn's clone contract;
        # ``lam`` is not a parameter here: it is chosen)
        self.graph, self.penalty, self.loss = graph, penalty, loss
        self.fit_intercept, self.node_column = fit_intercept, node_column
        self.method, self.solver_options = method, solver_options
        self.lams = lams
        self.lam_min_ratio = lam_min_ratio
        self.cv = cv
        self.random_state = random_state


class GTVClassifierCV(_GTVCVMixin, GTVClassifier):
    """:class:`GTVClassifier` with ``lam`` selected by K-fold cross-validation (validation
    error ``1 - accuracy``), folds and grid as in :class:`GTVRegressorCV`; ``lam`` is not a
    parameter: it is chosen (``lam_``).

    Parameters
    ----------
    graph : networkx.Graph or None
        The empirical graph (``A_e`` from the edge attribute ``weight``); None: the chain
        through the sorted node labels of the training rows.
    lams : int or sequence of float
        An int ``L``: ``L`` log-spaced values from ``lam_min_ratio * lambda_crit`` to
        ``lambda_crit`` (``lam_scale`` of the full data: the consensus threshold of
        :func:`~gtvmodel.consensus_threshold`, above which the consensus solution is
        optimal, where it is finite); a sequence: the ``lambda >= 0`` values.
    lam_min_ratio : float
        The smallest grid value as a fraction of ``lambda_crit``, in ``(0, 1]``.
    cv : int
        Number of folds (``>= 2``).
    random_state : int, numpy Generator or None
        Seed of the per-node fold assignment (``numpy.random.default_rng``).
    penalty : {"norm2", "norm1", "norminf", "squared"} or Penalty
        ``phi`` (``"squared"``: ``||.||_2^2``, graph Laplacian smoothing).
    fit_intercept : bool
        Append a constant feature (one intercept per node, coupled by ``phi``).
    node_column : int
        The column of ``X`` holding each row's node label.
    method : {"exact", "primal_dual"}
        The solver of every path point and of the refit: :func:`~gtvmodel.solve_exact` or
        Algorithm 1 (:func:`~gtvmodel.solve_primal_dual`).
    solver_options : dict or None
        Keyword arguments of that solver.

    Raises
    ------
    ParameterError
        In ``fit``: ``cv`` not an integer ``>= 2``; ``lams`` neither an int ``>= 1`` nor a
        non-empty 1-D sequence of finite values ``>= 0``; ``lam_min_ratio`` outside ``(0,
        1]``; ``penalty`` or ``method`` not one of the names above; ``node_column``
        not an integer ``>= 0``; ``graph`` neither a ``networkx.Graph`` nor None.
    DataError
        In ``fit``: ``y`` with a single class; ``node_column`` not a column of ``X``; no
        feature column left; no fold with both training and held-out rows (e.g. fewer rows
        than needed).  In ``predict``: ``X`` with another number of columns than in ``fit``.
    UnknownNodeError
        A row of ``X`` names a node label that is not a node of ``graph`` (``fit``) or of the
        fitted model (``predict``).
    SolverError
        The solver rejects ``solver_options`` or fails.
    ValueError
        scikit-learn's checks: ``X`` or ``y`` with NaN or inf entries (``check_X_y``);
        continuous targets (``check_classification_targets``); ``predict`` before ``fit``
        (``NotFittedError``).

    Examples
    --------
    Node 1's labels are node 0's flipped: a small ``lambda`` keeps the two rules apart:

    >>> import networkx as nx, numpy as np
    >>> from gtvmodel.sklearn import GTVClassifierCV
    >>> X = np.array([[0, -2.0], [0, -1.0], [0, 1.0], [0, 2.0],
    ...               [1, -2.0], [1, -1.0], [1, 1.0], [1, 2.0]])
    >>> y = ["a", "a", "b", "b", "b", "b", "a", "a"]
    >>> clf = GTVClassifierCV(nx.path_graph(2), lams=[1e-2, 100.0], cv=2).fit(X, y)
    >>> clf.lam_, clf.predict(X).tolist()
    (0.01, ['a', 'a', 'b', 'b', 'b', 'b', 'a', 'a'])
    """

    def __init__(self, graph: nx.Graph | None = None, *, lams: Any = 8,
                 lam_min_ratio: float = 1e-3, cv: int = 5, random_state: Any = 0,
                 penalty: Any = "norm2", fit_intercept: bool = True, node_column: int = 0,
                 method: str = "exact", solver_options: dict | None = None):
        self.graph, self.penalty = graph, penalty
        self.fit_intercept, self.node_column = fit_intercept, node_column
        self.method, self.solver_options = method, solver_options
        self.lams = lams
        self.lam_min_ratio = lam_min_ratio
        self.cv = cv
        self.random_state = random_state

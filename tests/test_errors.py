"""Every error of issue 2 item 5: the exception class from gtvmodel.errors and a message that
names the node, edge or argument at fault."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.errors import (
    ConstraintError,
    DataError,
    GraphError,
    GTVError,
    InfeasibleError,
    LossError,
    ParameterError,
    PenaltyError,
    SolverError,
    UnknownNodeError,
)


def model3(**kw) -> gm.GTVModel:
    G = nx.Graph([("a", "b"), ("b", "c")])
    return gm.GTVModel(G, 2, **kw)


def test_hierarchy():
    for cls in (GraphError, UnknownNodeError, DataError, LossError, ConstraintError,
                PenaltyError, ParameterError, InfeasibleError, SolverError):
        assert issubclass(cls, GTVError)


# ------------------------------------------------------------------ graph
def test_empty_graph():
    with pytest.raises(GraphError, match="no nodes"):
        gm.GTVModel(nx.Graph(), 2)


def test_self_loop_names_node():
    G = nx.Graph([("a", "b"), ("b", "b")])
    with pytest.raises(GraphError, match=r"self-loop at node 'b'"):
        gm.GTVModel(G, 1)


@pytest.mark.parametrize("w", [0.0, -1.0, np.nan, np.inf, None, "x"])
def test_bad_edge_weight_names_edge(w):
    G = nx.Graph([("a", "b"), ("b", "c")])
    G.edges["b", "c"]["weight"] = w
    with pytest.raises(GraphError, match=r"edge \('b', 'c'\)"):
        gm.GTVModel(G, 1)


def test_directed_and_multigraph_rejected():
    with pytest.raises(GraphError, match="undirected"):
        gm.GTVModel(nx.DiGraph([(0, 1)]), 1)
    with pytest.raises(GraphError, match="multigraph"):
        gm.GTVModel(nx.MultiGraph([(0, 1)]), 1)
    with pytest.raises(GraphError, match="networkx.Graph"):
        gm.GTVModel([(0, 1)], 1)


def test_bad_dim():
    with pytest.raises(DataError, match="dim"):
        gm.GTVModel(nx.path_graph(2), 0)


# ------------------------------------------------------------------ nodes
def test_unknown_node_everywhere():
    m = model3()
    for call in (lambda: m.var("z"), lambda: m.set_loss("z", gm.ZeroLoss()),
                 lambda: m.add_constraint("z", gm.NonNeg()), lambda: m.loss("z"),
                 lambda: m.index(["unhashable"])):
        with pytest.raises(UnknownNodeError, match=r"node .* is not in the graph"):
            call()
    sol = m.solve_exact()
    with pytest.raises(UnknownNodeError, match="node 'z'"):
        sol.weight("z")
    assert isinstance(UnknownNodeError("x"), KeyError)


# ------------------------------------------------------------------ data
@pytest.mark.parametrize("cls", [gm.SquaredLoss, gm.HuberLoss, gm.AbsoluteLoss])
def test_wrong_shapes_of_X_and_y(cls):
    with pytest.raises(DataError, match=rf"{cls.__name__}: y must have shape \(3,\)"):
        cls(np.ones((3, 2)), np.ones(4))
    with pytest.raises(DataError, match=rf"{cls.__name__}: X must be a 2-D"):
        cls(np.ones(3), np.ones(3))
    with pytest.raises(DataError, match=rf"{cls.__name__}: X must be a non-empty"):
        cls(np.ones((0, 2)), np.ones(0))
    with pytest.raises(DataError, match=rf"{cls.__name__}: X must be"):
        cls(np.ones((2, 2, 2)), np.ones(2))


def test_loss_dimension_mismatch_names_node():
    m = model3()
    with pytest.raises(DataError, match=r"node 'b'.*dimension 3.*d = 2"):
        m.set_loss("b", gm.SquaredLoss(np.ones((4, 3)), np.ones(4)))
    with pytest.raises(DataError, match=r"node 'a'.*dimension 1"):
        m.set_loss("a", gm.QuadraticLoss([1.0]))


def test_quadratic_loss_shape():
    with pytest.raises(DataError, match="QuadraticLoss: a must be a non-empty vector"):
        gm.QuadraticLoss(np.ones((2, 2)))
    with pytest.raises(DataError, match="QuadraticLoss: a must be a non-empty vector"):
        gm.QuadraticLoss([])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inf_in_data(bad):
    X = np.ones((3, 2))
    X[1, 0] = bad
    with pytest.raises(DataError, match=r"SquaredLoss: X contains NaN or inf \(first at index "
                                        r"\(1, 0\)\)"):
        gm.SquaredLoss(X, np.ones(3))
    y = np.ones(3)
    y[2] = bad
    with pytest.raises(DataError, match=r"LogisticLoss: y contains NaN or inf"):
        gm.LogisticLoss(np.ones((3, 2)), y)
    with pytest.raises(DataError, match=r"QuadraticLoss: a contains NaN or inf"):
        gm.QuadraticLoss([0.0, bad])
    with pytest.raises(DataError, match="Box: lo contains NaN"):
        gm.Box(np.nan, 1.0)
    with pytest.raises((DataError, PenaltyError), match=r"QuadForm: Q contains NaN or inf"):
        gm.QuadForm([[1.0, 0.0], [0.0, bad]])


def test_non_numeric_data():
    with pytest.raises(DataError, match="SquaredLoss: X is not numeric"):
        gm.SquaredLoss([["a", "b"]], [1.0])


@pytest.mark.parametrize("cls", [gm.LogisticLoss, gm.HingeLoss])
def test_labels_must_be_plus_minus_one(cls):
    with pytest.raises(DataError, match=rf"{cls.__name__}: .*labels must be -1 or \+1; "
                                        r"y\[1\] = 0"):
        cls(np.ones((3, 2)), [1.0, 0.0, -1.0])


def test_bad_regularization_and_huber_parameter():
    with pytest.raises(ParameterError, match="SquaredLoss: l1 must be finite and >= 0"):
        gm.SquaredLoss(np.ones((2, 1)), np.ones(2), l1=-1)
    with pytest.raises(ParameterError, match="QuadraticLoss: l2 must be finite and >= 0"):
        gm.QuadraticLoss([1.0], l2=np.inf)
    with pytest.raises(ParameterError, match="HuberLoss: M must be finite and > 0"):
        gm.HuberLoss(np.ones((2, 1)), np.ones(2), M=0)


def test_box_and_normball_bounds():
    with pytest.raises(DataError, match=r"Box: lo has shape \(2,\) but hi has shape \(3,\)"):
        gm.Box([0, 0], [1, 1, 1])
    with pytest.raises(DataError, match="Box: lo > hi"):
        gm.Box(1.0, 0.0)
    with pytest.raises(DataError, match="Box: lo must be a scalar or a vector"):
        gm.Box(np.zeros((2, 2)), 1.0)
    with pytest.raises(DataError, match="Box: bounds must be numeric"):
        gm.Box("x", 1.0)
    with pytest.raises(ParameterError, match="NormBall: radius must be finite and >= 0"):
        gm.NormBall(-1.0)
    with pytest.raises(DataError, match="NormBall: p must be >= 1"):
        gm.NormBall(1.0, p=0.5)
    m = model3()
    with pytest.raises(DataError, match=r"node 'c'.*Box.*dimension 3.*d = 2"):
        m.add_constraint("c", gm.Box([0, 0, 0], 1.0))


# ------------------------------------------------------------------ symbolic losses
def test_symbolic_loss_not_scalar():
    m = model3()
    with pytest.raises(LossError, match=r"node 'a': loss must be a scalar expression"):
        m.set_loss("a", cp.square(m.var("a")))


def test_symbolic_loss_not_convex_or_not_dcp():
    m = model3()
    x = m.var("b")
    with pytest.raises(LossError, match=r"node 'b': loss .* is not (DCP|convex)"):
        m.set_loss("b", -cp.sum_squares(x))
    with pytest.raises(LossError, match=r"node 'b': loss .* is not convex"):
        m.set_loss("b", cp.sqrt(cp.sum(x)))  # concave
    with pytest.raises(LossError, match=r"node 'b': loss .* is not DCP"):
        m.set_loss("b", cp.sqrt(cp.sum_squares(x)))  # concave of convex: not DCP


def test_symbolic_loss_uses_other_nodes_variable():
    m = model3()
    with pytest.raises(LossError, match=r"node 'a': loss may only use the node's own variable "
                                        r".*but it also uses"):
        m.set_loss("a", cp.sum_squares(m.var("a") - m.var("b")))
    y = cp.Variable(2, name="foreign")
    with pytest.raises(LossError, match=r"node 'c'.*foreign"):
        m.set_loss("c", cp.sum_squares(y))


def test_symbolic_loss_callable_errors():
    m = model3()
    with pytest.raises(LossError, match=r"node 'a': the loss callable raised"):
        m.set_loss("a", lambda x: x["bad index"])
    with pytest.raises(LossError, match=r"node 'a': the loss callable must return a CVXPY"):
        m.set_loss("a", lambda x: 3.0)
    with pytest.raises(LossError, match=r"node 'a': a loss must be"):
        m.set_loss("a", 3.0)


# ------------------------------------------------------------------ constraints
def test_non_dcp_constraint_names_node():
    m = model3()
    x = m.var("b")
    with pytest.raises(ConstraintError, match=r"node 'b': constraint .* is not DCP"):
        m.add_constraint("b", cp.sum_squares(x) >= 1)
    with pytest.raises(ConstraintError, match=r"node 'b': constraint may only use"):
        m.add_constraint("b", x == m.var("a"))
    with pytest.raises(ConstraintError, match=r"node 'b': the constraint callable raised"):
        m.add_constraint("b", lambda v: v["bad"])
    with pytest.raises(ConstraintError, match=r"node 'b': expected a CVXPY constraint"):
        m.add_constraint("b", lambda v: 1.0)
    with pytest.raises(ConstraintError, match=r"node 'b': a constraint must be"):
        m.add_constraint("b", "x >= 0")


def test_infeasible_node_constraints_name_the_node():
    m = model3()
    m.set_loss("a", gm.QuadraticLoss([1.0, 1.0]))
    m.add_constraint("c", gm.Box(1.0, 2.0))
    m.add_constraint("c", gm.NormBall(0.5))
    with pytest.raises(InfeasibleError, match=r"node\(s\) 'c'"):
        m.solve_exact()


def test_infeasible_symbolic_constraint_names_the_node():
    m = model3()
    x = m.var("b")
    m.add_constraint("b", cp.sum(x) >= 3)
    m.add_constraint("b", cp.norm(x, 2) <= 1)
    with pytest.raises(InfeasibleError, match=r"node\(s\) 'b'"):
        m.solve_exact()


def test_jointly_infeasible_constraints():
    """Each node feasible alone, the problem too (no coupling constraints): a symbolic loss
    whose domain excludes the constraint set is reported for its node."""
    m = model3()
    x = m.var("a")
    m.set_loss("a", -cp.sum(cp.log(x)))
    m.add_constraint("a", gm.Box(hi=-1.0))
    with pytest.raises(InfeasibleError, match=r"node\(s\) 'a'"):
        m.solve_exact()


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("lam", [-0.1, np.nan, np.inf, "big"])
def test_bad_lambda(lam):
    with pytest.raises(ParameterError, match="lam must be"):
        model3(lam=lam)
    m = model3()
    with pytest.raises(ParameterError, match="lam must be"):
        m.lam = lam


def test_quadform_not_symmetric_pd():
    with pytest.raises(PenaltyError, match="QuadForm: Q must be symmetric"):
        gm.QuadForm([[1.0, 0.5], [0.0, 1.0]])
    with pytest.raises(PenaltyError, match="QuadForm: Q must be positive definite"):
        gm.QuadForm([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(PenaltyError, match="QuadForm: Q is numerically singular|positive def"):
        gm.QuadForm([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(PenaltyError, match=r"QuadForm: Q must be a non-empty square matrix"):
        gm.QuadForm(np.ones((2, 3)))
    with pytest.raises(PenaltyError, match=r"QuadForm: Q has shape \(3, 3\) but the model has "
                                           r"d = 2"):
        model3(penalty=gm.QuadForm(np.eye(3)))


def test_bad_penalty_objects():
    with pytest.raises(PenaltyError, match="penalty must be a gtvmodel Penalty"):
        model3(penalty="norm2")
    with pytest.raises(PenaltyError, match="NormP: p must be >= 1"):
        gm.NormP(0.5)


# ------------------------------------------------------------------ solvers
def _small_conic_model() -> gm.GTVModel:
    rng = np.random.default_rng(0)
    m = model3(lam=0.3)
    for v in m.nodes:
        m.set_loss(v, gm.SquaredLoss(rng.normal(size=(4, 2)), rng.normal(size=4)))
    return m


def test_scs_with_too_few_iterations_raises_with_status():
    m = _small_conic_model()
    with pytest.raises(SolverError, match=r"SCS .*'optimal_inaccurate'") as info:
        m.solve_exact("SCS", max_iters=5)
    assert info.value.status == "optimal_inaccurate" and info.value.solver == "SCS"
    # accepting it explicitly returns the inaccurate result, labelled as such
    sol = m.solve_exact("SCS", max_iters=5, accept_inaccurate=True)
    assert sol.status == "optimal_inaccurate"


def test_osqp_on_a_conic_problem_raises():
    m = _small_conic_model()  # Norm2 penalty: second-order cones
    with pytest.raises(SolverError, match="OSQP solves only quadratic programs") as info:
        m.solve_exact("OSQP")
    assert info.value.solver == "OSQP" and info.value.status == "rejected"


def test_unknown_solver_and_bad_option():
    m = _small_conic_model()
    with pytest.raises(SolverError, match="solver 'NOSUCH' is not installed"):
        m.solve_exact("nosuch")
    with pytest.raises(SolverError, match="CLARABEL") as info:
        m.solve_exact(not_an_option=1)
    assert info.value.status is not None


def test_unbounded_symbolic_loss():
    m = model3()
    m.set_loss("a", cp.sum(m.var("a")))  # linear: unbounded below
    with pytest.raises(SolverError, match="unbounded") as info:
        m.solve_exact()
    assert "unbounded" in info.value.status


def test_bad_weights_for_objective():
    m = model3()
    with pytest.raises(DataError, match=r"weights must have shape \(3, 2\)"):
        m.objective(np.zeros((2, 2)))
    with pytest.raises(DataError, match="weights contains NaN or inf"):
        m.objective(np.full((3, 2), np.nan))

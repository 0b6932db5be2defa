"""The teaching plots of gtvmodel.plot (issue 13): drawn to Agg, checked through their artists."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.patches import FancyArrowPatch

import gtvmodel as gm
from gtvmodel import plot
from gtvmodel.errors import DataError, GraphError

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def path_model():
    """A path 0-1-2-3 with quadratic losses at 1, 1, -1, -1 (two clusters), solved exactly."""
    model = gm.GTVModel(nx.path_graph(4), dim=2, lam=0.2)
    for i, a in enumerate([(1, 0), (1, 0), (-1, 0), (-1, 0)]):
        model.set_loss(i, gm.QuadraticLoss(a))
    return model, model.solve_exact()


def _colorbars(ax):
    return [a for a in ax.figure.axes if a is not ax and a.get_label() == "<colorbar>"]


def _nodes_drawn(ax) -> int:
    return sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))


def test_graph_clusters_legend_and_node_count(path_model):
    model, _ = path_model
    ax = plot.graph(model, node_color=np.array([0, 0, 1, 1]), title="two clusters")
    assert _nodes_drawn(ax) == 4
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["cluster 0", "cluster 1"]
    assert not _colorbars(ax)
    assert ax.get_title() == "two clusters" and set(ax.pos) == set(model.nodes)


def test_graph_weight_coordinate_colorbar_and_seeded_layout(path_model):
    model, sol = path_model
    ax = plot.graph(model, node_color=sol.weights, coordinate=0, seed=3)
    bars = _colorbars(ax)
    assert len(bars) == 1 and bars[0].get_ylabel() == "w_i[0]"
    node_colls = [c for c in ax.collections if isinstance(c, PathCollection)]
    np.testing.assert_allclose(node_colls[0].get_array(), sol.weights[:, 0])
    again = plot.graph(model.graph, seed=3)  # a bare networkx graph, same seed: same layout
    for v in model.nodes:
        np.testing.assert_allclose(again.pos[v], ax.pos[v])


def test_graph_flow_arrows_follow_the_sign_convention(path_model):
    model, sol = path_model
    ax = plot.graph(model, edge_values=sol.flows, arrows=True, edge_label="|u_e[0]|")
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == model.num_edges
    # one colorbar for the edges, labelled as asked
    assert [b.get_xlabel() for b in _colorbars(ax)] == ["|u_e[0]|"]
    # node 0, 1 sit at w = +1-ish, nodes 2, 3 at -1-ish: the middle edge (1, 2) carries a
    # positive flow u_e = lam A_e (w_1 - w_2)/||.|| > 0, drawn from e+ = 1 to e- = 2
    mid = int(np.flatnonzero((model.edges == [1, 2]).all(axis=1))[0])
    assert sol.flows[mid, 0] > 0
    start, tip = arrows[mid]._posA_posB  # data coordinates of the arrow's tail and head
    np.testing.assert_allclose(start, ax.pos[1])
    np.testing.assert_allclose(tip, ax.pos[2])


def test_graph_edge_values_widths(path_model):
    model, _ = path_model
    ax = plot.graph(model, edge_values=np.array([1.0, 0.1, 1.0]))
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    widths = lines[0].get_linewidths()
    assert widths[1] < widths[0] == widths[2]


@pytest.mark.parametrize("kwargs, error, word", [
    ({"node_color": np.array([0, 1])}, DataError, "node_color"),
    ({"node_color": np.ones((4, 2)), "coordinate": 5}, DataError, "coordinate"),
    ({"edge_values": np.ones(7)}, DataError, "edge_values"),
    ({"arrows": True}, DataError, "arrows"),
    ({"arrows": "yes", "edge_values": np.ones(3)}, gm.ParameterError, "arrows"),
    ({"pos": {0: (0, 0)}}, DataError, "pos"),
    ({"seed": -1}, DataError, "seed"),
])
def test_graph_bad_input_names_the_argument(path_model, kwargs, error, word):
    model, _ = path_model
    with pytest.raises(error, match=word):
        plot.graph(model, **kwargs)


def test_graph_rejects_a_non_graph():
    with pytest.raises(GraphError, match="model_or_graph"):
        plot.graph([1, 2, 3])


def test_weights_scatter_marks_the_true_centres():
    W = np.array([[1.0, 0.9], [1.1, 1.0], [-1.0, 0.1], [-0.9, 0.0]])
    true = np.array([[1.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [-1.0, 0.0]])
    ax = plot.weights_scatter(W, true_weights=true, clusters=np.array([0, 0, 1, 1]))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["learnt w_i, cluster 0", "learnt w_i, cluster 1", "true w_bar"]
    centres = ax.collections[-1].get_offsets()
    assert len(centres) == 2  # one cross per distinct true vector
    assert ax.get_xlabel() == "w_i[0]" and ax.get_ylabel() == "w_i[1]"


@pytest.mark.parametrize("kwargs, word", [
    ({"dims": (0, 2)}, "dims"),
    ({"clusters": np.array([0.5, 1.0, 0.0, 1.0])}, "clusters"),
    ({"true_weights": np.ones((2, 3))}, "true_weights"),
])
def test_weights_scatter_bad_input(kwargs, word):
    with pytest.raises(DataError, match=word):
        plot.weights_scatter(np.zeros((4, 2)), **kwargs)


def test_recovery_report_and_sweep():
    data = gm.datasets.chain(n=3, eps=0.05, seed=0)
    model, part = data.model(), data.partition()
    reports = [gm.verify_recovery(model, part, lam=lam) for lam in (0.02, 0.05)]
    ax = plot.recovery(reports)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["bound (37), cluster 0", "measured, cluster 0",
                      "bound (37), cluster 1", "measured, cluster 1"]
    assert ax.get_xscale() == "log" and len(ax.lines) == 4
    measured = ax.lines[1].get_ydata()
    np.testing.assert_allclose(measured, [r.deviation[0] for r in reports])
    bars = plot.recovery(reports[0])
    assert len(bars.patches) == 4  # bound and measured for two clusters


def test_recovery_values_and_errors():
    ax = plot.recovery(np.array([[0.1, 0.2], [1.0, 2.0]]), np.array([[0.05, 0.1], [0.5, 1.0]]),
                       lam=[0.1, 1.0])
    assert len(ax.lines) == 4
    with pytest.raises(DataError, match="measured"):
        plot.recovery([0.1, 0.2])
    with pytest.raises(DataError, match="same shape"):
        plot.recovery([0.1, 0.2], [0.1])
    with pytest.raises(DataError, match="measured"):
        plot.recovery([0.1, 0.2], [0.1, -1.0])

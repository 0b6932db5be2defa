"""Issue 15, items 3-5: partitions, labels and edge weights in the forms people hold,
written from the user's side (the call a user writes, the message they read)."""

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.io import load_model


# ------------------------------------------------------------------ item 5: edge weights
def _similarity_graph():
    G = nx.path_graph(3)
    G.edges[0, 1]["similarity"] = 2.0
    G.edges[1, 2]["similarity"] = 0.5
    G.edges[0, 1]["weight"] = 7.0  # another attribute the user does not mean
    return G


def test_edge_weights_from_a_named_attribute(tmp_path):
    G = _similarity_graph()
    assert gm.GTVModel(G, dim=1, weight="similarity").edge_weights.tolist() == [2.0, 0.5]
    assert gm.GTVModel(G, dim=1).edge_weights.tolist() == [7.0, 1.0]  # default "weight"
    assert gm.GTVModel(G, dim=1, weight=None).edge_weights.tolist() == [1.0, 1.0]
    # as networkx reads it
    assert nx.laplacian_matrix(G, weight="similarity").toarray().tolist() == \
        gm.GTVModel(G, dim=1, weight="similarity").empirical_graph.laplacian().toarray().tolist()

    model = gm.GTVModel(G, dim=1, lam=0.3, weight="similarity")
    model.set_loss(0, gm.QuadraticLoss([1.0]))
    model.set_loss(2, gm.QuadraticLoss([-1.0]))
    model.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.edge_weights.tolist() == [2.0, 0.5]
    assert np.allclose(back.solve_exact().weights, model.solve_exact().weights, atol=1e-6)


def test_edge_weight_errors_name_the_attribute_and_the_edge():
    G = _similarity_graph()
    G.edges[1, 2]["similarity"] = -1.0
    with pytest.raises(gm.GraphError, match=r"edge \(1, 2\): weight A_e must be .*-1\.0.*"
                                            r"edge attribute 'similarity'"):
        gm.GTVModel(G, dim=1, weight="similarity")
    with pytest.raises(gm.GraphError, match="weight must be the name of an edge attribute"):
        gm.GTVModel(G, dim=1, weight=["similarity"])

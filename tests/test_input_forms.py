"""Issue 15, items 3-5: partitions, labels and edge weights in the forms people hold,
written from the user's side (the call a user writes, the message they read)."""

import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import theory as th
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


# ------------------------------------------------------------------ item 4: labels
X3 = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])


@pytest.mark.parametrize("cls", [gm.LogisticLoss, gm.HingeLoss])
def test_classification_labels_in_the_forms_people_hold(cls, tmp_path):
    pm = cls(X3, [1.0, -1.0, 1.0])
    for y in ([1, 0, 1], np.array([True, False, True]), [True, False, True],
              np.array([1, -1, 1], dtype=np.int8), np.array([[1], [0], [1]])):
        loss = cls(X3, y)
        assert loss.y.tolist() == [1.0, -1.0, 1.0]
        assert loss.value([0.3, -0.2]) == pm.value([0.3, -0.2])
    assert cls(X3, [0, 0, 0]).y.tolist() == [-1.0] * 3  # one class of {0, 1}
    assert cls(X3, [1, 1, 1]).y.tolist() == [1.0] * 3
    # the file stores the converted labels and reads them back
    model = gm.GTVModel(nx.path_graph(2), dim=2, lam=0.1)
    model.set_loss(0, cls(X3, [1, 0, 1], l2=0.1))
    model.set_loss(1, cls(X3, [False, True, True], l2=0.1))
    model.save(tmp_path / "c.npz")
    back = load_model(tmp_path / "c.npz")
    assert back.loss(0).y.tolist() == [1.0, -1.0, 1.0]
    assert back.loss(1).y.tolist() == [-1.0, 1.0, 1.0]


@pytest.mark.parametrize("cls", [gm.LogisticLoss, gm.HingeLoss])
def test_classification_labels_of_another_set_are_named(cls):
    with pytest.raises(gm.DataError, match=rf"{cls.__name__}: .*y\[2\] = 2: y holds the values "
                                           r"\{0, 1, 2\}"):
        cls(X3, [0, 1, 2])
    with pytest.raises(gm.DataError, match=r"y\[1\] = 0: y holds the values \{-1, 0, 1\}"):
        cls(X3, [1, 0, -1])


@pytest.mark.parametrize("cls", [gm.SquaredLoss, gm.AbsoluteLoss, gm.HuberLoss])
def test_regression_y_as_a_column(cls):
    y = np.array([1.0, 2.0, 0.0])
    column = cls(X3, y.reshape(-1, 1))
    assert column.y.shape == (3,) and column.value([0.5, -0.5]) == cls(X3, y).value([0.5, -0.5])
    with pytest.raises(gm.DataError, match=r"y must have shape \(3,\) or \(3, 1\).*got \(1, 3\)"):
        cls(X3, y.reshape(1, -1))
    with pytest.raises(gm.DataError, match=r"got \(3, 2\)"):
        cls(X3, np.ones((3, 2)))


# ------------------------------------------------------------------ item 3: partitions
def _barbell(labels=None):
    G = nx.barbell_graph(3, 0)  # triangles {0, 1, 2} and {3, 4, 5} joined by edge (2, 3)
    if labels is not None:
        G = nx.relabel_nodes(G, dict(enumerate(labels)))
    model = gm.GTVModel(G, dim=1)
    for i, a in enumerate([1.0, 1.2, 0.8, -1.0, -1.1, -0.9]):
        model.set_loss(model.nodes[i], gm.QuadraticLoss([a]))
    return model


def _reports(model, partition):
    """The three theory calls on one partition (a generator is consumed by one call: pass a
    function returning it)."""
    fresh = partition if callable(partition) else (lambda: partition)
    wc = th.check_well_connected(model, fresh(), 1.0)
    rec = th.verify_recovery(model, fresh(), 1.0)
    cg = th.cluster_graph(model, fresh())
    return ([(r.cluster, r.nodes, r.success, r.witness, round(r.margin, 12), r.bound)
             for r in wc],
            (rec.clustered, rec.success, {c: round(v, 8) for c, v in rec.deviation.items()},
             {c: round(v, 12) for c, v in rec.bound.items()}),
            (cg.nodes, cg.edge_weights.tolist()))


def test_partitions_in_the_forms_people_hold():
    model = _barbell()
    G = model.graph
    today = _reports(model, [[0, 1, 2], [3, 4, 5]])
    forms = [
        [0, 0, 0, 1, 1, 1],                                     # label array, node order
        np.array([0, 0, 0, 1, 1, 1]),                           # ... as numpy
        {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1},                   # node -> cluster id
        {0: [0, 1, 2], 1: {3, 4, 5}},                           # cluster id -> nodes
        (frozenset({0, 1, 2}), frozenset({3, 4, 5})),           # tuple of sets
        lambda: (set(c) for c in [(0, 1, 2), (3, 4, 5)]),       # generator of sets
        sorted(nx.community.louvain_communities(G, seed=1), key=min),
        sorted(nx.community.greedy_modularity_communities(G), key=min),
        lambda: nx.community.label_propagation_communities(G),  # networkx's generator
    ]
    for partition in forms:
        assert _reports(model, partition) == today, partition
    # any hashable cluster ids, kept in order of first appearance
    named = _reports(model, np.array(["left"] * 3 + ["right"] * 3))
    assert named == _reports(model, {"left": [0, 1, 2], "right": [3, 4, 5]})
    assert named[2][0] == ["left", "right"] and named[0][0][0] == "left"


def test_partition_forms_with_string_nodes_and_their_errors():
    model = _barbell(labels="abcdef")
    today = _reports(model, [["a", "b", "c"], ["d", "e", "f"]])
    assert _reports(model, ["x", "x", "x", "y", "y", "y"])[0][0][1:] == today[0][0][1:]
    assert _reports(model, {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "f": 1}) == today
    with pytest.raises(gm.PartitionError, match=r"partition \(a label array in node order\): "
                                                r"it has 5 entries for the 6 nodes"):
        th.check_well_connected(model, ["x", "x", "x", "y", "y"], 1.0)
    with pytest.raises(gm.PartitionError, match=r"partition \(a dict cluster id -> nodes\): "
                                                r"node 'c' appears in clusters 'p' and 'q'"):
        th.verify_recovery(model, {"p": ["a", "b", "c"], "q": ["c", "d", "e", "f"]}, 1.0)
    with pytest.raises(gm.PartitionError, match=r"partition \(a dict node -> cluster id\): "
                                                r"it misses 1 node\(s\): 'f'"):
        th.cluster_graph(model, {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1})
    with pytest.raises(gm.UnknownNodeError, match=r"node 'z' is not in the graph \(partition "
                                                  r"read as a list of clusters .*cluster 1\)"):
        th.check_well_connected(model, [{"a", "b", "c"}, {"d", "e", "f", "z"}], 1.0)
    with pytest.raises(gm.UnknownNodeError, match=r"node 'z' .*read as a dict node -> cluster"):
        th.check_well_connected(model, {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "z": 1}, 1.0)

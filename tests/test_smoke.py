import networkx as nx
import numpy as np

import gtvmodel as gm


def test_squared_norm2_closed_form_on_path(rng):
    """SquaredNorm2 + QuadraticLoss(y_i), d = 1: w = (2I + lam L)^{-1} 2y."""
    G = nx.path_graph(6)
    model = gm.GTVModel(G, 1, penalty=gm.SquaredNorm2(), lam=0.7)
    y = rng.normal(size=6)
    for i in range(6):
        model.set_loss(i, gm.QuadraticLoss([y[i]]))
    sol = model.solve_exact()
    L = model.empirical_graph.laplacian().toarray()
    expected = np.linalg.solve(2 * np.eye(6) + 0.7 * L, 2 * y)
    np.testing.assert_allclose(sol.weights.ravel(), expected, atol=1e-8)

from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    import networkx as nx
    import numpy as np
    from benchmark_utils import node_graph
    from sklearn.datasets import load_diabetes

    from gtvmodel.datasets import NetworkedData


class Dataset(BaseDataset):
    """scikit-learn's bundled diabetes data (442 patients, 10 features) as a networked dataset:
    patients sorted by age are dealt into ``nodes`` groups of consecutive ages, each node a
    linear regression of disease progression on the other 9 features (standardized) and a
    constant, nodes joined by a 3-NN graph of their mean data; no ground truth."""

    name = "diabetes-knn"
    requirements = ["pip:gtvmodel", "pip:scikit-learn"]
    parameters = {"nodes": [20], "seed": [0]}

    def get_data(self):
        Xall, yall = load_diabetes(return_X_y=True)
        order = np.argsort(Xall[:, 0], kind="stable")
        F = Xall[:, 1:]
        F = (F - F.mean(axis=0)) / F.std(axis=0)
        F = np.column_stack([F, np.ones(len(F))])
        y = (yall - yall.mean()) / yall.std()
        parts = np.array_split(order, self.nodes)
        X = {i: F[p] for i, p in enumerate(parts)}
        Y = {i: y[p] for i, p in enumerate(parts)}
        data = NetworkedData(nx.empty_graph(self.nodes), X, Y,
                             np.full((self.nodes, F.shape[1]), np.nan), np.zeros(self.nodes))
        rng = np.random.default_rng(self.seed)
        return dict(data=node_graph(data.split(0.2, seed=rng)))

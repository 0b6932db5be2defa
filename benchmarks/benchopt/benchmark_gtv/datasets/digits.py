from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from benchmark_utils import node_graph

    from gtvmodel import datasets


class Dataset(BaseDataset):
    """scikit-learn's 8x8 digits in two clusters of nodes, binary logistic at each node (the
    paper 001 VI-D stand-in, ``gtvmodel.datasets.digits``), nodes joined by a 3-NN graph of
    their mean images; the validation error is ``1 - accuracy`` on held-out images."""

    name = "digits"
    requirements = ["pip:gtvmodel"]
    parameters = {"nodes": [20], "seed": [0]}

    def get_data(self):
        return dict(data=node_graph(datasets.digits(nodes=self.nodes, seed=self.seed)))

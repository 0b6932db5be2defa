from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from gtvmodel import datasets


class Dataset(BaseDataset):
    """Chain of two clusters, paper 001 VI-B (``gtvmodel.datasets.chain``)."""

    name = "chain"
    requirements = ["pip:gtvmodel"]
    parameters = {"n": [10], "m": [5], "seed": [0]}

    def get_data(self):
        return dict(data=datasets.chain(n=self.n, eps=0.1, m=self.m, sigma=0.5, seed=self.seed))

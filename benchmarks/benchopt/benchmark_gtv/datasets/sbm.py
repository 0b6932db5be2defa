from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from gtvmodel import datasets


class Dataset(BaseDataset):
    """Stochastic block model, paper 001 VI-A (``gtvmodel.datasets.sbm``)."""

    name = "sbm"
    requirements = ["pip:gtvmodel"]
    parameters = {"size": [20], "m": [5], "sigma": [0.5], "seed": [0]}

    def get_data(self):
        return dict(data=datasets.sbm(sizes=(self.size, self.size), m=self.m,
                                       sigma=self.sigma, seed=self.seed))

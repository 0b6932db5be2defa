from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from gtvmodel import datasets


class Dataset(BaseDataset):
    """Star with 49 leaves, paper 001 VI-C (``gtvmodel.datasets.star``)."""

    name = "star"
    requirements = ["pip:gtvmodel"]
    parameters = {"leaves": [49], "m": [5], "seed": [0]}

    def get_data(self):
        return dict(data=datasets.star(leaves=self.leaves, m=self.m, d=2, sigma=0.5,
                                       seed=self.seed))

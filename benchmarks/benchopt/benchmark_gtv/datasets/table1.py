from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from gtvmodel import datasets


class Dataset(BaseDataset):
    """SBM 50 + 50 with d = 100, paper 001 Table I (``gtvmodel.datasets.table1``)."""

    name = "table1"
    requirements = ["pip:gtvmodel"]
    parameters = {"size": [50], "seed": [0]}

    def get_data(self):
        return dict(data=datasets.table1(sizes=(self.size, self.size), seed=self.seed))

from benchopt import BaseDataset, safe_import_context

with safe_import_context() as import_ctx:
    from benchmark_utils import node_graph

    from gtvmodel import datasets


class Dataset(BaseDataset):
    """Synthetic weather stations (the paper 001 VI-E stand-in, ``gtvmodel.datasets.weather``),
    stations joined by a 3-NN graph of their mean data."""

    name = "weather"
    requirements = ["pip:gtvmodel"]
    parameters = {"stations": [40], "days": [28], "seed": [0]}

    def get_data(self):
        data = datasets.weather(stations=self.stations, days=self.days, seed=self.seed)
        return dict(data=node_graph(data))

"""The data and the local training of the Flower App, in numpy (no flwr here).

Every client is one node of paper 001 VI-A's stochastic block model (two clusters of 4 nodes,
``m = 20`` samples each, noise ``sigma = 0.5``), regenerated from the same seed on the server
and on each client; the global model is one linear ``w`` (``d = 2``) trained on the squared
loss (39) ``L_i(w) = (1/m) ||y_i - X_i w||^2``.
"""

from __future__ import annotations

import numpy as np

from gtvmodel import datasets

#: The run configuration of pyproject.toml's [tool.flwr.app.config], used where the context
#: has none (``flwr.simulation.run_simulation`` called from Python).
DEFAULTS = {"num-server-rounds": 5, "local-epochs": 5, "lr": 0.1, "proximal-mu": 0.0,
            "lam": 0.05, "dataset-seed": 0}


def run_config(context) -> dict:
    """The context's run configuration over :data:`DEFAULTS`."""
    return {**DEFAULTS, **dict(context.run_config)}


def load_data(seed: int = 0) -> datasets.NetworkedData:
    """The networked dataset shared by the server and the clients."""
    return datasets.sbm(sizes=(4, 4), p_in=0.8, p_out=0.2, m=20, sigma=0.5, seed=seed)


def node_data(data: datasets.NetworkedData, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``partition_id``'s local dataset ``(X_i, y_i)``."""
    node = data.nodes[partition_id]
    return data.X[node], data.y[node]


def local_train(w: np.ndarray, X: np.ndarray, y: np.ndarray, epochs: int, lr: float,
                mu: float = 0.0) -> tuple[np.ndarray, float]:
    """``epochs`` gradient steps on ``L_i(v) + (mu / 2) ||v - w||^2`` from ``v = w`` (FedProx's
    local problem; ``mu = 0``: FedAvg's); returns ``v`` and ``L_i(v)``."""
    v = w.copy()
    for _ in range(epochs):
        grad = 2.0 * X.T @ (X @ v - y) / len(y) + mu * (v - w)
        v = v - lr * grad
    return v, float(np.mean((y - X @ v) ** 2))

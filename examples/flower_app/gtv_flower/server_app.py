"""The ServerApp: FedAvg (or FedProx with ``proximal-mu > 0``) whose centralized evaluation is
gtvmodel's certified gaps of the global model on the GTV and consensus targets."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, FedProx

from gtv_flower.task import load_data, run_config
from gtvmodel.flower import CertifiedEvaluator

app = ServerApp()


def certified_evaluate_fn(evaluator: CertifiedEvaluator):
    """Flower's message-API ``evaluate_fn(server_round, arrays) -> MetricRecord``."""
    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord(evaluator.metrics(server_round, arrays.to_numpy_ndarrays()))
    return evaluate


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = run_config(context)
    data = load_data(int(cfg["dataset-seed"]))
    evaluator = CertifiedEvaluator(data, lam=float(cfg["lam"]))
    mu = float(cfg["proximal-mu"])
    strategy = FedProx(proximal_mu=mu) if mu > 0 else FedAvg()
    strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(data.dim)]),
                   num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"])}),
                   evaluate_fn=certified_evaluate_fn(evaluator))
    print(f"{'round':>5} {'gap consensus':>14} {'gap GTV':>10} {'MSE':>8}")
    for row in evaluator.history:
        print(f"{int(row['round']):>5} {row['gap_consensus']:>14.4g} {row['gap_gtv']:>10.4g} "
              f"{row['mse']:>8.4g}")

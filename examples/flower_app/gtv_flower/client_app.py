"""The ClientApp: local FedAvg/FedProx epochs on the client's node, and its local loss."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from gtv_flower.task import load_data, local_train, node_data, run_config

app = ClientApp()


def _local(context: Context) -> tuple[np.ndarray, np.ndarray]:
    data = load_data(int(run_config(context)["dataset-seed"]))
    return node_data(data, int(context.node_config["partition-id"]))


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local epochs from the global model; the proximal weight comes from FedProx's config."""
    X, y = _local(context)
    w = msg.content["arrays"].to_numpy_ndarrays()[0]
    cfg = run_config(context)
    mu = float(msg.content["config"].get("proximal-mu", cfg["proximal-mu"]))
    v, loss = local_train(w, X, y, int(cfg["local-epochs"]), float(cfg["lr"]), mu)
    content = RecordDict({"arrays": ArrayRecord([v]),
                          "metrics": MetricRecord({"train_loss": loss,
                                                   "num-examples": len(y)})})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The global model's local loss ``L_i(w)``."""
    X, y = _local(context)
    w = msg.content["arrays"].to_numpy_ndarrays()[0]
    loss = float(np.mean((y - X @ w) ** 2))
    return Message(content=RecordDict({"metrics": MetricRecord({"eval_loss": loss,
                                                                "num-examples": len(y)})}),
                   reply_to=msg)

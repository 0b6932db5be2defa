"""Algorithm 1 of paper 001 (preconditioned primal-dual message passing), one module per part:

* :mod:`~gtvmodel.primal_dual.prox` -- the node updates PU (32), grouped for vectorized
  execution (exact fast paths and the general CVXPY path);
* :mod:`~gtvmodel.primal_dual.updates` -- the iteration's formulas (32), (33) and the
  message-passing view (:class:`NodeUpdate`, :class:`EdgeUpdate`);
* :mod:`~gtvmodel.primal_dual.compiled` -- the edge update DU (33) as one compiled (numba)
  pass per iteration, and the choice of ``NumpyBackend(kernel=...)``;
* :mod:`~gtvmodel.primal_dual.steps` -- the steps ``T``, ``Sigma`` with
  ``||Sigma^{1/2} D T^{1/2}|| <= 1`` (:class:`FixedSteps`, :class:`ResidualBalancing`);
* :mod:`~gtvmodel.primal_dual.result` -- :class:`History` and :class:`PrimalDualResult`;
* :mod:`~gtvmodel.primal_dual.loop` -- the loop with the stopping rule on the certified gap
  (34) that every backend runs (:class:`~gtvmodel.primal_dual.loop.Run`, the backends'
  public internal interface);
* :mod:`~gtvmodel.primal_dual.algorithm` -- the entry point :func:`solve_primal_dual`;
* :mod:`~gtvmodel.primal_dual.backends` -- where it runs: ``backend=`` a name or an object,
  :class:`NumpyBackend` (this process);
* :mod:`~gtvmodel.primal_dual.torch_backend` -- the same loop on PyTorch tensors on a CPU or
  a GPU (:class:`TorchBackend`, ``backend=gm.TorchBackend(device="cuda")``);
* :mod:`~gtvmodel.primal_dual.sharding`, :mod:`~gtvmodel.primal_dual.shards` and
  :mod:`~gtvmodel.primal_dual.distributed` -- the same loop on Dask, each shard of nodes on one
  worker (:class:`DaskBackend`, :func:`solve_distributed`), its
  certificates summed from per-shard partial sums (:mod:`~gtvmodel.certificates.
  sharded_certificate`).
"""

from .algorithm import solve_primal_dual
from .backends import Backend, NumpyBackend
from .distributed import Checkpoint, DaskBackend, DistributedResult, solve_distributed
from .result import History, PrimalDualResult
from .steps import FixedSteps, ResidualBalancing, initial_scale, step_norm
from .torch_backend import TorchBackend, solve_torch
from .updates import EdgeUpdate, NodeUpdate

__all__ = ["solve_primal_dual", "PrimalDualResult", "ResidualBalancing", "FixedSteps",
           "NodeUpdate", "EdgeUpdate", "History", "step_norm", "initial_scale",
           "solve_distributed", "DistributedResult", "Checkpoint", "solve_torch", "Backend",
           "NumpyBackend", "TorchBackend", "DaskBackend"]

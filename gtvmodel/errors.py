"""Exception hierarchy of gtvmodel.

Every error the package raises on bad input or a failed solve derives from
:class:`GTVError`, so ``except gtvmodel.GTVError`` catches all of them.  Messages
name the node, edge or argument at fault and say what is wrong.
"""

from __future__ import annotations


class GTVError(Exception):
    """Base class of every gtvmodel exception."""


class GraphError(GTVError, ValueError):
    """The empirical graph is unusable (empty, self-loops, bad edge weights)."""


class UnknownNodeError(GTVError, KeyError):
    """A node label that is not in the model's graph."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class DataError(GTVError, ValueError):
    """Node data (X, y, a, Q, bounds) with a wrong shape, NaN/inf or bad labels."""


class LossError(GTVError, ValueError):
    """A node loss that is not a scalar convex DCP expression in the node's own variable."""


class ConstraintError(GTVError, ValueError):
    """A node constraint that is not DCP or does not involve only the node's variable."""


class PenaltyError(GTVError, ValueError):
    """A bad edge penalty (for example a QuadForm matrix that is not symmetric PD)."""


class PartitionError(GTVError, ValueError):
    """A bad node partition: a node missing or repeated, an empty cluster, or a cluster on
    which a requested condition cannot hold (e.g. a disconnected induced subgraph)."""


class ParameterError(GTVError, ValueError):
    """A bad scalar parameter such as a negative or non-finite lambda."""


class InfeasibleError(GTVError):
    """The problem (usually a node's constraints) has no feasible point."""


class SolverError(GTVError, RuntimeError):
    """A numerical solver failed or reported an inaccurate status.

    ``status`` holds the solver's status string, ``solver`` its name.
    """

    def __init__(self, message: str, status: str | None = None, solver: str | None = None):
        super().__init__(message)
        self.status = status
        self.solver = solver


class UnsupportedError(GTVError, NotImplementedError):
    """An operation that is not defined for the given loss, penalty or constraint."""


class FileFormatError(GTVError, ValueError):
    """A problem or solution file that cannot be read (missing arrays, bad shapes, version)."""


class AccuracyWarning(UserWarning):
    """An exact solve was accepted at a looser accuracy than gtvmodel's reference tolerances
    (the solver could not reach them); ``Solution.info["tolerances"]`` says which."""


class DistributedError(GTVError, RuntimeError):
    """A distributed run (``solve_primal_dual(backend="dask")``) cannot go on: a worker could
    not build its shard (e.g. without gtvmodel installed), or every worker is gone
    (:class:`WorkerLostError`).  A closed or invalid client is a :class:`ParameterError`."""


class WorkerLostError(DistributedError):
    """Every worker of a distributed run is gone: ``checkpoint`` holds the last checkpoint
    (:class:`gtvmodel.primal_dual.distributed.Checkpoint`: iteration, weights, flows, step
    rule), so that nothing computed is lost (``warm_start=err.checkpoint`` resumes)."""

    def __init__(self, message: str, checkpoint: object = None):
        super().__init__(message)
        self.checkpoint = checkpoint

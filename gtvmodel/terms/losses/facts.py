"""The facts a loss states about itself: :class:`LossFacts`, one frozen record per loss.

A loss class gives its default record as ``class_facts``; an instance whose facts depend on
its data (a lower bound from its labels) overrides :meth:`Loss.facts
<gtvmodel.terms.losses.base.Loss.facts>`.  The engines read the facts by their historical
names (``base_smooth``, ``lower_bound``, ``has_data``, ``exact_prox``, ``isotropic_prox``,
``piecewise_quadratic``) through :class:`fact`, a read-only descriptor that answers from the
class record on the class (``batch.cls.base_smooth``) and from the instance's record on an
instance (``loss.lower_bound``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LossFacts", "fact", "FACT_ALIASES"]


@dataclass(frozen=True)
class LossFacts:
    """What an (unregularized) loss ``L`` guarantees; every field errs on the safe side.

    Attributes
    ----------
    differentiable : bool
        ``L`` is differentiable on its whole domain (a gradient exists everywhere; the
        certificate's and the recovery's dual points are read off it).
    lipschitz_gradient : bool
        ``grad L`` is globally Lipschitz (a finite global smoothness constant ``beta``
        exists, Theorem 2 (12)); implies ``differentiable``.  False for an exponential
        row (Poisson): its Hessian bounds then raise instead of answering ``inf``.
    lower_bound : float
        A lower bound of ``inf_w L(w)`` (``-inf``: unknown).
    has_data : bool
        Whether the loss carries data (False only for the zero loss).
    exact_prox : bool
        Whether :meth:`LossBatch.prox <gtvmodel.terms.losses.batch.LossBatch.prox>` has an
        exact path for the class (without ``l1`` unless ``isotropic_prox``).
    isotropic_prox : bool
        The prox is coordinate-separable after a scaling: it accepts ``l1`` and composes
        exactly with box and (without ``l1``) norm-ball projections.
    piecewise_quadratic : bool
        The row conjugate is quadratic on an interval (squared, Huber, hinge, absolute):
        PU (32) with ``l1`` and boxes is exact by the dual active-set method.
    quadratic : bool
        ``L`` is a quadratic function (a constant Hessian: squared, quadratic and zero
        losses), so an exact solver may state it by its Hessian and gradient at 0.
    """

    differentiable: bool = True
    lipschitz_gradient: bool = True
    lower_bound: float = 0.0
    has_data: bool = True
    exact_prox: bool = False
    isotropic_prox: bool = False
    piecewise_quadratic: bool = False
    quadratic: bool = False

    def __post_init__(self) -> None:
        if self.lipschitz_gradient and not self.differentiable:
            raise ValueError("LossFacts: a Lipschitz gradient needs differentiable=True")


#: The historical class-flag names and the :class:`LossFacts` field each reads.
FACT_ALIASES: dict[str, str] = {
    "base_smooth": "differentiable", "lower_bound": "lower_bound", "has_data": "has_data",
    "exact_prox": "exact_prox", "isotropic_prox": "isotropic_prox",
    "piecewise_quadratic": "piecewise_quadratic"}


class fact:  # noqa: N801 - a descriptor named like the attribute kind it makes
    """Read-only view of one :class:`LossFacts` field: on the class, its ``class_facts``; on
    an instance, its ``facts`` (assigning raises :class:`AttributeError`)."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.name = field

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        record = owner.class_facts if obj is None else obj.facts
        return getattr(record, self.field)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self.name} is a fact of {type(obj).__name__} "
                             f"(LossFacts.{self.field}): set it in class_facts or facts")

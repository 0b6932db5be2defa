"""Certified duality gaps (34) for any candidate (:func:`gtvmodel.certify`).

- :mod:`~gtvmodel.certificates.certificate`: :func:`certify` and :class:`Certificate`;
- :mod:`~gtvmodel.certificates.value`: the dual value ``D(U)`` as a rigorous lower bound;
- :mod:`~gtvmodel.certificates.repair`: dual-feasibility repair, flows from weights;
- :mod:`~gtvmodel.certificates.dual_side`: the certificate's repaired flows ``U'`` and ``D(U')``;
- :mod:`~gtvmodel.certificates.radii`: certified radii ``R_i`` of the residual charges;
- :mod:`~gtvmodel.certificates.kinds`: per-node facts computed once per model;
- :mod:`~gtvmodel.certificates.sharded_certificate`: the same certificate summed from per-shard
  partial sums (Algorithm 1 on Dask);
- :mod:`~gtvmodel.certificates.device_certificate` and
  :mod:`~gtvmodel.certificates.device_subspace`: the same certificate on another array library's
  tensors (Algorithm 1's ``device=`` backend).

Every certificate (host, sharded, device) lives here, above the formulations
(:mod:`gtvmodel.duality`) and below both engines that certify their iterates
(:mod:`gtvmodel.primal_dual`, :mod:`gtvmodel.solve`).
"""

from .certificate import Certificate, certify
from .radii import certified_radii
from .repair import flows_from_weights, project_flows, repair_flows
from .value import dual_value

__all__ = ["Certificate", "certify", "dual_value", "repair_flows", "flows_from_weights",
           "project_flows", "certified_radii"]

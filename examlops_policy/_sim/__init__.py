"""Trace replay: a cluster trace placed one pod at a time against a fleet, and the figures of it.

``trace`` reads traces (openb CSV); ``replay`` runs the openb protocol through a ``Placer`` (the
one seam the placement path plugs into) and computes the published allocation figure.
"""

from __future__ import annotations

from examlops_policy._sim.replay import PackerPlacer, Placer, PlacerFactory, ReplayResult, allocation_curve, arrival, expected_workload, packer_placer, replay, tune
from examlops_policy._sim.trace import POD_KINDS, TracePod, read_openb_nodes, read_openb_pods

__all__ = [
    "POD_KINDS",
    "PackerPlacer",
    "Placer",
    "PlacerFactory",
    "ReplayResult",
    "TracePod",
    "allocation_curve",
    "arrival",
    "expected_workload",
    "packer_placer",
    "read_openb_nodes",
    "read_openb_pods",
    "replay",
    "tune",
]

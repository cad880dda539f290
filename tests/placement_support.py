"""Placing a workload through the façade in a test: what the decision must be, and one pool's verdict.

``placed`` and ``refused`` place a workload named by the test and assert the outcome (naming the
refusal's reason where a placement was expected); ``placed_in`` registers a pool first and asserts
the workload lands there; ``granted`` is such a placement with node allocations written in by hand
(for the executors, which read them).
"""

from __future__ import annotations

import dataclasses

from examlops_policy.hardware import Hardware
from examlops_policy.model import NodeAllocation, Placement, Pool, PoolVerdict, Rejection, Workload
from examlops_policy.views import DecisionRecord


def place_workload(hw: Hardware, name: str, accelerator: str = "nvidia", **kw: object) -> DecisionRecord:
    """``hw.place`` of ``Workload(name, accelerator, **kw)``, whatever it decides."""
    return hw.place(Workload(name, accelerator=accelerator, **kw))  # type: ignore[arg-type]


def placed_with_id(hw: Hardware, name: str, accelerator: str = "nvidia", **kw: object) -> tuple[str, Placement]:
    """Place ``Workload(name, accelerator, **kw)``, which must be placed: its decision id and placement."""
    record = place_workload(hw, name, accelerator, **kw)
    assert isinstance(record.decision, Placement), getattr(record.decision, "reason", record.decision)
    return record.id, record.decision


def placed(hw: Hardware, name: str, accelerator: str = "nvidia", **kw: object) -> Placement:
    """Place ``Workload(name, accelerator, **kw)``, which must be placed: the placement."""
    return placed_with_id(hw, name, accelerator, **kw)[1]


def refused(hw: Hardware, name: str, accelerator: str = "nvidia", **kw: object) -> Rejection:
    """Place ``Workload(name, accelerator, **kw)``, which must be refused: the rejection."""
    record = place_workload(hw, name, accelerator, **kw)
    assert isinstance(record.decision, Rejection), record.decision
    return record.decision


def verdict(decision: Placement | Rejection, pool: str) -> PoolVerdict:
    """The decision's verdict on ``pool``."""
    return next(v for v in decision.verdicts if v.pool == pool)


def placed_in(hw: Hardware, pool: Pool, workload: Workload) -> DecisionRecord:
    """Register ``pool`` (``hw.apply``) and place ``workload``, which must be placed there: its record."""
    hw.apply([pool])
    record = hw.place(workload)
    assert isinstance(record.decision, Placement) and record.decision.pool == pool.name, record.decision
    return record


def granted(hw: Hardware, pool: Pool, workload: Workload, *allocations: NodeAllocation) -> DecisionRecord:
    """A real placement on ``pool`` (``placed_in``) with the node ``allocations`` written in by hand."""
    record = placed_in(hw, pool, workload)
    return dataclasses.replace(record, decision=dataclasses.replace(record.decision, allocations=tuple(allocations)))

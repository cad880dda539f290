"""Which pools a decision asks when they would start the workload, asked before the write lock.

Only candidates are asked: the pools no check but capacity and the wait denies (``Judged.
candidates``). A workload with ``max_wait``, a ``deadline`` or ``optimize: earliest`` needs every
candidate's estimate to be decided; any other workload asks for the chosen pool's only, which the
decision records (its selection does not depend on it). Each estimate comes from whoever owns the
pool (``estimates.gather.StartEstimator``, an ``Estimator``: Slurm itself, a Kubernetes cluster, the reviewed
provisioning table of the same policy snapshot, or the layer's own account of free capacity),
judged at one decision time, the estimator's clock when asking.

This waits on schedulers: the façade calls it after the policy's verdicts and before
``_core.commit.place`` takes the write lock, never under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from examlops_policy.model import START_OBJECTIVES, Capacity, Placement
from examlops_policy.tables import Tables
from examlops_policy._core.engine import Prepared
from examlops_policy._core.quota import NO_USE, QuotaUse
from examlops_policy._core.waiting import Starts

if TYPE_CHECKING:
    from examlops_policy.app.ports import Estimator


def needs_every_candidate(prepared: Prepared) -> bool:
    """Whether selection itself depends on the estimates (a wait limit, the earliest start or
    completion)."""
    judged = prepared.judged
    return judged.workload.wait.any or judged.objective in START_OBJECTIVES


def wanted(
    prepared: Prepared, capacities: Sequence[Capacity], tables: Tables, capacities_digest: str | None = None, quota: QuotaUse = NO_USE
) -> list[int]:
    """The fleet indexes of the pools to ask: every candidate, or the pool selection chooses
    without estimates while the projects hold ``quota`` and the pools that tie with it (the node
    packer chooses among them, ``joint.choose``, and one whose start was not asked could not be
    chosen over a scheduler's estimate); none for a workload rejected outright or placed nowhere."""
    judged = prepared.judged
    if not judged.judged or judged.workload.rejection is not None:
        return []
    if needs_every_candidate(prepared):
        return judged.candidates
    first = prepared.decide(capacities, tables, capacities_digest=capacities_digest, quota=quota)
    if not isinstance(first, Placement):
        return []
    return [judged.fleet.index[first.pool], *(judged.fleet.index[name] for name in first.tied if name != first.pool)]


def gather(estimator: Estimator, prepared: Prepared, capacities: Sequence[Capacity], pools: Sequence[int]) -> Starts:
    """The start estimates of ``pools`` (fleet indexes) for the prepared workload, at the decision's
    time (the estimator's clock now): each for the grant the pool gives with what it can place now
    (``capacities``, aligned with the fleet; ``Judged.grant_for``), and whether that fits now."""
    from examlops_policy.estimates.gather import EstimateRequest

    judged = prepared.judged
    now = estimator.now()
    requests = []
    for index in pools:
        # The grant the pool gives now (a larger covering share where the smallest has no room);
        # with no room for any, its smallest, which it would give once room frees.
        given = judged.grant_for(index, capacities[index])
        grant = judged.verdict(index).grant if given is None else given
        requests.append(EstimateRequest(judged.fleet.entries[index].pool, prepared.workload, grant, given is not None))
    found = estimator.estimate(requests, now) if requests else []
    return Starts(now, {r.pool.name: e for r, e in zip(requests, found)})


def starts_for(
    estimator: Estimator,
    prepared: Prepared,
    capacities: Sequence[Capacity],
    tables: Tables,
    capacities_digest: str | None = None,
    *,
    quota: QuotaUse = NO_USE,
) -> Starts:
    """What a decision over ``capacities`` (the projects holding ``quota``) is made with: the
    estimates of the pools it asks."""
    return gather(estimator, prepared, capacities, wanted(prepared, capacities, tables, capacities_digest, quota))


__all__ = ["gather", "needs_every_candidate", "starts_for", "wanted"]

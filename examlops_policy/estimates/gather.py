"""Each candidate pool's start estimate, from whoever can know it.

Which source a pool gets (``StartEstimator.source_of``): the first scheduler's asker that claims
it (a ``PoolAsker``: ``SlurmAsker``, ``KubernetesAsker``; a scheduler registered in
``app.schedulers`` with a ``StartAsking`` gives its own), else the table or the free capacity:

* an HPC pool served by a Slurm partition: Slurm, asked for exactly what ``submit`` would ask
  (``executors.slurm.grant_request`` with the workload's walltime as ``--time``), all Slurm pools
  of a decision in one bounded, concurrent batch. Whether the layer's own account has room does
  not matter: Slurm knows the jobs the layer did not place. No Slurm to ask, or a controller that
  does not answer: no estimate (never "now").
* a cloud pool on a Kubernetes cluster the estimator was given (a pool that lists its nodes by
  their names): Kubernetes (now when the grant fits, else unknown with the queue in front).
* any other cloud pool: capacity is provisioned on demand, so the provisioning table; a pool
  whose devices are all taken has nothing to provision (no estimate).
* any other pool (HPC without a scheduler to ask): now when the grant fits, else no estimate.

Off by default, ``own_capacity`` (``Hardware.estimate_from_own_capacity``, ``--own-capacity-estimate``):
where Slurm or a Kubernetes cluster gives no estimate (it cannot be asked, or does not say) and the
grant fits the pool's free capacity by the layer's own account, the estimate is "now" (source
``now``), its detail naming the scheduler's own reason. The layer does not see work it did not
place: the start is an assumption, said so.

This waits on schedulers: call it before the state's write lock is taken, never under it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from examlops_policy.errors import ExaError
from examlops_policy.estimates import Source, StartEstimate, start_now, unknown, utc_now
from examlops_policy.estimates.table import ProvisioningTable
from examlops_policy.model import Grant, NodeAllocation, Pool, Workload

if TYPE_CHECKING:
    # Imported where a pool of theirs is asked about: a fleet without Slurm or Kubernetes pools
    # imports neither client.
    from examlops_policy.estimates.kubernetes import KubernetesEstimator
    from examlops_policy.estimates.slurm import SlurmEstimator
    from examlops_policy.executors.gres import GresTable
    from examlops_policy.executors.slurm import SlurmRequest


@dataclass(frozen=True)
class EstimateRequest:
    """One candidate: ``pool``, the ``workload`` and the ``grant`` the pool would give it (its
    ``allocations`` where nodes were chosen), and whether the grant fits the pool's free capacity
    now by the layer's own account (``fits_now``)."""

    pool: Pool
    workload: Workload
    grant: Grant
    fits_now: bool
    allocations: tuple[NodeAllocation, ...] = ()


class PoolAsker(Protocol):
    """Who is asked about the pools one scheduler serves (its ``source``): which pools it
    ``claims``, and their estimates, one per request, in order, at the decision's time ``now``.
    A scheduler (``app.schedulers``) gives one; ``StartEstimator`` asks each about the pools it
    claims, the first that claims a pool, and no name of a scheduler is tested here."""

    @property
    def source(self) -> Source: ...

    def claims(self, pool: Pool) -> bool: ...

    def estimate_many(self, requests: Sequence[EstimateRequest], now: datetime) -> list[StartEstimate]: ...


class SlurmAsker:
    """Slurm, for a pool a Slurm partition serves: asked for exactly what ``submit`` would ask
    (``executors.slurm.grant_request``, the GRES table ``gres`` read when first needed), all of a
    decision's Slurm pools in one batch. ``slurm`` None: no Slurm to ask (no estimate, said so)."""

    source: Source = "slurm"

    def __init__(
        self, slurm: SlurmEstimator | Callable[[], SlurmEstimator] | None = None, gres: GresTable | Callable[[], GresTable] | None = None
    ) -> None:
        self._slurm: SlurmEstimator | None = None
        self._make_slurm: Callable[[], SlurmEstimator] | None = None
        if callable(slurm):
            self._make_slurm = slurm
        else:
            self._slurm = slurm
        self._gres = gres

    @property
    def slurm(self) -> SlurmEstimator | None:
        """Who Slurm pools are asked through (None: no Slurm to ask)."""
        if self._slurm is None and self._make_slurm is not None:
            self._slurm, self._make_slurm = self._make_slurm(), None
        return self._slurm

    @property
    def gres(self) -> GresTable:
        from examlops_policy.executors.gres import GresTable, load_gres_table

        if not isinstance(self._gres, GresTable):
            self._gres = load_gres_table() if self._gres is None else self._gres()
        return self._gres

    def claims(self, pool: Pool) -> bool:
        return pool.target == "hpc" and pool.partition is not None

    def request(self, request: EstimateRequest) -> SlurmRequest:
        """What ``submit`` would ask Slurm for this candidate (SpecError when Slurm cannot be asked
        for it exactly)."""
        from examlops_policy.executors.slurm import grant_request

        return grant_request(request.workload, request.grant, request.allocations, request.pool, self.gres)

    def estimate_many(self, requests: Sequence[EstimateRequest], now: datetime) -> list[StartEstimate]:
        results: list[StartEstimate | None] = [None] * len(requests)
        asked: list[tuple[int, str, SlurmRequest]] = []
        for index, request in enumerate(requests):
            name = request.pool.name
            if self._slurm is None and self._make_slurm is None:
                results[index] = unknown(name, self.source, "no Slurm to ask (no Slurm estimator was given)", now)
                continue
            try:
                asked.append((index, name, self.request(request)))
            except ExaError as exc:
                results[index] = unknown(name, self.source, f"Slurm cannot be asked for this grant: {exc}", now)
        if asked and self.slurm is not None:
            for (index, _, _), estimate in zip(asked, self.slurm.estimate_many([(name, r) for _, name, r in asked])):
                results[index] = estimate
        return [r if r is not None else unknown(requests[i].pool.name, self.source, "no answer", now) for i, r in enumerate(results)]


class SlurmAsking:
    """How Slurm is asked, for the life of one ``Hardware``: one Slurm estimator (made when a Slurm
    pool is first asked about, its answers cached across policy snapshots), asked with the GRES
    table of each snapshot (``asker(root)``: the policy folder's, read when first needed). The
    registry (``app.schedulers``) names it as how Slurm is asked unless told otherwise."""

    def __init__(self) -> None:
        self._slurm: SlurmEstimator | None = None

    def _estimator(self) -> SlurmEstimator:
        if self._slurm is None:
            from examlops_policy.estimates.slurm import SlurmEstimator

            self._slurm = SlurmEstimator()
        return self._slurm

    def asker(self, root: Path) -> PoolAsker:
        def gres() -> GresTable:
            from examlops_policy.executors.gres import load_gres_table

            return load_gres_table(root)

        return SlurmAsker(self._estimator, gres=gres)


class KubernetesAsker:
    """A Kubernetes cluster, for a cloud pool it serves (one that lists its nodes by name, as
    ``discover kubernetes`` registers them): now when the grant fits, else unknown with the queue
    in front (``estimates.kubernetes``)."""

    source: Source = "kubernetes"

    def __init__(self, kubernetes: KubernetesEstimator) -> None:
        self.kubernetes = kubernetes

    def claims(self, pool: Pool) -> bool:
        return pool.target == "cloud" and pool.nodes_named

    def estimate_many(self, requests: Sequence[EstimateRequest], now: datetime) -> list[StartEstimate]:
        return self.kubernetes.estimate_many([(r.pool, r.fits_now) for r in requests])


class StartEstimator:
    """The estimates of a decision's candidates. Each pool is asked of the first of ``askers``
    that claims it (a scheduler's); the others: a cloud pool from the table (``table``:
    ``ProvisioningTable.load()`` unless given), any other pool from the free capacity.

    ``askers`` left out: Slurm (``slurm``: given, or how to make it when a Slurm pool is first
    asked about; None: a Slurm pool has no estimate), then the Kubernetes cluster ``kubernetes``
    when given."""

    def __init__(
        self,
        *,
        slurm: SlurmEstimator | Callable[[], SlurmEstimator] | None = None,
        kubernetes: KubernetesEstimator | None = None,
        table: ProvisioningTable | None = None,
        gres: GresTable | Callable[[], GresTable] | None = None,
        clock: Callable[[], datetime] = utc_now,
        own_capacity: bool = False,
        askers: Sequence[PoolAsker] | None = None,
    ) -> None:
        if askers is None:
            askers = [SlurmAsker(slurm, gres), *([KubernetesAsker(kubernetes)] if kubernetes is not None else [])]
        self.askers: tuple[PoolAsker, ...] = tuple(askers)
        self.kubernetes = next((a.kubernetes for a in self.askers if isinstance(a, KubernetesAsker)), None)
        self.table = table if table is not None else ProvisioningTable.load()
        self._clock = clock
        # Where a scheduler gives no estimate: now when the grant fits by the layer's own account.
        self.own_capacity = own_capacity

    def now(self) -> datetime:
        """The estimator's clock: the time a decision asking it judges its estimates at."""
        return self._clock()

    def asker_of(self, pool: Pool) -> PoolAsker | None:
        """The scheduler's asker that claims ``pool`` (None: no scheduler is asked about it)."""
        return next((a for a in self.askers if a.claims(pool)), None)

    def source_of(self, pool: Pool) -> Source:
        """Who is asked about ``pool`` (see the module's description)."""
        asker = self.asker_of(pool)
        if asker is not None:
            return asker.source
        return "table" if pool.target == "cloud" else "now"

    def estimate(self, requests: Sequence[EstimateRequest], now: datetime | None = None) -> list[StartEstimate]:
        """One estimate per request, in order; ``now``: the decision's time (the clock's by
        default), what a start "now" and a table's delay are counted from."""
        now = now or self._clock()
        results: list[StartEstimate | None] = [None] * len(requests)
        asked: dict[int, list[int]] = {}  # asker (its index) -> the requests it is asked about
        for index, request in enumerate(requests):
            pool = request.pool
            asker = self.asker_of(pool)
            if asker is not None:
                asked.setdefault(self.askers.index(asker), []).append(index)
            elif pool.target == "cloud":
                results[index] = (
                    self.table.estimate(pool, now) if request.fits_now
                    else unknown(pool.name, "table", "every device of the pool is taken: there is nothing to provision until some are released", now)
                )  # fmt: skip
            else:
                results[index] = (
                    start_now(pool.name, now) if request.fits_now
                    else unknown(pool.name, "now", "no room for the grant now, and no scheduler to ask when there will be", now)
                )  # fmt: skip
        for which, indexes in asked.items():
            for index, estimate in zip(indexes, self.askers[which].estimate_many([requests[i] for i in indexes], now)):
                results[index] = estimate
        found = [r if r is not None else unknown(requests[i].pool.name, self.source_of(requests[i].pool), "no answer", now) for i, r in enumerate(results)]
        if self.own_capacity:
            schedulers = {a.source for a in self.askers}
            found = [_own(e, now) if e.at is None and e.source in schedulers and r.fits_now else e for e, r in zip(found, requests)]
        return found


def _own(unanswered: StartEstimate, now: datetime) -> StartEstimate:
    """The layer's own account instead of a scheduler's missing estimate: the grant fits now."""
    why = f"free capacity now by this layer's own account, which cannot see work it did not place: starts now ({unanswered.source} gave no estimate: {unanswered.reason})"
    return StartEstimate(unanswered.pool, now, "now", now, f"now: {why}", facts={"instead_of": unanswered.source, "unanswered": unanswered.reason})


__all__ = ["EstimateRequest", "KubernetesAsker", "PoolAsker", "SlurmAsker", "SlurmAsking", "StartEstimator"]

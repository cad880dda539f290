"""Each candidate pool's start estimate, from whoever can know it.

Which source a pool gets (``StartEstimator.source_of``):

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
from typing import TYPE_CHECKING

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


class StartEstimator:
    """The estimates of a decision's candidates. Sources not given are not asked: a Slurm pool
    without ``slurm`` (given, or how to make it when a Slurm pool is first asked about) has no
    estimate, a cloud pool without ``kubernetes`` is read from the table (``table``:
    ``ProvisioningTable.load()`` unless given)."""

    def __init__(
        self,
        *,
        slurm: SlurmEstimator | Callable[[], SlurmEstimator] | None = None,
        kubernetes: KubernetesEstimator | None = None,
        table: ProvisioningTable | None = None,
        gres: GresTable | Callable[[], GresTable] | None = None,
        clock: Callable[[], datetime] = utc_now,
        own_capacity: bool = False,
    ) -> None:
        self._slurm: SlurmEstimator | None = None
        self._make_slurm: Callable[[], SlurmEstimator] | None = None
        if callable(slurm):
            self._make_slurm = slurm
        else:
            self._slurm = slurm
        self.kubernetes = kubernetes
        self.table = table if table is not None else ProvisioningTable.load()
        # The GRES table is read when a Slurm pool is first asked about (given, or how to read it).
        self._gres = gres
        self._clock = clock
        # Where a scheduler gives no estimate: now when the grant fits by the layer's own account.
        self.own_capacity = own_capacity

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

    def now(self) -> datetime:
        """The estimator's clock: the time a decision asking it judges its estimates at."""
        return self._clock()

    def source_of(self, pool: Pool) -> Source:
        """Who is asked about ``pool`` (see the module's description)."""
        if pool.target == "hpc" and pool.partition is not None:
            return "slurm"
        if pool.target == "cloud":
            return "kubernetes" if self.kubernetes is not None and pool.nodes_named else "table"
        return "now"

    def slurm_request(self, request: EstimateRequest) -> SlurmRequest:
        """What ``submit`` would ask Slurm for this candidate (SpecError when Slurm cannot be asked
        for it exactly)."""
        from examlops_policy.executors.slurm import grant_request

        return grant_request(request.workload, request.grant, request.allocations, request.pool, self.gres)

    def estimate(self, requests: Sequence[EstimateRequest], now: datetime | None = None) -> list[StartEstimate]:
        """One estimate per request, in order; ``now``: the decision's time (the clock's by
        default), what a start "now" and a table's delay are counted from."""
        now = now or self._clock()
        results: list[StartEstimate | None] = [None] * len(requests)
        slurm_items: list[tuple[int, str, SlurmRequest]] = []
        kube_items: list[tuple[int, Pool, bool]] = []
        for index, request in enumerate(requests):
            pool = request.pool
            source = self.source_of(pool)
            if source == "slurm":
                if self._slurm is None and self._make_slurm is None:
                    results[index] = unknown(pool.name, "slurm", "no Slurm to ask (no Slurm estimator was given)", now)
                    continue
                try:
                    slurm_items.append((index, pool.name, self.slurm_request(request)))
                except ExaError as exc:
                    results[index] = unknown(pool.name, "slurm", f"Slurm cannot be asked for this grant: {exc}", now)
            elif source == "kubernetes":
                kube_items.append((index, pool, request.fits_now))
            elif source == "table":
                results[index] = (
                    self.table.estimate(pool, now) if request.fits_now
                    else unknown(pool.name, "table", "every device of the pool is taken: there is nothing to provision until some are released", now)
                )  # fmt: skip
            else:
                results[index] = (
                    start_now(pool.name, now) if request.fits_now
                    else unknown(pool.name, "now", "no room for the grant now, and no scheduler to ask when there will be", now)
                )  # fmt: skip
        if slurm_items and self.slurm is not None:
            for (index, _, _), estimate in zip(slurm_items, self.slurm.estimate_many([(name, r) for _, name, r in slurm_items])):
                results[index] = estimate
        if kube_items and self.kubernetes is not None:
            for (index, _, _), estimate in zip(kube_items, self.kubernetes.estimate_many([(p, f) for _, p, f in kube_items])):
                results[index] = estimate
        found = [r if r is not None else unknown(requests[i].pool.name, self.source_of(requests[i].pool), "no answer", now) for i, r in enumerate(results)]
        if self.own_capacity:
            found = [_own(e, now) if e.at is None and e.source in ("slurm", "kubernetes") and r.fits_now else e for e, r in zip(found, requests)]
        return found


def _own(unanswered: StartEstimate, now: datetime) -> StartEstimate:
    """The layer's own account instead of a scheduler's missing estimate: the grant fits now."""
    why = f"free capacity now by this layer's own account, which cannot see work it did not place: starts now ({unanswered.source} gave no estimate: {unanswered.reason})"
    return StartEstimate(unanswered.pool, now, "now", now, f"now: {why}", facts={"instead_of": unanswered.source, "unanswered": unanswered.reason})


__all__ = ["EstimateRequest", "StartEstimator"]

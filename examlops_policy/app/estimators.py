"""Who decisions ask when pools would start a workload (``DecisionCycle.estimator``).

A start estimator given to ``Hardware`` is asked as it is. Otherwise one is made per policy
snapshot: each registered scheduler that is asked unless told otherwise (its ``StartAsking``, from
the registry: Slurm, where a pool names a partition, one Slurm estimator for the life of the
object, its answers cached across snapshots), the provisioning table of that snapshot for cloud pools, the free
capacity for the rest; a Kubernetes cluster only when given (``ask_kubernetes``); "now" from the
layer's own account only when told (``own_capacity``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from examlops_policy.errors import StateError

if TYPE_CHECKING:
    from examlops_policy._reviewed import PolicySnapshot
    from examlops_policy.app.ports import StartAsking
    from examlops_policy.estimates.gather import PoolAsker, StartEstimator
    from examlops_policy.estimates.kubernetes import KubernetesEstimator, PendingSource


class Estimators:
    """The start estimator of each policy snapshot (see the module)."""

    def __init__(self, given: StartEstimator | None = None) -> None:
        self._given = given
        self._asking: list[StartAsking] | None = None  # each registered scheduler's, made when first asked
        self._kubernetes: KubernetesEstimator | None = None
        self._own_capacity = False
        self._made: tuple[PolicySnapshot, StartEstimator] | None = None
        self._closing: list[Callable[[], None]] = []  # what was opened here (a cluster connection)

    def of(self, policy: PolicySnapshot) -> StartEstimator:
        """The estimator of decisions made under ``policy``."""
        if self._given is not None:
            return self._given
        if self._made is None or self._made[0] is not policy:
            from examlops_policy.app import schedulers
            from examlops_policy.estimates.gather import KubernetesAsker, StartEstimator
            from examlops_policy.estimates.table import ProvisioningTable

            if self._asking is None:
                self._asking = schedulers.SCHEDULERS.askings()
            askers: list[PoolAsker] = [a.asker(policy.root) for a in self._asking]
            if self._kubernetes is not None:
                askers.append(KubernetesAsker(self._kubernetes))
            made = StartEstimator(askers=askers, table=ProvisioningTable.from_tables(policy.tables), own_capacity=self._own_capacity)
            self._made = (policy, made)
        return self._made[1]

    def ask_kubernetes(self, cluster: PendingSource | None = None, *, kubeconfig: str | None = None, context: str | None = None) -> None:
        """From now on, ask a Kubernetes cluster when the cloud pools it serves would start a
        workload: those that list their nodes by name, as ``discover kubernetes`` registers them.
        Now when the grant fits, else no estimate, with the pods that wait there in front of it
        (``estimates.kubernetes``); a cluster that does not answer gives no estimate; never the
        provisioning table. Slurm pools and the rest are asked as before.

        ``cluster``: a ``KubernetesCluster`` (or anything with ``pending_pods()``), else the one
        ``kubeconfig`` and ``context`` name (default: ``$KUBECONFIG``, else ``~/.kube/config``, and
        its current context), connected now (the file is read; the server is first asked by a
        decision) and closed with this Hardware. SpecError for a kubeconfig that cannot be used;
        StateError when this Hardware was given an estimator of its own (give it the cluster)."""
        from examlops_policy.estimates.kubernetes import KubernetesEstimator

        if self._given is not None:
            raise StateError("this Hardware was given its own start estimator: give that estimator the Kubernetes cluster instead")
        if cluster is None:
            from examlops_policy.executors.kubernetes_api import KubernetesCluster

            connected = KubernetesCluster.connect(kubeconfig, context)
            self._closing.append(connected.close)
            cluster = connected
        self._kubernetes = KubernetesEstimator(cluster)
        self._made = None

    def own_capacity(self, on: bool) -> None:
        """From now on (off by default), where Slurm or a Kubernetes cluster gives no start estimate
        (it cannot be asked, or does not say) and the grant fits the pool's free capacity by this
        layer's own account, take "now" as the estimate (source ``now``; its detail names the
        scheduler's reason). The layer does not see work it did not place, so this is an
        assumption: for a scheduler that is down or not installed here while its pools are known to
        be this layer's. StateError when this Hardware was given an estimator of its own (set
        ``own_capacity`` on it instead)."""
        if self._given is not None:
            raise StateError("this Hardware was given its own start estimator: set own_capacity on that estimator instead")
        self._own_capacity = on
        self._made = None

    def close(self) -> None:
        while self._closing:
            self._closing.pop()()


"""Start estimates for pools a Kubernetes cluster serves: now, or unknown, with the queue in front.

Kubernetes estimates no start times: kube-scheduler binds a pod when a node has room, and a
queue manager in front of it (Kueue) does not estimate waits either. What the cluster does show is
its queue: pods that wait for a node (phase Pending, not bound) and what they ask for. So:

* the grant fits the pool's free capacity now (the caller's own account, node by node): the
  scheduler binds it within seconds: the start is now (source ``kubernetes``; the detail names any
  pods that wait for the same resource there);
* it does not fit: no estimate, and the reason says what waits in front of it (how many pods ask
  for the pool's device resource where the pool is, the oldest since when). When capacity frees
  is the layer's own admission queue's business, not a guess made here;
* the API server does not answer: no estimate, with the server's words.

A pending pod competes with a pool when it asks for the pool's device resources (any resource of
the accelerator's vendor domain, e.g. ``nvidia.com/gpu`` or ``nvidia.com/mig-1g.10gb``; CPU for a
``cpu`` pool, without a device) and its node selector does not rule the pool out (its region label,
host name, or the vendor's product label). Read once per batch of pools (one list call), cached for
``ttl_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Final, Protocol

from examlops_policy.errors import ExaError
from examlops_policy.estimates import StartEstimate, iso, unknown, utc_now
from examlops_policy.executors.kubernetes import HOSTNAME_LABEL, PRODUCT_LABELS, PRODUCTS, REGION_LABEL, RESOURCES
from examlops_policy.model import JSONObject, Pool

if TYPE_CHECKING:
    from examlops_policy.executors.kubernetes_api import PendingPod

DEFAULT_TTL_S: Final = 10.0


class PendingSource(Protocol):
    """What the estimator reads: the cluster's pods that wait for a node."""

    def pending_pods(self) -> Sequence[PendingPod]: ...


def _domain(resource: str) -> str:
    return resource.split("/", 1)[0] + "/" if "/" in resource else ""


def competes(pod: PendingPod, pool: Pool) -> bool:
    """True when ``pod`` waits for what ``pool`` offers, where the pool is."""
    if pool.accelerator == "cpu":
        devices = {_domain(r) for r in RESOURCES.values()}
        asks = "cpu" in pod.requests and not any(_domain(k) in devices for k in pod.requests)
    else:
        vendor = _domain(RESOURCES[pool.accelerator])
        asks = any(k.startswith(vendor) and v > Decimal(0) for k, v in pod.requests.items())
    if not asks:
        return False
    selector = pod.node_selector
    if REGION_LABEL in selector and selector[REGION_LABEL] != pool.region:
        return False
    if HOSTNAME_LABEL in selector and selector[HOSTNAME_LABEL] not in {n.name for n in pool.node_list()}:
        return False
    label = PRODUCT_LABELS.get(pool.accelerator)
    if label is not None and label in selector and pool.model is not None:
        return selector[label] in PRODUCTS.get(pool.model, ())
    return True


class KubernetesEstimator:
    """Estimates for the pools one cluster serves (``cluster``: a ``KubernetesCluster``, or
    anything with ``pending_pods()``)."""

    def __init__(self, cluster: PendingSource, *, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], datetime] = utc_now) -> None:
        self._cluster = cluster
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: tuple[tuple[PendingPod, ...], datetime, float] | None = None
        self.asked = 0

    def _queue(self) -> tuple[tuple[PendingPod, ...], datetime]:
        with self._lock:
            if self._pending is not None and time.monotonic() < self._pending[2]:
                return self._pending[0], self._pending[1]
            self.asked += 1
        pods = tuple(self._cluster.pending_pods())
        observed = self._clock()
        with self._lock:
            self._pending = (pods, observed, time.monotonic() + self.ttl_s)
        return pods, observed

    def estimate(self, pool: Pool, fits_now: bool) -> StartEstimate:
        return self.estimate_many([(pool, fits_now)])[0]

    def estimate_many(self, items: Sequence[tuple[Pool, bool]]) -> list[StartEstimate]:
        """One estimate per (pool, whether the grant fits its free capacity now), in order."""
        if not items:
            return []
        try:
            pods, observed = self._queue()
        except ExaError as exc:
            now = self._clock()
            return [unknown(pool.name, "kubernetes", f"the API server did not answer ({exc})", now) for pool, _ in items]
        return [self._one(pool, fits, pods, observed) for pool, fits in items]

    def _one(self, pool: Pool, fits: bool, pods: Sequence[PendingPod], observed: datetime) -> StartEstimate:
        waiting = [p for p in pods if competes(p, pool)]
        what = "CPU" if pool.accelerator == "cpu" else RESOURCES[pool.accelerator]
        facts: JSONObject = {"pending_pods": len(waiting), "resource": what, "region": pool.region}
        if waiting:
            oldest = waiting[0].created_at
            facts["oldest_pending_since"] = oldest
            queue = f"{len(waiting)} pod(s) wait for {what} in {pool.region}" + (f" (the oldest since {oldest})" if oldest else "")
        else:
            queue = f"no pod waits for {what} in {pool.region}"
        if fits:
            return StartEstimate(pool.name, observed, "kubernetes", observed,
                                 f"kubernetes: the grant fits free capacity now: starts now ({queue}; read {iso(observed)})", facts=facts)  # fmt: skip
        return unknown(
            pool.name, "kubernetes",
            f"the pool has no room for the grant now and Kubernetes does not estimate when it will; {queue}",
            observed, facts,
        )  # fmt: skip


__all__ = ["KubernetesEstimator", "PendingSource", "competes"]

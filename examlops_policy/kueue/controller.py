"""The AdmissionCheck controller: ``exa kueue admission-check`` (``controllerName:
examlops.io/placement``).

Client: ``lightkube`` (the layer's Kubernetes client already, through
``executors.kubernetes_api.KubernetesCluster``: the same kubeconfig and context handling and the
same error words). Kueue's kinds are lightkube generic resources; every write is a server-side
apply (field manager ``examlops-placement``) of only what this controller owns: the
AdmissionCheck's ``Active`` condition and its own entry of ``Workload.status.admissionChecks``
(a list map keyed by name: Kueue's own entries and fields are left to Kueue).

One step (``Controller.step``), repeated every ``interval`` seconds:

1. the AdmissionChecks whose ``spec.controllerName`` is this controller's get ``Active=True``
   (``False``, with the reason, when the policy cannot be asked: Kueue then admits nothing through
   them: fail closed);
2. every Workload with one of those checks (Kueue lists on a Workload the checks its
   ClusterQueue names) whose quota is reserved and whose check is ``Pending`` is built
   (``workloads.build``) and placed through ``Hardware.place`` with its reservation's request id
   (``workloads.request_id``: a restart asks again with the same key and gets the recorded
   decision, never a second grant); a placement is recorded as the Workload's job (scheduler
   ``kueue``, its UID) and the check set ``Ready`` with its ``podSetUpdates``; only full: ``Retry``;
   never: ``Rejected`` (``workloads.update_for``); a Workload that also lists a MultiKueue check
   (a manager cluster's) has the cluster of its granted pool nominated first
   (``status.nominatedClusterNames``: ``multikueue``), so Kueue copies it to that one worker;
3. every live grant of this controller is released (``Hardware.release``) when its Workload is gone
   (deleted), finished, evicted, or holds another quota reservation than the one it was granted for,
   or (MultiKueue) runs on or is nominated for another cluster than the granted pool's.

Anything the API server or the policy will not answer ends the step (nothing written for the
Workload at hand: it stays ``Pending``, so Kueue admits nothing the layer did not decide).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final, TextIO

from examlops_policy.errors import ExaError, PolicyError, PolicyUnavailable, SpecError, StateError
from examlops_policy.kueue import multikueue as mk
from examlops_policy.kueue import workloads as wl
from examlops_policy.model import JSONObject, Placement, Pool

if TYPE_CHECKING:
    from examlops_policy.executors.kubernetes_api import KubernetesCluster
    from examlops_policy.hardware import Hardware

CONTROLLER_NAME: Final = wl.CONTROLLER_NAME
FIELD_MANAGER: Final = "examlops-placement"
SCHEDULER: Final = "kueue"  # the scheduler a grant of this controller is recorded under
DEFAULT_INTERVAL_S: Final = 1.0


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class KueueApi:
    """Kueue's objects on one API server (through a connected ``KubernetesCluster``)."""

    def __init__(self, cluster: KubernetesCluster) -> None:
        from lightkube.generic_resource import create_global_resource, create_namespaced_resource

        self.cluster = cluster
        self.AdmissionCheck = create_global_resource(wl.GROUP, wl.VERSION, "AdmissionCheck", "admissionchecks")
        self.Workload = create_namespaced_resource(wl.GROUP, wl.VERSION, "Workload", "workloads")
        self.MultiKueueConfig = create_global_resource(wl.GROUP, wl.VERSION, mk.CONFIG_KIND, "multikueueconfigs")

    def __enter__(self) -> KueueApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.cluster.close()

    def _client(self) -> Any:
        return self.cluster._client  # the connected lightkube client (errors mapped by _calling)

    def all_admission_checks(self) -> list[Mapping[str, Any]]:
        """Every AdmissionCheck, as JSON."""
        with self.cluster._calling("list Kueue AdmissionChecks"):
            return [c.to_dict() for c in self._client().list(self.AdmissionCheck)]

    def multikueue_clusters(self, checks: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
        """For each MultiKueue AdmissionCheck of ``checks``: the worker clusters of the
        MultiKueueConfig it names (none when it names none, or one that does not exist)."""
        from examlops_policy.executors.kubernetes_api import KubernetesError

        found: dict[str, tuple[str, ...]] = {}
        for check in checks:
            if (check.get("spec") or {}).get("controllerName") != mk.CONTROLLER_NAME:
                continue
            name = mk.config_name(check)
            config = None
            if name is not None:
                try:
                    with self.cluster._calling(f"get MultiKueueConfig {name}"):
                        config = self._client().get(self.MultiKueueConfig, name).to_dict()
                except KubernetesError as exc:
                    if exc.code != 404:
                        raise
            found[check["metadata"]["name"]] = mk.clusters_of(config)
        return found

    def nominate(self, kw: wl.KueueWorkload, clusters: Sequence[str]) -> None:
        """Write ``clusters`` to the Workload's ``status.nominatedClusterNames``, as Kueue's
        admission manager (``multikueue`` says why and how), unless the Workload read afresh is
        nominated so already or runs on a cluster (nothing written)."""
        with self.cluster._calling(f"read Workload {kw.ref}", namespace=kw.namespace):
            doc = self._client().get(self.Workload, kw.name, namespace=kw.namespace).to_dict()
        fresh = wl.parse(doc)
        if fresh.cluster_name is not None or fresh.nominated == tuple(clusters):
            return
        body = mk.nomination(doc, clusters)
        self._apply_status(self.Workload.Status, kw.name, kw.namespace, body, f"nominate {', '.join(clusters)} for Workload {kw.ref}", mk.ADMISSION_MANAGER)

    def workloads(self) -> list[wl.KueueWorkload]:
        with self.cluster._calling("list Kueue Workloads"):
            return [wl.parse(w.to_dict()) for w in self._client().list(self.Workload, namespace="*")]

    def set_active(self, check: Mapping[str, Any], active: bool, reason: str, message: str) -> bool:
        """Apply the check's ``Active`` condition; False when it already says so (nothing written)."""
        meta = check.get("metadata") or {}
        name = meta.get("name", "")
        status = "True" if active else "False"
        for c in (check.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Active" and c.get("status") == status and c.get("reason") == reason and c.get("message") == message:
                return False
        body: JSONObject = {
            "apiVersion": f"{wl.GROUP}/{wl.VERSION}", "kind": "AdmissionCheck", "metadata": {"name": name},
            "status": {"conditions": [{
                "type": "Active", "status": status, "reason": reason, "message": message,
                "lastTransitionTime": _now(), "observedGeneration": meta.get("generation", 0),
            }]},
        }  # fmt: skip
        self._apply_status(self.AdmissionCheck.Status, name, None, body, f"set AdmissionCheck {name} Active={status}")
        return True

    def set_check(self, kw: wl.KueueWorkload, check: str, update: wl.CheckUpdate) -> None:
        entry: JSONObject = {"name": check, "state": update.state, "message": update.message, "lastTransitionTime": _now()}
        if update.pod_set_updates:
            entry["podSetUpdates"] = list(update.pod_set_updates)
        body: JSONObject = {
            "apiVersion": f"{wl.GROUP}/{wl.VERSION}", "kind": "Workload", "metadata": {"name": kw.name, "namespace": kw.namespace},
            "status": {"admissionChecks": [entry]},
        }  # fmt: skip
        self._apply_status(self.Workload.Status, kw.name, kw.namespace, body, f"set check {check}={update.state} on Workload {kw.ref}")

    def _apply_status(self, kind: Any, name: str, namespace: str | None, body: JSONObject, action: str, manager: str = FIELD_MANAGER) -> None:
        from lightkube.types import PatchType

        with self.cluster._calling(action, namespace=namespace):
            self._client().patch(kind, name, body, namespace=namespace, patch_type=PatchType.APPLY, field_manager=manager, force=True)


def connect(kubeconfig: str | None = None, context: str | None = None) -> KueueApi:
    """Kueue's API on the cluster of ``kubeconfig``/``context`` (``KubernetesCluster.connect``:
    SpecError for a bad kubeconfig or context); closed by ``with``."""
    from examlops_policy.executors.kubernetes_api import KubernetesCluster

    return KueueApi(KubernetesCluster.connect(kubeconfig, context))


@dataclass
class StepReport:
    """What one step did: checks made active, (workload, state) decided, grants released."""

    active: list[str] = field(default_factory=list)
    decided: list[tuple[str, str, str]] = field(default_factory=list)  # (workload, state, message)
    released: list[tuple[str, str]] = field(default_factory=list)  # (decision id, why)
    policy_problem: str | None = None  # why the policy could not be asked (nothing was decided)


class Controller:
    """The controller over one home (``hw``) and one API server (``api``)."""

    def __init__(self, hw: Hardware, api: KueueApi) -> None:
        self.hw = hw
        self.api = api

    def step(self) -> StepReport:
        report = StepReport()
        every = self.api.all_admission_checks()
        checks = [c for c in every if (c.get("spec") or {}).get("controllerName") == wl.CONTROLLER_NAME]
        names = {c["metadata"]["name"] for c in checks}
        workers = self.api.multikueue_clusters(every)
        problem = report.policy_problem = self.policy_problem()
        for check in checks:
            reason, message = ("Active", "examlops placement decides this check") if problem is None else ("PolicyUnavailable", problem[:1024])
            if self.api.set_active(check, problem is None, reason, message):
                report.active.append(f"{check['metadata']['name']}={problem is None}")
        found = self.api.workloads()
        if names and problem is None:
            for kw in found:
                for check in sorted(names & set(kw.checks)):
                    if kw.reserved and not kw.over and kw.checks[check].state == "Pending":
                        update, pool = self.decide(kw, check)
                        dispatched = sorted(c for c in kw.checks if c in workers)
                        if dispatched:
                            update = self.dispatch(kw, update, pool, workers[dispatched[0]])
                        self.api.set_check(kw, check, update)
                        report.decided.append((kw.ref, update.state, update.message))
        report.released = self.release_over(found, names)
        return report

    def policy_problem(self) -> str | None:
        """Why the policy cannot be asked now (None: OPA serves the reviewed files' revision;
        a local OPA that serves another is started again on the files, as ``serve`` does)."""
        hw = self.hw
        try:
            hw.policy_snapshot(force=True)
            try:
                hw.engine.confirm()
            except PolicyError as exc:
                if "serves policy revision" not in str(exc):
                    raise
                hw.close_policy()
                hw.engine.confirm()
            return None
        except (PolicyError, PolicyUnavailable) as exc:
            hw.close_policy()
            return f"{type(exc).__name__}: {exc}"

    def decide(self, kw: wl.KueueWorkload, check: str) -> tuple[wl.CheckUpdate, Pool | None]:
        """Place ``kw`` for its current reservation (idempotent by its request id) and word the
        result; with the pool of a live placement (None: none). PolicyUnavailable, StateError and
        the like propagate: nothing is written."""
        key = wl.request_id(kw, check)
        assert key is not None  # only reserved Workloads are decided
        known = self.hw.tables.budgets.get("projects")
        projects = tuple(known) if isinstance(known, dict) else ()
        try:
            workload = wl.build(kw, projects=projects)
            record = self.hw.place(workload, request_id=key)
        except SpecError as exc:
            return wl.refused(exc), None
        pool = None
        decision = record.decision
        if isinstance(decision, Placement) and record.released_at is None:
            if record.job_id is None:
                record = self.hw.set_job(record.id, kw.ref, scheduler=SCHEDULER, uid=kw.uid)
            pool = self.hw.pool_by_name(decision.pool)
        return wl.update_for(record, pool, kw), pool

    def dispatch(self, kw: wl.KueueWorkload, update: wl.CheckUpdate, pool: Pool | None, clusters: Sequence[str]) -> wl.CheckUpdate:
        """MultiKueue: nominate the cluster of the granted ``pool`` (``multikueue.dispatch``),
        before the check says Ready; a grant on a pool of no listed cluster is released."""
        update, cluster = mk.dispatch(update, pool, clusters)
        if cluster is None and update.state == "Rejected" and pool is not None and update.decision_id is not None:
            self.hw.release(update.decision_id)
        elif cluster is not None and kw.cluster_name is None and kw.nominated != (cluster,):
            self.api.nominate(kw, (cluster,))
        return update

    def release_over(self, found: Sequence[wl.KueueWorkload], checks: set[str]) -> list[tuple[str, str]]:
        """Release this controller's live grants whose Workload is over (see the module)."""
        by_uid = {kw.uid: kw for kw in found if kw.uid}
        clusters: dict[str, str | None] = {}  # pool -> its cluster, read once a step
        released = []
        for grant in self.hw.cycle.store.live_grants(with_jobs=True):
            if grant.scheduler != SCHEDULER:
                continue
            kw = by_uid.get(grant.job_uid or "")
            why = None
            if kw is None:
                why = "its Workload was deleted"
            elif kw.holds("Finished"):
                why = "its Workload finished"
            elif kw.holds("Evicted") or kw.deleting:
                why = "its Workload was evicted" if kw.holds("Evicted") else "its Workload is being deleted"
            elif checks & set(kw.checks) and self.hw.decision(grant.id).request_id not in {wl.request_id(kw, c) for c in checks & set(kw.checks)}:
                why = "its Workload no longer holds the quota reservation it was granted for"
            elif kw.cluster_name is not None or kw.nominated:
                if grant.pool not in clusters:
                    clusters[grant.pool] = self.hw.pool_by_name(grant.pool).cluster
                why = mk.moved(kw, clusters[grant.pool])
            if why is not None:
                self.hw.release(grant.id)
                released.append((grant.id, why))
        return released


def run(
    hw: Hardware, api: KueueApi, *, stop: threading.Event, interval: float = DEFAULT_INTERVAL_S, log: TextIO | None = None,
    steps: int | None = None, clock: Callable[[], float] = time.monotonic,
) -> int:  # fmt: skip
    """Step until ``stop`` is set (or ``steps`` steps); an error of a step is logged and the step
    tried again after ``interval`` (the Workloads it did not reach stay Pending). Returns the
    number of steps that failed.

    The process is recorded (pid, start time, command line) in ``<home>/kueue/serve/<pid>.json``
    before it steps, as ``exa hardware serve`` records itself (``_serve._record``: records of
    processes proven gone are removed on the way), and the record is removed when it stops."""
    from examlops_policy._serve import _record

    record, gone = _record(hw.home / "kueue")
    for pid in gone:
        _log(log, f"removed the record of admission-check process {pid}: it is gone (killed without stopping)")
    failed = 0
    done = 0
    try:
        while not stop.is_set() and (steps is None or done < steps):
            started = clock()
            try:
                report = controller_step(hw, api)
                for line in lines(report):
                    _log(log, line)
            except (ExaError, StateError) as exc:
                failed += 1
                _log(log, f"step failed ({type(exc).__name__}): {exc}")
            done += 1
            stop.wait(max(0.0, interval - (clock() - started)))
        _log(log, "stopped")
    finally:
        record.unlink(missing_ok=True)
    return failed


def controller_step(hw: Hardware, api: KueueApi) -> StepReport:
    return Controller(hw, api).step()


def lines(report: StepReport) -> Iterator[str]:
    for name in report.active:
        yield f"admission check {name}"
    for ref, state, message in report.decided:
        yield f"{ref}: {state}: {message}"
    for ident, why in report.released:
        yield f"released {ident}: {why}"
    if report.policy_problem is not None:
        yield f"the policy cannot be asked; nothing decided: {report.policy_problem}"


def _log(out: TextIO | None, line: str) -> None:
    if out is not None:
        out.write(f"{_now()} {line}\n")
        out.flush()

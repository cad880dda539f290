"""A Kueue Workload as this layer reads it, and a recorded decision as the check's state.

Pure functions over the API server's JSON (``kueue.x-k8s.io/v1beta2``): no cluster, no policy.

**What a Workload asks for** (``build``). Kueue makes one Workload per Job; its pod set says, per
pod, the containers' requests (a request left out is the limit, as Kubernetes defaults it):

* the accelerator family and its devices per pod: the vendor resource (``nvidia.com/gpu``,
  ``amd.com/gpu``, ``habana.ai/gaudi``, ``google.com/tpu``: the executor's ``RESOURCES``, one
  source); ``examlops.io/accelerator`` on the Job may say it (and must agree with the resource);
* CPU (cores) and memory (MiB) per pod; the pod set's ``count`` is how many pods, each on a node
  of its own: a gang of that many nodes;
* the project: the Job's label ``examlops.io/project``, else the LocalQueue's name where it is a
  project of budgets.yaml (else none: counted as the unassigned project);
* the priority: the Workload's priority class (``spec.priorityClassRef.name``), a class of
  priorities.yaml (an unknown class is bad input: the check is Rejected with the table's words);
* the residency class and data region: the labels ``examlops.io/residency`` and
  ``examlops.io/data-region``; the target (``hpc``, ``cloud``; default ``any``): the label
  ``examlops.io/target`` (a cloud pool, such as discovery makes of Kubernetes nodes, takes only
  work that says ``cloud``, as for ``exa hardware place``); the time limit:
  ``spec.maximumExecutionTimeSeconds``.

Kueue copies these labels from the Job to its Workload (its ``integrations.labelKeysToCopy``,
set by scripts/kueue-up).

**Idempotency** (``request_id``): one decision per quota reservation of one Workload: the key is
the Workload's UID, the time its ``QuotaReserved`` condition became true and the check's
``retryCount``. A controller that
restarts during that reservation asks again with the same key and gets the decision recorded the
first time (``Hardware.place``'s ``request_id``): nothing is granted twice. After a ``Retry``,
Kueue releases the quota and reserves again later: a new reservation, a new key, a new decision.

**The check's state** (``update_for``): placed -> ``Ready`` with ``podSetUpdates`` that pin the
pods (the pool's region and product labels, the granted node's hostname for a single pod, the
vendor's toleration) and carry the decision id; only full (the policy's ``no_capacity``, queueable)
-> ``Retry`` with the policy's reason; anything else -> ``Rejected`` with the policy's words.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

from examlops_policy import quantities
from examlops_policy.errors import SpecError
from examlops_policy.executors.kubernetes import HOSTNAME_LABEL, LABEL_PREFIX, RESOURCES, _node_placement
from examlops_policy.model import JSONObject, JSONValue, Placement, Pool, PoolVerdict, Workload
from examlops_policy.views import DecisionRecord

CONTROLLER_NAME: Final = "examlops.io/placement"
GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta2"
PROJECT_LABEL: Final = f"{LABEL_PREFIX}/project"
ACCELERATOR_LABEL: Final = f"{LABEL_PREFIX}/accelerator"
RESIDENCY_LABEL: Final = f"{LABEL_PREFIX}/residency"
DATA_REGION_LABEL: Final = f"{LABEL_PREFIX}/data-region"
TARGET_LABEL: Final = f"{LABEL_PREFIX}/target"
# The labels a Job passes to its Workload (Kueue's integrations.labelKeysToCopy; scripts/kueue-up).
COPIED_LABELS: Final = (PROJECT_LABEL, ACCELERATOR_LABEL, RESIDENCY_LABEL, DATA_REGION_LABEL, TARGET_LABEL)
DECISION_KEY: Final = f"{LABEL_PREFIX}/decision-id"
# The request ids of this controller's decisions start so (specs.check_request_id: <= 128 chars).
KEY_PREFIX: Final = "kueue:"
# Kueue's AdmissionCheckState.message holds at most 32768 characters; a person reads far fewer.
MESSAGE_LIMIT: Final = 2048
ACCELERATOR_OF: Final = {resource: family for family, resource in RESOURCES.items()}

CheckStateName = Literal["Pending", "Ready", "Retry", "Rejected"]


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str = ""
    message: str = ""
    since: str = ""  # lastTransitionTime as the server wrote it


@dataclass(frozen=True)
class PodSet:
    """One pod set: ``count`` pods, each asking ``devices`` (resource -> amount), ``cpu_milli``
    and ``memory_mib``."""

    name: str
    count: int
    devices: Mapping[str, Decimal]
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class Check:
    """The state of one admission check on a Workload."""

    name: str
    state: str
    message: str = ""
    retries: int = 0  # Kueue's retryCount: how many times it was reset after a Retry


@dataclass(frozen=True)
class KueueWorkload:
    """A Workload as the controller reads it."""

    namespace: str
    name: str
    uid: str
    queue_name: str | None
    priority_class: str | None
    labels: Mapping[str, str]
    pod_sets: tuple[PodSet, ...]
    checks: Mapping[str, Check]
    conditions: Mapping[str, Condition]
    max_seconds: int | None = None
    deleting: bool = False
    problems: tuple[str, ...] = field(default=())  # what could not be read of the pod sets
    # MultiKueue (a manager cluster's Workload): the worker clusters nominated for it, and the one
    # that reserved quota for it (status.nominatedClusterNames, status.clusterName).
    nominated: tuple[str, ...] = ()
    cluster_name: str | None = None

    def holds(self, condition: str) -> bool:
        found = self.conditions.get(condition)
        return found is not None and found.status == "True"

    @property
    def reserved(self) -> bool:
        """Kueue reserved quota for it (the checks run from then on)."""
        return self.holds("QuotaReserved")

    @property
    def over(self) -> bool:
        """Finished, evicted or being deleted: whatever it was granted is to be released."""
        return self.holds("Finished") or self.holds("Evicted") or self.deleting

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def parse(obj: Mapping[str, Any]) -> KueueWorkload:
    """A Workload from the API server's JSON. Fields that cannot be read are kept as ``problems``
    (the check is then Rejected with them: nothing is guessed)."""
    meta, spec, status = _mapping(obj.get("metadata")), _mapping(obj.get("spec")), _mapping(obj.get("status"))
    problems: list[str] = []
    pod_sets: list[PodSet] = []
    for raw in _list(spec.get("podSets")):
        try:
            pod_sets.append(_pod_set(_mapping(raw)))
        except SpecError as exc:
            problems.append(str(exc))
    checks = {}
    for raw in _list(status.get("admissionChecks")):
        entry = _mapping(raw)
        name = _text(entry.get("name"))
        if name:
            retries = entry.get("retryCount")
            count = retries if isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0 else 0
            checks[name] = Check(name, _text(entry.get("state")) or "Pending", _text(entry.get("message")), count)
    conditions = {}
    for raw in _list(status.get("conditions")):
        entry = _mapping(raw)
        kind = _text(entry.get("type"))
        if kind:
            conditions[kind] = Condition(_text(entry.get("status")), _text(entry.get("reason")), _text(entry.get("message")), _text(entry.get("lastTransitionTime")))
    priority = _mapping(spec.get("priorityClassRef"))
    seconds = spec.get("maximumExecutionTimeSeconds")
    return KueueWorkload(
        namespace=_text(meta.get("namespace")), name=_text(meta.get("name")), uid=_text(meta.get("uid")),
        queue_name=_text(spec.get("queueName")) or None, priority_class=_text(priority.get("name")) or None,
        labels={k: v for k, v in _mapping(meta.get("labels")).items() if isinstance(v, str)},
        pod_sets=tuple(pod_sets), checks=checks, conditions=conditions,
        max_seconds=seconds if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0 else None,
        deleting=bool(meta.get("deletionTimestamp")), problems=tuple(problems),
        nominated=tuple(c for c in _list(status.get("nominatedClusterNames")) if isinstance(c, str)),
        cluster_name=_text(status.get("clusterName")) or None,
    )  # fmt: skip


def _pod_set(raw: Mapping[str, Any]) -> PodSet:
    name = _text(raw.get("name")) or "main"
    count = raw.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise SpecError(f"pod set {name}: count must be a whole number >= 1 (got {count!r})", field="spec.podSets.count")
    pod = _mapping(_mapping(raw.get("template")).get("spec"))
    devices: dict[str, Decimal] = {}
    cpu = memory = 0
    for container in _list(pod.get("containers")):
        resources = _mapping(_mapping(container).get("resources"))
        asked = {**_mapping(resources.get("limits")), **_mapping(resources.get("requests"))}
        for resource, value in asked.items():
            where = f"pod set {name}: resources.{resource}"
            if resource == "cpu":
                cpu += _quantity(quantities.cpu_milli, value, where)
            elif resource == "memory":
                memory += _quantity(quantities.memory_mib, value, where)
            elif resource not in ("ephemeral-storage", "pods") and not resource.startswith("hugepages-"):
                try:
                    amount = Decimal(str(value))
                except InvalidOperation:
                    raise SpecError(f"{where}: {value!r} is not a number of devices", field="spec.podSets") from None
                devices[resource] = devices.get(resource, Decimal(0)) + amount
    return PodSet(name, count, devices, cpu, memory)


def _quantity(parse_one: Any, value: object, where: str) -> int:
    try:
        result = parse_one(value)
    except (SpecError, ValueError) as exc:
        raise SpecError(f"{where}: {exc}", field="spec.podSets") from None
    assert isinstance(result, int)
    return result


def build(kw: KueueWorkload, *, projects: Collection[str]) -> Workload:
    """The layer's workload for ``kw`` (see the module). SpecError, in words a user can act on,
    when the Workload asks for what this layer cannot place."""
    if kw.problems:
        raise SpecError("; ".join(kw.problems), source=f"workload {kw.ref}")
    if len(kw.pod_sets) != 1:
        raise SpecError(
            f"{len(kw.pod_sets)} pod sets: the placement check decides a Workload of one pod set (a Job), all its pods alike",
            source=f"workload {kw.ref}", field="spec.podSets",
        )  # fmt: skip
    pods = kw.pod_sets[0]
    asked = {r: n for r, n in pods.devices.items() if r in ACCELERATOR_OF and n > 0}
    others = sorted(r for r, n in pods.devices.items() if r not in ACCELERATOR_OF and n > 0)
    if others:
        raise SpecError(
            f"pod set {pods.name} asks for {', '.join(others)}: the placement check knows the devices {', '.join(sorted(ACCELERATOR_OF))}",
            source=f"workload {kw.ref}", field="spec.podSets",
        )  # fmt: skip
    if len(asked) != 1:
        raise SpecError(
            f"pod set {pods.name} asks for {'no accelerator' if not asked else 'several accelerators: ' + ', '.join(sorted(asked))}: "
            f"ask for one of {', '.join(sorted(ACCELERATOR_OF))} in the containers' resources",
            source=f"workload {kw.ref}", field="spec.podSets",
        )  # fmt: skip
    ((resource, amount),) = asked.items()
    accelerator = ACCELERATOR_OF[resource]
    named = kw.labels.get(ACCELERATOR_LABEL)
    if named is not None and named != accelerator:
        raise SpecError(f"the label {ACCELERATOR_LABEL}={named} does not match the resource {resource}", source=f"workload {kw.ref}", field=ACCELERATOR_LABEL)
    if amount != amount.to_integral_value():
        raise SpecError(f"{resource}: {amount} is not a whole number of devices", source=f"workload {kw.ref}", field="spec.podSets")
    project = kw.labels.get(PROJECT_LABEL) or (kw.queue_name if kw.queue_name in projects else None)
    return Workload(
        name=kw.name, accelerator=accelerator, count=int(amount), nodes=pods.count,
        cpu=quantities.cores(pods.cpu_milli) if pods.cpu_milli else None, memory=pods.memory_mib or None,
        project=project, priority=kw.priority_class, residency=kw.labels.get(RESIDENCY_LABEL, "open"),
        data_region=kw.labels.get(DATA_REGION_LABEL), target=kw.labels.get(TARGET_LABEL), walltime=kw.max_seconds,
    )  # fmt: skip


def request_id(kw: KueueWorkload, check: str) -> str | None:
    """The key of the decision for the Workload's current quota reservation (None: no quota is
    reserved, nothing to decide): its UID, when the reservation was made, and how many times
    Kueue reset ``check`` after a Retry (two reservations within one second stay apart)."""
    reserved = kw.conditions.get("QuotaReserved")
    if reserved is None or reserved.status != "True" or not kw.uid:
        return None
    found = kw.checks.get(check)
    return f"{KEY_PREFIX}{kw.uid}:{reserved.since}:{found.retries if found else 0}"


def uid_of(request: str | None) -> str | None:
    """The Workload UID a request id of this controller names (None: not one of its keys)."""
    if not request or not request.startswith(KEY_PREFIX):
        return None
    return request[len(KEY_PREFIX) :].split(":", 1)[0] or None


@dataclass(frozen=True)
class CheckUpdate:
    """What the controller writes into the Workload's ``status.admissionChecks[name]``."""

    state: CheckStateName
    message: str
    pod_set_updates: tuple[JSONObject, ...] = ()
    decision_id: str | None = None


def _message(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def refused(exc: SpecError) -> CheckUpdate:
    """A Workload the layer cannot judge (bad input): Rejected with the error's words."""
    return CheckUpdate("Rejected", _message(str(exc)))


def update_for(record: DecisionRecord, pool: Pool | None, kw: KueueWorkload) -> CheckUpdate:
    """The check's state for the decision recorded for ``kw`` (``pool``: the placement's pool)."""
    from examlops_policy._core.commit import queueable

    decision = record.decision
    if isinstance(decision, Placement):
        if record.released_at is not None:
            # Released (its workload finished, was evicted, or the grant was released by hand):
            # nothing is held for these pods any more, so they must not start on it.
            return CheckUpdate("Retry", _message(f"decision {record.id} was released at {record.released_at}; deciding again"))
        assert pool is not None
        nodes = [a.node for a in decision.allocations]
        where = f" on {', '.join(nodes)}" if nodes else ""
        return CheckUpdate(
            "Ready",
            _message(f"placed on pool {decision.pool}{where} ({decision.region}) by decision {record.id}"),
            tuple(pod_set_updates(record, decision, pool, kw)),
            record.id,
        )
    why = "; ".join(_pool_reasons(decision.verdicts))
    detail = f": {why}" if why else ""
    if queueable(decision):
        return CheckUpdate("Retry", _message(f"not now: {decision.reason}{detail} (decision {record.id})"), decision_id=record.id)
    return CheckUpdate("Rejected", _message(f"{decision.reason}{detail} (decision {record.id})"), decision_id=record.id)


def _pool_reasons(verdicts: Sequence[PoolVerdict]) -> list[str]:
    """Each pool's reasons in the policy's words (``pool: message``), once each."""
    seen: list[str] = []
    for verdict in verdicts:
        for reason in verdict.reasons:
            line = f"{verdict.pool}: {reason.message}"
            if line not in seen:
                seen.append(line)
    return seen


def pod_set_updates(record: DecisionRecord, decision: Placement, pool: Pool, kw: KueueWorkload) -> list[JSONObject]:
    """Per pod set: the node selector of the pool (its region and product label, as the
    executor's Jobs are pinned) and, for one pod on a named node, that node's hostname; the
    vendor's toleration; the decision id as label and annotation."""
    selector, _affinity, _note = _node_placement(pool, None)
    nodes = [a.node for a in decision.allocations]
    if len(nodes) == 1 and pool.nodes_named:
        selector = {**selector, HOSTNAME_LABEL: nodes[0]}
    annotations: dict[str, JSONValue] = {
        DECISION_KEY: record.id,
        f"{LABEL_PREFIX}/pool": pool.name,
        f"{LABEL_PREFIX}/policy-revision": decision.provenance.policy_revision,
    }
    if nodes:
        annotations[f"{LABEL_PREFIX}/nodes"] = ",".join(nodes)
    updates: list[JSONObject] = []
    for pods in kw.pod_sets:
        update: JSONObject = {
            "name": pods.name,
            "labels": {DECISION_KEY: record.id.lower()},
            "annotations": dict(annotations),
            "nodeSelector": dict(selector),
        }
        if pool.accelerator in RESOURCES:
            update["tolerations"] = [{"key": RESOURCES[pool.accelerator], "operator": "Exists", "effect": "NoSchedule"}]
        updates.append(update)
    return updates

"""What the façade's workflows return: plain values a service or the CLI renders as it likes."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from examlops_policy._record import Record
from examlops_policy.errors import SpecError
from examlops_policy.model import Decision, Holding, JSONObject, JSONValue, Pool, PoolState, PoolVerdict, Reason, StartEstimate

# A start estimated within this many seconds of the decision's time is "now" for people: Slurm
# answers in whole seconds, a free partition the second after it is asked (the wait policy's
# slack, checks/wait).
NOW_WITHIN_S = 1


@dataclass(frozen=True)
class PoolChange:
    """What a change to a pool did (or, previewed, would do): ``added``, ``updated``, ``unchanged``,
    ``drained``, ``undrained``, ``removed``, or ``removal_pending`` (a drained pool whose live
    grants keep it until the last of them ends); previewed only, ``refused`` (``refused`` says
    why: the change would be refused, and with it the whole write). ``holders``: the live
    decisions holding its devices; ``removal_cancelled``: undraining it cancelled a pending
    removal."""

    name: str
    action: str
    changed_fields: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()
    removal_cancelled: bool = False
    refused: str | None = None
    adding: bool = False  # refused: the pool would have been added
    as_stored: bool = False  # refused: the pool was given as stored (it disagrees with another pool about a node)


@dataclass(frozen=True)
class DecisionRecord:
    """A decision as stored: its id, when it was made, whether it was released, its job, the
    caller's idempotency key and when its lease ends."""

    id: str
    created_at: str
    decision: Decision
    released_at: str | None = None
    job_id: str | None = None
    request_id: str | None = None
    lease_expires_at: str | None = None
    scheduler: str | None = None
    job_uid: str | None = None
    job_state: str | None = None
    queued_id: str | None = None
    job_started_at: str | None = None
    job_ended_at: str | None = None
    node_down_at: str | None = None
    preempting_for: str | None = None
    queue: QueueEntry | None = None
    lease_ended: bool = False  # released because its lease ended (at ``released_at``, the lease's end)
    # Preemption: the placement that took this grant (a victim: preempted by it), and the grants a
    # placement admitted by preemption took (their decisions).
    preempted_by: str | None = None
    preempted: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecisionSummary:
    """A decision as its columns give it, for lists and reports (no document is read)."""

    id: str
    created_at: str
    workload: str
    outcome: str
    pool: str | None
    accelerator: str | None
    model: str | None
    region: str | None
    fallback: bool | None
    fraction_honored: bool | None
    devices: float | None
    cost_per_hour: float | None
    carbon_factor: float | None
    note: str | None
    released_at: str | None
    job_id: str | None
    residency: str | None
    policy_revision: str
    verdicts: str | None
    lease_expires_at: str | None
    scheduler: str | None = None
    job_state: str | None = None
    queued_id: str | None = None
    larger_partition: bool = False
    lease_ended: bool = False
    # When the chosen pool was expected to start it (RFC 3339 UTC) and who said so; when its job was
    # handed to a scheduler, and when it really started (reconcile, from the scheduler).
    estimated_start: str | None = None
    estimate_source: str | None = None
    submitted_at: str | None = None
    actual_start: str | None = None
    preempting_for: str | None = None  # the queued record a preemption took (or marked) this grant for

    @property
    def estimate_error_s(self) -> float | None:
        """How much later than estimated the job really started (seconds; negative: sooner), where
        both are known."""
        return estimate_error_s(self.estimated_start, self.actual_start)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def estimate_error_s(estimated: str | None, actual: str | None) -> float | None:
    """Actual start minus estimated start, in whole seconds (None unless both are known)."""
    if estimated is None or actual is None:
        return None
    return float(math.floor(_epoch(actual)) - math.floor(_epoch(estimated)))


@dataclass(frozen=True)
class EstimateError:
    """How far start estimates of one kind (``source``: slurm, kubernetes, table, now) were from
    the actual starts: over ``decisions`` placements with both, the median and 90th percentile of
    actual minus estimated start, in seconds (positive: later than estimated)."""

    source: str
    decisions: int
    median_s: float
    p90_s: float


def estimate_errors(pairs: Sequence[tuple[str, float]]) -> tuple[EstimateError, ...]:
    """Per estimate source, from (source, error in seconds) pairs: the median (the mean of the two
    middle values for an even count) and the 90th percentile (nearest rank: the smallest error at
    least 90% of them do not exceed)."""
    by_source: dict[str, list[float]] = {}
    for source, error in pairs:
        by_source.setdefault(source, []).append(error)
    out = []
    for source, errors in sorted(by_source.items()):
        errors.sort()
        n = len(errors)
        median = errors[n // 2] if n % 2 else (errors[n // 2 - 1] + errors[n // 2]) / 2
        p90 = errors[max(0, math.ceil(0.9 * n) - 1)]
        out.append(EstimateError(source, n, float(median), float(p90)))
    return tuple(out)


@dataclass(frozen=True)
class BurstEvent:
    """One burst attempt, allowed or blocked."""

    id: int
    created_at: str
    decision_id: str
    workload: str
    residency: str
    pool: str | None
    region: str | None
    verdict: str
    reason_code: str | None
    reason: str | None


@dataclass(frozen=True)
class FinopsRow:
    """Totals for one device type in one region, and how the carbon of its placements was found
    (``carbon_methods``: keys of ``accounting.CARBON_METHODS``, or ``unrecorded`` for a decision
    older than its stored fleet; sorted)."""

    device: str
    region: str
    decisions: int
    device_hours: float
    cost: float
    carbon_g: float
    # Of the device-hours: those its jobs ran (used; a placement submitted to no scheduler counts
    # as used) and the rest of what it held (reserved but idle); the cost of each, and whether the
    # idle cost counts in ``cost`` (accounting.yaml's ``charge_idle``).
    used_device_hours: float = 0.0
    idle_device_hours: float = 0.0
    used_cost: float = 0.0
    idle_cost: float = 0.0
    idle_charged: bool = True
    carbon_methods: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkloadCost:
    """One workload name's decisions and what its placements held, cost and emitted (``exa models
    cost`` counts its placements; the FinOps report counts every decision, whatever its outcome)."""

    workload: str
    decisions: int
    device_hours: float
    cost: float
    carbon_g: float
    # Of the device-hours: those its jobs ran (used; a placement submitted to no scheduler counts
    # as used) and the rest of what it held (reserved but idle); the cost of each, and whether the
    # idle cost counts in ``cost`` (accounting.yaml's ``charge_idle``).
    used_device_hours: float = 0.0
    idle_device_hours: float = 0.0
    used_cost: float = 0.0
    idle_cost: float = 0.0
    idle_charged: bool = True


@dataclass(frozen=True)
class UsageRow:
    """A placement as a bill reads it (``Store.usage_page``): its columns, when it held its devices
    (``held_from`` to ``held_until``, epoch seconds) and when its job ran where reconcile recorded
    it, the hours of its holding the job ran (``used_hours``; all of them without a scheduler),
    when its workload asked (``asked_at``: its queued record's time; None: when it was placed),
    and its holdings: (node, device, profile, units, share, shares) each."""

    id: str
    created_at: str
    workload: str
    project: str | None
    pool: str
    accelerator: str
    model: str | None
    region: str
    devices: float
    cost_per_hour: float
    carbon_factor: float
    policy_revision: str
    fleet_revision: str | None
    job_id: str | None
    scheduler: str | None
    held_from: float
    held_until: float
    job_started: float | None
    job_ended: float | None
    used_hours: float
    asked_at: float | None
    target: str | None
    holdings: tuple[tuple[str, int, str | None, int | None, float, int | None], ...]


@dataclass(frozen=True)
class PoolView:
    """A pool as people look at it: what is free and placeable, its price and carbon per
    device-hour (``*_default``: taken from the reviewed tables, not set on the pool;
    ``carbon_method``: how the carbon figure was found, a key of ``accounting.CARBON_METHODS``)."""

    state: PoolState
    packing: str  # whole, fixed, mig, amd-compute-partition
    placeable: str | None  # e.g. "1g x5, 3g x1"; None for whole devices
    cost_per_hour: float
    cost_default: bool
    carbon_per_hour: float
    carbon_default: bool
    carbon_method: str = "pool"
    carbon_method_text: str = ""  # what the method means, with the reviewed figures it uses

    @property
    def pool(self) -> Pool:
        return self.state.pool


@dataclass(frozen=True)
class NodeDetail:
    """One node of a node-tracked pool as people look at it: its state and labels, its devices
    (``free``: with nothing on them; ``layout``: what the others hold, by device index, e.g.
    ``devices 0-1 whole, device 2: 3 of 4 shares``), its CPU millicores and memory MiB in all and free (None: not tracked)."""

    name: str
    state: str
    devices: int
    free: int
    layout: str
    cpu_milli: int | None
    cpu_free: int | None
    memory_mib: int | None
    memory_free: int | None
    block: str | None = None
    switch: str | None = None


@dataclass(frozen=True)
class PoolDetail:
    """One pool device by device: what each device holds (``nodes``: a node-tracked pool node by
    node, what this layer and schedulers hold there, pools sharing the node included)."""

    view: PoolView
    holdings: tuple[Holding, ...]
    devices: tuple[str, ...]  # each device's layout, in device order
    nodes: tuple[NodeDetail, ...] = ()


@dataclass(frozen=True)
class DecisionPage:
    """One page of decisions, newest first; ``cursor`` asks for the next page (None: the last)."""

    decisions: tuple[DecisionSummary, ...]
    cursor: str | None


@dataclass(frozen=True)
class Replay:
    """A recorded decision asked again: ``same`` when the policy gives the same answer."""

    decision_id: str
    same: bool
    policy_revision: str
    recorded_revision: str
    summary: str
    differences: tuple[str, ...]


@dataclass(frozen=True)
class FinopsReport:
    """Cost and carbon by device type and region, with totals, and what each carbon method its rows
    name means (``methods``: method -> text, under the reviewed tables)."""

    rows: tuple[FinopsRow, ...]
    decisions: int
    device_hours: float
    cost: float
    carbon_g: float
    methods: tuple[tuple[str, str], ...] = ()
    used_device_hours: float = 0.0
    idle_device_hours: float = 0.0
    used_cost: float = 0.0
    idle_cost: float = 0.0


@dataclass(frozen=True)
class ModelsCost:
    """Cost and carbon per workload name (``exa models cost``), with totals."""

    rows: tuple[WorkloadCost, ...]
    cost: float
    carbon_g: float
    used_cost: float = 0.0
    idle_cost: float = 0.0


@dataclass(frozen=True)
class NodeUsage:
    """What a scheduler reports busy on one node of a pool at discovery time: ``devices`` of the
    pool's kind (``indices`` where the scheduler names them), ``shares`` of shared devices (Slurm
    shards or MPS, replicas of a time-sliced GPU), and the node's ``cpu_milli`` and ``memory_mib``
    in use (None: not reported). Busy devices of a node in several pools (overlapping partitions)
    are reported for each of them: the node's capacity is one."""

    node: str
    devices: int = 0
    indices: tuple[int, ...] = ()
    shares: int = 0
    cpu_milli: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class DiscoveredChange:
    """One pool a discovery found and what applying it does (add, update, unchanged, stale)."""

    pool: Pool
    action: str
    changed_fields: tuple[str, ...] = ()
    free: float | None = None
    nodes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    usage: tuple[NodeUsage, ...] = ()  # what each node has busy, as the scheduler reported it


@dataclass(frozen=True)
class DiscoveryResult:
    """What a discovery found, what applying it changes, and whether it was applied."""

    source: str
    changes: tuple[DiscoveredChange, ...]
    warnings: tuple[str, ...]
    applied: bool
    held_outside: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Submission:
    """A placed decision handed to a scheduler (or, ``submitted`` False, what would be sent)."""

    decision_id: str
    scheduler: str
    submitted: bool
    job_id: str | None = None
    job_uid: str | None = None
    namespace: str | None = None
    command: str | None = None  # the exact sbatch command line (Slurm)
    argv: tuple[str, ...] = ()
    manifest: JSONObject | None = None  # the Job sent (Kubernetes)
    partition: str | None = None
    gres: str | None = None
    said: str = ""  # what happened, in words, as its scheduler says it


@dataclass(frozen=True)
class JobReport:
    """A decision's job as its scheduler reports it: pending (with why), running, complete,
    failed, or missing (deleted outside this layer)."""

    decision_id: str
    scheduler: str
    job_id: str
    state: str
    reason: str | None = None
    message: str | None = None
    native_state: str | None = None  # the scheduler's own word (e.g. Slurm's PENDING)


@dataclass(frozen=True)
class ReleaseReport:
    """A release: the record after it, whether it had been released before, the scheduler job
    deleted with it (Kubernetes), and what the queue was admitted on the capacity it freed (None:
    nothing waited, or admission could not run: ``admission_error`` says why; the release stands)."""

    record: DecisionRecord
    already: bool
    job_deleted: bool | None = None
    pool_removed: bool = False  # its pool's removal was pending on it: the pool is gone now
    admitted: AdmissionReport | None = None
    admission_error: str | None = None


@dataclass(frozen=True)
class Portability:
    """Whether an engine can run on an accelerator family: its backend, and the policy's reason
    when it cannot."""

    engine: str
    accelerator: str
    backend: str
    reason: Reason | None

    @property
    def portable(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Standing:
    """An admissible pool as the objective sees it: what its grant costs and emits per hour, and
    (balanced) its score, cost and carbon each divided by the highest among the candidates."""

    pool: str
    cost_per_hour: float
    carbon_per_hour: float
    score: float | None = None
    estimate: StartEstimate | None = None  # when it would start (where it was asked)
    job: JobFigures | None = None  # by work: what the workload's work takes there (None: unknown)


@dataclass(frozen=True)
class JobFigures:
    """What a workload's work takes on a pool: the units its grant does per second (throughput.yaml
    x the devices granted), the run time, and what the whole job costs and emits."""

    rate: float
    run_s: float
    cost: float
    carbon_g: float

    @classmethod
    def of(cls, verdict: PoolVerdict, work: float | None) -> JobFigures | None:
        """The figures of ``work`` units on the pool of ``verdict`` (None: no throughput known)."""
        if work is None or verdict.work_rate is None or verdict.work_rate <= 0:
            return None
        run_s = work / verdict.work_rate
        return cls(verdict.work_rate, run_s, verdict.grant_cost_per_hour * run_s / 3600, verdict.grant_carbon_per_hour * run_s / 3600)


@dataclass(frozen=True)
class Explanation:
    """Why a placement went where it did: the tier it was placed in, the objective, and the
    admissible pools of that tier ranked as the objective ranks them (the winner first)."""

    tier: int | None
    objective: str
    carbon_weight: float
    standings: tuple[Standing, ...]
    decided_at: datetime | None = None  # the decision's time, its estimates judged at


def decision_json(decision: Decision, record: DecisionRecord | None = None) -> dict[str, object]:
    """A decision as ``--json`` prints it (``outcome`` first, then every field, each pool's start
    estimate under its verdict where it was asked; the chosen pool's as the decision's own:
    ``estimated_start``, ``estimate_source``, ``estimate_observed_at`` and, without a start,
    ``estimate_reason``); with its record, the record's id, times, job and lease."""
    body: dict[str, object] = {"outcome": decision.outcome, **cast(JSONObject, _plain(decision))}
    estimate = getattr(decision, "estimate", None)
    shown = estimate.as_json() if isinstance(estimate, StartEstimate) else {}
    body.update(
        estimated_start=shown.get("estimated_start"), estimate_source=shown.get("estimate_source"),
        estimate_observed_at=shown.get("observed_at"), estimate_reason=shown.get("reason"),
    )  # fmt: skip
    work = decision.workload.work
    rows = body.get("verdicts")
    if work is not None and isinstance(rows, list):
        # What the workload's work takes on each pool (null where no throughput is known).
        for row, v in zip(rows, decision.verdicts):
            job = JobFigures.of(v, work)
            row.update(
                run_s=None if job is None else round(job.run_s, 3), cost_per_job=None if job is None else round(job.cost, 6),
                carbon_g_per_job=None if job is None else round(job.carbon_g, 3),
            )  # fmt: skip
    if record is not None:
        body.update(
            id=record.id, decision_id=record.id, created_at=record.created_at, released_at=record.released_at, job_id=record.job_id,
            request_id=record.request_id, lease_expires_at=record.lease_expires_at, scheduler=record.scheduler, job_uid=record.job_uid,
            job_state=record.job_state, queued_id=record.queued_id, job_started_at=record.job_started_at, job_ended_at=record.job_ended_at,
            node_down_at=record.node_down_at, lease_ended=record.lease_ended, preempting_for=record.preempting_for,
            preempted_by=record.preempted_by, preempted=list(record.preempted),
        )  # fmt: skip
        if record.queue is not None:
            body["queue"] = queue_entry_json(record.queue)
    return body


def queue_entry_json(entry: QueueEntry) -> JSONObject:
    """A queued record's place in the queue as ``--json`` prints it (``queue``, and ``place
    --queue``/``decisions``/``explain``): what it waits for as reason code -> pools."""
    body = cast(JSONObject, _plain(entry))
    body["waits_for"] = dict(entry.waits_for)
    return body


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "ok")


def _plain(value: object) -> JSONValue:
    """Like ``dataclasses.asdict`` without its deep copies (a large fleet's explanation holds
    thousands of verdicts sharing reason and grant objects)."""
    if isinstance(value, StartEstimate):
        return value.as_json()
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, Record):
        return {name: _plain(getattr(value, name)) for name in value.FIELDS}
    if isinstance(value, (tuple, list)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return cast(JSONValue, value)


# -- the queue, quotas, reconcile -------------------------------------------------------------------

@dataclass(frozen=True)
class Submit:
    """How a queued workload is handed to its scheduler once placed: ``slurm`` with the batch
    script's text (written to a private file at submission), or ``kubernetes`` with an image (and
    a namespace, a context, a kubeconfig, a command). Its scheduler checks it when it is placed
    (``Scheduler.check_queued``, through the registry ``app.schedulers``)."""

    scheduler: str
    options: Mapping[str, JSONValue]

    @classmethod
    def slurm(cls, script: Path) -> Submit:
        """The script's text is kept (the job runs what it said when it was queued)."""
        from examlops_policy import specs

        path = script.expanduser()
        if not path.is_file():
            raise SpecError("no such job script (a regular file is needed)", source=str(script), field="--script")
        return cls("slurm", {"script": specs.read_text(path), "name": path.name})

    @classmethod
    def kubernetes(cls, image: str, **options: JSONValue) -> Submit:
        return cls("kubernetes", {"image": image, **{k: v for k, v in options.items() if v not in (None, [], "")}})

    def text(self) -> str:
        """As the queue stores it: compact, sorted-key JSON."""
        return json.dumps({"scheduler": self.scheduler, **self.options}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_text(cls, text: str) -> Submit:
        raw = cast(JSONObject, json.loads(text))
        return cls(str(raw.pop("scheduler")), raw)



@dataclass(frozen=True)
class QueueEntry:
    """A queued record's place in the queue: ``state`` (queued, admitted, cancelled, failed), its
    place in the order (``position`` of ``of``, when it waits and the order was asked), since when it
    waits, what it waits for (reason code -> pools), the order's reason for its place, the placement
    that admitted it, when it ended and why (``message``), and whether it is submitted when admitted
    (``submission``: the scheduler)."""

    id: str
    workload: str
    state: str
    queued_at: str
    project: str | None
    priority: str | None
    accelerator: str
    devices: float
    position: int | None = None
    of: int | None = None
    waited_s: float | None = None
    waits_for: tuple[tuple[str, int], ...] = ()
    order_reason: str | None = None
    admitted_by: str | None = None
    ended_at: str | None = None
    message: str | None = None
    submission: str | None = None
    preempted_from: str | None = None
    invalid: tuple[str, ...] = ()
    # The reservation it holds on the capacity it needs (the policy's words), when it is the first
    # waiting workload that does not fit (later work of its class or below is held back from it).
    reservation: str | None = None
    # Preemption: while it waits, why its class (one that may preempt) takes no grant, in the
    # policy's reasons; once admitted, the grants it took.
    preemption: str | None = None
    preempted: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueListing:
    """The queue in the policy's order (``entries``), and the workloads the order could not judge
    (``invalid``: never offered capacity until fixed), with the fair-share figures per project."""

    entries: tuple[QueueEntry, ...]
    projects: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Admitted:
    """A queued workload admitted: its queued record, the placement made for it, the pool, and its
    job when it was submitted (or why not)."""

    queued_id: str
    decision_id: str
    workload: str
    pool: str
    job_id: str | None = None
    scheduler: str | None = None
    submit_error: str | None = None
    preempted: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdmissionReport:
    """One admission pass: what was admitted, what failed (its submission refused), what still waits."""

    admitted: tuple[Admitted, ...]
    failed: tuple[QueueEntry, ...]
    waiting: int
    revision: str | None = None
    # Waiting workloads whose class may preempt and that took no grant: (queued id, workload, why).
    not_preempted: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Cancelled:
    """A queued workload cancelled (``already``: it was cancelled before, at ``entry.ended_at``)."""

    entry: QueueEntry
    already: bool


@dataclass(frozen=True)
class QuotaRow:
    """Use against quota, per project and accelerator class, as the policy's report words it."""

    project: str
    accelerator: str
    held: float
    nominal: float | None
    borrowing_limit: float | None
    cohort: str | None
    borrowed: float
    room: float | None
    device_hours: float
    device_hours_quota: float | None
    period_days: float | None
    summary: str


@dataclass(frozen=True)
class ReconcileChange:
    """One change reconcile wrote: ``kind`` (ended, started, node, node_down, node_up, missing) on
    a decision or a node, with what the scheduler said."""

    kind: str
    scheduler: str
    decision_id: str | None = None
    job_id: str | None = None
    state: str | None = None
    pool: str | None = None
    node: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    text: str = ""


@dataclass(frozen=True)
class ReconcileReport:
    """What reconcile read and wrote: each change, and each scheduler it could not read (with why)."""

    changes: tuple[ReconcileChange, ...]
    unreadable: tuple[tuple[str, str], ...] = ()
    checked: int = 0


# -- start estimates, for people -----------------------------------------------------------------


def duration_text(seconds: float) -> str:
    """Whole seconds for people, the two largest units: ``45 s``, ``1 m 30 s``, ``2 h 05 m``,
    ``1 d 01 h`` (the wait policy's ``duration_text``, which words ``max_wait`` in its
    messages)."""
    s = int(math.floor(seconds))
    for size, big, small, next_size in ((86400, "d", "h", 3600), (3600, "h", "m", 60), (60, "m", "s", 1)):
        if s >= size:
            whole, part = divmod(s, size)
            part //= next_size
            return f"{whole} {big}" if part == 0 else f"{whole} {big} {part:02d} {small}"
    return f"{s} s"


def start_text(estimate: StartEstimate, now: datetime) -> str:
    """An estimate for people, seen from ``now``: ``slurm: expected start 14:20 UTC (in 2 h 05 m)``,
    ``now: starts now``, ``table: expected start 12:10 UTC (in 10 m; provisioning at most 10 m ...)``,
    ``slurm: no estimate (Slurm's controller does not answer ...)``, ``table: no estimate (provider
    not in the provisioning table: ...)``; with nobody to ask (source ``now``) just ``no estimate
    (...)``, never "now: no estimate". A start on another day than ``now`` says its date."""
    if estimate.at is None:
        return f"no estimate ({estimate.reason})" if estimate.source == "now" else f"{estimate.source}: no estimate ({estimate.reason})"
    wait = estimate.wait(now)
    if "instead_of" in estimate.facts:
        # --own-capacity-estimate: the layer's own account stood in for a scheduler's missing answer.
        return f"now: starts now by this layer's own account ({estimate.facts['instead_of']} gave no estimate: {estimate.facts.get('unanswered')})"
    if estimate.source == "now" or (wait is not None and wait.total_seconds() <= NOW_WITHIN_S):
        return f"{estimate.source}: starts now"
    at = estimate.at.astimezone(timezone.utc)
    when = at.strftime("%H:%M UTC") if at.date() == now.astimezone(timezone.utc).date() else at.strftime("%Y-%m-%d %H:%M UTC")
    after = f"in {duration_text(wait.total_seconds())}" if wait is not None else ""
    if estimate.source == "table" and "delay_s" in estimate.facts:
        kind = "typical" if estimate.facts.get("typical") else "at most"
        after += f"; provisioning {kind} {duration_text(float(str(estimate.facts['delay_s'])))}"
    return f"{estimate.source}: expected start {when} ({after})"


def wait_text(estimate: StartEstimate | None, now: datetime | None) -> str:
    """When a pool would start, in a few words, seen from the decision's time ``now``: ``now``,
    ``in 2 h 05 m``, or ``with no estimate``."""
    if estimate is None or estimate.at is None or now is None:
        return "with no estimate"
    wait = estimate.wait(now)
    return "now" if wait is None or wait.total_seconds() <= NOW_WITHIN_S else f"in {duration_text(wait.total_seconds())}"

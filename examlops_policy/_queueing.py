"""The queue, as library workflows: workloads that wait for capacity, the order the policy offers it
to them in, admission, cancel, quotas and preemption (``Hardware.place(queue=True)``,
``Hardware.queue``, ``Hardware.admit``, ``Hardware.cancel``, ``Hardware.quotas``).

Only a workload whose pools are stopped by ``not_now`` reasons alone waits (the policy's
``no_capacity``); its decision is recorded as ``queued``, with its row in the queue. Admission (one
pass, nothing held while OPA or a scheduler is asked): the waiting rows and the projects' use over
the fair-share window go to the policy's order (``data.examlops.queue.order.ranked``, asked once
per pass); then each position in turn is judged again under the policy revision served now, and
placed when it fits, in one write transaction that claims its row (a conditional update) and links
the placement to it. A position that does not fit does not block those behind it (Kueue's
BestEffortFIFO). A workload whose class may preempt and that fits nowhere asks the policy which
grants it may take (``data.examlops.queue.preemption.victims``); the victims are marked, their jobs
cancelled through their executors, then released and the workload admitted in one transaction,
and the victims queued again (keeping their age). After a placement commits, a workload queued
with a submission is submitted; a refusal releases it and fails its row, a scheduler that cannot
be reached is tried again at the next pass (``SUBMIT_ATTEMPTS`` in all).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from examlops_policy import specs
from examlops_policy._core import codec, commit
from examlops_policy._core.request import Request
from examlops_policy.errors import ExaError, ExecutorError, PolicyError, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, JSONValue, Placement, Rejection, Workload
from examlops_policy.store import StaleFleet
from examlops_policy.store.api import GrantRow, QueueRow
from examlops_policy.views import AdmissionReport, Admitted, Cancelled, DecisionRecord, QueueEntry, QueueListing, QuotaRow, Submit

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine, Prepared
    from examlops_policy._core.records import Reader
    from examlops_policy._core.state import Capacities, Snapshot
    from examlops_policy._core.waiting import Starts
    from examlops_policy._core.verdicts import PolicyEvaluator
    from examlops_policy.model import Pool
    from examlops_policy.store import Store
    from examlops_policy.tables import Tables
    from examlops_policy.views import Submission


class Hardware(Protocol):
    """What the queue's workflows need of the façade (``examlops_policy.hardware.Hardware``): its
    store, policy and tables, the decision path (a snapshot, a decision under the current policy
    snapshot), recorded decisions, placing, and what submission needs."""

    @property
    def store(self) -> Store: ...

    @property
    def tables(self) -> Tables: ...

    @property
    def policy(self) -> PolicyEvaluator: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def records(self) -> Reader: ...

    @property
    def _capacities(self) -> Capacities: ...

    def _current(self, *, force: bool = False) -> Any: ...

    def _snapshot(self) -> Snapshot: ...

    def _decide(self, request: Request, snap: Snapshot, under: Any) -> tuple[Any, Prepared, Starts, Decision]: ...

    def decision(self, ident: str) -> DecisionRecord: ...

    def place(
        self, workload: Workload, *, request_id: str | None = None, lease: timedelta | None = None, queue: bool = False,
        submission: Submit | None = None, queued_at: str | None = None, preempted_from: str | None = None,
    ) -> DecisionRecord: ...  # fmt: skip

    def pool_by_name(self, name: str) -> Pool: ...

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None) -> DecisionRecord: ...

    def mark_job(self, ident: str, state: str) -> DecisionRecord: ...

ORDER_RULE: Final = "examlops/queue/order/ranked"
VICTIMS_RULE: Final = "examlops/queue/preemption/victims"
REPORT_RULE: Final = "examlops/queue/quotas/report"
SUBMIT_ATTEMPTS: Final = 3
# Words in an executor's error that say the scheduler did not answer (try again), not that it refused.
_UNREACHABLE: Final = (
    "command not found", "no answer within", "Unable to contact", "Socket timed out", "Connection refused", "Unreachable",
    "Timeout", "could not be reached", "slurm_load_jobs error", "Zero Bytes were transmitted",
)  # fmt: skip
_PREEMPTABLE_CODES: Final = frozenset({"capacity_exhausted", "slice_unavailable", "quota_exceeded"})


class Queries(Protocol):
    """A policy that answers the queue's entry points."""

    def query(self, path: str, policy_input: JSONObject) -> object: ...


def rfc3339(ts: float | None = None) -> str:
    moment = datetime.now(timezone.utc) if ts is None else datetime.fromtimestamp(ts, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- what the queue keeps of a workload --------------------------------------------------------


def workload_spec(workload: Workload) -> str:
    """The workload in full (every field that differs from its default), as the queue keeps it."""
    out: JSONObject = {}
    for f in dataclasses.fields(Workload):
        value = getattr(workload, f.name)
        if value != f.default:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return codec.canonical(out).decode("utf-8")


def workload_from_spec(text: str) -> Workload:
    return specs.workload_from_mapping(cast(JSONObject, json.loads(text)), source="the queue")


def asks(workload: Workload) -> float:
    """Devices the workload asks for, for the order (a fraction counts as its share)."""
    return float(workload.count * workload.nodes) if workload.fraction >= 1 else float(workload.fraction)


# -- the order -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranked:
    """The policy's order of the queue: positions (each {position, id, project, priority, rank,
    fair_share, waited_s, accelerator, devices, reason}), the rows it could not judge, and the
    projects' fair-share figures."""

    order: tuple[Mapping[str, JSONValue], ...]
    invalid: Mapping[str, tuple[str, ...]]
    projects: JSONObject

    def position(self, ident: str) -> Mapping[str, JSONValue] | None:
        for p in self.order:
            if p.get("id") == ident:
                return p
        return None


def usage(hw: Hardware, now_ts: float) -> dict[str, list[list[float]]]:
    """Each project's device-hours per bucket of the fair-share window, each bucket aged at its
    middle (fair_share.yaml), from the placements that held devices in the window."""
    tables = hw.tables
    fs = tables.fair_share
    window_h = float(cast(float, fs.get("window_hours", 672)))
    bucket_h = float(cast(float, fs.get("bucket_hours", 24)))
    width = bucket_h * 3600.0
    since = now_ts - window_h * 3600.0
    n = max(1, int(round(window_h / bucket_h)))
    buckets: dict[str, dict[int, float]] = {}
    for project, devices, start, end in hw.store.usage_rows(since, now_ts, tables.unassigned):
        s, e = max(start, since), min(end, now_ts)
        if e <= s:
            continue
        first, last = int((now_ts - e) // width), min(n - 1, int((now_ts - s) // width))
        for b in range(max(0, first), last + 1):
            lo, hi = now_ts - (b + 1) * width, now_ts - b * width
            overlap = min(e, hi) - max(s, lo)
            if overlap > 0:
                row = buckets.setdefault(project, {})
                row[b] = row.get(b, 0.0) + devices * overlap / 3600.0
    return {p: [[(b + 0.5) * bucket_h, round(h, 6)] for b, h in sorted(rows.items()) if h > 0] for p, rows in sorted(buckets.items())}


def order_item(row: QueueRow) -> JSONObject:
    return {"id": row.id, "project": row.project, "priority": row.priority, "queued_at": row.queued_at, "accelerator": row.accelerator, "devices": row.devices}


def store_now(hw: Hardware) -> float:
    """Now, by the store's clock (what writes are recorded at)."""
    return commit.epoch_of(hw.store.now())


def rank(hw: Hardware, rows: Sequence[QueueRow], *, extra: Sequence[JSONObject] = (), now_ts: float | None = None) -> Ranked:
    """The policy's order of ``rows`` (and ``extra`` items), asked once."""
    now_ts = store_now(hw) if now_ts is None else now_ts
    items = [order_item(r) for r in rows] + list(extra)
    if not items:
        return Ranked((), {}, {})
    policy_input: JSONObject = {"now": rfc3339(now_ts), "queue": cast(JSONValue, items), "usage": cast(JSONValue, usage(hw, now_ts))}
    raw = _query(hw, ORDER_RULE, policy_input)
    if not isinstance(raw, dict) or not isinstance(raw.get("order"), list):
        raise PolicyError("the policy's queue order (examlops.queue.order.ranked) gave a malformed answer")
    errors = raw.get("errors") or []
    if errors:
        raise PolicyError(f"the policy's queue order refused its input: {json.dumps(errors)[:300]}")
    invalid = {
        str(i["id"]): tuple(str(cast(JSONObject, r).get("message", r)) for r in cast(list[JSONValue], i.get("reasons") or []))
        for i in cast(list[JSONObject], raw.get("invalid") or [])
    }
    return Ranked(tuple(cast(list[JSONObject], raw["order"])), invalid, cast(JSONObject, raw.get("projects") or {}))


def _query(hw: Hardware, path: str, policy_input: JSONObject) -> object:
    """One of the queue's entry points, under the revision the policy files have (confirmed)."""
    hw.engine.confirm()
    query = getattr(hw.policy, "query", None)
    if query is None:
        raise PolicyError(f"the policy evaluator {type(hw.policy).__name__} does not answer the queue's queries")
    return cast(Queries, hw.policy).query(path, policy_input)


# -- entries as people see them ---------------------------------------------------------------


def entry_of(row: QueueRow, ranked: Ranked | None = None, now_ts: float | None = None) -> QueueEntry:
    place = ranked.position(row.id) if ranked is not None else None
    waits = tuple(sorted(cast(dict[str, int], json.loads(row.waits_for)).items())) if row.waits_for else ()
    submission = Submit.from_text(row.submission).scheduler if row.submission else None
    waited = None
    if row.state == "queued":
        waited = round((time.time() if now_ts is None else now_ts) - row.queued_ts, 3)
    return QueueEntry(
        id=row.id, workload=row.workload, state=row.state, queued_at=row.queued_at, project=row.project, priority=row.priority,
        accelerator=row.accelerator, devices=row.devices,
        position=int(cast(int, place["position"])) if place else None, of=len(ranked.order) if ranked and place else None,
        waited_s=waited, waits_for=waits, order_reason=str(place["reason"]) if place and place.get("reason") else None,
        admitted_by=row.admitted_by, ended_at=row.ended_at, message=row.message, submission=submission,
        preempted_from=row.preempted_from,
        invalid=tuple(ranked.invalid.get(row.id, ())) if ranked is not None else (),
    )  # fmt: skip


def listing(hw: Hardware, *, every: bool = False) -> QueueListing:
    """The waiting workloads in the order they are offered capacity (then those the order cannot
    judge); with ``every``, the admitted, cancelled and failed ones after them (oldest first)."""
    rows = hw.store.queue_rows(("queued",))
    now_ts = store_now(hw)
    ranked = rank(hw, rows, now_ts=now_ts) if rows else Ranked((), {}, {})
    by_id = {r.id: r for r in rows}
    entries = [entry_of(by_id[str(p["id"])], ranked, now_ts) for p in ranked.order if str(p["id"]) in by_id]
    entries += [entry_of(by_id[i], ranked, now_ts) for i in sorted(ranked.invalid) if i in by_id]
    if every:
        entries += [entry_of(r) for r in hw.store.queue_rows(("admitted", "cancelled", "failed"))]
    return QueueListing(tuple(entries), ranked.projects)


def entry(hw: Hardware, ident: str) -> QueueEntry | None:
    """A queued record's entry, its place in the order asked when it waits (None: no queue row)."""
    row = hw.store.queue_find(ident) if ident else None
    if row is None:
        return None
    if row.state != "queued":
        return entry_of(row)
    rows = hw.store.queue_rows(("queued",))
    return entry_of(row, rank(hw, rows))


# -- queueing a placement ------------------------------------------------------------------------


def intent(hw: Hardware, workload: Workload, decided: Decision | None, ident: str, *, lease: timedelta | None, submission: Submit | None,
           queued_at: str | None = None, preempted_from: str | None = None) -> commit.QueueIntent:  # fmt: skip
    """What a placement that may wait writes to the queue; when it waits now (``decided`` is only
    full), its place in the order is asked first (the waiting rows and this one)."""
    position: int | None = None
    of: int | None = None
    if decided is not None:
        at = queued_at or hw.store.now()
        candidate: JSONObject = {"id": ident, "project": workload.project, "priority": workload.priority, "queued_at": at,
                                 "accelerator": workload.accelerator, "devices": asks(workload)}  # fmt: skip
        ranked = rank(hw, hw.store.queue_rows(("queued",)), extra=[candidate])
        place = ranked.position(ident)
        position, of = (int(cast(int, place["position"])) if place else None), len(ranked.order)
    return commit.QueueIntent(
        spec=workload_spec(workload), accelerator=workload.accelerator, devices=asks(workload), project=workload.project,
        priority=workload.priority, lease_s=None if lease is None else lease.total_seconds(),
        submission=None if submission is None else submission.text(), queued_at=queued_at, preempted_from=preempted_from,
        position=position, of=of,
    )  # fmt: skip


# -- admission ----------------------------------------------------------------------------------


def admit(hw: Hardware, *, limit: int | None = None) -> AdmissionReport:
    """One admission pass (see the module docstring)."""
    store = hw.store
    admitted: list[Admitted] = []
    failed: list[QueueEntry] = []
    admitted += _retry_submissions(hw, failed)
    _finish_preemptions(hw)
    if not store.queue_waiting():
        return AdmissionReport(tuple(admitted), tuple(failed), 0, None)
    rows = store.queue_rows(("queued",))
    ranked = rank(hw, rows)
    by_id = {r.id: r for r in rows}
    for place in ranked.order:
        if limit is not None and len(admitted) >= limit:
            break
        row = by_id.get(str(place["id"]))
        if row is None:
            continue
        done = admit_one(hw, row)
        if isinstance(done, Admitted):
            admitted.append(done)
        elif done is not None:
            failed.append(done)
    waiting = len(store.queue_rows(("queued",)))
    return AdmissionReport(tuple(admitted), tuple(failed), waiting, hw.engine.reviewed)


def admit_one(hw: Hardware, row: QueueRow) -> Admitted | QueueEntry | None:
    """Judge one waiting workload again and place it when it fits (claiming its row); preempt when
    its class may and it fits nowhere. Admitted, the entry of a workload that failed, or None
    (it still waits)."""
    try:
        workload = workload_from_spec(row.spec)
    except SpecError as exc:
        return _fail(hw, row, f"its workload no longer reads as valid: {exc}")
    request = Request(workload)
    lease = None if row.lease_s is None else timedelta(seconds=row.lease_s)
    preempted: tuple[str, ...] = ()
    for _ in range(FLEET_ROUNDS):
        under = hw._current()
        snap = hw._snapshot()
        under, prepared, starts, decided = hw._decide(request, snap, under)
        if not isinstance(decided, Placement):
            if not commit.queueable(decided):
                return _fail(hw, row, f"the policy now refuses it: {getattr(decided, 'reason', '')}")
            victims = _preemption(hw, row, workload, decided)
            if not victims:
                return None
            preempted = victims
            snap = hw._snapshot()
        try:
            # The lease is counted from the commit that records the placement, as for place.
            done = commit.place(
                hw.store, prepared, decided, snap, under.capacities, source=SOURCE, lease=lease, starts=starts, admit=row.id,
                preempted=preempted,
            )  # fmt: skip
        except StaleFleet:
            continue
        if done.not_admitted is not None:
            if preempted:
                _requeue_victims(hw, preempted)
            return None
        record = done.record if done.record is not None else hw.records.record(cast(Any, done.earlier))
        result = Admitted(row.id, record.id, workload.name, str(getattr(record.decision, "pool", "")), preempted=preempted)
        if preempted:
            _requeue_victims(hw, preempted)
        if row.submission:
            return _submit(hw, row, result)
        return result
    return None


FLEET_ROUNDS: Final = 5
SOURCE: Final = "exa-hardware"


def _fail(hw: Hardware, row: QueueRow, message: str) -> QueueEntry | None:
    after = commit.fail_queued(hw.store, hw._capacities, row.id, message, source=SOURCE)
    return None if after is None else entry_of(after)


# -- submission once admitted -----------------------------------------------------------------------


def _transient(exc: ExaError) -> bool:
    text = str(exc)
    return any(word in text for word in _UNREACHABLE) or getattr(exc, "reason", None) in ("Unreachable", "TLS", "Timeout")


def _submit(hw: Hardware, row: QueueRow, admitted: Admitted) -> Admitted | QueueEntry | None:
    """Hand an admitted workload's placement to its scheduler. A refusal fails the row (its
    placement released); a scheduler that does not answer is tried again at the next pass."""
    assert row.submission is not None
    sub = Submit.from_text(row.submission)
    try:
        done = hand_over(hw, admitted.decision_id, sub)
    except ExaError as exc:
        if isinstance(exc, ExecutorError) and _transient(exc):
            attempts = commit.note_submission(hw.store, row.id, str(exc), source=SOURCE)
            if attempts < SUBMIT_ATTEMPTS:
                return dataclasses.replace(admitted, scheduler=sub.scheduler, submit_error=f"{exc} (tried {attempts} of {SUBMIT_ATTEMPTS} times)")
        return _fail(hw, row, f"{sub.scheduler} refused its submission: {exc}")
    return dataclasses.replace(admitted, job_id=done.job_id, scheduler=sub.scheduler)


def hand_over(hw: Hardware, decision_id: str, sub: Submit) -> Submission:
    """Submit the live placement ``decision_id`` as ``sub`` says (the queued script's text in a
    private file while sbatch reads it); the job is recorded on the decision. ExaError as
    ``Hardware.submit`` raises it."""
    from examlops_policy import _submitting

    if sub.scheduler == "slurm":
        with _script_file(str(sub.options["script"]), str(sub.options.get("name") or "job.sh")) as script:
            return _submitting.submit(hw, decision_id, "slurm", dry_run=False, script=str(script))
    options = {k: v for k, v in sub.options.items() if k in ("image", "namespace", "command", "context", "kubeconfig")}
    return _submitting.submit(hw, decision_id, "kubernetes", dry_run=False, **options)


def submit_placed(hw: Hardware, record: DecisionRecord, sub: Submit) -> DecisionRecord:
    """A workload placed with a submission for when it is admitted that fitted at once (nothing
    queued): it is submitted now, as admission would have, and its record read again with the
    job. When the scheduler refuses or cannot be reached, the placement stays (recorded, live) and
    ``ExecutorError`` says so, naming the decision to submit again or release."""
    try:
        hand_over(hw, record.id, sub)
    except ExaError as exc:
        pool = str(getattr(record.decision, "pool", ""))
        how = "--script FILE" if sub.scheduler == "slurm" else "--kubernetes --image IMAGE"
        raise ExecutorError(
            f"{record.decision.workload.name} fitted at once and was placed on pool {pool} (decision {record.id}), but its "
            f"submission to {sub.scheduler} failed: {exc}; the placement holds its devices: submit it again with "
            f"'exa hardware submit {record.id[:12]} {how}' or release it with 'exa hardware release {record.id[:12]}'"
        ) from exc
    return hw.decision(record.id)


class _script_file:
    """The queued batch script, in a private file while sbatch reads it (Slurm keeps its own copy)."""

    def __init__(self, text: str, name: str) -> None:
        self._text, self._name = text, name
        self._dir: str | None = None

    def __enter__(self) -> Path:
        self._dir = tempfile.mkdtemp(prefix="exa-queued-")
        path = Path(self._dir) / (Path(self._name).name or "job.sh")
        path.write_text(self._text, encoding="utf-8")
        os.chmod(path, 0o700)
        return path

    def __exit__(self, *_: object) -> None:
        if self._dir is not None:
            for child in Path(self._dir).iterdir():
                child.unlink(missing_ok=True)
            os.rmdir(self._dir)


def _retry_submissions(hw: Hardware, failed: list[QueueEntry]) -> list[Admitted]:
    """Admitted workloads whose submission could not reach their scheduler: tried again."""
    out: list[Admitted] = []
    for row in hw.store.queue_rows(("admitted",)):
        if not row.submission or row.admitted_by is None or row.attempts == 0:
            continue
        record = hw.decision(row.admitted_by)
        if record.released_at is not None or record.job_id is not None:
            continue
        done = _submit(hw, row, Admitted(row.id, record.id, row.workload, str(getattr(record.decision, "pool", ""))))
        if isinstance(done, Admitted):
            out.append(done)
        elif done is not None:
            failed.append(done)
    return out


# -- preemption ---------------------------------------------------------------------------------


def _class(hw: Hardware, priority: str | None) -> Mapping[str, JSONValue]:
    classes = cast(Mapping[str, Mapping[str, JSONValue]], hw.tables.priorities.get("classes") or {})
    return classes.get(priority or hw.tables.default_priority or "", {})


def _preemption(hw: Hardware, row: QueueRow, workload: Workload, decided: Rejection) -> tuple[str, ...]:
    """The grants a waiting workload takes by preemption (marked for it, their jobs cancelled), or
    nothing: its class may not preempt, the policy finds no plan, or a cancel failed (the marks
    stay; the next pass finishes them)."""
    if not _class(hw, workload.priority).get("may_preempt"):
        return ()
    snap = hw._snapshot()
    pools: list[JSONValue] = []
    for v in decided.verdicts:
        reasons = [r for r in v.reasons if r.kind != "preference"]
        if not reasons or any(r.kind != "not_now" or r.code not in _PREEMPTABLE_CODES for r in reasons):
            continue
        state = snap.states[snap.index[v.pool]]
        pools.append({"name": v.pool, "spot": state.pool.spot, "free": state.capacity.whole, "devices": v.grant.devices})
    if not pools:
        return ()
    grants = [g for g in hw.store.live_grants(pools=[str(cast(JSONObject, p)["name"]) for p in pools]) if g.preempting_for in (None, row.id)]
    unassigned, default = hw.tables.unassigned, hw.tables.default_priority
    pairs = sorted({(g.project or unassigned, g.accelerator) for g in grants} | {(workload.project or unassigned, g.accelerator) for g in grants})
    held = hw.store.quota_held(pairs, unassigned)
    use: dict[str, dict[str, float]] = {}
    for (p, c), n in held.items():
        use.setdefault(p, {})[c] = n
    policy_input: JSONObject = {
        "workload": {"id": row.id, "project": workload.project, "priority": workload.priority},
        "pools": pools,
        "grants": [
            {"id": g.id, "project": g.project, "priority": g.priority or default, "pool": g.pool, "accelerator": g.accelerator,
             "devices": g.devices, "placed_at": g.created_at}
            for g in grants
        ],  # fmt: skip
        "quota_use": {"devices": cast(JSONValue, use)},
    }
    answer = _query(hw, VICTIMS_RULE, policy_input)
    plan = cast(JSONObject, answer).get("plan") if isinstance(answer, dict) else None
    if not isinstance(plan, dict) or not plan.get("victims"):
        return ()
    victims = [str(v) for v in cast(list[JSONValue], plan["victims"])]
    marked = commit.mark_preemption(hw.store, row.id, victims, plan, source=SOURCE)
    if not marked:
        return ()
    for victim in marked:
        if not _cancel_job(hw, victim):
            return ()
    return tuple(marked)


def _cancel_job(hw: Hardware, ident: str) -> bool:
    """Cancel a victim's job through its executor (none: nothing to cancel). False when it could
    not be cancelled (the mark stays; the next pass tries again)."""
    from examlops_policy import _submitting

    record = hw.decision(ident)
    if record.job_id is None or record.job_state in ("missing",) or record.job_ended_at is not None:
        return True
    try:
        _submitting.cancel(record)
    except ExaError:
        return False
    return True


def _requeue_victims(hw: Hardware, victims: Sequence[str]) -> None:
    """Victims released by a preemption wait again, keeping their age: placed anew when there is
    room elsewhere, else queued (``preempted_from`` set)."""
    for victim in victims:
        grant = hw.store.grant(victim)
        if grant is None or grant.released_ts is None:
            continue
        _requeue(hw, grant)


def _requeue(hw: Hardware, grant: GrantRow) -> None:
    origin = hw.store.queue_of(grant.id)
    record = hw.decision(grant.id)
    workload = workload_from_spec(origin.spec) if origin is not None else record.decision.workload
    submission = Submit.from_text(origin.submission) if origin is not None and origin.submission else None
    lease = timedelta(seconds=origin.lease_s) if origin is not None and origin.lease_s else None
    queued_at = origin.queued_at if origin is not None else grant.created_at
    try:
        hw.place(workload, queue=True, lease=lease, submission=submission, queued_at=queued_at, preempted_from=grant.id)
    except (StateError, PolicyError):
        pass  # the next pass finds it again (its mark stays until it is queued)


def _finish_preemptions(hw: Hardware) -> None:
    """Preemptions a crash or a failed cancel left half done: marks on live grants whose workload
    no longer waits are taken off; released victims not queued again are queued again."""
    for grant in hw.store.preempted():
        if grant.released_ts is None:
            row = hw.store.queue_find(grant.preempting_for) if grant.preempting_for else None
            if row is None or row.state != "queued":
                commit.unmark_preemption(hw.store, grant.id, source=SOURCE)
        else:
            _requeue(hw, grant)


# -- cancel, quotas --------------------------------------------------------------------------------


def cancel(hw: Hardware, ident: str) -> Cancelled:
    row = hw.store.queue_find(ident)
    after, already = commit.cancel_queued(hw.store, row.id, source=SOURCE)
    return Cancelled(entry_of(after), already)


def quota_use_all(hw: Hardware, now_ts: float) -> JSONObject:
    """What every project of the quotas table holds of each class it has a quota of, and its
    device-hours in the period of each (the quotas report's input)."""
    tables = hw.tables
    projects = cast(Mapping[str, Mapping[str, JSONValue]], tables.quotas.get("projects") or {})
    pairs = sorted({(p, c) for p, q in projects.items() for c in cast(Mapping[str, object], q.get("accelerators") or {})})
    held = hw.store.quota_held(pairs, tables.unassigned)
    devices: dict[str, dict[str, float]] = {}
    hours: dict[str, dict[str, float]] = {}
    for p, c in pairs:
        if held.get((p, c)):
            devices.setdefault(p, {})[c] = held[(p, c)]
        entry = cast(Mapping[str, JSONValue], cast(Mapping[str, JSONValue], projects[p].get("accelerators") or {}).get(c) or {})
        days = entry.get("period_days")
        if isinstance(days, (int, float)) and entry.get("device_hours") is not None:
            h = hw.store.device_hours(p, c, now_ts - float(days) * 86400.0, now_ts, tables.unassigned)
            if h > 0:
                hours.setdefault(p, {})[c] = round(h, 6)
    return {"devices": cast(JSONValue, devices), "device_hours": cast(JSONValue, hours)}


def quotas(hw: Hardware) -> list[QuotaRow]:
    """Use against quota per project and class, in the policy's words (its quotas report)."""
    raw = _query(hw, REPORT_RULE, {"quota_use": quota_use_all(hw, store_now(hw))})
    if not isinstance(raw, list):
        raise PolicyError("the policy's quotas report (examlops.queue.quotas.report) gave a malformed answer")
    out = []
    for r in cast(list[JSONObject], raw):
        def num(name: str) -> float | None:
            value = r.get(name)
            return None if value is None else float(cast(float, value))

        out.append(
            QuotaRow(
                str(r["project"]), str(r["accelerator"]), num("held") or 0.0, num("nominal"), num("borrowing_limit"),
                cast("str | None", r.get("cohort")), num("borrowed") or 0.0, num("room"), num("device_hours") or 0.0,
                num("device_hours_quota"), num("period_days"), str(r.get("summary") or ""),
            )
        )  # fmt: skip
    return out


def record_entry(hw: Hardware, record: DecisionRecord) -> DecisionRecord:
    """A queued record with its queue entry (its place when it waits)."""
    if record.decision.outcome != "queued":
        return record
    found = entry(hw, record.id)
    return dataclasses.replace(record, queue=found)

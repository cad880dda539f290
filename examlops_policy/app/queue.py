"""The queue, as library workflows: workloads that wait for capacity, the order the policy offers it
to them in, admission, cancel, quotas and preemption (``Hardware.place(queue=True)``,
``Hardware.queue``, ``Hardware.admit``, ``Hardware.cancel``, ``Hardware.quotas``).

Only a workload whose pools are stopped by ``not_now`` reasons alone waits (the policy's
``no_capacity``); its decision is recorded as ``queued``, with its row in the queue. Admission (one
pass, nothing held while OPA or a scheduler is asked): the waiting rows and the projects' use over
the fair-share window go to the policy's order (``data.examlops.queue.order.ranked``, asked once
per pass); then each position in turn is judged again under the policy revision served now (its
queued decision's record, which the chain vouches for, not the queue row's copy), and placed when
it fits, in one write transaction that claims its row (a conditional update) and links the
placement to it. The first position that does not fit holds a reservation on the capacity it needs
(``data.examlops.queue.reservation.judged``): those behind it of its class or below take that
capacity only if they end before it could start (Slurm's backfill). A workload whose class may preempt and that fits nowhere asks the policy which
grants it may take (``data.examlops.queue.preemption.victims``); the victims are marked, their jobs
cancelled through their executors, then released and the workload admitted in one transaction,
and the victims queued again (keeping their age). After a placement commits, a workload queued
with a submission is submitted; a refusal releases it and fails its row, a scheduler that cannot
be reached is tried again at the next pass (``SUBMIT_ATTEMPTS`` in all).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Final, cast

from examlops_policy._core import codec, commit
from examlops_policy._core.request import Request
from examlops_policy.app.cycle import SOURCE, Decided, DecisionCycle, FleetKeptChanging, Skip, Write
from examlops_policy.errors import ExaError, ExecutorError, NotFoundError, PolicyError, SpecError, StateError
from examlops_policy.model import Decision, JSONObject, JSONValue, Placement, Pool, PoolVerdict, Rejection, Workload
from examlops_policy.store.api import GrantRow, QueueRow
from examlops_policy.views import AdmissionReport, Admitted, Cancelled, DecisionRecord, QueueEntry, QueueListing, QuotaRow, Submit, duration_text

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine
    from examlops_policy._core.records import Reader
    from examlops_policy._core.state import Snapshot
    from examlops_policy._core.verdicts import PolicyEvaluator
    from examlops_policy.app.ports import Clock, Jobs, Placer, Queries, State
    from examlops_policy.store import Store
    from examlops_policy.tables import Tables
    from examlops_policy.views import Submission


@dataclass(frozen=True)
class Queue:
    """What the queue's workflows work with: the decision cycle (the state, the policy snapshot,
    decisions and their commit), recorded decisions and their jobs (``Jobs``: submission), and who
    places a preempted grant's workload again (``Placer``)."""

    cycle: DecisionCycle
    jobs: Jobs
    placer: Placer

    @property
    def store(self) -> Store:
        return self.cycle.store

    @property
    def tables(self) -> Tables:
        return self.cycle.tables

    @property
    def policy(self) -> PolicyEvaluator:
        return self.cycle.policy

    @property
    def engine(self) -> Engine:
        return self.cycle.engine()

    @property
    def records(self) -> Reader:
        return self.cycle.records


ORDER_RULE: Final = "examlops/queue/order/ranked"
RESERVATION_RULE: Final = "examlops/queue/reservation/judged"
VICTIMS_RULE: Final = "examlops/queue/preemption/victims"
REPORT_RULE: Final = "examlops/queue/quotas/report"
SUBMIT_ATTEMPTS: Final = 3
# Words in an executor's error that say the scheduler did not answer (try again), not that it refused.
_UNREACHABLE: Final = (
    "command not found", "no answer within", "Unable to contact", "Socket timed out", "Connection refused", "Unreachable",
    "Timeout", "could not be reached", "slurm_load_jobs error", "Zero Bytes were transmitted",
)  # fmt: skip
_PREEMPTABLE_CODES: Final = frozenset({"capacity_exhausted", "slice_unavailable", "quota_exceeded"})


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
    from examlops_policy import specs

    return specs.workload_from_mapping(cast(JSONObject, json.loads(text)), source="the queue")


def vouched_workload(q: Queue, row: QueueRow) -> Workload:
    """What a waiting workload is placed as: its queued decision's record (whose digest its audit
    entry holds) with its priority class (which its queued entry states), never the queue row's
    ``spec`` (a copy ``exa audit verify`` holds to the record). StateError when the record is
    not a queued record."""
    document = codec.document_of(q.store.decision_row(row.id).document)
    if document.get("outcome") != "queued" or not isinstance(document.get("workload"), dict):
        raise StateError(f"queued workload {row.id[:12]} ({row.workload}) has no queued record to place it from (run exa audit verify)")
    workload = codec.workload_from_json(cast(Mapping[str, object], document["workload"]))
    return dataclasses.replace(workload, priority=row.priority)


def submission_vouched(q: Queue, row: QueueRow) -> str | None:
    """Why the queue row's submission is not the one its ``queued`` audit entry records (its
    digest), or None when it is (an entry from before entries held the digest: only whether there
    is one)."""
    entry = q.store.queued_entry(row.id)
    if entry is None:
        return "the audit log has no queued entry for it"
    digest = entry.get("submission_digest")
    if row.submission is None:
        return None if not entry.get("submission") else "its submission was removed from its queue row"
    if digest is None:
        return None if entry.get("submission") else "its queue row names a submission its queued entry does not record"
    if codec.digest(row.submission.encode("utf-8")) != digest:
        return "its submission is not the one it was queued with (the digest in its queued entry)"
    return None


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


def flavour_weights(tables: Tables, pools: Mapping[str, Pool]) -> Callable[[str, str], float]:
    """What an hour of one device of a pool weighs in a project's use (fair_share.yaml,
    ``usage_weight``): ``devices`` 1; ``price`` the pool's price per device-hour (the accelerator's
    default for a pool removed since); ``throughput`` its model's throughput against the reference
    model (``Tables.throughput_weight``; 1 where no class measures both)."""
    how = str(tables.fair_share.get("usage_weight") or "devices")
    if how == "devices":
        return lambda pool, accelerator: 1.0
    if how == "price":

        def price(pool: str, accelerator: str) -> float:
            p = pools.get(pool)
            if p is not None and p.cost_per_hour is not None:
                return p.cost_per_hour
            return tables.default_cost(p.accelerator if p is not None else accelerator)

        return price
    if how == "throughput":
        reference = str(tables.fair_share.get("reference_model") or "v100")

        def speed(pool: str, accelerator: str) -> float:
            p = pools.get(pool)
            return tables.throughput_weight(p.model if p is not None else None, reference)

        return speed
    raise PolicyError(f"fair_share.yaml: usage_weight is devices, price or throughput (got {how!r})")


def usage(state: State, tables: Tables, now_ts: float) -> dict[str, list[list[float]]]:
    """Each project's device-hours per bucket of the fair-share window, each bucket aged at its
    middle (``tables``' fair_share.yaml), from the placements that held devices in the window; each
    hour of a device weighed by its flavour (``flavour_weights``: by default 1, raw device-hours)."""
    fs = tables.fair_share
    window_h = float(cast(float, fs.get("window_hours", 672)))
    bucket_h = float(cast(float, fs.get("bucket_hours", 24)))
    width = bucket_h * 3600.0
    since = now_ts - window_h * 3600.0
    n = max(1, int(round(window_h / bucket_h)))
    buckets: dict[str, dict[int, float]] = {}
    snap = state.snapshot() if str(tables.fair_share.get("usage_weight") or "devices") != "devices" else None
    weigh = flavour_weights(tables, {} if snap is None else {s.pool.name: s.pool for s in snap.states})
    for project, held, start, end, pool, accelerator in state.store.usage_rows(since, now_ts, tables.unassigned):
        devices = held * weigh(pool, accelerator)
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


def store_now(clock: Clock) -> float:
    """Now, by the store's clock (what writes are recorded at), in epoch seconds."""
    return commit.epoch_of(clock.now())


def rank(q: Queue, rows: Sequence[QueueRow], *, extra: Sequence[JSONObject] = (), now_ts: float | None = None) -> Ranked:
    """The policy's order of ``rows`` (and ``extra`` items), asked once."""
    now_ts = store_now(q.store) if now_ts is None else now_ts
    items = [order_item(r) for r in rows] + list(extra)
    if not items:
        return Ranked((), {}, {})
    policy_input: JSONObject = {"now": rfc3339(now_ts), "queue": cast(JSONValue, items), "usage": cast(JSONValue, usage(q.cycle, q.tables, now_ts))}
    raw = _query(q, ORDER_RULE, policy_input)
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


def _query(q: Queue, path: str, policy_input: JSONObject) -> object:
    """One of the queue's entry points, under the revision the policy files have (confirmed)."""
    q.engine.confirm()
    query = getattr(q.policy, "query", None)
    if query is None:
        raise PolicyError(f"the policy evaluator {type(q.policy).__name__} does not answer the queue's queries")
    return cast("Queries", q.policy).query(path, policy_input)


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


def listing(q: Queue, *, every: bool = False) -> QueueListing:
    """The waiting workloads in the order they are offered capacity (then those the order cannot
    judge); with ``every``, the admitted, cancelled and failed ones after them (oldest first)."""
    rows = q.store.queue_rows(("queued",))
    now_ts = store_now(q.store)
    ranked = rank(q, rows, now_ts=now_ts) if rows else Ranked((), {}, {})
    by_id = {r.id: r for r in rows}
    held = reservation_now(q, rows, ranked) if rows else None
    entries = [
        _with_outlook(q, _reserving(entry_of(by_id[str(p["id"])], ranked, now_ts), held), by_id[str(p["id"])])
        for p in ranked.order
        if str(p["id"]) in by_id
    ]
    entries += [entry_of(by_id[i], ranked, now_ts) for i in sorted(ranked.invalid) if i in by_id]
    if every:
        entries += [entry_of(r) for r in q.store.queue_rows(("admitted", "cancelled", "failed"))]
    return QueueListing(tuple(entries), ranked.projects)


def entry(q: Queue, ident: str, verdicts: Sequence[PoolVerdict] | None = None) -> QueueEntry | None:
    """A queued record's entry, its place in the order asked when it waits, and why its class takes
    no grant by preemption where it may preempt (``verdicts``: those it was queued with); the
    grants it took once admitted by preemption (None: no queue row)."""
    row = q.store.queue_find(ident) if ident else None
    if row is None:
        return None
    if row.state != "queued":
        found = entry_of(row)
        if row.state == "admitted":
            taken = tuple(g.id for g in q.store.preempted_for(row.id) if g.released_ts is not None)
            found = dataclasses.replace(found, preempted=taken)
        return found
    rows = q.store.queue_rows(("queued",))
    ranked = rank(q, rows)
    return _with_outlook(q, _reserving(entry_of(row, ranked), reservation_now(q, rows, ranked)), row, verdicts)


def _reserving(found: QueueEntry, held: Reservation | None) -> QueueEntry:
    """The entry with the reservation it holds (the policy's words), when it is the holder."""
    if held is None or held.id != found.id:
        return found
    return dataclasses.replace(found, reservation=held.reason)


def _with_outlook(q: Queue, found: QueueEntry, row: QueueRow, verdicts: Sequence[PoolVerdict] | None = None) -> QueueEntry:
    """A waiting entry with why its class, one that may preempt, takes no grant now (the policy's
    plan asked read-only over the verdicts it was queued with); other entries as they are."""
    try:
        workload = workload_from_spec(row.spec)
    except SpecError:
        return found
    if not may_preempt(q, workload):
        return found
    if verdicts is None:
        verdicts = q.records.record(q.store.decision_row(row.id)).decision.verdicts
    answer, none = victims_answer(q, row.id, workload, verdicts)
    plan = answer.get("plan") if answer is not None else None
    if isinstance(plan, dict) and plan.get("victims"):
        taken = ", ".join(str(v)[:12] for v in cast(list[JSONValue], plan["victims"]))
        return dataclasses.replace(found, preemption=f"the next admission pass preempts grant(s) {taken} for it")
    return dataclasses.replace(found, preemption=none or why_not(cast(JSONObject, answer)))


# -- queueing a placement ------------------------------------------------------------------------


def intent(q: Queue, workload: Workload, decided: Decision | None, ident: str, *, lease: timedelta | None, submission: Submit | None,
           queued_at: str | None = None, preempted_from: str | None = None) -> commit.QueueIntent:  # fmt: skip
    """What a placement that may wait writes to the queue; when it waits now (``decided`` is only
    full), its place in the order is asked first (the waiting rows and this one)."""
    position: int | None = None
    of: int | None = None
    if decided is not None:
        at = queued_at or q.store.now()
        candidate: JSONObject = {"id": ident, "project": workload.project, "priority": workload.priority, "queued_at": at,
                                 "accelerator": workload.accelerator, "devices": asks(workload)}  # fmt: skip
        ranked = rank(q, q.store.queue_rows(("queued",)), extra=[candidate])
        place = ranked.position(ident)
        position, of = (int(cast(int, place["position"])) if place else None), len(ranked.order)
    return commit.QueueIntent(
        spec=workload_spec(workload), accelerator=workload.accelerator, devices=asks(workload), project=workload.project,
        priority=workload.priority, lease_s=None if lease is None else lease.total_seconds(),
        submission=None if submission is None else submission.text(), queued_at=queued_at, preempted_from=preempted_from,
        position=position, of=of,
    )  # fmt: skip


# -- admission ----------------------------------------------------------------------------------


def offer_freed(q: Queue) -> tuple[AdmissionReport | None, str | None]:
    """Capacity freed (a release, devices added): the queue is offered it now, in the same
    process. The write that freed it stands whatever admission finds: an error here is said
    (second value), not raised. One indexed read when nothing waits."""
    try:
        if not q.store.queue_waiting():
            return None, None
        return admit(q), None
    except ExaError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def wakes_at(q: Queue) -> datetime | None:
    """While work waits in the queue, when capacity next frees by itself: the end of the first
    lease of a live placement not yet submitted, an aware UTC datetime by the store's clock
    (None: nothing waits, or no placement has a lease). What ``serve`` wakes for."""
    if not q.store.queue_waiting():
        return None
    ends = q.store.next_lease_end()
    return None if ends is None else datetime.fromtimestamp(commit.epoch_of(ends), timezone.utc)


def admit(q: Queue, *, limit: int | None = None) -> AdmissionReport:
    """One admission pass (see the module docstring): each waiting workload, in the policy's order,
    judged again under the revision served now and placed when it fits (at most ``limit``; SpecError
    unless it is a whole number of at least 1); submitted when it was queued with a submission.
    Nothing is admitted twice, whatever runs at once."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SpecError(f"must be a whole number of at least 1 (got {limit!r})", field="max")
    store = q.store
    admitted: list[Admitted] = []
    failed: list[QueueEntry] = []
    admitted += _retry_submissions(q, failed)
    _finish_preemptions(q)
    if not store.queue_waiting():
        return AdmissionReport(tuple(admitted), tuple(failed), 0, None)
    rows = store.queue_rows(("queued",))
    # Work past its max_wait (counted from when it was first queued) leaves the queue first.
    now_ts = store_now(q.store)
    late = {r.id: text for r in rows if (text := past_max_wait(r, now_ts)) is not None}
    for r in rows:
        if r.id in late and (gone := _fail(q, r, late[r.id], waiting=True)) is not None:
            failed.append(gone)
    rows = [r for r in rows if r.id not in late]
    ranked = rank(q, rows)
    by_id = {r.id: r for r in rows}
    reserved: list[Reservation] = []  # the reservation the first workload that does not fit holds (one a pass)
    why: dict[str, str] = {}
    for place in ranked.order:
        if limit is not None and len(admitted) >= limit:
            break
        row = by_id.get(str(place["id"]))
        if row is None:
            continue
        done = admit_one(q, row, reserved, why)
        if isinstance(done, Admitted):
            admitted.append(done)
        elif done is not None:
            failed.append(done)
    waiting = len(store.queue_rows(("queued",)))
    not_preempted = tuple((i, by_id[i].workload, text) for i, text in why.items() if i in by_id)
    return AdmissionReport(tuple(admitted), tuple(failed), waiting, q.engine.reviewed, not_preempted)


def admit_one(
    q: Queue, row: QueueRow, reserved: list[Reservation] | None = None, why: dict[str, str] | None = None
) -> Admitted | QueueEntry | None:
    """Judge one waiting workload again and place it when it fits (claiming its row) and the
    reservation held in this pass (``reserved``) lets it start; preempt when its class may and it
    fits nowhere; else, when no reservation is held yet, ask whether it holds one. Admitted, the
    entry of a workload that failed, or None (it still waits; ``why``, by queued id, says why a
    class that may preempt took no grant)."""
    try:
        workload = vouched_workload(q, row)
    except StateError:
        return None  # no queued record to place it from: nothing is placed (exa audit verify names the row)
    except (SpecError, TypeError) as exc:
        return _fail(q, row, f"its workload no longer reads as valid: {exc}")
    if row.submission is not None:
        edited = submission_vouched(q, row)
        if edited is not None:
            return _fail(q, row, f"not admitted: {edited}; its queue row was changed beside the audit log (run exa audit verify)")
    late = past_max_wait(row, store_now(q.store), workload)
    if late is not None:
        return _fail(q, row, late, waiting=True)
    request = Request(_left_to_wait(workload, row, store_now(q.store)))
    lease = None if row.lease_s is None else timedelta(seconds=row.lease_s)
    preempted: tuple[str, ...] = ()

    def plan(decided: Decided) -> Write | Skip[QueueEntry | None]:
        nonlocal preempted
        decision, snap = decided.decision, decided.snapshot
        if not isinstance(decision, Placement):
            if not commit.queueable(decision):
                return Skip(_fail(q, row, f"the policy now refuses it: {getattr(decision, 'reason', '')}"))
            victims = _preemption(q, row, workload, decision, why)
            if not victims:
                if reserved is not None and not reserved:
                    held = reservation_for(q, row, workload, decision, snap)
                    if held is not None:
                        reserved.append(held)
                return Skip(None)
            preempted = victims
            snap = q.cycle.snapshot()
        elif reserved and not _may_start(q, reserved[0], row.id, workload, decision, lease):
            return Skip(None)  # the capacity it would take is reserved for a workload before it
        # The lease is counted from the commit that records the placement, as for place.
        return Write(decision, snap, lease=lease, admit=row.id, preempted=preempted)

    try:
        written = q.cycle.run(request, plan, name=workload.name)
    except FleetKeptChanging:
        return None  # it still waits: the next pass judges it again
    if isinstance(written, Skip):
        return written.result
    done = written.done
    if done.not_admitted is not None:
        if preempted:
            _requeue_victims(q, preempted)
        return None
    if done.record is not None:
        record = done.record
    else:
        assert done.earlier is not None
        record = q.records.record(done.earlier)
    result = Admitted(row.id, record.id, workload.name, str(getattr(record.decision, "pool", "")), preempted=preempted)
    if preempted:
        _requeue_victims(q, preempted)
    if row.submission:
        return _submit(q, row, result)
    return result


def _fail(q: Queue, row: QueueRow, message: str, *, waiting: bool = False) -> QueueEntry | None:
    after = commit.fail_queued(q.store, q.cycle.capacities, row.id, message, source=SOURCE, waiting=waiting)
    return None if after is None else entry_of(after)


# -- reservations (backfill) ----------------------------------------------------------------------------


@dataclass
class Reservation:
    """What the first waiting workload that does not fit holds in an admission pass, as the policy
    granted it (``data.examlops.queue.reservation.judged``): the devices it needs on the pool where
    it could start soonest, from when (RFC 3339; None: no grant there says when it ends), the
    devices free then beyond them (``spare``, taken down as backfilled work takes them), and the
    policy's words."""

    id: str
    name: str
    priority: str | None
    pool: str
    devices: float
    starts_at: str | None
    spare: float
    reason: str

    def as_holder(self) -> JSONObject:
        return {"id": self.id, "name": self.name, "priority": self.priority, "pool": self.pool, "devices": self.devices,
                "starts_at": self.starts_at, "spare": self.spare}  # fmt: skip


def _ends(q: Queue, pool: str) -> list[tuple[float, float | None]]:
    """(devices, when they free in epoch seconds or None) of the live grants on a pool: the end of
    an unsubmitted grant's lease, or its start plus its workload's walltime, whichever is first."""
    out = []
    for devices, lease_ts, submitted, started, document in q.store.grant_ends(pool):
        ends = [lease_ts] if lease_ts is not None and not submitted else []
        try:
            walltime = cast(Mapping[str, object], codec.document_of(document).get("workload") or {}).get("walltime")
        except StateError:
            walltime = None
        if isinstance(walltime, (int, float)) and not isinstance(walltime, bool):
            ends.append(started + float(walltime))
        out.append((devices, min(ends) if ends else None))
    return out


def _start_on(free: float, needed: float, ends: Sequence[tuple[float, float | None]], now_ts: float) -> tuple[float | None, float]:
    """When ``needed`` devices are free on a pool with ``free`` free now and grants ending at
    ``ends`` (None: no grant says when enough end), and the devices free then beyond them."""
    known = sorted((end, devices) for devices, end in ends if end is not None)
    for at in [now_ts, *(max(now_ts, end) for end, _ in known)]:
        have = free + sum(devices for end, devices in known if end <= at)
        if have + 1e-9 >= needed:
            return at, have - needed
    return None, 0.0


def reservation_for(q: Queue, row: QueueRow, workload: Workload, decided: Decision, snap: Snapshot) -> Reservation | None:
    """The reservation a waiting workload that does not fit holds, when the policy grants it one:
    on the pool, of those only full for it, where it could start soonest (then by name)."""
    now_ts = store_now(q.store)
    options: list[tuple[bool, float, str, float, float]] = []
    for v in decided.verdicts:
        reasons = [r for r in v.reasons if r.kind != "preference"]
        if not reasons or any(r.kind != "not_now" or r.code != "capacity_exhausted" for r in reasons) or v.pool not in snap.index:
            continue
        state = snap.states[snap.index[v.pool]]
        needed = float(v.grant.devices)
        if needed <= 0 or needed > state.pool.count:
            continue
        at, spare = _start_on(float(state.capacity.whole), needed, _ends(q, v.pool), now_ts)
        options.append((at is None, at or 0.0, v.pool, needed, spare))
    if not options:
        return None
    unknown, at, pool, needed, spare = min(options)
    starts_at = None if unknown else rfc3339(at)
    item: JSONObject = {"id": row.id, "name": workload.name, "project": workload.project, "priority": workload.priority, "fits": False,
                        "pool": pool, "devices": needed, "starts_at": starts_at}  # fmt: skip
    answer = _judged(q, {"workload": item})
    if not answer.get("holds"):
        return None
    return Reservation(row.id, workload.name, workload.priority, pool, needed, starts_at, max(0.0, spare), str(answer.get("reason") or ""))


def _reservation_at_once(q: Queue, row: QueueRow, workload: Workload, placed: Placement, snap: Snapshot) -> Reservation | None:
    """The reservation of a waiting workload that fits now, when the policy lets it reserve: the
    devices it would be placed on, from now, until the next pass admits it."""
    state = snap.states[snap.index[placed.pool]]
    starts_at = rfc3339(store_now(q.store))
    item: JSONObject = {"id": row.id, "name": workload.name, "project": workload.project, "priority": workload.priority, "fits": False,
                        "pool": placed.pool, "devices": placed.grant.devices, "starts_at": starts_at}  # fmt: skip
    answer = _judged(q, {"workload": item})
    if not answer.get("holds"):
        return None
    spare = max(0.0, float(state.capacity.whole) - float(placed.grant.devices))
    return Reservation(row.id, workload.name, workload.priority, placed.pool, float(placed.grant.devices), starts_at, spare, str(answer.get("reason") or ""))


def _judged(q: Queue, policy_input: JSONObject) -> Mapping[str, JSONValue]:
    raw = _query(q, RESERVATION_RULE, policy_input)
    if not isinstance(raw, dict) or not isinstance(raw.get("holds"), bool) or not isinstance(raw.get("may_start"), bool):
        raise PolicyError("the policy's reservation (examlops.queue.reservation.judged) gave a malformed answer")
    return cast(Mapping[str, JSONValue], raw)


def _may_start(q: Queue, held: Reservation, ident: str, workload: Workload, placed: Placement, lease: timedelta | None) -> bool:
    """Whether a workload that fits may start while ``held`` is reserved (the policy's backfill
    rule); taking devices of the reserved pool beyond the reservation's start takes them from its
    spare."""
    now_ts = store_now(q.store)
    ends = [float(s) for s in (workload.walltime, None if lease is None else lease.total_seconds()) if s is not None]
    ends_ts = now_ts + min(ends) if ends else None
    item: JSONObject = {"id": ident, "name": workload.name, "project": workload.project, "priority": workload.priority, "fits": True,
                        "pool": placed.pool, "devices": placed.grant.devices, "ends_at": None if ends_ts is None else rfc3339(ends_ts)}  # fmt: skip
    answer = _judged(q, {"workload": item, "holder": held.as_holder()})
    if not answer["may_start"]:
        return False
    start_ts = None if held.starts_at is None else commit.epoch_of(held.starts_at)
    if placed.pool == held.pool and (ends_ts is None or start_ts is None or ends_ts > start_ts):
        held.spare = max(0.0, held.spare - float(placed.grant.devices))
    return True


def reservation_now(q: Queue, rows: Sequence[QueueRow], ranked: Ranked) -> Reservation | None:
    """The reservation the queue holds as it stands (what ``place --queue`` is held to, and what
    ``queue`` and ``explain`` show): that of the first workload in the order the policy lets
    reserve: one that does not fit, on the capacity it needs; one that fits now (the next pass
    admits it), on the devices it would be placed on, from now."""
    by_id = {r.id: r for r in rows}
    under = None
    for place in ranked.order:
        row = by_id.get(str(place["id"]))
        if row is None:
            continue
        try:
            workload = vouched_workload(q, row)
        except (ExaError, TypeError):
            continue
        under = q.cycle.current() if under is None else under
        snap = q.cycle.snapshot()
        decided = q.cycle.decide(Request(workload), snap, under).decision
        if isinstance(decided, Placement):
            found = _reservation_at_once(q, row, workload, decided, snap)
        elif commit.queueable(decided):
            found = reservation_for(q, row, workload, decided, snap)
        else:
            continue
        if found is not None:
            return found
    return None


def withheld_for(q: Queue, workload: Workload, placed: Placement, ident: str, lease: timedelta | None) -> dict[str, int]:
    """What a workload placed with ``queue`` may not take at once because the queue holds a
    reservation it may not use (the policy's backfill rule): the reserved pool's devices (pool ->
    whole devices); empty when it may start (or nothing is reserved)."""
    rows = q.store.queue_rows(("queued",))
    if not rows:
        return {}
    held = reservation_now(q, rows, rank(q, rows))
    if held is None or _may_start(q, held, ident, workload, placed, lease):
        return {}
    return {held.pool: int(math.ceil(held.devices - 1e-9))}


# -- max_wait, counted from when it was first queued ---------------------------------------------------


def past_max_wait(row: QueueRow, now_ts: float, workload: Workload | None = None) -> str | None:
    """Why a waiting workload leaves the queue unplaced: its ``max_wait``, counted from when it was
    first queued (as a deadline is fixed then), has passed; None while it has not, or when it has
    none. A workload queued again after it was preempted had started within its max_wait: it
    waits on (its wait is the preemption's)."""
    if row.preempted_from is not None:
        return None
    if workload is None:
        try:
            workload = workload_from_spec(row.spec)
        except SpecError:
            return None  # admission fails it, saying why
    if workload.max_wait is None:
        return None
    waited = now_ts - row.queued_ts
    if waited <= workload.max_wait:
        return None
    return (
        f"past its max_wait: it waited {duration_text(waited)} since it was first queued at {row.queued_at}, "
        f"longer than its max_wait of {duration_text(workload.max_wait)}; it leaves the queue unplaced"
    )


def _left_to_wait(workload: Workload, row: QueueRow, now_ts: float) -> Workload:
    """The workload as admission judges it: its max_wait is what is left of it since it was first
    queued (the placement's record keeps that), so no pass starts its clock again."""
    if workload.max_wait is None or row.preempted_from is not None:
        return workload
    return dataclasses.replace(workload, max_wait=max(0, int(workload.max_wait - (now_ts - row.queued_ts))))


# -- submission once admitted -----------------------------------------------------------------------


def _transient(exc: ExaError) -> bool:
    text = str(exc)
    return any(word in text for word in _UNREACHABLE) or getattr(exc, "reason", None) in ("Unreachable", "TLS", "Timeout")


def _submit(q: Queue, row: QueueRow, admitted: Admitted) -> Admitted | QueueEntry | None:
    """Hand an admitted workload's placement to its scheduler. A refusal fails the row (its
    placement released); a scheduler that does not answer is tried again at the next pass."""
    assert row.submission is not None
    sub = Submit.from_text(row.submission)
    try:
        done = hand_over(q, admitted.decision_id, sub)
    except ExaError as exc:
        if isinstance(exc, ExecutorError) and _transient(exc):
            attempts = commit.note_submission(q.store, row.id, str(exc), source=SOURCE)
            if attempts < SUBMIT_ATTEMPTS:
                return dataclasses.replace(admitted, scheduler=sub.scheduler, submit_error=f"{exc} (tried {attempts} of {SUBMIT_ATTEMPTS} times)")
        return _fail(q, row, f"{sub.scheduler} refused its submission: {exc}")
    return dataclasses.replace(admitted, job_id=done.job_id, scheduler=sub.scheduler)


def hand_over(q: Queue, decision_id: str, sub: Submit) -> Submission:
    """Submit the live placement ``decision_id`` as ``sub`` says, through its scheduler
    (``Scheduler.submit_queued``: Slurm writes the queued script's text to a private file while
    sbatch reads it); the job is recorded on the decision. ExaError as ``Hardware.submit`` raises it."""
    from examlops_policy.app import schedulers

    return schedulers.scheduler(sub.scheduler, field="--submit").submit_queued(q.jobs, decision_id, sub.options)


def submit_placed(q: Queue, record: DecisionRecord, sub: Submit) -> DecisionRecord:
    """A workload placed with a submission for when it is admitted that fitted at once (nothing
    queued): it is submitted now, as admission would have, and its record read again with the
    job. When the scheduler refuses or cannot be reached, the placement stays (recorded, live) and
    ``ExecutorError`` says so, naming the decision to submit again or release."""
    try:
        hand_over(q, record.id, sub)
    except ExaError as exc:
        pool = str(getattr(record.decision, "pool", ""))
        from examlops_policy.app import schedulers

        how = schedulers.scheduler(sub.scheduler, field="--submit").resubmit
        raise ExecutorError(
            f"{record.decision.workload.name} fitted at once and was placed on pool {pool} (decision {record.id}), but its "
            f"submission to {sub.scheduler} failed: {exc}; the placement holds its devices: submit it again with "
            f"'exa hardware submit {record.id[:12]} {how}' or release it with 'exa hardware release {record.id[:12]}'"
        ) from exc
    return q.jobs.decision(record.id)


def _retry_submissions(q: Queue, failed: list[QueueEntry]) -> list[Admitted]:
    """Admitted workloads whose submission could not reach their scheduler: tried again."""
    out: list[Admitted] = []
    for row in q.store.queue_rows(("admitted",)):
        if not row.submission or row.admitted_by is None or row.attempts == 0:
            continue
        record = q.jobs.decision(row.admitted_by)
        if record.released_at is not None or record.job_id is not None:
            continue
        edited = submission_vouched(q, row)
        if edited is not None:
            done_failed = _fail(q, row, f"not submitted: {edited}; its queue row was changed beside the audit log (run exa audit verify)")
            if done_failed is not None:
                failed.append(done_failed)
            continue
        done = _submit(q, row, Admitted(row.id, record.id, row.workload, str(getattr(record.decision, "pool", ""))))
        if isinstance(done, Admitted):
            out.append(done)
        elif done is not None:
            failed.append(done)
    return out


# -- preemption ---------------------------------------------------------------------------------


def _class(q: Queue, priority: str | None) -> Mapping[str, JSONValue]:
    classes = cast(Mapping[str, Mapping[str, JSONValue]], q.tables.priorities.get("classes") or {})
    return classes.get(priority or q.tables.default_priority or "", {})


def _preemption(
    q: Queue, row: QueueRow, workload: Workload, decided: Rejection, why: dict[str, str] | None = None,
) -> tuple[str, ...]:
    """The grants a waiting workload takes by preemption (marked for it, their jobs cancelled), or
    nothing: its class may not preempt, the policy finds no plan, or a cancel failed (the marks
    stay; the next pass finishes them). Why it takes nothing, for a class that may preempt, goes
    in ``why`` (by queued id)."""
    if not may_preempt(q, workload):
        return ()
    answer, none = victims_answer(q, row.id, workload, decided.verdicts)
    plan = answer.get("plan") if answer is not None else None
    if not isinstance(plan, dict) or not plan.get("victims"):
        if why is not None:
            why[row.id] = none or why_not(cast(JSONObject, answer))
        return ()
    victims = [str(v) for v in cast(list[JSONValue], plan["victims"])]
    marked = commit.mark_preemption(q.store, row.id, victims, plan, source=SOURCE)
    if not marked:
        if why is not None:
            why[row.id] = f"the grants its plan takes ({', '.join(v[:12] for v in victims)}) are marked for another preemption"
        return ()
    for victim in marked:
        if not _cancel_job(q, victim):
            if why is not None:
                why[row.id] = f"the job of grant {victim[:12]} could not be cancelled yet (tried again at the next pass)"
            return ()
    return tuple(marked)


def may_preempt(q: Queue, workload: Workload) -> bool:
    """Whether the workload's priority class may preempt (priorities.yaml)."""
    return bool(_class(q, workload.priority).get("may_preempt"))


def victims_answer(q: Queue, ident: str, workload: Workload, verdicts: Sequence[PoolVerdict]) -> tuple[JSONObject | None, str | None]:
    """The policy's preemption answer for a waiting workload judged with ``verdicts`` (read only):
    the pools that deny it only for capacity or quota, the live grants on them, what the projects
    hold. (None, why) when no pool it could use is stopped only by capacity or quota."""
    snap = q.cycle.snapshot()
    pools: list[JSONValue] = []
    for v in verdicts:
        reasons = [r for r in v.reasons if r.kind != "preference"]
        if not reasons or any(r.kind != "not_now" or r.code not in _PREEMPTABLE_CODES for r in reasons) or v.pool not in snap.index:
            continue
        state = snap.states[snap.index[v.pool]]
        pools.append({"name": v.pool, "spot": state.pool.spot, "free": state.capacity.whole, "devices": v.grant.devices})
    if not pools:
        return None, "no pool it could use is stopped only by capacity or quota, so no grant there would make room"
    grants = [g for g in q.store.live_grants(pools=[str(cast(JSONObject, p)["name"]) for p in pools]) if g.preempting_for in (None, ident)]
    unassigned, default = q.tables.unassigned, q.tables.default_priority
    pairs = sorted({(g.project or unassigned, g.accelerator) for g in grants} | {(workload.project or unassigned, g.accelerator) for g in grants})
    held = q.store.quota_held(pairs, unassigned)
    use: dict[str, dict[str, float]] = {}
    for (p, c), n in held.items():
        use.setdefault(p, {})[c] = n
    policy_input: JSONObject = {
        "workload": {"id": ident, "project": workload.project, "priority": workload.priority},
        "pools": pools,
        "grants": [
            {"id": g.id, "project": g.project, "priority": g.priority or default, "pool": g.pool, "accelerator": g.accelerator,
             "devices": g.devices, "placed_at": g.created_at}
            for g in grants
        ],  # fmt: skip
        "quota_use": {"devices": cast(JSONValue, use)},
    }
    answer = _query(q, VICTIMS_RULE, policy_input)
    if not isinstance(answer, dict):
        raise PolicyError("the policy's preemption answer (examlops.queue.preemption.victims) is malformed")
    return cast(JSONObject, answer), None


def why_not(answer: JSONObject) -> str:
    """Why the policy's answer has no plan, in its reasons: the workload's own (its class), else the
    codes of the grants it spared (how many each) and the first one's words, else that its
    candidates free too little on any one pool, else that no grant holds the pools."""
    own = answer.get("reason")
    if isinstance(own, dict):
        return f"{own.get('code')}: {own.get('message')}"
    spared = [cast(JSONObject, s) for s in cast(list[JSONValue], answer.get("spared") or [])]
    candidates = cast(list[JSONValue], answer.get("candidates") or [])
    if candidates:
        n = len(candidates)
        return f"its {n} candidate grant{'s' if n != 1 else ''} would free too little on any one pool"
    if spared:
        counts: dict[str, int] = {}
        first: str | None = None
        for s in spared:
            reasons = [cast(JSONObject, r) for r in cast(list[JSONValue], s.get("reasons") or [])]
            if reasons:
                code = str(reasons[0].get("code"))
                counts[code] = counts.get(code, 0) + 1
                first = first or str(reasons[0].get("message"))
        codes = ", ".join(f"{c} on {n} grant{'s' if n != 1 else ''}" for c, n in sorted(counts.items()))
        return f"{codes} ({first})"
    return "no live grant holds devices on the pools it could use"


def _cancel_job(q: Queue, ident: str) -> bool:
    """Cancel a victim's job through its executor (none: nothing to cancel). False when it could
    not be cancelled (the mark stays; the next pass tries again)."""
    from examlops_policy.app import submitting

    record = q.jobs.decision(ident)
    if record.job_id is None or record.job_state in ("missing",) or record.job_ended_at is not None:
        return True
    try:
        submitting.cancel(record)
    except ExaError:
        return False
    return True


def _requeue_victims(q: Queue, victims: Sequence[str]) -> None:
    """Victims released by a preemption wait again, keeping their age: placed anew when there is
    room elsewhere, else queued (``preempted_from`` set)."""
    for victim in victims:
        grant = q.store.grant(victim)
        if grant is None or grant.released_ts is None:
            continue
        _requeue(q, grant)


def _requeue(q: Queue, grant: GrantRow) -> None:
    origin = q.store.queue_of(grant.id)
    record = q.jobs.decision(grant.id)
    workload = workload_from_spec(origin.spec) if origin is not None else record.decision.workload
    if workload.priority is None and grant.priority is not None:
        # A record from before the workload document kept the class: its column has it.
        workload = dataclasses.replace(workload, priority=grant.priority)
    submission = Submit.from_text(origin.submission) if origin is not None and origin.submission else None
    lease = timedelta(seconds=origin.lease_s) if origin is not None and origin.lease_s else None
    queued_at = origin.queued_at if origin is not None else grant.created_at
    try:
        q.placer.place(workload, queue=True, lease=lease, submission=submission, queued_at=queued_at, preempted_from=grant.id)
    except (StateError, PolicyError):
        pass  # the next pass finds it again (its mark stays until it is queued)


def _finish_preemptions(q: Queue) -> None:
    """Preemptions a crash or a failed cancel left half done: marks on live grants whose workload
    no longer waits are taken off; released victims not queued again are queued again."""
    for grant in q.store.preempted():
        if grant.released_ts is None:
            row = q.store.queue_find(grant.preempting_for) if grant.preempting_for else None
            if row is None or row.state != "queued":
                commit.unmark_preemption(q.store, grant.id, source=SOURCE)
        else:
            _requeue(q, grant)


# -- cancel, quotas --------------------------------------------------------------------------------


def cancel(q: Queue, ident: str) -> Cancelled:
    row = q.store.queue_find(ident)
    after, already = commit.cancel_queued(q.store, row.id, source=SOURCE)
    return Cancelled(entry_of(after), already)


def quota_use_all(q: Queue, now_ts: float) -> JSONObject:
    """What every project of the quotas table holds of each class it has a quota of, and its
    device-hours in the period of each (the quotas report's input)."""
    tables = q.tables
    projects = cast(Mapping[str, Mapping[str, JSONValue]], tables.quotas.get("projects") or {})
    pairs = sorted({(p, c) for p, q in projects.items() for c in cast(Mapping[str, object], q.get("accelerators") or {})})
    held = q.store.quota_held(pairs, tables.unassigned)
    devices: dict[str, dict[str, float]] = {}
    hours: dict[str, dict[str, float]] = {}
    for p, c in pairs:
        if held.get((p, c)):
            devices.setdefault(p, {})[c] = held[(p, c)]
        entry = cast(Mapping[str, JSONValue], cast(Mapping[str, JSONValue], projects[p].get("accelerators") or {}).get(c) or {})
        days = entry.get("period_days")
        if isinstance(days, (int, float)) and entry.get("device_hours") is not None:
            h = q.store.device_hours(p, c, now_ts - float(days) * 86400.0, now_ts, tables.unassigned)
            if h > 0:
                hours.setdefault(p, {})[c] = round(h, 6)
    return {"devices": cast(JSONValue, devices), "device_hours": cast(JSONValue, hours)}


def quotas(q: Queue) -> list[QuotaRow]:
    """Use against quota per project and class, in the policy's words (its quotas report)."""
    raw = _query(q, REPORT_RULE, {"quota_use": quota_use_all(q, store_now(q.store))})
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


def record_entry(q: Queue, record: DecisionRecord) -> DecisionRecord:
    """A record with what the queue says of it: a queued one's entry (its place when it waits, why
    it takes no grant by preemption, the grants it took); the placement that took a preempted
    grant (``preempted_by``); the grants a placement admitted by preemption took (``preempted``)."""
    if record.decision.outcome == "queued":
        return dataclasses.replace(record, queue=entry(q, record.id, record.decision.verdicts))
    if record.preempting_for is not None and record.released_at is not None:
        row = _queue_row(q, record.preempting_for)
        if row is not None and row.admitted_by is not None:
            return dataclasses.replace(record, preempted_by=row.admitted_by)
    if record.queued_id is not None:
        taken = tuple(g.id for g in q.store.preempted_for(record.queued_id) if g.released_ts is not None)
        if taken:
            return dataclasses.replace(record, preempted=taken)
    return record


def _queue_row(q: Queue, ident: str) -> QueueRow | None:
    try:
        return q.store.queue_find(ident)
    except NotFoundError:
        return None


def preempt_now(q: Queue, ident: str) -> None:
    """Work of a class that may preempt, just queued: its preemption is tried at once (its
    admission alone), not only at the next pass. What stops it stays for that pass to try again
    (and the entry says why it takes no grant)."""
    row = _queue_row(q, ident)
    if row is None or row.state != "queued":
        return
    try:
        if not may_preempt(q, workload_from_spec(row.spec)):
            return
        admit_one(q, row)
    except ExaError:
        return  # the queued record stands; the next admission pass tries again

"""Recorded decisions as workflows read and amend them: rebuilt as of now, a page of them, what one
was made on, its job recorded, its lease renewed, asked again of the policy (``replay``), and the
periods and hours they are read over.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import date, datetime, timedelta, timezone

from examlops_policy import quantities
from examlops_policy._core import commit, leases
from examlops_policy._core.engine import differences, reference_input, same_policy
from examlops_policy._core.records import DecisionInputs, judged_from
from examlops_policy.app.cycle import SOURCE, DecisionCycle
from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.model import Placement, Pool
from examlops_policy.views import BurstEvent, DecisionPage, DecisionRecord, Replay


class Records:
    """The recorded decisions of a cycle's state (``Jobs``, the port submission and the queue
    use: records, their pools, and the writes that record a job on its decision)."""

    def __init__(self, cycle: DecisionCycle) -> None:
        self.cycle = cycle

    def decision(self, ident: str) -> DecisionRecord:
        """A decision by id or unique id prefix, as of now (``released_at``: its release, or the end
        of a lease that ended)."""
        return self.cycle.record(self.cycle.store.decision_row(ident))

    def decisions(self, limit: int) -> list[DecisionRecord]:
        now = self.cycle.store.now()
        return [self.cycle.records.record(leases.as_read(row, now)) for row in self.cycle.store.decision_rows(limit)]

    def decision_page(self, *, limit: int = 20, since: str | None = None, until: str | None = None, cursor: str | None = None) -> DecisionPage:
        """A page of decisions from their columns, newest first (``since``/``until``: ISO 8601 UTC
        bounds on when they were made; ``cursor``: the previous page's). SpecError for a ``limit``
        that is not a whole number of at least 1, as ``exa hardware decisions --limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise SpecError(f"must be a whole number of at least 1 (got {limit!r})", field="limit")
        before = None
        if cursor is not None:
            created, _, ident = cursor.partition("/")
            if not created or not ident:
                raise SpecError("a cursor is CREATED_AT/ID, as the previous page gave it", field="cursor")
            before = (created, ident)
        start, end = period(since, until)
        store = self.cycle.store
        now = store.now()
        rows = [
            dataclasses.replace(r, lease_ended=leases.by_lease(r.released_at, r.lease_expires_at, r.job_id))
            for r in (leases.as_read(r, now) for r in store.decision_summaries(limit=limit, since=start, until=end, before=before))
        ]
        more = f"{rows[-1].created_at}/{rows[-1].id}" if len(rows) == limit and rows else None
        return DecisionPage(tuple(rows), more)

    def decision_inputs(self, ident: str) -> DecisionInputs:
        """What a recorded decision was made on: its fleet and verdict-set documents and the
        capacity every pool had (SpecError for a decision recorded before decisions kept them)."""
        return self.cycle.records.inputs(self.cycle.store.decision_row(ident))

    def pool_by_name(self, name: str) -> Pool:
        snap = self.cycle.snapshot()
        at = snap.index.get(name)
        if at is None:
            raise NotFoundError(f"no pool {name!r}")
        return snap.states[at].pool

    def set_job(self, ident: str, job_id: str, *, scheduler: str, uid: str | None = None) -> DecisionRecord:
        """Record the scheduler's job (and its uid) on a live placement, audited; SpecError when it
        is not a live placement without a job."""
        cycle = self.cycle
        return cycle.records.record(commit.set_job(cycle.store, cycle.capacities, ident, job_id, scheduler=scheduler, uid=uid, source=SOURCE))

    def mark_job(self, ident: str, state: str) -> DecisionRecord:
        """Record a changed job state on a decision (e.g. ``missing``), audited."""
        return self.cycle.records.record(commit.mark_job(self.cycle.store, ident, state, source=SOURCE))

    def renew(self, ident: str, lease: timedelta) -> DecisionRecord:
        """Move a live placement's lease end to ``lease`` from now. SpecError for a placement that
        was released or whose lease has ended (saying when)."""
        cycle = self.cycle
        return cycle.records.record(commit.renew(cycle.store, cycle.capacities, ident, check_lease(lease), source=SOURCE))

    def burst_events(self, limit: int) -> list[BurstEvent]:
        return self.cycle.store.burst_events(limit)

    def accounting(self, record: DecisionRecord, hours: float) -> dict[str, object]:
        """``device_accounting`` of a recorded placement held for ``hours`` (the same dictionary:
        ``carbon_g_grounded`` exactly where the pool's power is known). SpecError for a decision
        that placed nothing."""
        from examlops_policy.accounting import device_accounting

        if not isinstance(record.decision, Placement):
            raise SpecError(f"decision {record.id[:12]} placed nothing, so it has no cost or carbon", field="ID")
        return device_accounting(record.decision, hours)

    def replay(self, record: DecisionRecord) -> Replay:
        """Ask the policy again, with the input a recorded decision was made on (its workload, its
        fleet, the capacity it saw), through the policy's complete reference rule: does the policy
        OPA serves now give the same answer?"""
        decision = record.decision
        fleet_rev = decision.provenance.fleet_revision
        if fleet_rev is None:
            raise SpecError(f"decision {record.id[:12]} was recorded before decisions kept their fleet; it cannot be replayed", field="ID")
        cycle = self.cycle
        engine = cycle.engine(cycle.current(force=True))
        revision_now, _ = engine.confirm()
        about = engine.about(revision_now)
        doc = self.decision_inputs(record.id)
        judged = judged_from(doc.fleet, doc.verdicts, fleet_rev)
        fleet = engine.fleet([e.pool for e in judged.fleet.entries], revision_now, about)
        reference = cycle.policy.decision(
            reference_input(decision.workload, fleet, doc.capacities, about, doc.starts, quota_use=decision.provenance.quota_use)
        )
        diffs = differences(decision, reference)
        recorded = decision.provenance.policy_revision
        same_rev = same_policy(revision_now, recorded)
        summary = ("the same answer" if not diffs else f"{len(diffs)} difference(s)") + (
            " (the same policy revision)" if same_rev else f" (the decision was made under {recorded[:19]})"
        )
        return Replay(record.id, not diffs, revision_now, recorded, summary, tuple(diffs))


def check_lease(lease: timedelta) -> timedelta:
    """``lease``, or SpecError unless it is a duration of more than 0 s and at most a year."""
    if not isinstance(lease, timedelta) or lease <= timedelta(0) or lease > timedelta(days=366):
        raise SpecError(f"a lease must be a duration of more than 0s and at most a year (got {quantities.shown(lease)})", field="lease")
    return lease


def hours_of(hours: float | None) -> float | None:
    """``hours`` as a float, or SpecError unless it is a finite number of at least 0."""
    if hours is None:
        return None
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise SpecError(f"hours must be a finite number of at least 0 (got {quantities.shown(hours)})", field="hours")
    return float(hours)


def instant(text: str | None, field: str) -> str | None:
    """An ISO 8601 time (a date alone is its midnight; no offset is UTC) as decisions store theirs."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise SpecError(f"{field} must be an ISO 8601 time such as 2026-11-30 or 2026-11-30T08:00:00Z (got {text!r})", field=field) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def period(since: str | None, until: str | None) -> tuple[str | None, str | None]:
    """``since`` and ``until`` as stored times; SpecError when the period ends before it starts."""
    start, end = instant(since, "since"), instant(until, "until")
    if start is not None and end is not None and end < start:
        raise SpecError(f"the period ends ({until}) before it starts ({since}): --since must not be after --until", field="since")
    return start, end


def day_of(ts: str) -> date:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(timezone.utc).date()

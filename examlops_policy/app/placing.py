"""Placing and releasing: ``Hardware.place`` (with the queue when it may wait), ``what_if``,
``portable`` and ``release``, each through the decision cycle (``app.cycle``).

A placement is one ``DecisionCycle.run``: each round, when the workload may wait and the queue holds
a reservation it may not use, it is decided again as if the reserved devices were held (backfill),
and its place in the queue's order is asked before the write; the cycle commits it (or decides
again while the fleet changes). Queued work of a class that may preempt tries its preemption at
once; a workload queued with a submission that fitted at once is submitted now.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from examlops_policy._core import codec, commit
from examlops_policy._core.state import sharing_of
from examlops_policy._core.request import Request
from examlops_policy.app import queue as queueing, schedulers
from examlops_policy.app.cycle import SOURCE, Decided, DecisionCycle, Skip, Write
from examlops_policy.app.records import Records, check_lease
from examlops_policy.errors import SpecError
from examlops_policy.model import Decision, JSONObject, NodeAllocation, Placement, Pool, Workload
from examlops_policy.views import DecisionRecord, Portability, ReleaseReport, Submit

if TYPE_CHECKING:
    from collections.abc import Callable

    from examlops_policy._core.engine import Prepared
    from examlops_policy._core.rooms import Rooms
    from examlops_policy._core.waiting import Starts
    from examlops_policy.model import Capacity
    from examlops_policy.tables import Tables


class Placing:
    """The placing workflows over one decision cycle; the queue's workflows (``queue``) place a
    preempted grant's workload again through it (it is their ``Placer``)."""

    def __init__(self, cycle: DecisionCycle, records: Records) -> None:
        self.cycle = cycle
        self.records = records
        self.queue = queueing.Queue(cycle, records, self)

    def decision(self, ident: str) -> DecisionRecord:
        """A recorded decision as of now, with what the queue says of it (``Hardware.decision``)."""
        return queueing.record_entry(self.queue, self.records.decision(ident))

    def place(
        self,
        workload: Workload,
        *,
        request_id: str | None = None,
        lease: timedelta | None = None,
        queue: bool = False,
        submission: Submit | None = None,
        queued_at: str | None = None,
        preempted_from: str | None = None,
    ) -> DecisionRecord:
        """Decide and record: devices, decision, burst event and audit entries, atomically.

        ``request_id`` makes the call idempotent: a retry with the same key returns the decision
        recorded the first time and reserves nothing more (a retry after the placement was released,
        or its lease ended, says so: ``released_at``). ``lease``: counted from the commit; a
        placement neither submitted to a scheduler nor renewed before it ends holds nothing from
        then on (every read sees it ended; the next write releases it, stamped with the lease's end,
        audited as ``expired``). ``queue``: when every pool that could take the workload is only
        full (the policy's ``no_capacity``), it waits in the queue instead (outcome ``queued``, its
        record's ``queue`` says its place) and is placed when capacity frees (``admit``); work of a
        class that may preempt tries its preemption at once (its record's ``queue`` then says it was
        admitted, or why it takes no grant); ``submission``: how it is submitted once placed (now,
        when it fits at once: ExecutorError, its placement kept, when the scheduler refuses). A
        workload that can never run is rejected as ever. Raises SpecError, PolicyUnavailable/PolicyError (nothing placed), StateError.
        """
        from examlops_policy import specs

        cycle, q = self.cycle, self.queue
        under = cycle.current()
        specs.check_workload_facts(workload, under.policy.tables)
        if submission is not None and not queue:
            raise SpecError("a submission once admitted is for a queued placement: add --queue (queue=True)", field="submission")
        if submission is not None:
            schedulers.scheduler(submission.scheduler, field="--submit").check_queued(submission.options)
        request = Request(workload)
        if request_id is not None:
            specs.check_request_id(request_id)
            found = cycle.store.request_row(request_id)
            if found is not None:
                return queueing.record_entry(q, same_request(cycle.record(found), request, request_id))
        if lease is not None:
            check_lease(lease)

        def plan(decided: Decided) -> Write | Skip[None]:
            ident = uuid.uuid4().hex
            decision = decided.decision
            withheld: dict[str, int] = {}
            if queue and isinstance(decision, Placement) and preempted_from is None and cycle.store.queue_waiting():
                # Work that may wait does not take what the queue reserves for a workload before it
                # (backfill): decided again as if the reserved devices were held.
                withheld = queueing.withheld_for(q, workload, decision, ident, lease)
                if withheld:
                    decision = cycle.withholding(decided, withheld)
            waits = None
            if queue:
                # Its place in the order is asked before the write (when it is only full now; one
                # found only full under the lock is queued all the same, its place asked later).
                waits = queueing.intent(
                    q, workload, decision if commit.queueable(decision) else None, ident, lease=lease, submission=submission,
                    queued_at=queued_at, preempted_from=preempted_from,
                )  # fmt: skip
            return Write(decision, decided.snapshot, ident=ident, request_id=request_id, lease=lease, queue=waits, withheld=withheld or None)

        written = cycle.run(request, plan, name=workload.name, under=under)
        assert not isinstance(written, Skip)  # a placement always writes its decision
        done = written.done
        if done.record is None and done.not_admitted == "replaced":
            assert done.earlier is not None  # the victim was placed or queued again already: that decision
            return queueing.record_entry(q, cycle.record(done.earlier))
        if done.record is None:
            assert done.earlier is not None and request_id is not None
            return queueing.record_entry(q, same_request(cycle.record(done.earlier), request, request_id))
        if done.record.decision.outcome == "queued":
            # Urgent work (a class that may preempt) takes its grants now, not at the next pass.
            queueing.preempt_now(q, done.record.id)
        if submission is not None and isinstance(done.record.decision, Placement):
            # It fitted at once: submitted now, as admission would have (not left unsubmitted).
            return queueing.record_entry(q, queueing.submit_placed(q, done.record, submission))
        return queueing.record_entry(q, done.record)

    def portable(self, engine: str, accelerator: str) -> Portability:
        """Whether ``engine`` can run on ``accelerator`` (the policy's portability check): the
        accelerator's backend, and the policy's reason when it cannot. SpecError for an unknown
        engine or accelerator; PolicyUnavailable without a verdict."""
        under, prepared = self.cycle.prepare(Workload("portability-check", accelerator=accelerator, engine=engine), [])
        rejection = prepared.judged.workload.rejection
        # With no pools, the only rejection that speaks of the workload itself is portability's.
        reason = rejection if rejection is not None and rejection.code == "backend_unsupported" else None
        backend = str(cast(JSONObject, under.policy.tables.accelerators[accelerator])["backend"])
        return Portability(engine, accelerator, backend, reason)

    def what_if(self, workload: Workload, pools: Sequence[Pool] | None = None, *, where: bool = False) -> Decision:
        """Decide without recording or reserving: over ``pools`` (nothing held on them) or the
        current state. ``where``: a placement on a pool of nodes also says the node(s) and devices
        it would get now (its nodes are read; a recorded placement's are chosen again when it is
        committed)."""
        from examlops_policy import specs

        cycle = self.cycle
        under = cycle.current()
        specs.check_workload_facts(workload, under.policy.tables)
        if pools is None:
            decided = cycle.decide(Request(workload), cycle.snapshot(), under)
            return self._nodes_of(decided) if where else decided.decision
        from examlops_policy.app.estimating import starts_for

        states = []
        for pool in pools:
            specs.check_pool_facts(pool, under.policy.tables)
            states.append(under.capacities.empty(pool))
        ordered = sorted(states, key=lambda s: s.pool.name)
        under, prepared = cycle.prepare(workload, [s.pool for s in ordered], under=under)
        capacities, tables = [s.capacity for s in ordered], under.policy.tables
        starts = starts_for(cycle.estimator(under), prepared, capacities, tables)
        decision = prepared.decide(capacities, tables, starts=starts)
        if not where:
            return decision
        by_name = {s.pool.name: s.pool for s in ordered}
        sharing = sharing_of(by_name.values())
        return _on_nodes(
            prepared, decision, capacities, tables, starts, lambda name: under.capacities.rooms_of(by_name[name], []),
            lambda name: [by_name[other] for other in sharing.group(name)[1:]],
        )  # fmt: skip

    def _nodes_of(self, decided: Decided) -> Decision:
        """A placement on a pool of nodes with the node(s) and devices it would get now (what a
        recorded one gets is chosen again, under the write lock, when it is committed); a grant
        whose lease ended holds nothing there."""
        capacities, snap = decided.under.capacities, decided.snapshot
        sharing = capacities.sharing(snap.fleet_version, snap.pools)

        def room_of(name: str) -> Rooms:
            pool = snap.states[snap.index[name]].pool
            rows, grants, usage = self.cycle.store.node_rows(sharing.group(pool.name))
            if snap.ended:
                rows = [r for r in rows if r.decision_id not in snap.ended]
                grants = [g for g in grants if g.decision_id not in snap.ended]
            return capacities.rooms_of(pool, rows, grants, usage, sharing.devices(pool.name), sharing.other_mode(pool.name), sharing.states(pool.name))

        return _on_nodes(
            decided.prepared, decided.decision, snap.capacities, decided.under.policy.tables, decided.starts, room_of,
            lambda name: [snap.states[snap.index[other]].pool for other in sharing.group(name)[1:]],
        )  # fmt: skip

    def release(self, ident: str, *, kubeconfig: str | None = None, context: str | None = None) -> ReleaseReport:
        """Free what a placement holds; a Kubernetes Job it was submitted as is deleted first
        (only the Job of the recorded uid, through ``kubeconfig``/``context`` as for submit). A
        second release writes nothing and says when the first one was. ExecutorError when the
        Job cannot be deleted (nothing released)."""
        cycle = self.cycle
        record = self.decision(ident)
        deleted = None
        scheduler = schedulers.of_job(record.scheduler)  # None: a job this layer's schedulers do not run
        if scheduler is not None and record.released_at is None and record.job_id and record.job_state != "missing":
            deleted = scheduler.released(record, {"kubeconfig": kubeconfig, "context": context})
        pool = getattr(record.decision, "pool", None)
        pending = pool is not None and any(s.pool.name == pool and s.removing is not None for s in cycle.snapshot().states)
        row, already = commit.release(cycle.store, cycle.capacities, record.id, source=SOURCE)
        removed = pending and pool not in cycle.snapshot().index
        admitted, problem = (None, None) if already else queueing.offer_freed(self.queue)
        return ReleaseReport(cycle.records.record(row), already, deleted, removed, admitted, problem)


def _on_nodes(
    prepared: Prepared,
    decision: Decision,
    capacities: Sequence[Capacity],
    tables: Tables,
    starts: Starts | None,
    room_of: Callable[[str], Rooms],
    sharers: Callable[[str], Sequence[Pool]],
) -> Decision:
    """A placement (decided on ``capacities`` with ``starts``) with the node(s) and devices it
    would get now where its pool has nodes (``room_of``: a pool's nodes and what is on them), on
    the tied pool the packer's best node is on, chosen with the packer each pool chooses with
    (``sharers``: the pools sharing a pool's nodes; ``joint.settle``, as a commit chooses)."""
    if not isinstance(decision, Placement):
        return decision
    fleet = prepared.judged.fleet

    def pool_of(name: str) -> Pool:
        return fleet.entries[fleet.index[name]].pool

    kept: dict[str, Rooms | None] = {}

    def tracked(name: str) -> Rooms | None:
        if name not in kept:
            kept[name] = room_of(name) if pool_of(name).node_tracked else None
        return kept[name]

    if not any(pool_of(name).node_tracked for name in (decision.pool, *decision.tied)):
        return decision
    from examlops_policy._core import joint, rooms

    decision, room, chooser = joint.settle(prepared, decision, capacities, tables, starts, tracked, pool_of, sharers)
    assert isinstance(decision, Placement)
    if room is None:
        return decision
    return with_nodes(decision, rooms.choose(room, decision.grant, decision.workload, chooser=chooser))


def with_nodes(decided: Placement, allocations: tuple[NodeAllocation, ...] | None) -> Placement:
    """``decided`` with the node(s) and devices chosen for it (as it is when none were)."""
    if allocations is None:
        return decided
    return dataclasses.replace(decided, allocations=allocations, holdings=tuple(h for a in allocations for h in a.holdings))


def as_burst(workload: Workload) -> Workload:
    """The workload asking for cloud explicitly, bursting allowed (``exa hardware burst``)."""
    return dataclasses.replace(workload, target="cloud", allow_burst=True)


def same_request(record: DecisionRecord, request: Request, request_id: str) -> DecisionRecord:
    """The recorded decision for ``request_id``, which must be for the same workload."""
    if not request.asks_as(codec.workload_input(record.decision.workload)):
        raise SpecError(
            f"request id {request_id!r} was used for another workload (decision {record.id[:12]}, {record.decision.workload.name}); "
            "use a new request id",
            field="request_id",
        )
    return record

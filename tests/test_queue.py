"""The queue through the library, on SQLite and PostgreSQL, with the real OPA: a workload whose
pools are only full waits (recorded and audited as queued, with its place in the policy's order);
one that can never run is rejected at once; admission places waiting workloads in the order, each
under the revision served now, linked to its queued record; nothing is admitted twice; cancel;
quotas; preemption."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from examlops_policy._core import leases
from examlops_policy.app.queue import workload_from_spec
from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Queued, Rejection, Workload
from examlops_policy.store import Store
from reliability.backends import Backend
from reliability.harness import open_hardware, violations
from tests.backend_support import backend, hw  # noqa: F401 - fixtures

SMALL = Pool("small", "hpc", "amd", 2, "eu", cost_per_hour=0.5, carbon_factor=10)


pytestmark = pytest.mark.hw_pools(SMALL)


def amd(name: str, count: int = 1, **more: Any) -> Workload:
    return Workload(name, "amd", count=count, **more)


def entries(store: Store, kind: str | None = None) -> list[dict[str, Any]]:
    out = [json.loads(row.canonical) for row in store.audit_rows()]
    return [e for e in out if kind is None or e["kind"] == kind]


# -- queueing --------------------------------------------------------------------------------------


def test_a_workload_whose_pools_are_full_waits_recorded_and_audited_as_queued(hw: Hardware, backend: Backend) -> None:
    first = hw.place(amd("a", 2))
    assert isinstance(first.decision, Placement)
    waiting = hw.place(amd("b"), queue=True)
    d = waiting.decision
    assert isinstance(d, Queued) and not isinstance(d, Rejection) and d.queued and d.outcome == "queued" and d.code == "no_capacity"
    assert waiting.queue is not None and waiting.queue.state == "queued" and (waiting.queue.position, waiting.queue.of) == (1, 1)
    assert dict(waiting.queue.waits_for) == {"capacity_exhausted": 1}
    queued = entries(hw.store, "queued")
    assert len(queued) == 1 and queued[0]["decision_id"] == waiting.id and queued[0]["position"] == 1
    assert queued[0]["waits_for"] == {"capacity_exhausted": 1}
    assert [e["outcome"] for e in entries(hw.store, "decision")] == ["placed", "queued"]
    # The record reads back as it was decided (rebuilt), and the chain vouches for it.
    again = hw.decision(waiting.id)
    assert isinstance(again.decision, Queued) and again.decision.reason == d.reason
    assert hw.verify_audit().ok
    assert violations(backend) == []


def test_the_public_api_names_the_queued_decision_and_the_node() -> None:
    """``from examlops_policy import ...`` gives what a pool of nodes and a queued record are built
    of: ``Node``, and ``Queued`` (a queued record's decision, no ``Rejection``)."""
    import examlops_policy
    from examlops_policy import model

    assert examlops_policy.Node is model.Node and examlops_policy.Queued is model.Queued
    assert {"Node", "Queued"} <= set(examlops_policy.__all__)
    assert not issubclass(model.Queued, model.Rejection)


def test_without_queue_a_full_fleet_rejects_as_before(hw: Hardware) -> None:
    hw.place(amd("a", 2))
    rejected = hw.place(amd("b"))
    assert rejected.decision.outcome == "rejected" and rejected.queue is None
    assert hw.store.queue_rows(("queued",)) == []


def test_a_workload_that_can_never_run_is_rejected_at_once_even_with_queue(hw: Hardware) -> None:
    never = hw.place(Workload("x", "amd", engine="sglang"), queue=True)  # sglang cannot run on ROCm
    assert never.decision.outcome == "rejected" and never.decision.code == "backend_unsupported"  # type: ignore[union-attr]
    assert hw.store.queue_rows(("queued",)) == [] and entries(hw.store, "queued") == []


def test_more_devices_than_a_pool_that_lists_no_nodes_has_is_never_and_does_not_wait(hw: Hardware) -> None:
    """SMALL lists no nodes: it is one node of its 2 devices, so 3 on one node can never run there
    (pool_too_small, never); ``queue=True`` rejects it at once and nothing waits. 2 while it is
    full still waits."""
    never = hw.place(amd("big", 3), queue=True)
    d = never.decision
    assert isinstance(d, Rejection) and not isinstance(d, Queued) and d.outcome == "rejected" and d.code == "no_eligible_pool"
    assert never.queue is None
    (v,) = d.verdicts
    assert [(r.code, r.kind) for r in v.reasons] == [("pool_too_small", "never"), ("capacity_exhausted", "not_now")]
    assert v.reasons[0].details == {"units": 3, "profile": None, "devices_needed": 3}
    assert hw.store.queue_rows(("queued",)) == [] and entries(hw.store, "queued") == []
    hw.place(amd("a", 2))
    waiting = hw.place(amd("b", 2), queue=True)
    assert isinstance(waiting.decision, Queued) and waiting.queue is not None and dict(waiting.queue.waits_for) == {"capacity_exhausted": 1}
    assert hw.verify_audit().ok


def test_with_room_a_queued_placement_is_placed_at_once(hw: Hardware) -> None:
    record = hw.place(amd("a"), queue=True)
    assert isinstance(record.decision, Placement) and record.queue is None


def test_a_retry_with_the_same_request_id_returns_the_queued_record(hw: Hardware) -> None:
    hw.place(amd("a", 2))
    one = hw.place(amd("b"), queue=True, request_id="req-1")
    two = hw.place(amd("b"), queue=True, request_id="req-1")
    assert one.id == two.id and two.decision.outcome == "queued"
    assert len(hw.store.queue_rows(("queued",))) == 1


def test_the_order_is_the_policys_priority_then_fair_share_then_age(hw: Hardware) -> None:
    hw.place(amd("a", 2))
    low = hw.place(amd("low", priority="low"), queue=True)
    normal = hw.place(amd("normal"), queue=True)
    high = hw.place(amd("high", priority="high"), queue=True)
    listing = hw.queue()
    assert [e.id for e in listing.entries] == [high.id, normal.id, low.id]
    assert [e.position for e in listing.entries] == [1, 2, 3]
    assert listing.entries[0].order_reason and listing.entries[0].order_reason.startswith("priority high")


def test_an_unknown_priority_class_is_bad_input(hw: Hardware) -> None:
    with pytest.raises(SpecError, match="unknown priority class 'urgent'"):
        hw.place(amd("a", priority="urgent"), queue=True)


# -- admission ---------------------------------------------------------------------------------------


def test_a_release_admits_the_next_in_order_linked_to_its_queued_record(hw: Hardware, backend: Backend) -> None:
    first = hw.place(amd("a", 2))
    later = hw.place(amd("later"), queue=True)
    sooner = hw.place(amd("sooner", priority="high"), queue=True)
    released = hw.release(first.id)
    assert released.admitted is not None and released.admission_error is None
    names = [a.workload for a in released.admitted.admitted]
    assert names == ["sooner", "later"]  # both fit once the two devices are free, in order
    placed = hw.decision(released.admitted.admitted[0].decision_id)
    assert isinstance(placed.decision, Placement) and placed.queued_id == sooner.id
    queued = hw.decision(sooner.id)
    assert queued.queue is not None and queued.queue.state == "admitted" and queued.queue.admitted_by == placed.id
    assert [e["queued_id"] for e in entries(hw.store, "admit")] == [sooner.id, later.id]
    assert hw.store.queue_rows(("queued",)) == []
    assert violations(backend) == []


def test_max_wait_counts_from_when_it_was_first_queued_and_work_past_it_leaves_the_queue(tmp_path: Path, opa_home: Path) -> None:
    """As a deadline would be: a pass does not start the clock again. Work past its max_wait leaves
    the queue (failed, saying why) and is not placed; work within it is judged with what is left."""
    from examlops_policy.hardware import ManagedPolicy
    from examlops_policy.store.sqlite import SQLiteStore

    clock = {"now": "2026-11-01T00:00:00.000000Z"}
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db", clock=lambda: clock["now"]), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([SMALL])
        first = hw.place(amd("a", 2))
        short = hw.place(amd("short", max_wait=60), queue=True)
        long = hw.place(amd("long", max_wait=600), queue=True)
        assert short.decision.outcome == long.decision.outcome == "queued"
        clock["now"] = "2026-11-01T00:00:30.000000Z"
        assert hw.admit().failed == ()  # within both: both still wait
        clock["now"] = "2026-11-01T00:02:00.000000Z"  # 2 min after both were queued
        report = hw.release(first.id).admitted
        assert report is not None
        assert [a.queued_id for a in report.admitted] == [long.id]
        assert [(e.id, e.state) for e in report.failed] == [(short.id, "failed")]
        why = report.failed[0].message or ""
        assert why.startswith("past its max_wait: it waited 2 m since it was first queued at 2026-11-01T00:00:00") and "max_wait of 1 m" in why
        placed = hw.decision(report.admitted[0].decision_id).decision
        assert isinstance(placed, Placement) and placed.workload.max_wait == 480  # 10 min less the 2 it waited
        # The reason stays with the queued record: explain and queue --all show it.
        entry = hw.decision(short.id).queue
        assert entry is not None and (entry.state, entry.message) == ("failed", why)
        assert hw.store.queue_rows(("queued",)) == []
        assert hw.verify_audit().ok
    finally:
        hw.close()


def test_admission_with_nothing_waiting_writes_nothing(hw: Hardware) -> None:
    before = len(hw.store.audit_rows())
    report = hw.admit()
    assert report.admitted == () and report.waiting == 0
    assert len(hw.store.audit_rows()) == before


def test_what_does_not_fit_does_not_block_what_does(hw: Hardware) -> None:
    first = hw.place(amd("a"))
    hw.place(amd("b"), lease=timedelta(hours=1))
    big = hw.place(amd("big", 2, priority="high"), queue=True)
    small = hw.place(amd("small", walltime=600), queue=True)
    # One device free: the big one (first in order) does not fit and holds a reservation from when
    # b's lease ends; the small one fits and ends before then (backfilled).
    hw.release(first.id)
    assert hw.decision(small.id).queue.state == "admitted"  # type: ignore[union-attr]
    assert hw.decision(big.id).queue.state == "queued"  # type: ignore[union-attr]


def test_admission_judges_again_under_the_policy_served_now(hw: Hardware) -> None:
    """The placement admission makes is a decision of its own: asked under the revision OPA
    confirms now, over the capacity as it is then (not the queued record's verdicts)."""
    first = hw.place(amd("a", 2))
    queued = hw.place(amd("b"), queue=True)
    hw.release(first.id)
    placed = hw.decision(hw.decision(queued.id).queue.admitted_by)  # type: ignore[union-attr,arg-type]
    served, _ = hw.engine.confirm()
    assert placed.decision.provenance.policy_revision == served
    assert placed.decision.provenance.input_digest != queued.decision.provenance.input_digest
    assert isinstance(placed.decision, Placement) and placed.decision.pool == "small"


def test_a_claim_is_one_conditional_update_and_the_database_refuses_a_second_link(hw: Hardware, backend: Backend) -> None:
    hw.place(amd("a", 2))
    queued = hw.place(amd("b"), queue=True)
    wins = [hw.store.transaction(lambda txn: txn.claim(queued.id, "2026-12-01T00:00:00Z"), landed=lambda txn: None) for _ in range(2)]
    assert wins == [True, False]
    with backend.raw() as db:
        placed = db.execute("SELECT id FROM decisions WHERE outcome = 'placed'").fetchone()[0]
        db.execute("UPDATE decisions SET queued_id = ? WHERE id = ?".replace("?", "%s" if backend.name == "postgres" else "?"), (queued.id, placed))
        other = hw.place(amd("c"), queue=True)  # another decision to link twice
        with pytest.raises(Exception, match="(?i)unique"):
            db.execute("UPDATE decisions SET queued_id = ? WHERE id = ?".replace("?", "%s" if backend.name == "postgres" else "?"), (queued.id, other.id))


def test_a_cancelled_workload_is_never_admitted(hw: Hardware) -> None:
    first = hw.place(amd("a", 2))
    queued = hw.place(amd("b"), queue=True)
    done = hw.cancel(queued.id[:10])
    assert not done.already and done.entry.state == "cancelled"
    again = hw.cancel(queued.id)
    assert again.already and again.entry.ended_at == done.entry.ended_at
    report = hw.release(first.id)
    assert report.admitted is None  # nothing waited
    assert hw.decision(queued.id).queue.state == "cancelled"  # type: ignore[union-attr]
    assert [e["queued_id"] for e in entries(hw.store, "cancel")] == [queued.id]


def test_cancel_of_an_admitted_or_unknown_workload_is_refused(hw: Hardware) -> None:
    first = hw.place(amd("a", 2))
    queued = hw.place(amd("b"), queue=True)
    hw.release(first.id)
    with pytest.raises(SpecError, match="no longer waiting: admitted by decision"):
        hw.cancel(queued.id)
    with pytest.raises(NotFoundError):
        hw.cancel("abcdef0123")


def test_cancel_racing_admission_one_wins(hw: Hardware, backend: Backend, opa_home: Path) -> None:
    """A cancel and an admission of the same workload at once: it ends cancelled or admitted, never
    both, and at most one placement links to it."""
    for round_ in range(3):
        first = hw.place(amd(f"a{round_}", 2))
        queued = hw.place(amd(f"b{round_}"), queue=True)
        other = open_hardware(backend, opa_home)
        try:
            outcome: dict[str, Any] = {}
            t = threading.Thread(target=lambda: outcome.update(cancel=_try(lambda: other.cancel(queued.id))))
            t.start()
            hw.release(first.id)
            t.join(60)
        finally:
            other.close()
        state = hw.decision(queued.id).queue.state  # type: ignore[union-attr]
        with backend.raw() as db:
            links = db.execute(f"SELECT count(*) FROM decisions WHERE queued_id = '{queued.id}'").fetchone()[0]
        assert (state, links) in (("cancelled", 0), ("admitted", 1))
        for live in hw.store.live_grants():
            hw.release(live.id)


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # the loser of the race is told why
        return exc


def test_the_lease_a_queued_workload_asked_for_is_its_placements(hw: Hardware) -> None:
    first = hw.place(amd("a", 2))
    queued = hw.place(amd("b"), queue=True, lease=timedelta(minutes=30))
    report = hw.release(first.id)
    assert report.admitted is not None
    placed = hw.decision(report.admitted.admitted[0].decision_id)
    assert placed.lease_expires_at is not None and placed.queued_id == queued.id
    # Counted from the commit that records the placement, as for place.
    assert leases.instant(placed.lease_expires_at) - leases.instant(placed.created_at) == timedelta(minutes=30)


def test_undraining_a_pool_offers_the_queue_its_capacity(hw: Hardware) -> None:
    """A drained pool takes no new grants (pool_drained, not now): work that only it could take
    waits, and is admitted when the pool is undrained."""
    hw.drain("small")
    waiting = hw.place(amd("b"), queue=True)
    assert waiting.decision.outcome == "queued" and dict(waiting.queue.waits_for) == {"pool_drained": 1}  # type: ignore[union-attr]
    assert hw.drain("small").action == "unchanged" and hw.decision(waiting.id).queue.state == "queued"  # type: ignore[union-attr]
    hw.undrain("small")
    entry = hw.decision(waiting.id).queue
    assert entry is not None and entry.state == "admitted"
    assert isinstance(hw.decision(str(entry.admitted_by)).decision, Placement)


def test_audit_verify_holds_the_queue_to_the_chain(tmp_path: Path, opa_home: Path) -> None:
    """Queued, cancelled and admitted records, and the placements' queue columns, as their entries
    say: a row changed beside the chain is named."""
    import sqlite3

    from examlops_policy.hardware import ManagedPolicy
    from examlops_policy.store.sqlite import SQLiteStore

    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db"), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([SMALL])
        first = hw.place(amd("a", 2, project="llm-pretraining"))
        waiting = hw.place(amd("b", priority="high"), queue=True)
        dropped = hw.place(amd("c"), queue=True)
        hw.cancel(dropped.id)
        admitted = hw.release(first.id).admitted
        assert admitted is not None and [a.queued_id for a in admitted.admitted] == [waiting.id]
        report = hw.verify_audit()
        assert report.ok, report.problems
        for table, column, value, ident in (
            ("queue", "state", "queued", waiting.id),
            ("queue", "admitted_by", None, waiting.id),
            ("queue", "ended_at", "2026-01-01T00:00:00.000000Z", dropped.id),
            ("decisions", "project", "green-research", first.id),
            ("decisions", "queued_id", None, admitted.admitted[0].decision_id),
            ("decisions", "job_started_at", "2026-01-01T00:00:00.000000Z", first.id),
        ):
            with sqlite3.connect(tmp_path / "state.db") as db:
                before = db.execute(f"SELECT {column} FROM {table} WHERE id = ?", (ident,)).fetchone()[0]
                db.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (value, ident))
            problems = [p.message for p in hw.verify_audit().problems]
            assert any(m.startswith(f"{table}.{column} of {ident[:12]}") for m in problems), (table, column, problems)
            with sqlite3.connect(tmp_path / "state.db") as db:
                db.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (before, ident))
        assert hw.verify_audit().ok
    finally:
        hw.close()


# -- quotas ---------------------------------------------------------------------------------------


def test_a_placement_decided_while_its_project_held_quota_reads_back_and_verifies(backend: Backend, opa_home: Path) -> None:
    """Its input digest covers what the project held (the record's quota use): reading it back and
    exa audit verify work it out the same way."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool(n, "hpc", "amd", 1, "eu") for n in ("a", "b", "c")])
        hw.place(amd("train", project="green-research"))
        second = hw.place(amd("train", project="green-research"))
        assert second.decision.provenance.quota_use == {"devices": {"green-research": {"amd": 1.0}}}
        read = hw.decision(second.id).decision
        assert isinstance(read, Placement) and (read.pool, read.provenance) == (second.decision.pool, second.decision.provenance)  # type: ignore[union-attr]
        report = hw.verify_audit()
        assert report.ok, report.problems
    finally:
        hw.close()


def test_a_placement_over_its_projects_quota_waits_and_is_admitted_when_the_project_frees(backend: Backend, opa_home: Path) -> None:
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("big", "hpc", "nvidia", 40, "eu", cost_per_hour=0.5, carbon_factor=10)])
        first = hw.place(Workload("w1", "nvidia", count=10, project="inference-eu"))  # inference-eu: 16 nvidia devices
        waiting = hw.place(Workload("w2", "nvidia", count=10, project="inference-eu"), queue=True)
        assert waiting.decision.outcome == "queued"
        assert dict(waiting.queue.waits_for) == {"quota_exceeded": 1}  # type: ignore[union-attr]
        assert waiting.decision.provenance.quota_use == {"devices": {"inference-eu": {"nvidia": 10.0}}}
        other = hw.place(Workload("other", "nvidia", count=10))  # another project: the pool has room
        assert isinstance(other.decision, Placement)
        rows = {(r.project, r.accelerator): r for r in hw.quotas()}
        assert rows[("inference-eu", "nvidia")].held == 10 and rows[("inference-eu", "nvidia")].room == 6
        report = hw.release(first.id)
        assert report.admitted is not None and [a.queued_id for a in report.admitted.admitted] == [waiting.id]
        assert hw.replay(waiting.id).same
    finally:
        hw.close()


def test_device_hours_used_in_the_period_stop_new_work_of_the_class(tmp_path: Path, opa_home: Path) -> None:
    """green-research may use 2000 nvidia device-hours per 30 days: its placements' hours, counted
    over the period by the store's clock, stop the next one (it waits)."""
    from examlops_policy.hardware import ManagedPolicy
    from examlops_policy.store.sqlite import SQLiteStore

    clock = {"now": "2026-11-01T00:00:00.000000Z"}
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db", clock=lambda: clock["now"]), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([Pool("big", "hpc", "nvidia", 64, "eu", cost_per_hour=0.1, carbon_factor=1)])
        held = hw.place(Workload("long", "nvidia", count=16, project="green-research"))
        clock["now"] = "2026-11-06T04:00:00.000000Z"  # 124 h: 1984 device-hours, under the quota
        assert isinstance(hw.place(Workload("more", "nvidia", project="green-research")).decision, Placement)
        clock["now"] = "2026-11-06T05:00:00.000000Z"  # 125 h: 16 x 125 = 2000 (and the second one's hour)
        hw.release(held.id)
        waits = hw.place(Workload("next", "nvidia", project="green-research"), queue=True)
        assert waits.decision.outcome == "queued" and dict(waits.queue.waits_for) == {"quota_exceeded": 1}  # type: ignore[union-attr]
        assert waits.decision.provenance.quota_use == {"device_hours": {"green-research": {"nvidia": 2001.0}},
                                                       "devices": {"green-research": {"nvidia": 1.0}}}
        # The quotas report agrees: no room while the device-hours are used up (nominal 16, 1 held).
        row = next(r for r in hw.quotas() if (r.project, r.accelerator) == ("green-research", "nvidia"))
        assert (row.held, row.room) == (1.0, 0.0) and row.summary.endswith("used up, nothing more starts until older use ages out")
        clock["now"] = "2026-12-06T06:00:00.000000Z"  # 30 days on, the first grant's hours have aged out
        assert isinstance(hw.place(Workload("later", "nvidia", project="green-research")).decision, Placement)
    finally:
        hw.close()


def test_a_larger_partition_is_given_only_within_the_projects_quota(backend: Backend, opa_home: Path) -> None:
    """llm-pretraining may hold 4 amd devices (its cohort holds no more). A quarter that only a free
    DPX half has room for is given the half while the project's quota has room for it; once the half
    would take the project over (the quarter itself would not), the pool waits for the quota, naming
    the half, and the policy's reference rule agrees."""
    hw = open_hardware(backend, opa_home)
    try:
        mi = Pool("mi", "hpc", "amd", 2, "eu", cost_per_hour=4.0, carbon_factor=10, supports_fractions=True, model="mi300x")
        hw.apply([mi, Pool("whole", "hpc", "amd", 3, "eu", cost_per_hour=10.0, carbon_factor=10)])
        llm = {"project": "llm-pretraining"}
        assert hw.place(Workload("three", "amd", count=3, **llm)).decision.pool == "whole"  # type: ignore[union-attr]
        assert hw.place(Workload("c0", "amd", fraction=0.125, **llm)).decision.grant.profile == "cpx"  # type: ignore[union-attr]
        assert hw.place(Workload("half", "amd", fraction=0.5)).decision.grant.profile == "dpx"  # type: ignore[union-attr]
        # Device 0 runs CPX, device 1 DPX with one half free: a quarter gets that half (3.125 + 0.5 <= 4).
        quarter = hw.place(Workload("q1", "amd", fraction=0.25, **llm))
        assert isinstance(quarter.decision, Placement)
        assert (quarter.decision.pool, quarter.decision.grant.profile, quarter.decision.grant.larger) == ("mi", "dpx", True)
        hw.release(quarter.id)
        for i in range(1, 5):  # four more CPX eighths: the project holds 3.625
            assert hw.place(Workload(f"c{i}", "amd", fraction=0.125, **llm)).decision.grant.profile == "cpx"  # type: ignore[union-attr]
        waiting = hw.place(Workload("q2", "amd", fraction=0.25, **llm), queue=True)
        assert waiting.decision.outcome == "queued"
        on_mi = next(v for v in waiting.decision.verdicts if v.pool == "mi")
        assert on_mi.grant.profile == "dpx" and [r.code for r in on_mi.reasons] == ["quota_exceeded"]
        assert on_mi.reasons[0].kind == "not_now" and on_mi.reasons[0].message.endswith("no room now for 0.500 more")
        assert hw.replay(waiting.id).same
    finally:
        hw.close()


# -- preemption -------------------------------------------------------------------------------------


def test_a_high_priority_workload_preempts_a_low_one_on_spot_capacity(backend: Backend, opa_home: Path) -> None:
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("spot-amd", "hpc", "amd", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True)])
        victim = hw.place(amd("batch", 2, priority="low", spot="allow"))
        assert isinstance(victim.decision, Placement)
        urgent = hw.place(amd("urgent", 2, priority="high", spot="allow"), queue=True)
        assert urgent.decision.outcome == "queued"
        # Queueing urgent work tries its preemption at once, not at the next pass.
        assert urgent.queue is not None and urgent.queue.state == "admitted" and urgent.queue.preempted == (victim.id,)
        assert hw.admit().admitted == ()
        after = hw.decision(victim.id)
        assert after.released_at is not None and after.preempting_for == urgent.id
        # The victim says who took its grant; the preemptor's placement names its victims.
        assert after.preempted_by == urgent.queue.admitted_by
        assert hw.decision(urgent.queue.admitted_by).preempted == (victim.id,)  # type: ignore[arg-type]
        flags = {s.id: (s.preempting_for, s.released_at) for s in hw.decision_page().decisions}
        assert flags[victim.id] == (urgent.id, after.released_at)
        requeued = [r for r in hw.store.queue_rows(("queued",)) if r.preempted_from == victim.id]
        assert len(requeued) == 1 and requeued[0].queued_at == victim.created_at  # it keeps its age
        kinds = [e["kind"] for e in entries(hw.store)]
        assert "preempt" in kinds and "preempted" in kinds
        assert violations(backend) == []
        report = hw.verify_audit()  # the tables held to the chain: the victim's release and mark
        assert report.ok, report.problems
    finally:
        hw.close()


def test_a_preempted_workload_is_queued_again_in_its_class_and_may_be_preempted_again(backend: Backend, opa_home: Path) -> None:
    """The record keeps the workload's class (its document says ``priority``); the victim waits as
    ``low`` behind normal work, and a later high one takes its grant again."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("spot-amd", "hpc", "amd", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True)])
        victim = hw.place(amd("batch", 2, priority="low", spot="allow"))
        assert hw.decision(victim.id).decision.workload.priority == "low"  # rebuilt from its recorded document
        first = hw.place(amd("urgent", 2, priority="high", spot="allow"), queue=True)
        assert first.queue is not None and first.queue.state == "admitted" and first.queue.admitted_by is not None  # preempted at once
        normal = hw.place(amd("normal", 2, spot="allow"), queue=True)
        requeued = next(r for r in hw.store.queue_rows(("queued",)) if r.preempted_from == victim.id)
        assert requeued.priority == "low" and workload_from_spec(requeued.spec).priority == "low"
        assert [e.id for e in hw.queue().entries] == [normal.id, requeued.id]  # low stays behind normal
        # The urgent work ends: normal comes first, then the victim runs again, still low ...
        assert [a.queued_id for a in hw.release(first.queue.admitted_by).admitted.admitted] == [normal.id]  # type: ignore[union-attr]
        hw.release(next(e.admitted_by for e in hw.queue(every=True).entries if e.id == normal.id))  # type: ignore[arg-type]
        again = next(e for e in hw.queue(every=True).entries if e.id == requeued.id)
        assert again.state == "admitted" and again.admitted_by is not None
        assert hw.decision(again.admitted_by).decision.workload.priority == "low"
        # ... and high work takes it again.
        second = hw.place(amd("urgent-2", 2, priority="high", spot="allow"), queue=True)
        assert second.queue is not None and (second.queue.state, second.queue.preempted) == ("admitted", (again.admitted_by,))
        assert violations(backend) == []
    finally:
        hw.close()


def test_when_urgent_work_does_not_preempt_the_plans_reasons_say_why(backend: Backend, opa_home: Path) -> None:
    """The policy's reasons for passing over each grant reach the queued record, the queue, the
    admission report and the place result (victim_within_quota: the other project borrows nothing;
    pool_not_preemptible: not spot capacity)."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([
            Pool("spot-nv", "hpc", "nvidia", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True),
            Pool("small", "hpc", "amd", 2, "eu", cost_per_hour=0.5, carbon_factor=10),
        ])  # fmt: skip
        train = hw.place(amd("train", 2))
        held = hw.place(Workload("serve", "nvidia", count=2, priority="low", spot="allow", project="inference-eu"))
        assert isinstance(held.decision, Placement)
        urgent = hw.place(Workload("urgent", "nvidia", count=2, priority="high", spot="allow", project="llm-pretraining"), queue=True)
        entry = urgent.queue
        assert entry is not None and entry.state == "queued" and entry.preemption is not None
        # Its own pool's grant borrows nothing; the fallback pool (amd) is not spot capacity.
        assert entry.preemption.startswith("pool_not_preemptible on 1 grant, victim_within_quota on 1 grant ("), entry.preemption
        listed = next(e for e in hw.queue().entries if e.id == urgent.id)
        assert listed.preemption == entry.preemption
        report = hw.admit()
        assert report.not_preempted == ((urgent.id, "urgent", entry.preemption),)
        assert hw.decision(urgent.id).queue.preemption == entry.preemption  # type: ignore[union-attr]

        other = hw.place(amd("eval", 2, priority="high"), queue=True)
        assert other.queue is not None and other.queue.preemption is not None
        assert other.queue.preemption.startswith("pool_not_preemptible on 1 grant (") and train.id in other.queue.preemption
    finally:
        hw.close()


def test_a_normal_priority_workload_does_not_preempt(backend: Backend, opa_home: Path) -> None:
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("spot-amd", "hpc", "amd", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True)])
        hw.place(amd("batch", 2, priority="low", spot="allow"))
        normal = hw.place(amd("normal", 2, spot="allow"), queue=True)
        assert normal.queue is not None and normal.queue.preemption is None  # its class never preempts: nothing to explain
        report = hw.admit()
        assert report.admitted == () and report.not_preempted == ()
    finally:
        hw.close()


# -- usage for the fair share ---------------------------------------------------------------------


def test_use_per_project_is_bucketed_by_day_and_aged_at_each_buckets_middle(tmp_path: Path, opa_home: Path) -> None:
    from examlops_policy.app import queue as queueing
    from examlops_policy.hardware import ManagedPolicy
    from examlops_policy.store._sql import epoch
    from examlops_policy.store.sqlite import SQLiteStore

    clock = {"now": "2026-11-01T00:00:00.000000Z"}
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db", clock=lambda: clock["now"]), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([SMALL, Pool("gpus", "hpc", "nvidia", 8, "eu", cost_per_hour=0.1, carbon_factor=1)])
        a = hw.place(amd("a", 2, project="llm-pretraining"))  # 2 devices from 00:00 ...
        clock["now"] = "2026-11-01T12:00:00.000000Z"
        hw.release(a.id)  # ... to 12:00: 24 device-hours
        b = hw.place(Workload("b", "nvidia", count=4))  # 4 devices from 12:00, still held
        now = epoch("2026-11-02T06:00:00Z")  # 30 h after the start
        use = queueing.usage(hw.cycle, hw.tables, now)
        # Buckets of 24 h back from now: [now-24h, now) holds 4 x 18 h of b; [now-48h, now-24h) holds
        # 4 x 0 h of b... b started 18 h ago, a ran 30..18 h ago.
        assert use == {"default": [[12.0, 72.0]], "llm-pretraining": [[12.0, 12.0], [36.0, 12.0]]}
        assert b.decision.outcome == "placed"
    finally:
        hw.close()


def test_the_queue_wakes_when_the_first_lease_of_an_unsubmitted_placement_ends(hw: Hardware) -> None:
    """What ``serve`` wakes for: while work waits, the end of the first lease that frees capacity
    by itself (a submitted placement's lease no longer ends it)."""
    assert hw.queue_wakes_at() is None  # nothing placed, nothing waits
    leased = hw.place(amd("a", 2), lease=timedelta(minutes=30))
    assert leased.lease_expires_at is not None
    assert hw.queue_wakes_at() is None  # a lease, but nothing waits
    hw.place(amd("b"), queue=True)
    wakes = hw.queue_wakes_at()
    assert isinstance(wakes, datetime) and wakes.utcoffset() == timedelta(0)  # a datetime, as the rest of the API
    assert wakes == leases.instant(leased.lease_expires_at)
    hw.set_job(leased.id, "4711", scheduler="slurm")
    assert hw.queue_wakes_at() is None  # submitted: it holds its devices until its job ends


def test_a_preempted_victim_placed_again_at_once_is_never_queued_again(backend: Backend, opa_home: Path) -> None:
    """Issue 32, 2: the victim of a preemption re-placed at once on another pool is marked as the
    victim's re-placement; a later pass does not queue it again, and releasing the preemptor admits
    no copy of it: one live placement of the workload, and the state verifies."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([
            Pool("nv-spot", "hpc", "nvidia", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True),
            Pool("nv-od", "hpc", "nvidia", 2, "eu", cost_per_hour=2.0, carbon_factor=10),
        ])  # fmt: skip
        victim = hw.place(Workload("victim", "nvidia", count=2, priority="low", spot="allow"))
        assert isinstance(victim.decision, Placement) and victim.decision.pool == "nv-spot"
        boss = hw.place(Workload("boss", "nvidia", count=2, priority="high", spot="require"), queue=True)
        assert boss.decision.outcome == "queued"
        # Urgent work queued by place --queue preempts at once (no admission pass needed).
        entry = boss.queue
        assert entry is not None and entry.state == "admitted" and entry.admitted_by is not None
        assert entry.preempted == (victim.id,)
        live = [g for g in hw.store.live_grants() if g.workload == "victim"]
        assert [g.pool for g in live] == ["nv-od"]  # placed again at once, on demand
        assert hw.store.grant(live[0].id).replaces == victim.id  # type: ignore[union-attr]  # marked as its re-placement
        hw.admit()  # the next pass: nothing of the victim is left to finish
        # Placing it again is conditional, keyed by the victim: a second try (another admitter
        # finishing the same preemption) writes nothing and answers the re-placement.
        before = len(hw.store.audit_rows())
        again = hw.place(Workload("victim", "nvidia", count=2, priority="low", spot="allow"), queue=True, preempted_from=victim.id)
        assert again.id == live[0].id and len(hw.store.audit_rows()) == before
        assert [r for r in hw.store.queue_rows(("queued",)) if r.workload == "victim"] == []
        hw.release(entry.admitted_by)  # boss ends: no copy of the victim to admit
        assert len([g for g in hw.store.live_grants() if g.workload == "victim"]) == 1
        assert violations(backend) == []
        report = hw.verify_audit()
        assert report.ok, report.problems
    finally:
        hw.close()


def test_an_edited_queue_row_is_named_by_verify_and_admission_places_what_its_record_holds(backend: Backend, opa_home: Path) -> None:
    """Issue 32, 1: queue.spec and queue.submission are held to the chain. A row whose spec was
    edited (2 devices, no project, for a row queued as 1 device of inference-eu) or whose batch
    script was swapped is named by exa audit verify; admission places the queued record's workload,
    never the edited spec, and submits nothing a row was edited to say (its row fails)."""
    from examlops_policy.views import Submit

    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("nv", "hpc", "nvidia", 2, "eu", cost_per_hour=0.5, carbon_factor=10)])
        holder = hw.place(Workload("holder", "nvidia", count=2))
        small = hw.place(Workload("small", "nvidia", project="inference-eu"), queue=True)
        script = hw.place(Workload("job", "nvidia", project="inference-eu"), queue=True,
                          submission=Submit("slurm", {"script": "#!/bin/sh\necho queued\n", "name": "job.sh"}))  # fmt: skip
        assert hw.verify_audit().ok
        [queued] = [e for e in entries(hw.store, "queued") if e["decision_id"] == script.id]
        assert queued["submission"] is True and str(queued["submission_digest"]).startswith("sha256:")
        with backend.raw() as db:
            mark = "?" if backend.name == "sqlite" else "%s"
            db.execute(f"UPDATE queue SET spec = {mark} WHERE id = {mark}", ('{"accelerator":"nvidia","count":2,"name":"small"}', small.id))
            db.execute(f"UPDATE queue SET submission = {mark} WHERE id = {mark}", ('{"name":"job.sh","scheduler":"slurm","script":"#!/bin/sh\\nrm -rf /\\n"}', script.id))  # fmt: skip
        problems = [p.message for p in hw.verify_audit().problems]
        assert any(m.startswith(f"queue.spec of {small.id[:12]} ") for m in problems), problems
        assert any(m.startswith(f"queue.submission of {script.id[:12]} ") for m in problems), problems
        admitted = hw.release(holder.id).admitted
        assert admitted is not None
        assert [a.queued_id for a in admitted.admitted] == [small.id]
        placed = hw.decision(admitted.admitted[0].decision_id).decision
        assert isinstance(placed, Placement) and placed.grant.devices == 1 and placed.workload.project == "inference-eu"
        assert [(f.id, f.state) for f in admitted.failed] == [(script.id, "failed")]
        assert "not admitted: its submission is not the one it was queued with" in str(admitted.failed[0].message)
        assert [g.workload for g in hw.store.live_grants()] == ["small"]  # the swapped script's row placed nothing
    finally:
        hw.close()


# -- reservations (backfill) ---------------------------------------------------------------------------


def test_a_large_workload_queued_behind_small_ones_is_admitted_within_a_bounded_number_of_rounds(backend: Backend, opa_home: Path) -> None:
    """Issue 32, 3: a 4-device job of class high waits while 4 one-device jobs hold the pool; each
    round one small job is queued and one released. The big one holds a reservation on the pool
    (the first in the order that does not fit), so no small job of its class or below takes the
    freed devices (none says when it ends): it is admitted once the 4 are released."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("nv", "hpc", "nvidia", 4, "eu", cost_per_hour=0.5, carbon_factor=10)])
        live = [hw.place(Workload(f"s{i}", "nvidia")).id for i in range(4)]
        big = hw.place(Workload("big", "nvidia", count=4, priority="high"), queue=True)
        assert big.decision.outcome == "queued"
        rounds = 0
        while hw.store.queue_find(big.id).state == "queued" and rounds < 12:
            rounds += 1
            small = hw.place(Workload(f"q{rounds}", "nvidia"), queue=True)
            assert small.decision.outcome == "queued", f"round {rounds}: a small job took reserved capacity"
            hw.release(live.pop(0))
            held = [e for e in hw.queue().entries if e.reservation]
            if hw.store.queue_find(big.id).state == "queued":
                assert [e.id for e in held] == [big.id]
                assert "holds a reservation of 4 devices on pool nv" in str(held[0].reservation)
        assert hw.store.queue_find(big.id).state == "admitted" and rounds == 4
        assert [g.workload for g in hw.store.live_grants()] == ["big"]
        assert violations(backend) == []
        report = hw.verify_audit()
        assert report.ok, report.problems
        for e in hw.queue().entries:  # every small job queued while the reservation held reads back as queued
            assert hw.decision(e.id).decision.outcome == "queued"
    finally:
        hw.close()


def test_a_small_job_that_ends_before_the_reservation_starts_is_backfilled(backend: Backend, opa_home: Path) -> None:
    """Slurm's backfill: the reservation starts when the grants holding the pool end (their leases);
    a job of the same class whose walltime ends before then may use the reserved devices, one that
    ends after may not."""
    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([Pool("nv", "hpc", "nvidia", 4, "eu", cost_per_hour=0.5, carbon_factor=10)])
        hw.place(Workload("long", "nvidia", count=3), lease=timedelta(hours=2))
        big = hw.place(Workload("big", "nvidia", count=4), queue=True)
        [entry] = hw.queue().entries
        assert entry.id == big.id and entry.reservation is not None and " on pool nv from 20" in entry.reservation
        late = hw.place(Workload("late", "nvidia", walltime=3 * 3600), queue=True)
        assert late.decision.outcome == "queued"  # it would end after the reservation starts
        assert hw.decision(late.id).decision.outcome == "queued" and hw.replay(late.id).same
        short = hw.place(Workload("short", "nvidia", walltime=1800), queue=True)
        assert isinstance(short.decision, Placement) and short.decision.pool == "nv"  # backfilled
        report = hw.verify_audit()
        assert report.ok, report.problems
    finally:
        hw.close()

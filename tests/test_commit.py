"""What a placement writes, and when its selection is re-run under the lock (``_core/commit.py``).

A decision is selected outside the lock on a snapshot of the state; the commit re-runs the selection
only when the snapshot is stale for the pools that matter: the chosen pool changed, or a pool ranked
before it has room now (for a rejection: any pool changed). A record names the state version whose
capacity it was decided at, and the capacity log gives that version's capacities back.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from examlops_policy._core import commit
from examlops_policy._core.request import Request
from examlops_policy._core.waiting import Starts
from examlops_policy.store import StaleFleet
from examlops_policy.errors import StateError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Rejection, Workload

AMD = Workload("train", "amd", engine="vllm", target="hpc")
FLEET = [
    Pool("amd-a", "hpc", "amd", 1, "eu", cost_per_hour=1.0),
    Pool("amd-b", "hpc", "amd", 2, "eu", cost_per_hour=2.0),
    Pool("amd-c", "hpc", "amd", 2, "eu", cost_per_hour=3.0),
]


def decided(hw: Hardware, workload: Workload) -> tuple[object, object, object, object]:
    """A placement selected outside the lock, not committed yet (with the start estimates it was
    selected with: ``starts[hw]``)."""
    made = hw.cycle.decide(Request(workload))
    starts[id(hw)] = made.starts
    return made.snapshot, made.under, made.prepared, made.decision


starts: dict[int, Starts] = {}


def record_doc(hw: Hardware, ident: str) -> dict[str, object]:
    with sqlite3.connect(hw.home / "state.db") as db:
        (doc,) = db.execute("SELECT document FROM decisions WHERE id = ?", (ident,)).fetchone()
    return dict(json.loads(doc))


def test_a_change_to_a_pool_that_does_not_matter_keeps_the_selection_and_its_version(hardware: Hardware) -> None:
    hardware.apply(FLEET)
    snap, under, prepared, decision = decided(hardware, AMD)
    assert isinstance(decision, Placement) and decision.pool == "amd-a"
    # Meanwhile a pool ranked after the chosen one loses a device (its scheduler reports it busy).
    assert hardware.record_usage({"amd-c": 1}, scheduler="slurm") == {"amd-c": 1}
    done = commit.place(hardware.store, prepared, decision, snap, under.capacities, source="exa-test", starts=starts[id(hardware)])  # type: ignore[arg-type]
    assert done.record is not None
    assert done.record.decision.provenance.input_digest == decision.provenance.input_digest  # type: ignore[attr-defined]
    assert record_doc(hardware, done.record.id)["at"] == snap.version  # type: ignore[attr-defined]
    # Read back, it is rebuilt over the capacity it was decided at, explanation and all.
    again = hardware.decision(done.record.id).decision
    assert [(v.pool, [r.code for r in v.reasons]) for v in again.verdicts] == [(v.pool, [r.code for r in v.reasons]) for v in decision.verdicts]  # type: ignore[attr-defined]
    assert hardware.replay(done.record.id).same


def test_the_chosen_pool_filled_meanwhile_re_runs_the_selection_under_the_lock(hardware: Hardware) -> None:
    hardware.apply(FLEET)
    snap, under, prepared, decision = decided(hardware, AMD)
    assert isinstance(decision, Placement) and decision.pool == "amd-a"
    hardware.place(Workload("first", "amd", engine="vllm", target="hpc"))  # takes amd-a's only device
    done = commit.place(hardware.store, prepared, decision, snap, under.capacities, source="exa-test", starts=starts[id(hardware)])  # type: ignore[arg-type]
    assert done.record is not None
    placed = done.record.decision
    assert isinstance(placed, Placement) and placed.pool == "amd-b"
    assert placed.provenance.input_digest != decision.provenance.input_digest  # decided on the capacity of now
    assert record_doc(hardware, done.record.id)["at"] == snap.version + 1  # type: ignore[attr-defined]
    assert hardware.decision(done.record.id).decision.pool == "amd-b"  # type: ignore[union-attr]
    # Only amd-a was asked when it would start (the workload has no wait limit): the record says
    # amd-b's start was not asked, and reads back so.
    assert placed.estimate is None and record_doc(hardware, done.record.id)["estimates"].keys() == {"amd-a"}  # type: ignore[union-attr]
    assert hardware.decision(done.record.id).decision.estimate is None  # type: ignore[union-attr]
    assert hardware.verify_audit().ok


def test_a_winner_under_the_lock_whose_start_was_not_asked_is_decided_again(hardware: Hardware) -> None:
    """Under earliest (or a wait limit), selection depends on every candidate's estimate, all asked
    before the lock: a winner under the lock whose start is not among them (here: estimates lost
    on purpose) sends the decision back rather than be chosen without one."""
    hardware.apply(FLEET)
    hurried = Workload("hurried", "amd", engine="vllm", target="hpc", optimize="earliest")
    snap, under, prepared, decision = decided(hardware, hurried)
    assert isinstance(decision, Placement) and decision.pool == "amd-a"
    assert set(starts[id(hardware)].estimates) == {"amd-a", "amd-b", "amd-c"}
    hardware.place(Workload("first", "amd", engine="vllm", target="hpc"))  # takes amd-a's only device
    fewer = Starts(starts[id(hardware)].now, {"amd-a": starts[id(hardware)].estimates["amd-a"]})
    with pytest.raises(StaleFleet, match="'amd-b', chosen now, was not asked"):
        commit.place(hardware.store, prepared, decision, snap, under.capacities, source="exa-test", starts=fewer)  # type: ignore[arg-type]
    # As the façade places it: asked again, every candidate's start known.
    record = hardware.place(hurried)
    assert isinstance(record.decision, Placement) and record.decision.pool == "amd-b"
    assert record.decision.estimate is not None and record.decision.estimate.source == "now"


def test_a_pool_ranked_before_the_chosen_one_with_room_again_re_runs_the_selection(hardware: Hardware) -> None:
    hardware.apply(FLEET)
    first = hardware.place(AMD)  # amd-a's only device
    snap, under, prepared, decision = decided(hardware, AMD)
    assert isinstance(decision, Placement) and decision.pool == "amd-b"
    hardware.release(first.id)  # amd-a has room again, and is cheaper
    done = commit.place(hardware.store, prepared, decision, snap, under.capacities, source="exa-test", starts=starts[id(hardware)])  # type: ignore[arg-type]
    assert done.record is not None and isinstance(done.record.decision, Placement) and done.record.decision.pool == "amd-a"


def test_a_rejection_is_decided_again_when_any_pool_changed(hardware: Hardware) -> None:
    hardware.apply(FLEET[:1])
    first = hardware.place(AMD)
    snap, under, prepared, decision = decided(hardware, AMD)
    assert isinstance(decision, Rejection) and decision.code == "no_capacity"
    hardware.release(first.id)
    done = commit.place(hardware.store, prepared, decision, snap, under.capacities, source="exa-test", starts=starts[id(hardware)])  # type: ignore[arg-type]
    assert done.record is not None and isinstance(done.record.decision, Placement)


def test_a_placement_writes_one_capacity_not_the_fleets(hardware: Hardware) -> None:
    hardware.apply([Pool(f"p{i:03d}", "hpc", "amd", 2, "eu", cost_per_hour=1.0 + i) for i in range(40)])
    with sqlite3.connect(hardware.home / "state.db") as db:
        before = db.execute("SELECT COUNT(*) FROM capacity_log").fetchone()[0]
    record = hardware.place(AMD)
    with sqlite3.connect(hardware.home / "state.db") as db:
        logged = db.execute("SELECT pool, capacity FROM capacity_log ORDER BY rowid DESC LIMIT ?", (db.execute("SELECT COUNT(*) FROM capacity_log").fetchone()[0] - before,)).fetchall()
    assert logged == [("p000", "1")]
    doc = record_doc(hardware, record.id)
    assert "capacity" not in doc and len(json.dumps(doc)) < 2000


def test_an_altered_capacity_log_is_caught_when_the_decision_is_read(hardware: Hardware) -> None:
    """The capacities a record was decided at live in the capacity log, outside the record; the
    record's input digest (audited with it) covers them."""
    hardware.apply(FLEET)
    record = hardware.place(AMD)
    assert hardware.decision(record.id).decision.pool == "amd-a"  # type: ignore[union-attr]
    at = record_doc(hardware, record.id)["at"]
    with sqlite3.connect(hardware.home / "state.db") as db:
        db.execute("UPDATE capacity_log SET capacity = '0' WHERE pool = 'amd-c' AND version <= ?", (at,))
    fresh = Hardware(hardware.home, policy=hardware.policy)
    try:
        with pytest.raises(StateError, match="capacity log or the record was altered"):
            fresh.decision(record.id)
    finally:
        fresh.close()


def test_a_process_s_own_placement_advances_its_snapshot_without_reading_the_pool_back(hardware: Hardware) -> None:
    """After a placement that changed only its pool, the next snapshot is the one the store would
    give, and reading it costs one statement (the state version), not a read of the pool."""
    from examlops_policy._core.state import Snapshots

    hardware.apply([*FLEET, Pool("mig", "hpc", "nvidia", 2, "eu", model="a100", supports_fractions=True)])
    statements: list[str] = []
    for workload in [AMD, AMD, Workload("half", "nvidia", fraction=0.5, target="hpc"), AMD, AMD]:
        record = hardware.place(workload)
        db = hardware.store._db  # type: ignore[attr-defined]
        db.set_trace_callback(statements.append)
        try:
            snap = hardware.cycle.snapshot()
        finally:
            db.set_trace_callback(None)
        fresh = Snapshots().read(hardware.store)
        assert (snap.version, snap.fleet_version, snap.states, snap.capacity_digest) == (
            fresh.version, fresh.fleet_version, fresh.states, fresh.capacity_digest,
        )  # fmt: skip
        if isinstance(record.decision, Placement):
            assert len(statements) == 1 and statements[0].startswith("SELECT fleet_version FROM state WHERE id = 1 AND version = "), statements
        statements.clear()
    # Another process's write in between is read from the store as before.
    other = Hardware(hardware.home, store=None, policy=hardware.policy)
    try:
        other.place(AMD)
    finally:
        other.close()
    assert hardware.cycle.snapshot().states == Snapshots().read(hardware.store).states

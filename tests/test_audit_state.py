"""``exa audit verify`` holds every table to the state the audit chain describes: each edit below,
made directly in the database (the chain untouched), is named (table, column, row, both values)
and the command exits 7. The state is made by the real CLI and OPA: pools, placements (one with a
lease, one released, one fraction), a blocked and an allowed burst, a capacity report; and the
pool lifecycle: a job recorded, a lease that ended (released at its end by the next write), a pool removed, a pool
removed and registered again, a drained pool whose removal waits on its live grant."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from examlops_policy.opa import stop_server
from tests.conftest import run_exa

pytestmark = pytest.mark.opa  # its state is made by exa processes on their own local OPA


@dataclass(frozen=True)
class Made:
    home: Path
    live: str  # a live placement of 2 amd devices
    leased: str  # a live placement with a lease
    released: str  # a released placement
    blocked: str  # an eu-only burst, blocked
    allowed: str  # an open burst, allowed to cloud-us
    ended: str  # a placement whose lease ended, released at its end by a later write


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    home = tmp_path_factory.mktemp("audit-state") / "home"

    def place(*args: str, code: int = 0) -> str:
        result = run_exa(home, *args, "--json", shared_opa=False)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        return str(json.loads(result.stdout)["decision_id"])

    run_exa(home, "hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "8", "--region", "eu", check=True)
    run_exa(home, "hardware", "add-pool", "cloud-us", "--target", "cloud", "--accelerator", "nvidia", "--count", "8",
            "--region", "us-east-1", "--cost-per-hour", "3", check=True)  # fmt: skip
    live = place("hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", "--count", "2")
    leased = place("hardware", "place", "leased", "--accelerator", "amd", "--engine", "vllm", "--lease", "2h")
    released = place("hardware", "place", "done", "--accelerator", "amd", "--engine", "vllm")
    run_exa(home, "hardware", "release", released, check=True)
    blocked = place("hardware", "burst", "eu-data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst", code=4)
    allowed = place("hardware", "burst", "open-data", "--accelerator", "nvidia", "--allow-burst")
    hw = Hardware(home)
    try:
        hw.record_usage({"hpc-mi300": 5.0}, scheduler="slurm")  # 2 of ours are not submitted: 5 outside
        hw.set_job(leased, "4711", scheduler="slurm")  # handed to a scheduler since
        hw.add_pool(Pool("spare", "hpc", "amd", 2, "eu", cost_per_hour=0.5))
        ended = hw.place(Workload("short", "amd", engine="vllm"), lease=timedelta(seconds=1)).id
        hw.add_pool(Pool("back", "cloud", "nvidia", 2, "us-east-1"))
        hw.record_usage({"back": 1.0}, scheduler="slurm")
        time.sleep(1.2)
        hw.remove_pool("back")  # this write first releases the ended lease, at its end
        hw.add_pool(Pool("back", "cloud", "nvidia", 2, "us-east-1"))  # registered again: nothing held outside
        hw.add_pool(Pool("gone", "cloud", "nvidia", 2, "us-east-1"))
        hw.remove_pool("gone")
        hw.drain("cloud-us")
        assert hw.remove_pool("cloud-us").action == "removal_pending"  # the allowed burst holds it
    finally:
        hw.close()
    stop_server(home)
    db = sqlite3.connect(home / "state.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    assert run_exa(home, "audit", "verify").returncode == 0
    yield Made(home, live, leased, released, blocked, allowed, ended)


def edited(made: Made, tmp_path: Path, *statements: str) -> Path:
    """A copy of the state with ``statements`` run on it, as someone with the database would."""
    home = tmp_path / "copy"
    home.mkdir(parents=True)
    shutil.copy2(made.home / "state.db", home / "state.db")
    db = sqlite3.connect(home / "state.db", isolation_level=None)
    try:
        for sql in statements:
            assert db.execute(sql).rowcount != 0, f"{sql} changed nothing"
    finally:
        db.close()
    return home


def problems(home: Path) -> list[str]:
    result = run_exa(home, "audit", "verify", "--json")
    assert result.returncode == 7, (result.stdout, result.stderr)
    found = json.loads(result.stdout)["problems"]
    assert {p["kind"] for p in found} == {"state"}, found  # the chain itself still verifies
    text = run_exa(home, "audit", "verify")
    assert text.returncode == 7 and "✗ audit log does NOT verify" in text.stdout
    return [p["message"] for p in found]


def named(messages: list[str], *parts: str) -> None:
    assert any(all(p in m for p in parts) for m in messages), f"no problem names {parts}: {messages}"


# (what the issue did, statements, what a problem must name)
EDITS = [
    ("devices", ["UPDATE decisions SET devices = 1 WHERE id = '{live}'"], ["decisions.devices of {live12} is 1", "says 2"]),
    ("region", ["UPDATE decisions SET region = 'eu-west-3' WHERE id = '{allowed}'"], ["decisions.region of {allowed12}", '"us-east-1"']),
    ("accelerator", ["UPDATE decisions SET accelerator = 'nvidia' WHERE id = '{live}'"], ["decisions.accelerator of {live12}", '"amd"']),
    ("workload", ["UPDATE decisions SET workload = 'other' WHERE id = '{live}'"], ["decisions.workload of {live12}", '"train"']),
    ("model and target", ["UPDATE decisions SET target = 'cloud' WHERE id = '{live}'"], ["decisions.target of {live12}", '"hpc"']),
    ("residency", ["UPDATE decisions SET residency = 'open' WHERE id = '{blocked}'"], ["decisions.residency of {blocked12}", '"eu-only"']),
    ("created time", ["UPDATE decisions SET created_at = '2020-01-01T00:00:00.000000Z' WHERE id = '{live}'"], ["decisions.created_at of {live12}"]),
    ("created epoch", ["UPDATE decisions SET created_ts = created_ts + 3600 WHERE id = '{live}'"], ["decisions.created_ts of {live12}"]),
    ("lease", ["UPDATE decisions SET lease_expires_at = '2099-01-01T00:00:00.000000Z' WHERE id = '{leased}'"], ["decisions.lease_expires_at of {leased12}"]),
    ("job", ["UPDATE decisions SET job_id = '4242', scheduler = 'slurm' WHERE id = '{live}'"], ["decisions.job_id of {live12}", "no submission"]),
    ("job moved", ["UPDATE decisions SET job_id = '4242' WHERE id = '{leased}'"], ["decisions.job_id of {leased12}", '"4711"']),
    ("submission time", ["UPDATE decisions SET submitted_at = '2020-01-01T00:00:00.000000Z' WHERE id = '{leased}'"], ["decisions.submitted_at of {leased12}"]),
    ("submitted without a job", ["UPDATE decisions SET submitted_at = '2031-01-01T00:00:00.000000Z' WHERE id = '{live}'"],
     ["decisions.submitted_at of {live12}", "no submission"]),
    (
        "released and holdings deleted",
        ["UPDATE decisions SET released_at = '2026-12-01T00:00:00.000000Z', released_ts = 1 WHERE id = '{live}'",
         "UPDATE allocations SET released_at = '2026-12-01T00:00:00.000000Z' WHERE decision_id = '{live}'",
         "DELETE FROM holdings WHERE decision_id = '{live}'"],
        ["decisions.released_at of {live12}", "records no release"],
    ),
    ("holdings deleted", ["DELETE FROM holdings WHERE decision_id = '{live}'"], ["holdings of decision {live12} are []"]),
    ("holding moved", ["UPDATE holdings SET device = 7 WHERE decision_id = '{leased}'"], ["holdings of decision {leased12}"]),
    ("release moved", ["UPDATE decisions SET released_at = '2026-01-01T00:00:00.000000Z' WHERE id = '{released}'"], ["decisions.released_at of {released12}"]),
    ("release undone", ["UPDATE allocations SET released_at = NULL WHERE decision_id = '{released}'"], ["allocations.released_at of {released12} is null"]),
    ("allocation devices", ["UPDATE allocations SET devices = 1 WHERE decision_id = '{live}'"], ["allocations.devices of {live12} is 1"]),
    ("burst verdict", ["UPDATE burst_events SET verdict = 'allowed' WHERE decision_id = '{blocked}'"], ["burst_events.verdict of {blocked12}", '"blocked"']),
    ("burst row deleted", ["DELETE FROM burst_events WHERE decision_id = '{blocked}'"], ["burst_events has no row for the burst attempt of decision {blocked12}"]),
    (
        "decision and burst deleted",
        ["DELETE FROM burst_events WHERE decision_id = '{blocked}'", "DELETE FROM decisions WHERE id = '{blocked}'"],
        ["decision {blocked12} is in the audit log", "its row was deleted"],
    ),
    ("pool region", ["UPDATE pools SET spec = json_set(spec, '$.region', 'eu-west-3') WHERE name = 'cloud-us'"], ["pools.spec of 'cloud-us'", "region"]),
    ("pool count", ["UPDATE pools SET count = 100 WHERE name = 'hpc-mi300'"], ["pools.count of 'hpc-mi300' is 100"]),
    ("held outside", ["UPDATE pools SET held_outside = 0 WHERE name = 'hpc-mi300'"], ["pools.held_outside of 'hpc-mi300' is 0"]),
    ("free", ["UPDATE pools SET free = 8 WHERE name = 'hpc-mi300'"], ["pools.free of 'hpc-mi300' is 8"]),
    ("capacity", ["UPDATE pools SET capacity = '8' WHERE name = 'hpc-mi300'"], ["pools.capacity of 'hpc-mi300' is 8"]),
    ("pool deleted", ["DELETE FROM pools WHERE name = 'cloud-us'"], ["pool 'cloud-us' is in the audit log", "its row was deleted"]),
    # Leases that end on time, partitions, pools that leave the fleet.
    ("lease epoch", ["UPDATE decisions SET lease_expires_ts = lease_expires_ts + 3600 WHERE id = '{leased}'"], ["decisions.lease_expires_ts of {leased12}"]),
    ("larger partition", ["UPDATE decisions SET larger_partition = 1 WHERE id = '{live}'"], ["decisions.larger_partition of {live12} is 1", "says false"]),
    ("lease's end", ["UPDATE decisions SET released_at = '2031-01-01T00:00:00.000000Z' WHERE id = '{ended}'"], ["decisions.released_at of {ended12}"]),
    ("removal undone", ["UPDATE pools SET removed_at = NULL WHERE name = 'gone'"], ["pools.removed_at of 'gone' is null", "records its removal"]),
    ("removal time", ["UPDATE pools SET removed_at = '2020-01-01T00:00:00.000000Z' WHERE name = 'gone'"], ["pools.removed_at of 'gone'", '"2020-01-01']),
    ("pool removed", ["UPDATE pools SET removed_at = '2031-01-01T00:00:00.000000Z' WHERE name = 'hpc-mi300'"], ["pools.removed_at of 'hpc-mi300'", "records no removal"]),
    ("pending removal dropped", ["UPDATE pools SET removing_since = NULL WHERE name = 'cloud-us'"], ["pools.removing_since of 'cloud-us' is null"]),
    ("pending removal added", ["UPDATE pools SET removing_since = '2031-01-01T00:00:00.000000Z' WHERE name = 'hpc-mi300'"], ["pools.removing_since of 'hpc-mi300'", "records no pending removal"]),
    ("held outside before removal", ["UPDATE pools SET held_outside = 1 WHERE name = 'back'"], ["pools.held_outside of 'back' is 1"]),
    # The capacity log: what a decision was decided at (records name the state version), and each
    # pool's latest capacity.
    (
        "capacity a decision was decided at",
        ["UPDATE capacity_log SET capacity = '1' WHERE pool = 'hpc-mi300' AND version = (SELECT max(version) FROM capacity_log "
         "WHERE pool = 'hpc-mi300' AND version <= (SELECT json_extract(document, '$.at') FROM decisions WHERE id = '{leased}'))"],
        ["capacity_log: the capacities decision {leased12} was decided at", "input digest"],
    ),
    (
        "capacity entry deleted",
        ["DELETE FROM capacity_log WHERE pool = 'cloud-us' AND version = (SELECT min(version) FROM capacity_log WHERE pool = 'cloud-us')"],
        ["capacity_log has no capacity of pool 'cloud-us' at state version", "decision {live12} was decided at"],
    ),
    (
        "capacity entry added",
        ["INSERT INTO capacity_log (version, pool, capacity) SELECT json_extract(document, '$.at'), 'cloud-us', '0' FROM decisions "
         "WHERE id = '{released}'"],
        ["capacity_log: the capacities decision {released12} was decided at"],
    ),
    (
        "latest capacity",
        ["UPDATE capacity_log SET capacity = '8' WHERE pool = 'hpc-mi300' AND version = (SELECT max(version) FROM capacity_log WHERE pool = 'hpc-mi300')"],
        ["capacity_log's latest entry for pool 'hpc-mi300' is 8", "but pools holds"],
    ),
    # Rows a decision is read back from, and what the summaries were worked out with.
    ("verdict set deleted", ["DELETE FROM verdict_sets"], ["the verdict set verdicts:", "that decision {live12}", "is not stored"]),
    (
        "layout and summary",
        ["UPDATE state SET layout = 'sha256:other-rules'", "UPDATE pools SET capacity = '8', free = 8 WHERE name = 'hpc-mi300'"],
        ["state.layout is \"sha256:other-rules\"", "the summaries above were worked out under other rules, or edited"],
    ),
    (
        "capacity beyond the state",
        ["INSERT INTO capacity_log (version, pool, capacity) SELECT version + 5, 'cloud-us', '8' FROM state"],
        ["capacity_log has an entry for pool 'cloud-us' at state version", "beyond the state's version"],
    ),
]


@pytest.mark.parametrize(("what", "statements", "expected"), EDITS, ids=[e[0] for e in EDITS])
def test_a_table_edited_behind_the_chain_is_named_and_exits_7(made: Made, tmp_path: Path, what: str, statements: list[str], expected: list[str]) -> None:
    ids = {"live": made.live, "leased": made.leased, "released": made.released, "blocked": made.blocked, "allowed": made.allowed, "ended": made.ended}
    fill = {**ids, **{f"{k}12": v[:12] for k, v in ids.items()}}
    home = edited(made, tmp_path, *(s.format(**fill) for s in statements))
    named(problems(home), *(e.format(**fill) for e in expected))


def test_an_inserted_row_no_entry_accounts_for_is_named(made: Made, tmp_path: Path) -> None:
    home = edited(
        made, tmp_path,
        f"INSERT INTO burst_events (created_at, decision_id, workload, residency, pool, region, verdict) "
        f"SELECT created_at, id, workload, 'open', 'cloud-us', 'us-east-1', 'allowed' FROM decisions WHERE id = '{made.live}'",
    )  # fmt: skip
    named(problems(home), f"burst_events has 1 row(s) for decision {made.live[:12]}", "record no burst attempt")


def test_a_decision_whose_verdict_set_was_deleted_is_a_damaged_state_not_a_busy_one(made: Made, tmp_path: Path) -> None:
    home = edited(made, tmp_path, "DELETE FROM verdict_sets")
    result = run_exa(home, "hardware", "explain", made.live)
    assert result.returncode == 10, (result.stdout, result.stderr)
    assert "verdict set" in result.stderr and "is missing" in result.stderr and str(home / "state.db") in result.stderr


@pytest.mark.parametrize("which", ["a middle one", "the last one"])
def test_a_deleted_schema_migrations_row_is_a_damaged_state_not_a_busy_one(made: Made, tmp_path: Path, which: str) -> None:
    """Not migrated again (a column it adds is there already): exit 10 naming the table, nothing written."""
    version = "2" if which == "a middle one" else "(SELECT max(version) FROM schema_migrations)"
    home = edited(made, tmp_path, f"DELETE FROM schema_migrations WHERE version = {version}")
    before = (home / "state.db").read_bytes()
    for args in (["audit", "verify"], ["hardware", "pools"]):
        result = run_exa(home, *args)
        assert result.returncode == 10, (args, result.stdout, result.stderr)
        assert result.stderr.startswith("StateCorrupt: ") and "schema_migrations" in result.stderr, result.stderr
    assert (home / "state.db").read_bytes() == before


def test_audit_verify_holds_the_state_as_found_and_writes_nothing(made: Made, tmp_path: Path) -> None:
    """A stored layout that says the summaries were worked out under other rules is not worked out
    again first (which would hide the edit): the summaries are held to the live grants anyway."""
    home = edited(made, tmp_path, "UPDATE state SET layout = 'sha256:other-rules'", "UPDATE pools SET free = 8 WHERE name = 'hpc-mi300'")
    db = sqlite3.connect(home / "state.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = (home / "state.db").read_bytes()
    found = problems(home)
    named(found, "pools.free of 'hpc-mi300' is 8")
    named(found, "state.layout is \"sha256:other-rules\"")
    assert (home / "state.db").read_bytes() == before


def test_the_untouched_state_verifies(made: Made) -> None:
    result = run_exa(made.home, "audit", "verify", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["problems"] == []


def test_a_lease_that_ended_is_released_at_its_end_in_the_tables_and_the_chain(made: Made) -> None:
    db = sqlite3.connect(made.home / "state.db")
    try:
        lease_end, released = db.execute("SELECT lease_expires_at, released_at FROM decisions WHERE id = ?", (made.ended,)).fetchone()
        entries = [json.loads(e) for (e,) in db.execute("SELECT entry FROM audit_log ORDER BY seq")]
    finally:
        db.close()
    assert released == lease_end
    assert [e["released_at"] for e in entries if e.get("decision_id") == made.ended and e["kind"] == "expired"] == [lease_end]
    removed = [e for e in entries if e["kind"] == "pool" and e.get("action") in ("removed", "removal_pending")]
    assert [(e["pool"], e["action"]) for e in removed] == [("back", "removed"), ("gone", "removed"), ("cloud-us", "removal_pending")]
    assert all(isinstance(e.get("removed_at", e.get("removing_since")), str) for e in removed)


def test_node_by_node_grants_shares_and_usage_are_held_to_the_chain(hardware: Hardware, tmp_path: Path) -> None:
    """What a gang holds on each node (its devices, CPU and memory), a share of a shared device and
    what a scheduler reports busy on a node are each held to the entry that recorded them."""
    from examlops_policy.store.api import NodeUsageRow

    hardware.add_pool(Pool("ai", "hpc", "nvidia", 8, "eu", model="h100", cost_per_hour=2.0, nodes=2, cpu_per_node=32, memory_per_node="256Gi"))
    hardware.add_pool(Pool("t4", "hpc", "nvidia", 2, "eu", model="t4", cost_per_hour=0.4, sharing="time-slice", shares_per_device=4))
    gang = hardware.place(Workload("gang", "nvidia", count=1, nodes=2, memory="1Gi", models=("h100",))).id
    quarter = hardware.place(Workload("quarter", "nvidia", fraction=0.25, models=("t4",))).id
    hardware.record_usage({}, scheduler="slurm", nodes={"ai": [NodeUsageRow("ai", "ai-0", 1, (3,), 0, None, None)]})
    assert hardware.verify_audit().ok
    hardware.close()
    db = sqlite3.connect(hardware.home / "state.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    made = Made(hardware.home, gang, quarter, "", "", "", "")
    for statements, expected in [
        ([f"UPDATE node_grants SET cpu_milli = cpu_milli + 1000 WHERE decision_id = '{gang}'"], [f"node_grants of decision {gang[:12]}"]),
        ([f"UPDATE holdings SET node = 'ai-9' WHERE decision_id = '{gang}' AND node = 'ai-1'"], [f"holdings of decision {gang[:12]}", "ai-9"]),
        ([f"UPDATE holdings SET shares = 4 WHERE decision_id = '{quarter}'"], [f"holdings of decision {quarter[:12]}"]),
        (["UPDATE node_usage SET devices = 0, indices = '[]' WHERE pool = 'ai'"], ["node_usage of pool 'ai'"]),
        (["DELETE FROM node_usage"], ["node_usage of pool 'ai' is []"]),
        (["INSERT INTO node_usage (pool, node, devices, indices, shares, scheduler, updated_at) VALUES ('t4', 't4', 1, '[0]', 0, 'slurm', 'x')"],
         ["node_usage has 1 row(s) for pool 't4'", "records no node usage"]),
        # A pool counted node by node: its free devices and summary as what is held and busy on its nodes give them.
        (["UPDATE pools SET free = 8 WHERE name = 'ai'"], ["pools.free of 'ai' is 8", "says 5"]),
        (["UPDATE pools SET capacity = json_set(capacity, '$[2][0][0]', 4) WHERE name = 'ai'"], ["pools.capacity of 'ai'", "its live holdings give"]),
        (["UPDATE pools SET free = 2 WHERE name = 't4'"], ["pools.free of 't4' is 2", "says 1.75"]),
        ([f"UPDATE holdings SET share = 1 WHERE decision_id = '{quarter}'"], [f"holdings.share of {quarter[:12]} device 0 on t4 is 1", "says 0.25"]),
    ]:
        home = edited(made, tmp_path / str(len(list(tmp_path.iterdir()))), *statements)
        named(problems(home), *expected)


def test_the_summary_of_a_pool_sharing_a_node_is_held_to_what_the_other_pool_holds_there(hardware: Hardware, tmp_path: Path) -> None:
    """Two pools listing one node (overlapping partitions): a grant on one takes the node's devices
    from the other as well, and the other's stored summary is held to that."""
    from examlops_policy.model import Node
    from examlops_policy.store.api import NodeUsageRow

    node = Node("shared-0", 4, cpu=32, memory="128Gi")
    hardware.add_pool(Pool("batch", "hpc", "nvidia", 4, "eu", model="h100", cost_per_hour=1.0, nodes=(node,)))
    hardware.add_pool(Pool("debug", "hpc", "nvidia", 4, "eu", model="h100", cost_per_hour=2.0, nodes=(node,)))
    placed = hardware.place(Workload("three", "nvidia", count=2, models=("h100",)))
    assert placed.decision.pool == "batch"  # type: ignore[union-attr]
    assert {s.pool.name: s.free for s in hardware.pools()} == {"batch": 2, "debug": 2}
    assert hardware.verify_audit().ok
    # A scheduler reports one more device of the node busy, through the other pool.
    hardware.record_usage({}, scheduler="slurm", nodes={"debug": [NodeUsageRow("debug", "shared-0", 1, (3,), 0, None, None)]})
    assert {s.pool.name: s.free for s in hardware.pools()} == {"batch": 1, "debug": 1}
    assert hardware.verify_audit().ok
    hardware.close()
    db = sqlite3.connect(hardware.home / "state.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    made = Made(hardware.home, placed.id, "", "", "", "", "")
    for pool in ("batch", "debug"):
        home = edited(made, tmp_path / pool, f"UPDATE pools SET free = 4 WHERE name = '{pool}'")
        named(problems(home), f"pools.free of '{pool}' is 4", "says 1")


def test_entries_written_while_the_clock_steps_back_are_dated_in_their_order(tmp_path: Path) -> None:
    """A writer dates an entry no earlier than the head it links to, so verify can hold entry times
    to their order (an entry dated before the one it follows was not written so)."""
    from examlops_policy.store.sqlite import SQLiteStore

    times = iter(["2026-06-01T12:00:00.000000Z", "2026-06-01T11:00:00.000000Z", "2026-06-01T13:00:00.000000Z"])
    now = ["2026-06-01T12:00:00.000000Z"]

    def clock() -> str:
        return now[0]

    home = tmp_path / "home"
    hw = Hardware(home, store=SQLiteStore(tmp_path / "state.db", clock=clock))
    try:
        for name in ("a", "b", "c"):
            now[0] = next(times)
            hw.add_pool(Pool(name, "hpc", "amd", 2, "eu"))
        stamps = [json.loads(r.canonical)["ts"] for r in hw.store.audit_rows()]
        assert stamps == sorted(stamps) and stamps[-1] == "2026-06-01T13:00:00.000000Z", stamps
        assert hw.verify_audit().ok, hw.verify_audit().problems
    finally:
        hw.close()

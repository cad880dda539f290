"""State written by earlier releases opens with this one.

Each earlier release runs for real from this repository's history, in its own tree, with its own
OPA: it registers the specification's pools, places (a whole device, a MIG fraction, a fallback),
rejects, blocks a burst and releases one placement. Then this release opens that state: the
migrations run, and the state works on.

* ``OLD``, the release before per-device capacity and compact decisions (one float of free devices
  per pool, full decision documents): live grants get their devices, the old documents stay
  readable.
* ``PREVIOUS``, the release before the capacity log (compact records that keep every pool's
  capacity, packed): its records stay readable and rebuild, explanations included, and replay;
  the capacity log starts from every pool's capacity as it was; new records name the state
  version they were decided at.
* ``BEFORE_NODES``, the release before grants were made node by node (pools could say their nodes,
  which decided nothing): old grants get their node (a pool without nodes: its one node, named
  like it; a pool of nodes: its devices counted across them), and the pool places node by node on.
* ``BEFORE_LEASE_ENDS``, the release before leases ended on time and pools could leave the fleet
  (migration 0007): a lease it granted that has ended is seen ended and billed to its end, the
  next write releases it at that end, and pools can be drained and removed.
* ``BEFORE_ESTIMATES``, the release before start estimates (records of version 3, which name the
  state version; it accepted ``optimize: earliest`` and ranked it as cost, and kept no max_wait):
  its records rebuild and replay as they were decided, their estimate columns empty; new records
  keep their estimates (version 4) and fill the columns.
* ``BEFORE_QUEUE``, the release before the queue, quotas and reconcile (migration 0009): its
  records read and replay as made, their projects are filled in, and queued and admitted records
  round-trip on the migrated state.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy import Hardware, Placement, Queued, Rejection, Workload
from examlops_policy.hardware import ManagedPolicy
from examlops_policy.store._sql import migrations
from examlops_policy.store.sqlite import SQLiteStore
from tests.conftest import ROOT

OLD = "94886a3ef398bade9708bb1679c4b433faa1d028"  # the release before per-device capacity
PREVIOUS = "d9af34adab665f3243dec84fc5716d0dc545a7ef"  # the release before the capacity log
BEFORE_NODES = "3c6852f0908a4c9c913f347f0b3a9addc6094713"  # the release before grants node by node
BEFORE_LEASE_ENDS = "3c6852f0908a4c9c913f347f0b3a9addc6094713"  # the release before migration 0007
BEFORE_ESTIMATES = "3c6852f0908a4c9c913f347f0b3a9addc6094713"  # the release before start estimates


def _old_tree(tmp_path: Path, commit: str = OLD) -> Path:
    """An earlier release's package and policies, from git (skips in a shallow clone without it)."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode != 0:
        pytest.skip(f"commit {commit[:12]} is not in this clone's history (a shallow clone?)")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "examlops_policy", "policies", "schemas"], capture_output=True, check=True)
    tree = tmp_path / "old"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _old_exa(tree: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from examlops_policy.cli.main import main; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_DB_URL", "EXA_POLICY_DIR"))}
    env.update(PYTHONPATH=str(tree), EXA_HOME=str(home), COLUMNS="200")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=tree, timeout=120)


# What the release before nodes counted also does: a pool of two nodes of 4 devices, and a grant of
# 3 devices on it (then devices 0-2 counted across its nodes).
NODE_STEPS: tuple[tuple[str, ...], ...] = (
    ("hardware", "add-pool", "nodes8", "--target", "hpc", "--accelerator", "nvidia", "--model", "h100", "--count", "8", "--region", "eu",
     "--cost-per-hour", "1.0", "--nodes", "2", "--cpu-per-node", "32"),
    ("hardware", "place", "spread", "--accelerator", "nvidia", "--engine", "vllm", "--count", "3", "--target", "hpc"),
)  # fmt: skip


def _written_by(
    commit: str, tmp_path_factory: pytest.TempPathFactory, more: tuple[tuple[str, ...], ...] = (), leased: bool = False
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A state folder an earlier release wrote (``more``: commands after the common ones), and its
    decision ids by workload name (``leased``: with a placement on a one-second lease, ended by the
    time this returns)."""
    base = tmp_path_factory.mktemp("migration")
    tree = _old_tree(base, commit)
    home = base / "home"
    try:
        for args in (
            ("hardware", "add-pool", "hpc-nvidia", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "2.5", "--carbon-factor", "300", "--supports-fractions"),
            ("hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu"),
            ("hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia", "--count", "100", "--region", "us"),
            ("hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc"),
            ("hardware", "place", "infer", "--accelerator", "nvidia", "--engine", "vllm", "--fraction", "0.5"),
            ("hardware", "place", "tpu-job", "--accelerator", "tpu", "--engine", "generic", "--target", "hpc"),
            ("hardware", "place", "bad", "--accelerator", "amd", "--engine", "sglang"),
            ("hardware", "burst", "eu-data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst"),
            ("hardware", "place", "done", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc"),
            *more,
        ):  # fmt: skip
            result = _old_exa(tree, home, *args)
            assert result.returncode in (0, 3, 4), (args, result.stdout, result.stderr)
        import json

        listed = json.loads(_old_exa(tree, home, "hardware", "decisions", "--json", "--limit", "50").stdout)
        # Full decisions (the old release) or their summaries (later ones): the workload, or its name.
        ids = {(d["workload"]["name"] if isinstance(d["workload"], dict) else d["workload"]): d["id"] for d in listed}
        assert _old_exa(tree, home, "hardware", "release", ids["done"]).returncode == 0
        if leased:  # last: no later write of that release may release it
            result = _old_exa(tree, home, "hardware", "place", "leased", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc", "--lease", "1s", "--json")
            assert result.returncode == 0, (result.stdout, result.stderr)
            ids["leased"] = json.loads(result.stdout)["id"]
            time.sleep(1.2)
        yield home, ids
    finally:
        _old_exa(tree, home, "opa", "stop")


@pytest.fixture(scope="module")
def old_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield from _written_by(OLD, tmp_path_factory)


@pytest.fixture(scope="module")
def previous_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield from _written_by(PREVIOUS, tmp_path_factory)


@pytest.fixture(scope="module")
def before_0006_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The release before migrations 0006 and 0007 (one state for both: each test opens a copy)."""
    assert BEFORE_NODES == BEFORE_LEASE_ENDS
    yield from _written_by(BEFORE_NODES, tmp_path_factory, NODE_STEPS, leased=True)


@pytest.fixture(scope="module")
def leased_state(before_0006_state: tuple[Path, dict[str, str]]) -> tuple[Path, dict[str, str]]:
    return before_0006_state


@pytest.fixture(scope="module")
def before_estimates_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    yield from _written_by(BEFORE_ESTIMATES, tmp_path_factory, (
        ("hardware", "place", "soonest", "--accelerator", "nvidia", "--engine", "vllm", "--optimize", "earliest", "--max-wait", "1h"),
    ))  # fmt: skip


def _open_copy(state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> tuple[Hardware, dict[str, str]]:
    import shutil

    home, ids = state
    copy = tmp_path / "home"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("opa"))
    return Hardware(copy, store=SQLiteStore(copy / "state.db"), policy=ManagedPolicy(opa_home)), ids


@pytest.fixture(scope="module")
def before_nodes_state(before_0006_state: tuple[Path, dict[str, str]]) -> tuple[Path, dict[str, str]]:
    return before_0006_state


@pytest.fixture()
def migrated(old_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    """This release on a copy of the old state (each test migrates afresh)."""
    hw, ids = _open_copy(old_state, tmp_path, opa_home)
    try:
        yield hw, ids
    finally:
        hw.close()


@pytest.fixture()
def from_before_estimates(before_estimates_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    """This release on a copy of the state the release before start estimates wrote."""
    hw, ids = _open_copy(before_estimates_state, tmp_path, opa_home)
    try:
        yield hw, ids
    finally:
        hw.close()


@pytest.fixture()
def from_previous(previous_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    """This release on a copy of the previous release's state."""
    hw, ids = _open_copy(previous_state, tmp_path, opa_home)
    try:
        yield hw, ids
    finally:
        hw.close()


def test_the_old_state_migrates_to_every_version(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, _ = migrated
    hw.pools()  # opened: migrated
    import sqlite3

    with sqlite3.connect(hw.home / "state.db") as db:
        versions = [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _ in migrations("sqlite")]


def test_old_decisions_stay_readable_as_they_were_made(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, ids = migrated
    train = hw.decision(ids["train"]).decision
    assert isinstance(train, Placement) and (train.pool, train.accelerator, train.fallback) == ("hpc-mi300", "amd", False)
    tpu = hw.decision(ids["tpu-job"]).decision
    assert isinstance(tpu, Placement) and tpu.fallback and tpu.note == "requested tpu unavailable — fell back to amd"
    bad = hw.decision(ids["bad"]).decision
    assert isinstance(bad, Rejection) and bad.code == "backend_unsupported"
    blocked = hw.decision(ids["eu-data"]).decision
    assert isinstance(blocked, Rejection) and blocked.burst_blocked
    assert hw.decision(ids["done"]).released_at is not None
    page = hw.decision_page(limit=50)
    assert {d.workload for d in page.decisions} == set(ids)
    assert [e.verdict for e in hw.burst_events()] == ["blocked"]


def test_live_grants_keep_their_devices_and_the_state_works_on(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, ids = migrated
    views = {v.pool.name: v for v in hw.pool_views()}
    # Two live amd placements (train, tpu-job), one released: 2 of 4 MI300 devices held.
    assert views["hpc-mi300"].state.free == 2 and views["hpc-mi300"].state.capacity.whole == 2
    # The old 0.5 MIG placement holds a 4g slice on a device of its own.
    nvidia = hw.pool("hpc-nvidia")
    assert [(h.profile, h.units) for h in nvidia.holdings] == [("4g", 4)]
    assert views["hpc-nvidia"].state.capacity.whole == 7
    # New placements, releases, accounting and the audit chain work on the old state.
    record = hw.place(Workload("after", accelerator="amd", engine="vllm", target="hpc"))
    assert isinstance(record.decision, Placement) and record.decision.pool == "hpc-mi300"
    assert not hw.release(ids["train"]).already
    assert hw.accounting(ids["tpu-job"], 10) == {"device": "amd", "region": "eu", "hours": 10, "cost": 18.0, "carbon_g": 2500.0}
    assert hw.finops(10).decisions == 5
    report = hw.verify_audit()
    assert report.ok, report.problems


# -- the previous release: compact records with their capacity vector ------------------------------


def _records(hw: Hardware) -> dict[str, dict[str, object]]:
    import json
    import sqlite3

    with sqlite3.connect(hw.home / "state.db") as db:
        return {ident: json.loads(doc) for ident, doc in db.execute("SELECT id, document FROM decisions")}


def test_the_previous_releases_records_stay_readable_and_rebuild(from_previous: tuple[Hardware, dict[str, str]]) -> None:
    hw, ids = from_previous
    before = _records(hw)
    assert {doc["v"] for doc in before.values()} == {2} and all("capacity" in doc for doc in before.values())
    infer = hw.decision(ids["infer"]).decision
    assert isinstance(infer, Placement) and infer.pool == "hpc-nvidia" and infer.grant.profile == "4g"
    # The explanation is rebuilt from the record's own capacity vector, every pool's verdict as made.
    assert {v.pool: [r.code for r in v.reasons] for v in infer.verdicts} == {
        "hpc-nvidia": [], "hpc-mi300": ["fallback_not_needed"], "cloud-a100": ["burst_not_allowed"],
    }  # fmt: skip
    tpu = hw.decision(ids["tpu-job"]).decision
    assert isinstance(tpu, Placement) and tpu.fallback and tpu.note == "requested tpu unavailable — fell back to amd"
    blocked = hw.decision(ids["eu-data"]).decision
    assert isinstance(blocked, Rejection) and blocked.burst_blocked
    assert hw.replay(ids["infer"]).same and hw.replay(ids["eu-data"]).same
    assert _records(hw) == before  # reading rewrote nothing


def test_the_capacity_log_starts_from_the_previous_state_and_new_records_name_their_version(
    from_previous: tuple[Hardware, dict[str, str]],
) -> None:
    import sqlite3

    hw, ids = from_previous
    views = {v.pool.name: v for v in hw.pool_views()}
    assert views["hpc-mi300"].state.capacity.whole == 2 and views["hpc-nvidia"].state.capacity.whole == 7
    with sqlite3.connect(hw.home / "state.db") as db:
        seeded = dict(db.execute("SELECT pool, COUNT(*) FROM capacity_log GROUP BY pool").fetchall())
    assert seeded == {"cloud-a100": 1, "hpc-mi300": 1, "hpc-nvidia": 1}
    record = hw.place(Workload("after", accelerator="nvidia", engine="vllm", fraction=0.25))
    assert isinstance(record.decision, Placement) and record.decision.pool == "hpc-nvidia"
    doc = _records(hw)[record.id]
    assert doc["v"] == 4 and "capacity" not in doc and isinstance(doc["at"], int)
    # Read back, the new record and the old ones rebuild to what they recorded, explanations alike.
    again = hw.decision(record.id).decision
    assert [(v.pool, [r.code for r in v.reasons]) for v in again.verdicts] == [(v.pool, [r.code for r in v.reasons]) for v in record.decision.verdicts]
    assert hw.replay(record.id).same
    assert not hw.release(ids["train"]).already
    assert hw.finops(10).decisions == 5
    report = hw.verify_audit()
    assert report.ok, report.problems


# -- the release before grants node by node -----------------------------------------------------------


@pytest.fixture()
def from_before_nodes(before_nodes_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    hw, ids = _open_copy(before_nodes_state, tmp_path, opa_home)
    try:
        yield hw, ids
    finally:
        hw.close()


# -- the release before migration 0007: leases that end on time, pools that leave -------------------


@pytest.fixture()
def from_before_lease_ends(leased_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    hw, ids = _open_copy(leased_state, tmp_path, opa_home)
    try:
        yield hw, ids
    finally:
        hw.close()


def test_old_grants_get_their_node_and_the_pools_place_node_by_node(from_before_nodes: tuple[Hardware, dict[str, str]]) -> None:
    import sqlite3

    hw, ids = from_before_nodes
    hw.pools()  # opened: migrated, capacities worked out node by node
    with sqlite3.connect(hw.home / "state.db") as db:
        assert [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")] == [v for v, _ in migrations("sqlite")]
        nodes = dict(db.execute("SELECT pool, GROUP_CONCAT(DISTINCT node) FROM holdings GROUP BY pool").fetchall())
    # A pool without nodes is one node named like it; the pool of nodes had devices 0-2 counted
    # across its nodes: all three on its first node.
    assert nodes["hpc-mi300"] == "hpc-mi300" and nodes["hpc-nvidia"] == "hpc-nvidia"
    assert nodes["nodes8"] == "nodes8-0"
    spread = hw.pool("nodes8")
    assert sorted((h.device for h in spread.holdings)) == [0, 1, 2]
    rooms = {v.pool.name: v for v in hw.pool_views()}["nodes8"].state.capacity.nodes
    assert rooms is not None and sorted((r.whole, r.count) for r in rooms) == [(1, 1), (4, 1)]
    # The old grant reads back as it was made (no nodes named then).
    old = hw.decision(ids["spread"]).decision
    assert isinstance(old, Placement) and old.pool == "nodes8" and old.allocations == ()
    # Four devices fit only on the empty node; then two do not fit the pool of nodes at all.
    four = hw.place(Workload("four", accelerator="nvidia", engine="vllm", count=4, target="hpc")).decision
    assert isinstance(four, Placement) and four.pool == "nodes8" and [a.node for a in four.allocations] == ["nodes8-1"]
    two = hw.place(Workload("two", accelerator="nvidia", engine="vllm", count=2, target="hpc")).decision
    assert isinstance(two, Placement) and two.pool == "hpc-nvidia"
    assert not hw.release(ids["spread"]).already
    again = hw.place(Workload("three", accelerator="nvidia", engine="vllm", count=3, target="hpc")).decision
    assert isinstance(again, Placement) and again.pool == "nodes8" and [a.node for a in again.allocations] == ["nodes8-0"]
    assert hw.replay(ids["spread"]).same
    report = hw.verify_audit()
    assert report.ok, report.problems


def test_a_lease_an_earlier_release_granted_ends_on_time_after_the_migration(from_before_lease_ends: tuple[Hardware, dict[str, str]]) -> None:
    import sqlite3

    from examlops_policy._core import leases

    hw, ids = from_before_lease_ends
    views = {v.pool.name: v for v in hw.pool_views()}  # opened: migrated
    with sqlite3.connect(hw.home / "state.db") as db:
        end, end_ts, released = db.execute(
            "SELECT lease_expires_at, lease_expires_ts, released_at FROM decisions WHERE id = ?", (ids["leased"],)
        ).fetchone()
    assert released is None and end_ts == pytest.approx(leases.instant(end).timestamp(), abs=1e-3)
    # Seen ended before any write: two live amd placements (train, tpu-job) hold 2 of 4 devices.
    assert views["hpc-mi300"].state.free == 2
    record = hw.decision(ids["leased"])
    assert (record.released_at, record.lease_ended) == (end, True)
    # Billed to the lease's end, before any write and after the write that releases it at that end.
    held = (leases.instant(end) - leases.instant(record.created_at)).total_seconds() / 3600

    def billed() -> float:
        return {r.workload: r.device_hours for r in hw.models_cost().rows}["leased"]

    assert billed() == pytest.approx(held, abs=1e-6)
    assert isinstance(hw.place(Workload("after", accelerator="amd", engine="vllm", target="hpc")).decision, Placement)
    with sqlite3.connect(hw.home / "state.db") as db:
        assert db.execute("SELECT released_at FROM decisions WHERE id = ?", (ids["leased"],)).fetchone()[0] == end
    assert billed() == pytest.approx(held, abs=1e-6)
    assert hw.verify_audit().ok


# -- the release before start estimates: records of version 3 ---------------------------------------


def test_records_from_before_start_estimates_rebuild_and_new_ones_keep_theirs(from_before_estimates: tuple[Hardware, dict[str, str]]) -> None:
    import sqlite3

    hw, ids = from_before_estimates
    before = _records(hw)
    assert {doc["v"] for doc in before.values()} == {3}
    # Decided without estimates: read back so (no decision time, no estimate), explanations as made.
    soonest = hw.decision(ids["soonest"]).decision
    assert isinstance(soonest, Placement) and soonest.pool == "hpc-nvidia"
    assert soonest.estimate is None and soonest.decided_at is None and soonest.workload.max_wait is None
    infer = hw.decision(ids["infer"]).decision
    assert {v.pool: [r.code for r in v.reasons] for v in infer.verdicts} == {
        "hpc-nvidia": [], "hpc-mi300": ["fallback_not_needed"], "cloud-a100": ["burst_not_allowed"],
    }  # fmt: skip
    assert hw.replay(ids["soonest"]).same and hw.replay(ids["eu-data"]).same
    assert _records(hw) == before  # reading rewrote nothing
    page = {d.workload: d for d in hw.decision_page(limit=50).decisions}
    assert page["soonest"].estimated_start is None and page["soonest"].estimate_source is None
    # New placements keep their candidates' estimates and fill the columns.
    record = hw.place(Workload("after", accelerator="amd", engine="vllm", target="hpc", max_wait="1h", walltime="30m"))
    assert isinstance(record.decision, Placement) and record.decision.pool == "hpc-mi300"
    doc = _records(hw)[record.id]
    assert doc["v"] == 4 and doc["workload"]["max_wait"] == 3600 and doc["workload"]["walltime"] == 1800
    assert doc["estimates"]["hpc-mi300"]["estimate_source"] == "now"
    with sqlite3.connect(hw.home / "state.db") as db:
        columns = db.execute("SELECT estimated_start, estimate_source FROM decisions WHERE id = ?", (record.id,)).fetchone()
    assert columns == (doc["estimates"]["hpc-mi300"]["estimated_start"], "now")
    assert hw.decision(record.id).decision.workload.walltime == 1800
    assert hw.replay(record.id).same
    report = hw.verify_audit()
    assert report.ok, report.problems


# -- the release before the queue: migration 0009 ------------------------------------------------------

BEFORE_QUEUE = "ac4428cbc6942e36e41a93c7acdb697288a58383"  # the release before queueing, quotas and reconcile (0009)


@pytest.fixture(scope="module")
def before_queue_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The state the release before the queue wrote: the usual scenario, and a placement of a
    project (whose column 0009 fills from the record)."""
    base = tmp_path_factory.mktemp("migration-queue")
    tree = _old_tree(base, BEFORE_QUEUE)
    home = base / "home"
    try:
        gen = _written_by(BEFORE_QUEUE, tmp_path_factory)
        written, ids = next(gen)
        import json
        import shutil

        shutil.copytree(written, home, ignore=shutil.ignore_patterns("opa"))
        try:
            next(gen)
        except StopIteration:
            pass
        placed = _old_exa(tree, home, "hardware", "place", "proj", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc",
                          "--project", "llm-pretraining", "--json")  # fmt: skip
        assert placed.returncode == 0, placed.stderr
        ids["proj"] = json.loads(placed.stdout)["id"]
        yield home, ids
    finally:
        _old_exa(tree, home, "opa", "stop")


def test_the_state_before_the_queue_migrates_and_reads_as_it_was_made(
    before_queue_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path
) -> None:
    import sqlite3

    hw, ids = _open_copy(before_queue_state, tmp_path, opa_home)
    try:
        before = _records(hw)
        hw.pools()
        with sqlite3.connect(hw.home / "state.db") as db:
            versions = [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")]
            projects = dict(db.execute("SELECT id, project FROM decisions").fetchall())
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert versions == [v for v, _ in migrations("sqlite")] and 9 in versions
        assert projects[ids["proj"]] == "llm-pretraining" and projects[ids["train"]] is None
        train = hw.decision(ids["train"]).decision
        assert isinstance(train, Placement) and train.pool == "hpc-mi300"
        assert hw.decision(ids["eu-data"]).decision.outcome == "blocked"
        assert hw.replay(ids["infer"]).same
        assert _records(hw) == before
        assert hw.verify_audit().ok
    finally:
        hw.close()


def test_queued_and_admitted_records_round_trip_on_the_migrated_state(
    before_queue_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path
) -> None:
    hw, ids = _open_copy(before_queue_state, tmp_path, opa_home)
    try:
        # hpc-mi300 (4 amd devices) holds train, tpu-job and proj: one left; hpc-nvidia 7 whole
        # devices beside its MIG slice. Fill both, then queue (a stand-in would do, were one free).
        for filler in (Workload("filler-a", accelerator="amd", engine="vllm", target="hpc"),
                       Workload("filler-n", accelerator="nvidia", engine="vllm", target="hpc", count=7)):  # fmt: skip
            assert isinstance(hw.place(filler).decision, Placement)
        waiting = hw.place(Workload("waits", accelerator="amd", engine="vllm", target="hpc"), queue=True)
        assert waiting.decision.outcome == "queued"
        report = hw.release(ids["train"])
        assert report.admitted is not None and [a.queued_id for a in report.admitted.admitted] == [waiting.id]
        placement_id = report.admitted.admitted[0].decision_id
    finally:
        hw.close()
    again = Hardware(hw.home, store=SQLiteStore(hw.home / "state.db"), policy=ManagedPolicy(opa_home))
    try:
        queued = again.decision(waiting.id)
        assert isinstance(queued.decision, Queued) and queued.decision.outcome == "queued"
        assert queued.queue is not None and queued.queue.state == "admitted" and queued.queue.admitted_by == placement_id
        placed = again.decision(placement_id)
        assert isinstance(placed.decision, Placement) and placed.queued_id == waiting.id
        assert again.verify_audit().ok
    finally:
        again.close()


# -- the release before pools over one node shared it (issue 30) ----------------------------------------

BEFORE_SHARED_NODES = "63e58ecaddd70b17393451461b23af840ec83aa4"  # the release before pools over a node drew on one capacity

# Pools that list the same nodes, as that release let them (each kept its own idea of the node): an
# L4 time-sliced four ways and shared through MPS eight ways, a CPU pool over an H100 node's cores,
# and two pools that disagree about an A100 node (8 devices and 64 cores up, 4 and 32 drained).
OVERLAPPING = """\
pools:
  - {name: ts4, target: hpc, accelerator: nvidia, model: l4, count: 1, region: eu, cost_per_hour: 0.5, sharing: time-slice,
     shares_per_device: 4, nodes: [{name: l1, devices: 1, cpu: 16, memory: 64Gi}]}
  - {name: mps8, target: hpc, accelerator: nvidia, model: l4, count: 1, region: eu, cost_per_hour: 0.8, sharing: mps,
     shares_per_device: 8, nodes: [{name: l1, devices: 1, cpu: 16, memory: 64Gi}]}
  - {name: pa, target: hpc, accelerator: nvidia, model: h100, count: 8, region: eu, nodes: [{name: n1, devices: 8, cpu: 64, memory: 512Gi}]}
  - {name: pc, target: hpc, accelerator: cpu, count: 64, region: eu, nodes: [{name: n1, devices: 64, cpu: 64, memory: 512Gi}]}
  - {name: z8, target: hpc, accelerator: nvidia, model: a100, count: 8, region: eu, nodes: [{name: z1, devices: 8, cpu: 64, memory: 512Gi}]}
  - {name: z4, target: hpc, accelerator: nvidia, model: a100, count: 4, region: eu,
     nodes: [{name: z1, devices: 4, cpu: 32, memory: 512Gi, state: drained}]}
"""
# Every one placed by that release: 1.5 of the L4, 94 cores of the 64-core node, 6 A100s and 40
# cores on a node one pool calls 4-device, 32-core and drained.
OVERLAPPING_STEPS: tuple[tuple[str, ...], ...] = (
    *(("hardware", "place", f"share{i}", "--accelerator", "nvidia", "--model", "l4", "--engine", "vllm", "--fraction", f)
      for i, f in enumerate(("0.5", "0.25", "0.25", "0.125", "0.375"))),
    *(("hardware", "place", f"gpu{c}", "--accelerator", "nvidia", "--model", "h100", "--engine", "vllm", "--cpu", c) for c in ("40", "10", "14")),
    ("hardware", "place", "cores30", "--accelerator", "cpu", "--engine", "cpu", "--count", "30"),
    ("hardware", "place", "a100x6", "--accelerator", "nvidia", "--model", "a100", "--engine", "vllm", "--count", "6", "--cpu", "40"),
)  # fmt: skip


@pytest.fixture(scope="module")
def before_shared_nodes_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The state the release before shared nodes wrote over overlapping pools, and its decision
    ids by workload name."""
    import json

    base = tmp_path_factory.mktemp("migration-shared-nodes")
    tree = _old_tree(base, BEFORE_SHARED_NODES)
    home = base / "home"
    fleet = base / "fleet.yaml"
    fleet.write_text(OVERLAPPING)
    try:
        for args in (("hardware", "apply", "-f", str(fleet)), *OVERLAPPING_STEPS):
            result = _old_exa(tree, home, *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)  # that release placed every one
        listed = json.loads(_old_exa(tree, home, "hardware", "decisions", "--json", "--limit", "50").stdout)
        yield home, {d["workload"]: d["id"] for d in listed}
    finally:
        _old_exa(tree, home, "opa", "stop")


def _held(hw: Hardware) -> list[tuple[object, ...]]:
    """Every holding and node grant row, as stored."""
    import sqlite3

    with sqlite3.connect(hw.home / "state.db") as db:
        return [
            *db.execute("SELECT decision_id, pool, node, device, profile, start, units, shares FROM holdings ORDER BY 1, 3, 4"),
            *db.execute("SELECT decision_id, pool, node, position, cpu_milli, memory_mib FROM node_grants ORDER BY 1, 3"),
        ]


def test_grants_an_earlier_release_made_on_overlapping_pools_stay_on_their_nodes_and_verify_names_what_is_held_twice(
    before_shared_nodes_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path
) -> None:
    import sqlite3

    with sqlite3.connect(before_shared_nodes_state[0] / "state.db") as db:
        written = [
            *db.execute("SELECT decision_id, pool, node, device, profile, start, units, shares FROM holdings ORDER BY 1, 3, 4"),
            *db.execute("SELECT decision_id, pool, node, position, cpu_milli, memory_mib FROM node_grants ORDER BY 1, 3"),
        ]
    hw, ids = _open_copy(before_shared_nodes_state, tmp_path, opa_home)
    try:
        hw.pools()  # opened: migrated, summaries worked out again under this release's rules
        assert _held(hw) == written  # every live grant on its node, devices, shares, CPU and memory
        report = hw.verify_audit()
        said = [p.message for p in report.problems]
        assert not report.ok and all(p.kind == "state" for p in report.problems), said
        assert said == [
            "pool 'z8' says node 'z1' has CPU 64, pool 'z4' says 32: a node is one machine whichever pools list it; make them agree",
            "node 'l1', device 0 (nvidia l4) is held in 2 modes at once (mps (8 shares per device) by mps8; time-slice (4 shares per device)"
            " by ts4): a device is in one mode at a time (live grants recounted against the node)",
            "node 'l1', device 0 (nvidia l4): its shares add up to 1.5 of the device (live grants recounted against the node)",
            "node 'z1', device 4 (nvidia a100) is held, but the node has 4 such device(s) (live grants recounted against the node)",
            "node 'z1', device 5 (nvidia a100) is held, but the node has 4 such device(s) (live grants recounted against the node)",
            "node 'n1': 94 CPU cores granted (pa 64, pc 30), it has 64 (live grants recounted against the node)",
            "node 'z1': 40 CPU cores granted (z8 40), it has 32 (live grants recounted against the node)",
        ], said
        # Nothing more goes where the node is held twice over.
        for more in (Workload("more-share", "nvidia", models=("l4",), engine="vllm", fraction=0.125), Workload("more-cores", "cpu", engine="cpu")):
            assert not isinstance(hw.place(more).decision, Placement), more
        # A node one pool calls drained is drained in the pool that calls it up: z8's two A100s
        # that its own view leaves free on z1 take nothing (fail closed).
        z8 = hw.pool("z8")
        assert [(n.name, n.state) for n in z8.nodes] == [("z1", "drained")]
        more_a100 = hw.place(Workload("more-a100", "nvidia", models=("a100",), engine="vllm")).decision
        assert not isinstance(more_a100, Placement), more_a100
        # The same file applied again is refused where its pools disagree, and nothing is written.
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(OVERLAPPING)
        from examlops_policy.errors import SpecError

        previewed = {c.name: c for c in hw.apply_file(fleet, dry_run=True)}
        assert previewed["z8"].action == "refused" and previewed["z8"].as_stored and not previewed["z8"].adding
        assert {c.action for name, c in previewed.items() if name != "z8"} == {"unchanged"}
        from examlops_policy.cli.pools import change_line

        assert change_line(previewed["z8"]).startswith("✗ z8 refused as it stands: pool 'z8' says node 'z1' has CPU 64")
        with pytest.raises(SpecError, match="pool 'z8' says node 'z1' has CPU 64, pool 'z4' says 32"):
            hw.apply_file(fleet)
        assert _held(hw) == written
        # Made to agree (written with a nodes: inventory this time), it is taken, every grant kept.
        fleet.write_text(
            OVERLAPPING.split("  - {name: z8")[0]
            + "  - {name: z8, target: hpc, accelerator: nvidia, model: a100, count: 8, region: eu, nodes: [z1]}\n"
            "  - {name: z4, target: hpc, accelerator: nvidia, model: a100, count: 8, region: eu, nodes: [z1]}\n"
            "nodes:\n  - {name: z1, model: a100, devices: 8, cpu: 64, memory: 512Gi}\n"
        )
        changes = {c.name: c.action for c in hw.apply_file(fleet)}
        assert changes == {"ts4": "unchanged", "mps8": "unchanged", "pa": "unchanged", "pc": "unchanged", "z8": "unchanged", "z4": "updated"}
        assert _held(hw) == written
        # Once the grants beyond the nodes end, the state verifies.
        for name in ("share3", "share4", "cores30"):
            assert not hw.release(ids[name]).already
        report = hw.verify_audit()
        assert report.ok, [p.message for p in report.problems]
    finally:
        hw.close()

"""Issue 10, "Trust fixes": one test per item, through the real ``exa`` CLI or the library, on the
real OPA where a policy decides.

Items 1, 2 and 4 are covered elsewhere: 1 by tests/test_opa_lifecycle.py (a stale record naming
another process), 2 by tests/test_policy.py (a revision other than the reviewed one), 4 by
tests/test_opa_lifecycle.py (a full disk leaves no OPA running).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.accounting import device_accounting
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Placement, Pool, Rejection, Workload
from examlops_policy.store.sqlite import SQLiteStore
from reliability.backends import Backend, fresh_backend
from tests.conftest import SEED_POOLS, exa_json, free_port, run_exa, shared_opa_env
from tests.disk_support import fill, small_tmpfs

# -- helpers ---------------------------------------------------------------------------------------


def seed(home: Path, pools: tuple[Pool, ...] = SEED_POOLS) -> None:
    """Register ``pools`` in ``home``'s SQLite state through the library (no policy needed)."""
    hw = Hardware(home, store=SQLiteStore(home / "state.db"))
    try:
        for pool in pools:
            hw.add_pool(pool)
    finally:
        hw.close()


def count(home: Path, table: str) -> int:
    db = sqlite3.connect(home / "state.db")
    try:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


def audit_entries(home: Path) -> list[dict[str, Any]]:
    """Every audit entry of ``home``'s log, as the library reads them back."""
    store = SQLiteStore(home / "state.db")
    try:
        return [json.loads(row.canonical) for row in store.audit_rows()]
    finally:
        store.close()


@contextmanager
def library(home: Path) -> Iterator[Hardware]:
    """The library on ``home``'s SQLite state, deciding with the session's OPA."""
    hw = Hardware(home, store=SQLiteStore(home / "state.db"), policy=ManagedPolicy(Path(os.environ["EXA_TEST_OPA_HOME"])))
    try:
        yield hw
    finally:
        hw.close()


def pool_specs(home: Path) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in json.loads(run_exa(home, "hardware", "pools", "--json", check=True).stdout)}


def json_error(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON error object a failing ``--json`` command wrote on stderr (and nothing else)."""
    doc: dict[str, Any] = json.loads(result.stderr)
    assert set(doc) == {"error", "code", "message"}, doc
    return doc


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- item 3: a pool that live decisions hold keeps what they hold ------------------------------------

BASE_POOL = {"name": "held", "target": "hpc", "accelerator": "nvidia", "count": 8, "region": "eu"}


def write_pools(path: Path, **changes: object) -> Path:
    path.write_text(json.dumps({"pools": [{**BASE_POOL, **changes}]}))  # JSON is YAML
    return path


def test_apply_refuses_to_move_live_grants_and_allows_what_keeps_them(exa_home: Path, tmp_path: Path) -> None:
    """Issue item 3: `exa hardware apply -f` refuses to change a held pool's accelerator, model,
    target, region or partitioning (exit 2 naming the decisions); price, carbon factor,
    capabilities and a larger count may change; after the release the change is allowed."""
    fleet = tmp_path / "pools.yaml"
    with library(exa_home) as hw:
        hw.apply([Pool(**BASE_POOL)])  # type: ignore[arg-type]
        first, second = (hw.place(Workload(name, "nvidia")) for name in ("a", "b"))
        assert isinstance(first.decision, Placement) and isinstance(second.decision, Placement)
        assert first.decision.pool == second.decision.pool == "held"
        before = hw.pool_by_name("held")
    audit_size = count(exa_home, "audit_log")

    refused: dict[str, object] = {
        "accelerator": "amd",
        "model": "a100",
        "target": "cloud",
        "region": "us",
        "supports_fractions": True,
        "fixed_profile": "1g",
    }
    for field, value in refused.items():
        result = run_exa(exa_home, "hardware", "apply", "-f", str(write_pools(fleet, **{field: value})))
        assert result.returncode == 2, (field, result.stdout, result.stderr)
        assert f"cannot change {field}" in result.stderr, (field, result.stderr)
        assert first.id[:12] in result.stderr and second.id[:12] in result.stderr, (field, result.stderr)
        assert "Traceback" not in result.stderr
    assert count(exa_home, "audit_log") == audit_size  # nothing was written

    harmless: dict[str, object] = {"cost_per_hour": 3.5, "carbon_factor": 100, "capabilities": ["fp8"], "count": 10}
    out = run_exa(exa_home, "hardware", "apply", "-f", str(write_pools(fleet, **harmless)), check=True).stdout
    assert "~ held updated (capabilities, carbon_factor, cost_per_hour, count)" in out

    with library(exa_home) as hw:
        kept = hw.pool_by_name("held")
        assert (kept.accelerator, kept.model, kept.target, kept.region, kept.supports_fractions, kept.fixed_profile) == (
            before.accelerator, before.model, before.target, before.region, before.supports_fractions, before.fixed_profile
        )  # fmt: skip
        for record in (first, second):
            hw.release(record.id)
    moved = write_pools(fleet, **harmless, accelerator="amd", region="us", supports_fractions=True)
    out = run_exa(exa_home, "hardware", "apply", "-f", str(moved), check=True).stdout
    assert "~ held updated (accelerator, region, supports_fractions)" in out


# -- item 5: idempotency keys and leases -------------------------------------------------------------


def test_a_request_id_places_once_on_the_command_line(exa_home: Path) -> None:
    """Issue item 5: `exa hardware place ... --request-id K` twice returns the same decision and
    reserves nothing more; the same key for another workload is exit 2."""
    seed(exa_home)
    first = exa_json(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--request-id", "job-42")
    sizes = {t: count(exa_home, t) for t in ("decisions", "allocations", "holdings", "audit_log")}
    again = exa_json(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--request-id", "job-42")
    assert again["id"] == first["id"] and again["request_id"] == "job-42"
    assert {t: count(exa_home, t) for t in sizes} == sizes
    assert pool_specs(exa_home)["hpc-mi300"]["free"] == 3

    other = run_exa(exa_home, "hardware", "place", "serve", "--accelerator", "amd", "--request-id", "job-42")
    assert other.returncode == 2, other.stdout + other.stderr
    assert "request id 'job-42' was used for another workload" in other.stderr and first["id"][:12] in other.stderr
    assert {t: count(exa_home, t) for t in sizes} == sizes


def test_a_request_id_places_once_through_the_library(seeded: Hardware) -> None:
    """Issue item 5: `Hardware.place(w, request_id=...)` is idempotent, and a key names one workload."""
    work = Workload("train", "amd", engine="vllm")
    first = seeded.place(work, request_id="req-1")
    free = {s.pool.name: s.free for s in seeded.pools()}
    again = seeded.place(work, request_id="req-1")
    assert again.id == first.id and again.decision.decision_id == first.id
    assert {s.pool.name: s.free for s in seeded.pools()} == free
    assert len(seeded.decisions()) == 1
    with pytest.raises(SpecError, match="was used for another workload") as caught:
        seeded.place(Workload("train", "amd", engine="vllm", count=2), request_id="req-1")
    assert caught.value.field == "request_id"
    assert len(seeded.decisions()) == 1


def test_an_ended_lease_is_released_by_the_next_write_and_audited_as_expired(exa_home: Path) -> None:
    """Issue item 5: a placement with `--lease 1s` is released by the next write once it ended,
    with an audit entry of kind "expired"; the log still verifies."""
    seed(exa_home)
    leased = exa_json(exa_home, "hardware", "place", "short", "--accelerator", "amd", "--lease", "1s")
    assert leased["lease_expires_at"] is not None
    time.sleep(1.2)
    exa_json(exa_home, "hardware", "place", "next", "--accelerator", "amd")
    record = json.loads(run_exa(exa_home, "hardware", "explain", leased["id"], "--json", check=True).stdout)
    assert record["released_at"] is not None
    assert pool_specs(exa_home)["hpc-mi300"]["free"] == 3  # only "next" holds a device now
    expired = [e for e in audit_entries(exa_home) if e["kind"] == "expired"]
    assert [e["decision_id"] for e in expired] == [leased["id"]]
    assert run_exa(exa_home, "audit", "verify").returncode == 0


def test_renew_moves_the_lease_end(exa_home: Path) -> None:
    """Issue item 5: `exa hardware renew ID --lease 2h` moves a live placement's lease end (audited)."""
    seed(exa_home)
    leased = exa_json(exa_home, "hardware", "place", "long", "--accelerator", "amd", "--lease", "1h")
    renewed = json.loads(run_exa(exa_home, "hardware", "renew", leased["id"], "--lease", "2h", "--json", check=True).stdout)
    end = instant(renewed["lease_expires_at"])
    assert end > instant(leased["lease_expires_at"]) + timedelta(minutes=59)
    assert abs(end - (datetime.now(timezone.utc) + timedelta(hours=2))) < timedelta(minutes=1)
    record = json.loads(run_exa(exa_home, "hardware", "explain", leased["id"], "--json", check=True).stdout)
    assert record["lease_expires_at"] == renewed["lease_expires_at"] and record["released_at"] is None
    assert [e["lease_expires_at"] for e in audit_entries(exa_home) if e["kind"] == "renew"] == [renewed["lease_expires_at"]]


# -- item 6: a mistyped audit row is a problem reported, not a crash ---------------------------------


@pytest.mark.parametrize(
    ("statement", "seq"),
    [
        ("UPDATE audit_log SET entry = CAST(entry AS TEXT) WHERE seq = 2", 2),
        ("UPDATE audit_log SET prev_hash = hex(prev_hash) WHERE seq = 3", 3),
        ("UPDATE audit_log SET entry_hash = 3.5 WHERE seq = 1", 1),
    ],
    ids=["entry-as-text", "prev-hash-as-text", "entry-hash-as-real"],
)
def test_a_mistyped_audit_row_is_reported_as_damaged(exa_home: Path, statement: str, seq: int) -> None:
    """Issue item 6: an audit entry rewritten with the wrong type through sqlite3 (append-only
    triggers dropped first) makes `exa audit verify` exit 7 with the problem reported, no traceback."""
    seed(exa_home)
    db = sqlite3.connect(exa_home / "state.db", isolation_level=None)
    try:
        triggers = db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit_log'").fetchall()
        for (trigger,) in triggers:
            db.execute(f'DROP TRIGGER "{trigger}"')
        assert db.execute(statement).rowcount == 1
    finally:
        db.close()

    text = run_exa(exa_home, "audit", "verify")
    assert text.returncode == 7, text.stdout + text.stderr
    assert f"seq {seq}: damaged:" in text.stdout and "not bytes" in text.stdout
    assert "Traceback" not in text.stderr and text.stderr == ""
    as_json = run_exa(exa_home, "audit", "verify", "--json")
    assert as_json.returncode == 7 and "Traceback" not in as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and (seq, "damaged") in [(p["seq"], p["kind"]) for p in report["problems"]]


# -- item 7: each storage fault its own exit code ----------------------------------------------------


@pytest.mark.parametrize("damage", ["not a database", "damaged pages"])
def test_a_corrupt_state_database_is_exit_10_naming_the_file(exa_home: Path, damage: str) -> None:
    """Issue item 7: a state.db that is not a database, or whose pages are damaged, is exit 10
    (StateCorrupt) with the file's path in the message."""
    seed(exa_home)
    path = exa_home / "state.db"
    size = path.stat().st_size
    with path.open("r+b") as f:
        if damage == "not a database":
            f.write(os.urandom(size))
        else:
            f.seek(4096)  # the header page stays; the rest is noise
            f.write(os.urandom(size - 4096))
    for args in (["hardware", "pools"], ["hardware", "place", "w", "--accelerator", "amd"], ["audit", "verify"]):
        result = run_exa(exa_home, *args)
        assert result.returncode == 10, (args, result.stdout, result.stderr)
        assert f"StateCorrupt: {path}: the state database is damaged or is not a database" in result.stderr.replace("\n", "")
        assert "Traceback" not in result.stderr


@pytest.fixture()
def full_home(tmp_path: Path) -> Iterator[Path]:
    """A seeded home on a 1 MiB tmpfs (needs root: mount); the caller fills it."""
    with small_tmpfs(tmp_path) as mount:
        home = mount / "home"
        seed(home)
        yield home


@pytest.mark.opa
def test_a_full_disk_is_exit_11_and_nothing_is_written(full_home: Path) -> None:
    """Issue item 7: with the state's disk full, a placement and a pool change are exit 11
    (StateFull); with space again, the state is as it was."""
    filler = fill(full_home.parent)
    for args in (
        ["hardware", "place", "w", "--accelerator", "amd"],
        ["hardware", "add-pool", "more", "--target", "hpc", "--accelerator", "amd", "--count", "1", "--region", "eu"],
    ):
        result = run_exa(full_home, *args)
        assert result.returncode == 11, (args, result.stdout, result.stderr)
        assert "StateFull" in result.stderr and "the disk is full" in result.stderr and "Traceback" not in result.stderr
    filler.unlink()
    assert (count(full_home, "decisions"), count(full_home, "pools"), count(full_home, "audit_log")) == (0, 3, 3)
    assert run_exa(full_home, "audit", "verify").returncode == 0


def test_an_unreachable_postgresql_is_exit_12_and_nothing_is_written(exa_home: Path) -> None:
    """Issue item 7: EXA_DB_URL naming a PostgreSQL that does not answer is exit 12
    (StateUnreachable), after bounded retries, and nothing is written anywhere."""
    url = f"postgresql://exa@127.0.0.1:{free_port()}/x"
    result = run_exa(exa_home, "hardware", "add-pool", "p", "--target", "hpc", "--accelerator", "amd", "--count", "1",
                     "--region", "eu", env={"EXA_DB_URL": url})  # fmt: skip
    assert result.returncode == 12, result.stdout + result.stderr
    assert "StateUnreachable" in result.stderr and "could not be reached" in result.stderr
    assert "nothing was written" in result.stderr and "Traceback" not in result.stderr
    assert not exa_home.exists()  # no SQLite state stood in for the server


# -- item 8: the two schemas agree on types too ------------------------------------------------------

# SQLite's declared type -> the PostgreSQL types that hold the same values.
EQUIVALENT_TYPES = {
    "INTEGER": {"smallint", "integer", "bigint"},
    "REAL": {"double precision"},  # not PostgreSQL's 4-byte "real"
    "TEXT": {"text"},
    "BLOB": {"bytea"},
}


@pytest.mark.postgres
def test_both_backends_have_the_same_column_types(tmp_path: Path) -> None:
    """Issue item 8: every column has an equivalent type on SQLite and PostgreSQL (e.g.
    held_outside is double precision on both, not a 4-byte real)."""

    def types(backend: Backend) -> dict[tuple[str, str], str]:
        backend.open().close()
        with backend.raw() as db:
            if backend.name == "sqlite":
                tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
                return {(t, r[1]): str(r[2]).upper() for t in tables for r in db.execute(f"PRAGMA table_info({t})")}
            rows = db.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema()"
            ).fetchall()
            return {(t, c): str(d) for t, c, d in rows}

    with fresh_backend("sqlite", tmp_path) as lite, fresh_backend("postgres", tmp_path) as pg:
        sqlite_types, pg_types = types(lite), types(pg)
    assert set(sqlite_types) == set(pg_types)
    unknown = {k: v for k, v in sqlite_types.items() if v not in EQUIVALENT_TYPES}
    assert unknown == {}, "add these SQLite types to EQUIVALENT_TYPES"
    differ = {k: (sqlite_types[k], pg_types[k]) for k in sorted(sqlite_types) if pg_types[k] not in EQUIVALENT_TYPES[sqlite_types[k]]}
    assert differ == {}
    assert pg_types[("pools", "held_outside")] == "double precision"


# -- item 9: a second release ------------------------------------------------------------------------


def test_a_second_release_says_when_the_first_was_and_writes_nothing(exa_home: Path) -> None:
    """Issue item 9: releasing twice: the second `exa hardware release ID` exits 0, says "already
    released at <time>" and adds nothing to the audit log."""
    seed(exa_home)
    decision = exa_json(exa_home, "hardware", "place", "a", "--accelerator", "amd")
    first = json.loads(run_exa(exa_home, "hardware", "release", decision["id"], "--json", check=True).stdout)
    assert first["already_released"] is False and first["released_at"]
    size = count(exa_home, "audit_log")
    again = run_exa(exa_home, "hardware", "release", decision["id"])
    assert again.returncode == 0, again.stderr
    assert f"was already released at {first['released_at']}" in again.stdout
    assert count(exa_home, "audit_log") == size
    as_json = json.loads(run_exa(exa_home, "hardware", "release", decision["id"], "--json", check=True).stdout)
    assert as_json["already_released"] is True and as_json["released_at"] == first["released_at"]
    assert count(exa_home, "audit_log") == size
    assert pool_specs(exa_home)["hpc-mi300"]["free"] == 4


# -- item 10: a wrong type for any field is SpecError naming the field -------------------------------


def test_capabilities_as_a_bare_string_is_refused() -> None:
    """Issue item 10: `capabilities="fp8"` (a string, not a list) is SpecError for a workload and a pool."""
    with pytest.raises(SpecError, match="list of tags") as workload:
        Workload("w", accelerator="nvidia", capabilities="fp8")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="list of tags") as pool:
        Pool("p", "hpc", "nvidia", 1, "eu", capabilities="fp8")  # type: ignore[arg-type]
    assert workload.value.field == pool.value.field == "capabilities"


WORKLOAD_WRONG = [
    ("name", 5), ("accelerator", None), ("capabilities", [1]), ("target", 1), ("engine", ["vllm"]), ("fraction", True),
    ("fraction", "0.5"), ("count", "2"), ("count", True), ("count", 1.0), ("residency", None), ("allow_burst", "yes"),
    ("allow_burst", 1), ("data_region", 7), ("allow_cpu_fallback", "no"), ("optimize", 0), ("carbon_weight", "0.5"),
    ("max_cost_per_hour", "1"), ("max_carbon_per_hour", False), ("project", 3),
]  # fmt: skip
POOL_WRONG = [
    ("name", 5), ("target", None), ("accelerator", 1), ("count", "2"), ("count", True), ("count", 2.0), ("region", 1),
    ("cost_per_hour", "2.5"), ("carbon_factor", True), ("supports_fractions", "yes"), ("capabilities", "fp8"),
    ("model", 100), ("power_w", "700"), ("pue", "1.2"), ("partition", 1), ("gres_type", 1), ("fixed_profile", 1),
    ("spot", "no"), ("price_source", 1),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value"), WORKLOAD_WRONG, ids=[f"{f}={v!r}" for f, v in WORKLOAD_WRONG])
def test_a_workload_field_of_the_wrong_type_is_spec_error_naming_it(field: str, value: object) -> None:
    """Issue item 10: a wrong type for any Workload field raises SpecError naming the field."""
    values: dict[str, Any] = {"name": "w", "accelerator": "nvidia", field: value}
    with pytest.raises(SpecError) as caught:
        Workload(**values)
    assert caught.value.field == field and f"{field}: " in str(caught.value)


@pytest.mark.parametrize(("field", "value"), POOL_WRONG, ids=[f"{f}={v!r}" for f, v in POOL_WRONG])
def test_a_pool_field_of_the_wrong_type_is_spec_error_naming_it(field: str, value: object) -> None:
    """Issue item 10: a wrong type for any Pool field raises SpecError naming the field."""
    values: dict[str, Any] = {"name": "p", "target": "hpc", "accelerator": "nvidia", "count": 1, "region": "eu", field: value}
    with pytest.raises(SpecError) as caught:
        Pool(**values)
    assert caught.value.field == field and f"{field}: " in str(caught.value)


# -- item 11: a recorded decision carries its id -------------------------------------------------------


def test_a_recorded_decision_carries_its_record_id(seeded: Hardware) -> None:
    """Issue item 11: `Hardware.place(w).decision.decision_id == record.id`, for a placement and a
    rejection, and as read back."""
    placement = seeded.place(Workload("train", "amd", engine="vllm"))
    rejection = seeded.place(Workload("train", "amd", engine="sglang"))
    assert isinstance(placement.decision, Placement) and isinstance(rejection.decision, Rejection)
    for record in (placement, rejection):
        assert record.id and record.decision.decision_id == record.id
        assert seeded.decision(record.id).decision.decision_id == record.id
    assert {r.id: r.decision.decision_id for r in seeded.decisions()} == {placement.id: placement.id, rejection.id: rejection.id}


def test_place_json_has_the_decision_id(exa_home: Path) -> None:
    """Issue item 11: `exa hardware place --json` prints "decision_id" equal to "id", never null,
    for a placement and a rejection."""
    seed(exa_home)
    placement = exa_json(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm")
    result = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "sglang", "--json")
    assert result.returncode == 3, result.stdout + result.stderr
    rejection = json.loads(result.stdout)
    assert (placement["outcome"], rejection["outcome"]) == ("placed", "rejected")
    for doc in (placement, rejection):
        assert doc["id"] and doc["decision_id"] == doc["id"]


# -- item 12: device_accounting refuses what it cannot account ---------------------------------------


def test_device_accounting_refuses_a_rejection_and_hours_of_the_wrong_type(seeded: Hardware) -> None:
    """Issue item 12: `device_accounting(rejection, 10)`, `hours=True` and `hours="10"` raise SpecError."""
    placement = seeded.place(Workload("train", "amd", engine="vllm")).decision
    rejection = seeded.place(Workload("train", "amd", engine="sglang")).decision
    assert isinstance(placement, Placement) and isinstance(rejection, Rejection)
    assert device_accounting(placement, 10)["cost"] == 18.0
    with pytest.raises(SpecError, match="rejection") as caught:
        device_accounting(rejection, 10)  # type: ignore[arg-type]
    assert caught.value.field == "placement"
    for hours in (True, "10", float("nan"), -1):
        with pytest.raises(SpecError, match="hours must be") as caught:
            device_accounting(placement, hours=hours)  # type: ignore[arg-type]
        assert caught.value.field == "hours"


# -- item 13: explain shows each pool's accelerator, target and region -------------------------------


def test_explain_shows_each_pools_accelerator_target_and_region(exa_home: Path) -> None:
    """Issue item 13: `exa hardware explain ID` (a recorded decision, rebuilt) shows the accelerator,
    target and region of every pool row."""
    seed(exa_home)
    decision = exa_json(exa_home, "hardware", "place", "infer", "--accelerator", "nvidia", "--fraction", "0.5")
    out = run_exa(exa_home, "hardware", "explain", decision["id"], check=True).stdout.splitlines()
    start = out.index(next(line for line in out if line.startswith("Pools for infer")))
    header = out[start + 1].split()
    assert header[:4] == ["pool", "accel", "target", "region"]
    rows = {}
    for line in out[start + 2 :]:
        if line.startswith("Checks over"):
            break
        if line.startswith("* "):  # the legend of "1 whole*"
            continue
        cells = line.split()
        rows[cells[0]] = tuple(cells[1:4])
    assert rows == {p.name: (p.accelerator, p.target, p.region) for p in SEED_POOLS}


# -- item 14: -f FILE and the options that would conflict with it ------------------------------------


def test_a_workload_file_with_conflicting_options_is_exit_2_naming_them(exa_home: Path, tmp_path: Path) -> None:
    """Issue item 14: `exa hardware place -f FILE NAME --accelerator X` is exit 2 naming the
    conflicting options; nothing is recorded."""
    seed(exa_home)
    spec = tmp_path / "workload.yaml"
    spec.write_text("workload:\n  name: train\n  accelerator: amd\n")
    result = run_exa(exa_home, "hardware", "place", "-f", str(spec), "other", "--accelerator", "nvidia", "--allow-burst")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "NAME (other), --accelerator, --allow-burst would conflict with it" in result.stderr
    assert "Traceback" not in result.stderr
    assert (count(exa_home, "decisions"), count(exa_home, "audit_log")) == (0, 3)
    assert exa_json(exa_home, "hardware", "place", "-f", str(spec))["pool"] == "hpc-mi300"  # the file alone is fine


# -- item 16: --json errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (["hardware", "explain", "abcdef", "--json"], 8, "NotFoundError"),
        (["hardware", "decisions", "--limit", "0", "--json"], 2, "UsageError"),
        (["hardware", "place", "w", "--accelerator", "quantum", "--json"], 2, "UsageError"),
        (["hardware", "place", "w;x", "--accelerator", "amd", "--json"], 2, "SpecError"),
        (["hardware", "release", "abcdef", "--json"], 8, "NotFoundError"),
    ],
    ids=["unknown-decision", "limit-0", "invalid-choice", "bad-name", "release-unknown"],
)
def test_a_failing_json_command_writes_a_json_error(exa_home: Path, args: list[str], code: int, error: str) -> None:
    """Issue item 16: with --json, a failure (usage errors too) is `{"error","code","message"}` on
    stderr, its code the exit code, nothing on stdout."""
    seed(exa_home)
    result = run_exa(exa_home, *args)
    assert result.returncode == code, result.stdout + result.stderr
    doc = json_error(result)
    assert doc["code"] == code and doc["error"] == error and doc["message"]
    assert result.stdout == ""


def test_opa_status_and_finops_cost_speak_json(exa_home: Path) -> None:
    """Issue item 16: `exa opa status --json` is JSON; `exa finops cost --json` has "totals"."""
    seed(exa_home)
    status = run_exa(exa_home, "opa", "status", "--json")
    doc = json.loads(status.stdout)
    assert isinstance(doc, dict) and doc["running"] is True
    exa_json(exa_home, "hardware", "place", "a", "--accelerator", "amd")
    cost = json.loads(run_exa(exa_home, "finops", "cost", "--hours", "10", "--json", check=True).stdout)
    assert cost["totals"] == {"decisions": 1, "device_hours": 10.0, "cost": 18.0, "carbon_g": 2500.0,
                              "used_device_hours": 10.0, "idle_device_hours": 0.0, "used_cost": 18.0, "idle_cost": 0.0}  # fmt: skip


# -- item 17: messages ------------------------------------------------------------------------------


def test_name_errors_say_what_is_wrong(exa_home: Path) -> None:
    """Issue item 17: a name that is too long, in upper case where lower case is required, or with
    a forbidden character gets its own message."""
    seed(exa_home)
    cases = {
        "too long": (["hardware", "place", "a" * 64, "--accelerator", "amd"], "is at most 63 characters (got 64)"),
        "upper case": (["hardware", "place", "w", "--accelerator", "amd", "--capabilities", "FP8"], "must be lower case (got 'FP8')"),
        "forbidden": (["hardware", "place", "w;x", "--accelerator", "amd"], "may hold only letters, digits, '.', '_' and '-' (got ';'"),
    }
    messages = {}
    for problem, (args, expected) in cases.items():
        result = run_exa(exa_home, *args)
        assert result.returncode == 2, (problem, result.stderr)
        assert expected in result.stderr, (problem, result.stderr)
        messages[problem] = result.stderr
    assert len(set(messages.values())) == 3
    assert count(exa_home, "decisions") == 0


def test_pools_show_no_float_noise_after_a_mig_slice(exa_home: Path) -> None:
    """Issue item 17: after a 4g MIG placement, `exa hardware pools` shows 7.429/8, not 7.428571...
    (no 0.857143 or 0.5714285714285714 anywhere)."""
    seed(exa_home)
    decision = exa_json(exa_home, "hardware", "place", "infer", "--accelerator", "nvidia", "--fraction", "0.5")
    assert decision["grant"]["profile"] == "4g"
    out = run_exa(exa_home, "hardware", "pools", check=True).stdout
    assert "7.429/8" in out
    assert re.search(r"\d\.\d{4,}", out) is None, out
    assert "0.857143" not in out and "0.5714285714285714" not in out


def test_audit_verify_of_one_entry_says_1_entry(exa_home: Path) -> None:
    """Issue item 17: `exa audit verify` of a one-entry log says "1 entry", not "1 entries"."""
    seed(exa_home, SEED_POOLS[:1])
    out = run_exa(exa_home, "audit", "verify", check=True).stdout
    assert "✓ audit log verifies: 1 entry, head" in out and "1 entries" not in out


def test_burst_and_fallback_share_one_parenthesis(exa_home: Path) -> None:
    """Issue item 17: a placement that both bursts and falls back says "(burst, fallback)" once."""
    seed(exa_home, (SEED_POOLS[2],))  # only cloud-a100: a tpu workload bursts and falls back to nvidia
    result = run_exa(exa_home, "hardware", "place", "t", "--accelerator", "tpu", "--allow-burst")
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first == "✓ t → pool cloud-a100 · nvidia on cloud (burst, fallback)"


def test_a_full_pool_is_said_to_be_full_not_unavailable(exa_home: Path) -> None:
    """Issue item 17: when the requested accelerator's pool is full and another stands in, the note
    says its pools are full rather than "unavailable"."""
    seed(exa_home, (Pool("one", "hpc", "amd", 1, "eu"), Pool("nv", "hpc", "nvidia", 2, "eu")))
    exa_json(exa_home, "hardware", "place", "a", "--accelerator", "amd")
    result = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["✓ b → pool nv · nvidia on hpc (fallback)", "  requested amd pools are full — fell back to nvidia"]
    assert "unavailable" not in result.stdout
    # A requested accelerator with no pool at all is still "unavailable".
    assert "requested tpu unavailable — fell back to nvidia" in run_exa(exa_home, "hardware", "place", "c", "--accelerator", "tpu").stdout


# -- item 18: burst --dry-run ---------------------------------------------------------------------------


def test_burst_dry_run_prints_the_decision_and_records_nothing(exa_home: Path) -> None:
    """Issue item 18: `exa hardware burst NAME --accelerator nvidia --allow-burst --dry-run` prints
    the decision and records nothing (no decision, no burst event, no audit entry)."""
    seed(exa_home)
    result = run_exa(exa_home, "hardware", "burst", "w", "--accelerator", "nvidia", "--allow-burst", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "✓ w → pool cloud-a100 · nvidia on cloud (burst)"
    assert json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout) == []
    assert json.loads(run_exa(exa_home, "hardware", "burst-events", "--json", check=True).stdout) == []
    assert (count(exa_home, "decisions"), count(exa_home, "burst_events"), count(exa_home, "audit_log")) == (0, 0, 3)
    assert count(exa_home, "allocations") == 0


# -- item 19: a signed checkpoint verified without its key -----------------------------------------------


def test_a_signed_checkpoint_without_key_warns_that_the_signature_was_not_checked(exa_home: Path, tmp_path: Path) -> None:
    """Issue item 19: `exa audit verify --checkpoint CP` of a signed checkpoint, without --key,
    warns that the signature was not checked (and --json says signature_checked false)."""
    seed(exa_home)
    keys = tmp_path / "keys"
    keys.mkdir()
    run_exa(exa_home, "audit", "keygen", "auditor", "--out-dir", str(keys), check=True)
    checkpoint = tmp_path / "checkpoint.txt"
    run_exa(exa_home, "audit", "checkpoint", "--key", str(keys / "auditor.skey"), "--out", str(checkpoint), check=True)
    warning = "the checkpoint is signed, but its signature was not checked: give --key VKEY to check it"

    unchecked = run_exa(exa_home, "audit", "verify", "--checkpoint", str(checkpoint), check=True).stdout
    assert "matches checkpoint at size 3" in unchecked and warning in unchecked
    doc = json.loads(run_exa(exa_home, "audit", "verify", "--checkpoint", str(checkpoint), "--json", check=True).stdout)
    assert doc["ok"] is True and doc["signature_checked"] is False

    checked = run_exa(exa_home, "audit", "verify", "--checkpoint", str(checkpoint), "--key", str(keys / "auditor.vkey"), check=True).stdout
    assert "matches checkpoint at size 3" in checked and warning not in checked


# -- issue 32 item 6: what an OPA reports is not what is proven ---------------------------------------


def test_an_external_opa_that_reports_the_reviewed_tables_is_reported_not_proven(exa_home: Path) -> None:
    """An OPA at EXA_OPA_URL serving the reviewed bundle: its revision and table digest come from
    the rules it serves, so both status commands say they are reported by it, not proven."""
    env = shared_opa_env()
    opa = run_exa(exa_home, "opa", "status", env=env, shared_opa=False)
    assert opa.returncode == 0, opa.stdout + opa.stderr
    assert "matches the policy files: reported by the OPA, not proven" in opa.stdout, opa.stdout
    assert json.loads(run_exa(exa_home, "opa", "status", "--json", env=env, shared_opa=False).stdout)["proven"] is False
    policy = run_exa(exa_home, "policy", "status", env=env, shared_opa=False)
    assert policy.returncode == 0, policy.stdout + policy.stderr
    line = next(line for line in policy.stdout.splitlines() if "EXA_OPA_URL" in line)
    assert "· matches: reported by the OPA, not proven" in line and "✓" not in line, policy.stdout
    external = json.loads(run_exa(exa_home, "policy", "status", "--json", env=env, shared_opa=False).stdout)["paths"][1]
    assert (external["matches"], external["proven"]) == (True, False)


def test_a_local_opa_without_a_verification_key_is_warned_about() -> None:
    """A local OPA whose recorded command line verifies no bundle signature (a same-user impostor
    serving an unsigned bundle) matches only by what it reports: both status commands say so."""
    import io
    from types import SimpleNamespace

    from examlops_policy.cli import opa_cmds, policy as policy_cmds
    from examlops_policy.cli.console import Console
    from examlops_policy.opa.connection import OpaStatus
    from examlops_policy.opa.revisions import PathRevision, PolicyStatus

    def shown(signed: bool) -> str:
        out = io.StringIO()
        st = OpaStatus(running=True, managed=True, reached_at="unix:///h/opa/opa.sock", policy_revision="sha256:" + "a" * 64,
                       served_revision="sha256:" + "a" * 64, pid=2, supervisor_pid=1, listeners=("unix:///h/opa/opa.sock",),
                       bundle_roots=("examlops", "system/authz"), refuses_anonymous=True, token_file="/h/opa/token", signed_bundle=signed)  # fmt: skip
        assert st.proven is signed and st.to_json()["proven"] is signed
        opa_cmds.print_status(Console(file=out, width=400), st)
        return out.getvalue()

    assert "not proven" not in shown(True) and "no --verification-key" not in shown(True)
    unsigned = shown(False)
    assert "matches the policy files: reported by the OPA, not proven" in unsigned
    assert "⚠ its recorded command line has no --verification-key" in unsigned
    for proven in (True, False):
        path = PathRevision("local OPA", "unix:///h/opa/opa.sock", True, "sha256:" + "a" * 64, True, proven=proven)
        hw = SimpleNamespace(policy_status=lambda path=path: PolicyStatus(Path("policies"), "sha256:" + "a" * 64, (path,)))
        out = io.StringIO()
        assert policy_cmds.cmd_status(SimpleNamespace(json=False), hw, Console(file=out, width=400)) == 0  # type: ignore[arg-type]
        assert ("no --verification-key" in out.getvalue()) is not proven and ("✓ local OPA" in out.getvalue()) is proven

"""The Store contract, on SQLite and on PostgreSQL: the same behaviour from one interface.

Decisions come from the real OPA (the session's, started on demand); a hand-written ``decide`` is
used only where a test needs one that fails or blocks. PostgreSQL cases skip when no server answers
(they fail instead under EXA_REQUIRE_SERVICES=1); see tests/reliability/backends.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from examlops_policy import audit
from examlops_policy.errors import NotFoundError, PolicyUnavailable, SpecError, StateError
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Capacity, Node, Pool, PoolState, Workload
from examlops_policy._core import commit
from examlops_policy._core.state import Capacities, Snapshot
from examlops_policy.store import Store
from examlops_policy.store._sql import migrations, utc_now
from examlops_policy.store.postgres import PostgresStore, redacted
from reliability.backends import Backend, fresh_backend
from reliability.harness import FLEET, WORKLOADS, node_violations, open_hardware, violations
from tests.backend_support import backend, hw  # noqa: F401 - fixtures
from tests.conftest import run_exa

TRAIN_AMD, INFER_HALF, _, BURST_OPEN, BURST_EU, NEVER = WORKLOADS
APPEND_ONLY_ERRORS = (sqlite3.DatabaseError, psycopg.Error)


pytestmark = pytest.mark.hw_pools(*FLEET)


def _entries(store: Store) -> list[dict[str, Any]]:
    return [json.loads(row.canonical) for row in store.audit_rows()]


def _free(hw: Hardware) -> dict[str, float]:
    return {s.pool.name: s.free for s in hw.pools()}


# -- schema and migrations ---------------------------------------------------------------------


def test_both_backends_have_the_same_migration_versions() -> None:
    assert [v for v, _ in migrations("sqlite")] == [v for v, _ in migrations("postgres")] != []


@pytest.mark.postgres
def test_both_backends_have_the_same_tables_and_columns(tmp_path: Path) -> None:
    def columns(backend: Backend) -> dict[str, list[str]]:
        backend.open().close()
        with backend.raw() as db:
            if backend.name == "sqlite":
                tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
                return {t: sorted(r[1] for r in db.execute(f"PRAGMA table_info({t})")) for t in tables}
            rows = db.execute(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            ).fetchall()
            found: dict[str, list[str]] = {}
            for table, column in rows:
                found.setdefault(table, []).append(column)
            return {t: sorted(c) for t, c in found.items()}

    with fresh_backend("sqlite", tmp_path) as lite, fresh_backend("postgres", tmp_path) as pg:
        assert columns(lite) == columns(pg)


def test_migrations_apply_once_and_reopening_changes_nothing(backend: Backend) -> None:
    for _ in range(2):
        backend.open().close()
    with backend.raw() as db:
        versions = [r[0] for r in db.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
    assert versions == [v for v, _ in migrations(backend.name)]


def test_stores_opened_at_once_on_fresh_state_all_work(backend: Backend) -> None:
    """Concurrent first opens race to migrate; the lock makes one win and the others see it."""
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            backend.open().close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert backend.count("schema_migrations") == len(migrations(backend.name))


def test_state_from_a_newer_version_is_refused(backend: Backend) -> None:
    backend.open().close()
    with backend.raw() as db:
        db.execute("INSERT INTO schema_migrations VALUES (9999, 'later')")
    with pytest.raises(StateError, match="schema version 9999, newer than this exa knows"):
        backend.open()


# -- pools -------------------------------------------------------------------------------------


def test_pools_are_added_updated_and_left_alone_with_an_audit_entry_each_change(backend: Backend, tmp_path: Path) -> None:
    store = backend.open()
    hw = Hardware(tmp_path, store=store)
    try:
        assert [hw.add_pool(pool).action for pool in FLEET] == ["added"] * 3
        with pytest.raises(SpecError, match="'hpc-mi300' already exists"):
            hw.add_pool(FLEET[1])
        bigger = Pool("hpc-mi300", "hpc", "amd", 6, "eu", cost_per_hour=1.5)
        changes = hw.apply([FLEET[0], bigger])
        assert [(c.action, c.changed_fields) for c in changes] == [("unchanged", ()), ("updated", ("cost_per_hour", "count"))]
        assert [(e["kind"], e["pool"]["name"], e["action"]) for e in _entries(store)] == [
            ("pool", "hpc-nvidia", "added"), ("pool", "hpc-mi300", "added"), ("pool", "cloud-a100", "added"),
            ("pool", "hpc-mi300", "updated"),
        ]  # fmt: skip
        states = sorted(hw.pools(), key=lambda s: s.pool.name)
        assert [s.pool.name for s in states] == ["cloud-a100", "hpc-mi300", "hpc-nvidia"]
        assert states[1] == PoolState(bigger, 6.0, Capacity(6))
    finally:
        store.close()


def test_a_pool_cannot_shrink_below_what_live_decisions_hold(hw: Hardware) -> None:
    for _ in range(3):
        assert hw.place(TRAIN_AMD).decision.ok
    with pytest.raises(SpecError, match=r"count 2 would drop device\(s\) 2 that live decisions hold"):
        hw.apply([Pool("hpc-mi300", "hpc", "amd", 2, "eu")])
    assert _free(hw)["hpc-mi300"] == 1.0


# -- placing -----------------------------------------------------------------------------------


def test_a_placement_holds_capacity_and_writes_decision_and_audit_entry(hw: Hardware) -> None:
    record = hw.place(INFER_HALF)
    assert record.decision.ok and record.decision.pool == "hpc-nvidia"  # type: ignore[union-attr]
    held = record.decision.grant.devices  # type: ignore[union-attr]
    assert 0 < held < 1 and _free(hw)["hpc-nvidia"] == pytest.approx(8 - held)
    stored = hw.decision(record.id)
    assert (stored.id, stored.created_at, stored.decision.decision_id) == (record.id, record.created_at, record.id)
    decision_entries = [e for e in _entries(hw.store) if e["kind"] == "decision"]
    assert [(e["decision_id"], e["outcome"], e["pool"], e["devices"]) for e in decision_entries] == [
        (record.id, "placed", "hpc-nvidia", held)
    ]
    assert hw.verify_audit().ok


def test_refusals_are_recorded_and_hold_nothing(hw: Hardware) -> None:
    before = _free(hw)
    never, blocked = hw.place(NEVER), hw.place(BURST_EU)
    assert not never.decision.ok and never.decision.code == "backend_unsupported"  # type: ignore[union-attr]
    assert not blocked.decision.ok and blocked.decision.burst_blocked  # type: ignore[union-attr]
    assert _free(hw) == before
    assert [r.id for r in hw.decisions()] == [blocked.id, never.id]
    event = hw.store.burst_events()[0]
    assert (event.decision_id, event.verdict, event.residency, event.pool) == (blocked.id, "blocked", "eu-only", "cloud-a100")
    with pytest.raises(SpecError, match="placed nothing"):
        hw.release(never.id)


def test_an_allowed_burst_is_recorded_with_its_own_audit_entry(hw: Hardware) -> None:
    record = hw.place(BURST_OPEN)
    assert record.decision.ok
    event = hw.store.burst_events()[0]
    assert (event.decision_id, event.verdict, event.pool, event.region) == (record.id, "allowed", "cloud-a100", "us")
    kinds = [(e["kind"], e.get("decision_id")) for e in _entries(hw.store) if e["kind"] != "pool"]
    assert kinds == [("burst", record.id), ("decision", record.id)]


def test_full_pools_reject_for_capacity_then_accept_after_a_release(backend: Backend, hw: Hardware) -> None:
    held = [hw.place(TRAIN_AMD) for _ in range(4)]
    hw.apply([Pool("hpc-nvidia", "hpc", "nvidia", 1, "eu")])  # no fallback room left
    hw.place(Workload("fill", accelerator="nvidia", engine="vllm", target="hpc"))
    full = hw.place(TRAIN_AMD)
    assert not full.decision.ok and full.decision.code == "no_capacity"  # type: ignore[union-attr]
    released = hw.release(held[0].id[:8]).record
    assert released.released_at is not None
    again = hw.release(held[0].id)
    assert again.already and again.record.released_at == released.released_at  # nothing written a second time
    assert hw.place(TRAIN_AMD).decision.ok
    assert [e["kind"] for e in _entries(hw.store)].count("release") == 1
    assert violations(backend) == []


class _Unreachable:
    """A policy engine that never answers (the Python around OPA, faked)."""

    def describe(self) -> str:
        return "nowhere"

    def confirm(self) -> Any:
        raise PolicyUnavailable("OPA at nowhere is not reachable; nothing was placed")


def test_a_failing_policy_writes_nothing_and_holds_no_lock(backend: Backend, hw: Hardware) -> None:
    before = [backend.count(t) for t in ("decisions", "audit_log")]
    failing = Hardware(hw.home, store=backend.open(), policy=_Unreachable())  # type: ignore[arg-type]
    try:
        with pytest.raises(PolicyUnavailable):
            failing.place(TRAIN_AMD)
    finally:
        failing.close()
    assert [backend.count(t) for t in ("decisions", "audit_log")] == before
    assert hw.place(TRAIN_AMD).decision.ok


def test_a_write_the_database_refuses_leaves_no_partial_rows(backend: Backend, hw: Hardware) -> None:
    """A placement on a pool the store does not know breaks a foreign key: nothing is kept."""
    ghost = Pool("ghost", "hpc", "amd", 2, "eu")
    prepared = hw.engine.prepare(TRAIN_AMD, [ghost])
    decided = prepared.decide([Capacity(2)], hw.tables)
    state = hw.store.rows()
    before = [backend.count(t) for t in ("decisions", "allocations", "audit_log")]
    with pytest.raises(StateError, match="nothing was written"):
        ghostly = Snapshot(state.version, state.fleet_version, (PoolState(ghost, 2.0, Capacity(2)),))
        commit.place(hw.store, prepared, decided, ghostly, Capacities(hw.tables), source="exa-test")
    assert [backend.count(t) for t in ("decisions", "allocations", "audit_log")] == before
    assert violations(backend) == []


def test_concurrent_placers_never_oversubscribe(backend: Backend, opa_home: Path) -> None:
    setup = open_hardware(backend, opa_home)
    setup.apply([Pool("hpc-mi300", "hpc", "amd", 5, "eu")])
    setup.close()
    outcomes: list[bool] = []

    def placer() -> None:
        mine = open_hardware(backend, opa_home)
        try:
            outcomes.extend(mine.place(TRAIN_AMD).decision.ok for _ in range(4))
        finally:
            mine.close()

    threads = [threading.Thread(target=placer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(outcomes) == [False] * 11 + [True] * 5
    assert violations(backend) == []


def test_concurrent_placers_never_grant_a_device_share_core_or_mib_twice(backend: Backend, opa_home: Path) -> None:
    """Placers racing over pools of nodes (one listing nodes a second one also lists), a shared
    pool, gangs, CPU and memory, releasing as they go: nothing on any node is ever held twice."""
    named = tuple(Node(f"gpu-{i}", 4, cpu=16, memory="64Gi") for i in range(3))
    setup = open_hardware(backend, opa_home)
    setup.apply(
        [
            Pool("batch", "hpc", "nvidia", 12, "eu", cost_per_hour=1.0, nodes=named, partition="batch"),
            Pool("debug", "hpc", "nvidia", 8, "eu", cost_per_hour=1.5, nodes=named[1:], partition="debug"),
            Pool("t4", "hpc", "nvidia", 2, "eu", model="t4", cost_per_hour=0.5, sharing="mps", shares_per_device=4, nodes=1, cpu_per_node=8),
        ]
    )  # fmt: skip
    setup.close()
    asks = [
        Workload("gang", "nvidia", count=2, nodes=2, cpu=6, memory="16Gi"),
        Workload("one", "nvidia", cpu=5, memory="24Gi"),
        Workload("four", "nvidia", count=4, cpu=1),
        Workload("share", "nvidia", fraction=0.3, cpu=1),
        Workload("quarter", "nvidia", fraction=0.25, models=("t4",)),
    ]
    outcomes: list[bool] = []

    def placer(seed: int) -> None:
        mine = open_hardware(backend, opa_home)
        try:
            held: list[str] = []
            for i in range(8):
                record = mine.place(asks[(seed + i) % len(asks)])
                outcomes.append(record.decision.ok)
                if record.decision.ok:
                    held.append(record.id)
                if len(held) > 2:
                    mine.release(held.pop(0))
        finally:
            mine.close()

    threads = [threading.Thread(target=placer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(outcomes) == 32 and any(outcomes)
    assert violations(backend) == []


def test_the_node_invariants_catch_what_is_held_twice() -> None:
    """The check the concurrency tests rely on finds a device, a share, a core and a MiB held twice."""
    named = tuple(Node(f"gpu-{i}", 2, cpu=4, memory=1024) for i in range(2))
    pools = {
        "a": Pool("a", "hpc", "nvidia", 4, "eu", nodes=named),
        "b": Pool("b", "hpc", "nvidia", 2, "eu", nodes=named[:1]),
        "s": Pool("s", "hpc", "nvidia", 2, "eu", sharing="mps", shares_per_device=4, nodes=2),
    }
    sound = [("a", "gpu-0", 0, None, 1.0, None), ("b", "gpu-0", 1, None, 1.0, None), ("s", "s-0", 0, None, 0.75, 3), ("s", "s-1", 0, None, 0.25, 1)]
    assert node_violations(pools, sound, [("a", "gpu-0", 2000, 512), ("b", "gpu-0", 2000, 512)]) == []
    twice = [*sound, ("b", "gpu-0", 0, None, 1.0, None), ("s", "s-0", 0, None, 0.5, 2), ("a", "gpu-1", 2, None, 1.0, None)]
    assert node_violations(pools, twice, [("a", "gpu-0", 3000, 512), ("b", "gpu-0", 2000, 1024)]) == [
        "node gpu-1: device 2 beyond its 2 devices",
        "node gpu-0: device 0 held whole and 1 more time(s)",
        "node s-0: device 0 shared beyond its shares",
        "node gpu-0: grants hold 5000 CPU milli of 4000",
        "node gpu-0: grants hold 1536 MiB of 1024",
    ]


# -- reading back ----------------------------------------------------------------------------


def test_decisions_are_most_recent_first_and_found_by_unique_prefix(hw: Hardware) -> None:
    made = [hw.place(w) for w in (TRAIN_AMD, NEVER, INFER_HALF)]
    assert [r.id for r in hw.decisions()] == [r.id for r in reversed(made)]
    assert [r.id for r in hw.decisions(limit=1)] == [made[-1].id]
    assert hw.decision(made[0].id[:10]).id == made[0].id
    with pytest.raises(NotFoundError, match="ids are hexadecimal"):
        hw.decision("zz'; --")
    with pytest.raises(NotFoundError, match="no decision"):
        hw.decision("f" * 32)
    ids = [r.id for r in made]
    while not (shared := sorted({i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1})):
        ids.append(hw.place(NEVER).id)  # 17 ids at most before two share a first digit
    with pytest.raises(SpecError, match="ambiguous"):  # bad input (exit 2), not "not found"
        hw.decision(shared[0])


def test_a_job_id_is_recorded_with_an_audit_entry(hw: Hardware) -> None:
    record = hw.place(TRAIN_AMD)
    updated = hw.set_job(record.id[:8], "4242", scheduler="slurm")
    assert (updated.job_id, hw.decision(record.id).job_id) == ("4242", "4242")
    last = _entries(hw.store)[-1]
    assert (last["kind"], last["source"], last["scheduler"], last["job_id"]) == ("submit", "exa-hardware", "slurm", "4242")


def test_one_job_per_placement_and_none_for_a_released_one(hw: Hardware) -> None:
    record = hw.place(TRAIN_AMD)
    hw.set_job(record.id, "1", scheduler="slurm")
    with pytest.raises(SpecError, match="not a live placement without a job"):
        hw.set_job(record.id, "2", scheduler="slurm")
    other = hw.place(TRAIN_AMD)
    hw.release(other.id)
    with pytest.raises(SpecError, match="not a live placement without a job"):
        hw.set_job(other.id, "3", scheduler="slurm")
    assert hw.decision(record.id).job_id == "1" and hw.decision(other.id).job_id is None


def test_devices_the_scheduler_holds_for_others_are_not_free(hw: Hardware) -> None:
    mine = hw.place(TRAIN_AMD)  # one MI300 device, submitted below
    hw.set_job(mine.id, "10", scheduler="slurm")
    assert _free(hw)["hpc-mi300"] == 3
    # Slurm reports 3 busy: ours (submitted) and 2 held by jobs this layer never placed.
    held = hw.record_usage({"hpc-mi300": 3}, scheduler="slurm")
    assert held == {"hpc-mi300": 2} and _free(hw)["hpc-mi300"] == 1
    entries = _entries(hw.store)
    assert (entries[-1]["kind"], entries[-1]["held_outside"]) == ("capacity", 2)
    # An unchanged report writes nothing; the scheduler draining frees the devices again.
    size = len(entries)
    hw.record_usage({"hpc-mi300": 3}, scheduler="slurm")
    assert len(_entries(hw.store)) == size
    hw.record_usage({"hpc-mi300": 1}, scheduler="slurm")
    assert _free(hw)["hpc-mi300"] == 3
    with pytest.raises(NotFoundError):
        hw.record_usage({"no-such-pool": 1}, scheduler="slurm")


# -- the audit log ---------------------------------------------------------------------------


def test_the_audit_log_is_append_only_and_refuses_a_fork(backend: Backend, hw: Hardware) -> None:
    hw.place(TRAIN_AMD)
    rows = hw.store.audit_rows()
    assert audit.verify_chain(rows).ok and len(rows) == 4
    with backend.raw() as db:
        for statement in ("UPDATE audit_log SET kind = 'x'", "DELETE FROM audit_log WHERE seq = 1"):
            with pytest.raises(APPEND_ONLY_ERRORS):
                db.execute(statement)
        if backend.name == "postgres":
            with pytest.raises(psycopg.Error):
                db.execute("TRUNCATE audit_log")
        # A writer racing past the lock, linking to the same predecessor, is refused outright.
        fork = audit.next_row(rows[-2], {"kind": "fork"})
        param = "?" if backend.name == "sqlite" else "%s"
        with pytest.raises(APPEND_ONLY_ERRORS):
            db.execute(
                f"INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) "
                f"VALUES ({', '.join([param] * 7)})",
                (fork.seq + 1, fork.prev_hash, fork.entry_hash, fork.canonical, "x", "fork", "now"),
            )
    assert hw.store.audit_rows() == rows


# -- PostgreSQL: retries and lost connections ------------------------------------------------


def _pg(store: PostgresStore, opa_home: Path) -> Hardware:
    return Hardware(opa_home, store=store, policy=ManagedPolicy(opa_home))


@pytest.mark.postgres
def test_postgres_a_racing_append_is_caught_by_unique_and_retried(tmp_path: Path, opa_home: Path) -> None:
    """Another writer appends between this transaction's head read and its insert (it skips the
    lock): UNIQUE(seq) refuses the second, which retries from the new head."""
    with fresh_backend("postgres", tmp_path) as backend:
        raced: list[int] = []

        class Racing(PostgresStore):
            def _execute(self, sql: str, params: Any = ()) -> Any:
                cursor = super()._execute(sql, params)
                if sql.startswith("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC") and not raced:
                    # Right after this transaction read the audit head, another writer appends.
                    with backend.raw() as db:
                        head = db.execute("SELECT seq, prev_hash, entry_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
                        row = audit.next_row(audit.AuditRow(head[0], bytes(head[1]), bytes(head[2]), bytes(head[3])), {"kind": "racer"})
                        db.execute(
                            "INSERT INTO audit_log (seq, prev_hash, entry_hash, entry, source, kind, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            (row.seq, row.prev_hash, row.entry_hash, row.canonical, "racer", "racer", utc_now()),
                        )
                    raced.append(row.seq)
                return cursor

        store = PostgresStore(backend.target)
        _pg(store, opa_home).apply(FLEET)
        racing = Racing(backend.target)
        hw = _pg(racing, opa_home)
        record = hw.place(TRAIN_AMD)
        assert raced and racing.conflicts_retried == 1
        assert backend.count("decisions") == 1 and record.decision.ok
        entries = _entries(store)
        assert [e["kind"] for e in entries[-2:]] == ["racer", "decision"]
        assert audit.verify_chain(store.audit_rows()).ok
        store.close()
        racing.close()


@pytest.mark.postgres
def test_postgres_a_session_cut_mid_transaction_is_reconnected_and_rerun(tmp_path: Path, opa_home: Path) -> None:
    with fresh_backend("postgres", tmp_path) as backend:
        cut: list[int] = []
        holder: list[PostgresStore] = []

        def clock() -> str:
            # The clock is read inside the placement's transaction: cut the session there, once.
            store = holder[0] if holder else None
            if store is not None and store._conn is not None and store._conn.info.transaction_status != 0 and not cut:
                cut.append(store._conn.info.backend_pid)
                with backend.raw() as db:
                    db.execute("SELECT pg_terminate_backend(%s)", (cut[0],))
            return utc_now()

        store = PostgresStore(backend.target, clock=clock)
        hw = _pg(store, opa_home)
        hw.apply(FLEET)
        holder.append(store)
        record = hw.place(TRAIN_AMD)
        assert cut and store.reconnects == 1
        assert [r.id for r in store.decision_rows()] == [record.id]
        assert violations(backend) == []
        store.close()


class _LosesCommitReplies(PostgresStore):
    """The server commits, then the connection drops before the reply arrives (once per flag)."""

    lose_next = False

    def _commit(self) -> None:
        super()._commit()
        if self.lose_next:
            self.lose_next = False
            assert self._conn is not None
            self._conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.mark.postgres
@pytest.mark.parametrize("operation", ["place", "release", "set_job", "apply_pools"])
def test_postgres_a_lost_commit_reply_is_not_written_twice(tmp_path: Path, opa_home: Path, operation: str) -> None:
    with fresh_backend("postgres", tmp_path) as backend:
        store = _LosesCommitReplies(backend.target)
        hw = _pg(store, opa_home)
        hw.apply(FLEET)
        first = hw.place(TRAIN_AMD)
        store.lose_next = True
        act: dict[str, Callable[[], object]] = {
            "place": lambda: hw.place(TRAIN_AMD),
            "release": lambda: hw.release(first.id),
            "set_job": lambda: hw.set_job(first.id, "7", scheduler="slurm"),
            "apply_pools": lambda: hw.apply([Pool("hpc-mi300", "hpc", "amd", 9, "eu")]),
        }
        entries = backend.count("audit_log")
        result = act[operation]()
        assert result is not None and not store.lose_next
        assert backend.count("audit_log") == entries + 1  # written once, not retried on top
        assert store.reconnects == 1
        assert violations(backend) == []
        store.close()


@pytest.mark.postgres
def test_postgres_an_unreachable_server_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    url = "postgresql://exa:s3cret@127.0.0.1:1/exa"
    with pytest.raises(StateError, match=r"postgresql://exa@127.0.0.1:1/exa: the state database could not be reached") as info:
        PostgresStore(url, attempts=2)
    assert "s3cret" not in str(info.value) and redacted(url) == "postgresql://exa@127.0.0.1:1/exa"


@pytest.mark.postgres
def test_postgres_a_wrong_password_fails_at_once(tmp_path: Path) -> None:
    with fresh_backend("postgres", tmp_path) as backend:
        url = make_conninfo(backend.target, password="wrong")
        with pytest.raises(StateError, match="password authentication failed"):
            PostgresStore(url, attempts=8)


@pytest.mark.postgres
def test_postgres_the_cli_works_on_exa_db_url(tmp_path: Path) -> None:
    """``EXA_DB_URL`` switches the real ``exa`` CLI to PostgreSQL: place, list, verify."""
    with fresh_backend("postgres", tmp_path) as backend:
        home, env = tmp_path / "exa-home", backend.env()
        try:
            run_exa(home, "hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd",
                    "--count", "4", "--region", "eu", check=True, env=env)  # fmt: skip
            placed = run_exa(home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", check=True, env=env)
            assert "hpc-mi300" in placed.stdout
            assert "✓ audit log verifies: 2 entries" in run_exa(home, "audit", "verify", check=True, env=env).stdout
            assert not (home / "state.db").exists()
            assert backend.count("decisions") == 1
        finally:
            run_exa(home, "opa", "stop", env=env)


# -- what a read costs: what is there now, not the whole history -----------------------------------


def _placed(txn: Any, ident: str, pool: str, *, release: bool) -> None:
    """A placement of one whole device of ``pool`` through the store's narrow API (released when
    ``release``): rows only, as the core writes them."""
    from examlops_policy.model import Holding
    from examlops_policy.store.api import NewDecision

    now = txn.now()
    txn.add_decision(NewDecision(
        id=ident, created_at=now, workload="w", outcome="placed", document="{}", record_digest="sha256:0", input_digest="sha256:0",
        policy_revision="sha256:0", opa_version="1", verdicts="fresh", fleet_revision=None, verdict_set="k", residency="open",
        fraction=1.0, note=None, pool=pool, devices=1.0, holdings=(Holding(0),), share=1.0,
    ))  # fmt: skip
    if release:
        txn.release(ident, now)


def _steps(store: Any, read: Callable[[], object]) -> int:
    """The SQLite virtual-machine instructions ``read`` runs (about the rows it visits)."""
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0

    store._db.set_progress_handler(count, 1)
    try:
        read()
    finally:
        store._db.set_progress_handler(None, 1)
    return counted[0]


def _history(store: Any, pool: str, first: int, count: int) -> None:
    """``count`` placements on ``pool``, every one released (ids from ``first``)."""
    store.transaction(lambda txn: [_placed(txn, f"{i:032x}", pool, release=True) for i in range(first, first + count)], landed=lambda txn: None)


def test_a_decision_found_by_an_id_prefix_and_a_pools_live_grants_cost_the_same_whatever_the_history(tmp_path: Path) -> None:
    """Looking a decision up by a prefix of its id searches the primary key (a range), and a
    pool's live grants are read from its live allocations: neither grows with the decisions and
    released grants the state has gathered (LIKE scanned the decisions; the holdings were read
    for every grant the pool ever had)."""
    from examlops_policy.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "state.db")
    try:
        store.transaction(lambda txn: txn.add_pool("gpu", "{}", 8, 1), landed=lambda txn: None)
        live = "f" * 31 + "e"
        store.transaction(lambda txn: _placed(txn, live, "gpu", release=False), landed=lambda txn: None)
        _history(store, "gpu", 1, 50)

        def costs() -> tuple[int, int]:
            found = _steps(store, lambda: store.decision_row(live[:8]))
            held = _steps(store, lambda: store.pool_row("gpu"))
            assert store.decision_row(live[:8]).id == live
            assert [h.decision_id for h in store.pool_row("gpu")[1]] == [live]
            return found, held

        small = costs()
        _history(store, "gpu", 51, 3000)
        large = costs()
        assert large[0] <= small[0] + 50, (small, large)
        assert large[1] <= small[1] + 50, (small, large)
        # Prefixes still find, refuse and tell ambiguity apart as before.
        assert store.decision_row(f"{7:032x}").id == f"{7:032x}"
        with pytest.raises(SpecError, match="ambiguous"):
            store.decision_row("0000")
        with pytest.raises(NotFoundError):
            store.decision_row("fffffffffe")
        with pytest.raises(NotFoundError, match="hexadecimal"):
            store.decision_row("%")
    finally:
        store.close()

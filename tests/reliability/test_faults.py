"""Faults: the policy engine killed, the database locked, a placer killed mid-transaction and
PostgreSQL restarted, each in the middle of work. Placements fail closed with a clear error or
carry on; nothing half-written survives; the chain verifies."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from examlops_policy.errors import PolicyUnavailable, StateError
from examlops_policy.opa import stop_server
from reliability.backends import Backend, fresh_backend, managed_postgres, restart_postgres
from reliability.harness import (
    FLEET,
    SPAWN,
    WORKLOADS,
    admit_until_killed,
    hang_inside_transaction,
    kill_opa,
    opa_pid,
    open_hardware,
    place_forever,
    prepare,
    run_load,
    violations,
    wait_for_decisions,
)

BURST = WORKLOADS[3]


@pytest.fixture()
def own_opa(tmp_path: Path) -> Iterator[Path]:
    """A state directory with an OPA of its own (started on demand), for tests that kill it."""
    home = tmp_path / "own-opa"
    yield home
    if (home / "opa" / "server.json").is_file():
        with suppress(ProcessLookupError):
            kill_opa(home, signal.SIGTERM)
    stop_server(home)


# -- OPA killed ------------------------------------------------------------------------------


@pytest.mark.opa
def test_opa_killed_placement_fails_closed_then_a_new_opa_serves(backend: Backend, own_opa: Path) -> None:
    """A placer asking a dead OPA by its address fails closed, writing nothing; the managed placer
    finds the server dead before it decides and starts a new one."""
    from examlops_policy.hardware import Hardware
    from examlops_policy.opa.transport import OpaTransport
    from examlops_policy._policy import OpaPolicy

    hw = open_hardware(backend, own_opa)
    try:
        hw.apply(FLEET)
        assert hw.place(BURST).decision.ok
        token = (own_opa / "opa" / "token").read_text(encoding="ascii").strip()
        killed = kill_opa(own_opa)
        before = backend.count("decisions"), backend.count("audit_log"), backend.count("allocations")
        by_address = Hardware(own_opa, store=backend.open(), policy=OpaPolicy(OpaTransport.from_url(f"unix://{own_opa}/opa/opa.sock", token=token)))
        try:
            with pytest.raises(PolicyUnavailable, match="not reachable; nothing was placed"):
                by_address.place(BURST)
        finally:
            by_address.close()
        assert (backend.count("decisions"), backend.count("audit_log"), backend.count("allocations")) == before
        assert hw.place(BURST).decision.ok
        assert opa_pid(own_opa) != killed
    finally:
        hw.close()
    assert violations(backend) == []


@pytest.mark.opa
def test_opa_killed_during_a_concurrent_run(backend: Backend, own_opa: Path, tmp_path: Path) -> None:
    """Placers asking while it dies get PolicyUnavailable (nothing written); all carry on with a new OPA."""
    killed: list[int] = []

    def kill_midway() -> None:
        wait_for_decisions(backend, 30)
        killed.append(kill_opa(own_opa))

    run = run_load(backend, own_opa, tmp_path, procs=4, per_proc=40, during=kill_midway)
    assert killed and opa_pid(own_opa) != killed[0]
    assert set(run.errors) <= {"PolicyUnavailable"}, [s for r in run.reports for s in r.error_samples]
    assert all(r.ok_after_last_error > 0 for r in run.reports)
    assert violations(backend, run.reports) == []


# -- database locked -------------------------------------------------------------------------


@contextmanager
def peer_holding_the_write_lock(backend: Backend, opa_home: Path) -> Iterator[threading.Event]:
    """Another placer inside its write transaction (writing its decision) until the returned event
    is set; it then fails, so it writes nothing."""
    inside, leave = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def append_slowly(kind: str, body: Any, *, source: str) -> None:
        inside.set()
        leave.wait(30)
        raise RuntimeError("peer gives up")

    def peer() -> None:
        peer_hw = open_hardware(backend, opa_home)  # in this thread: a SQLite connection stays in its own
        store: Any = peer_hw.store
        store._append_audit = append_slowly
        try:
            peer_hw.place(BURST)
        except RuntimeError:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)
        finally:
            peer_hw.close()

    thread = threading.Thread(target=peer)
    thread.start()
    assert inside.wait(30)
    try:
        yield leave
    finally:
        leave.set()
        thread.join(30)
    assert not errors


@contextmanager
def outside_session_locking(backend: Backend, opa_home: Path) -> Iterator[threading.Event]:
    """A session outside exa holding locks on the tables (SQLite: the write lock)."""
    with backend.raw() as db:
        if backend.name == "sqlite":
            db.execute("BEGIN IMMEDIATE")
        else:
            db.execute("BEGIN")
            db.execute("LOCK TABLE pools, decisions, allocations IN ACCESS EXCLUSIVE MODE")
        try:
            yield threading.Event()
        finally:
            db.execute("ROLLBACK")


HOLDERS = {"peer-placer": peer_holding_the_write_lock, "outside-session": outside_session_locking}


@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_locked_database_bounded_retries_then_a_clear_error(backend: Backend, opa_home: Path, holder: str) -> None:
    hw = open_hardware(backend, opa_home, lock_timeout_s=0.2, attempts=3)
    try:
        hw.apply(FLEET)
        before = backend.count("decisions"), backend.count("audit_log")
        with HOLDERS[holder](backend, opa_home):
            began = time.monotonic()
            with pytest.raises(StateError, match=r"stayed locked.*gave up after 3 attempts, nothing was written"):
                hw.place(BURST)
            assert time.monotonic() - began < 5
        assert hw.store.conflicts_retried == 2  # type: ignore[attr-defined]
        assert (backend.count("decisions"), backend.count("audit_log")) == before
        assert hw.place(BURST).decision.ok
    finally:
        hw.close()
    assert violations(backend) == []


def test_a_lock_held_briefly_is_waited_out(backend: Backend, opa_home: Path) -> None:
    hw = open_hardware(backend, opa_home, lock_timeout_s=0.1, attempts=8)
    try:
        hw.apply(FLEET)
        with peer_holding_the_write_lock(backend, opa_home) as leave:
            threading.Timer(0.4, leave.set).start()
            record = hw.place(BURST)
        assert record.decision.ok
        assert hw.store.conflicts_retried >= 1  # type: ignore[attr-defined]
        assert backend.count("decisions") == 1
    finally:
        hw.close()
    assert violations(backend) == []


# -- a placer killed -------------------------------------------------------------------------


def test_placer_killed_mid_transaction_leaves_no_partial_rows(backend: Backend, opa_home: Path) -> None:
    prepare(backend, opa_home)
    inside = SPAWN.Event()
    placer = SPAWN.Process(target=hang_inside_transaction, args=(backend, str(opa_home), 3, inside), daemon=True)
    placer.start()
    try:
        assert inside.wait(60), "the placer never reached its fourth transaction"
    finally:
        placer.kill()
        placer.join(10)
    # Its fourth placement had written a decision, an allocation, a burst event and an audit
    # entry when it died: none of them survives.
    assert [backend.count(t) for t in ("decisions", "allocations", "burst_events")] == [3, 3, 3]
    assert violations(backend) == []
    hw = open_hardware(backend, opa_home, lock_timeout_s=5)
    try:
        assert hw.place(BURST).decision.ok  # the dead placer's lock is gone
    finally:
        hw.close()
    assert violations(backend) == []


def test_placer_killed_at_random_moments(backend: Backend, opa_home: Path, tmp_path: Path) -> None:
    prepare(backend, opa_home)
    told: set[str] = set()
    for round_ in range(3):
        out, started = tmp_path / f"told-{round_}.txt", SPAWN.Event()
        placer = SPAWN.Process(target=place_forever, args=(backend, str(opa_home), str(out), started), daemon=True)
        placer.start()
        try:
            assert started.wait(60)
            time.sleep(random.uniform(0.05, 0.5))
        finally:
            placer.kill()
            placer.join(10)
        told |= set(out.read_text(encoding="utf-8").split())
        with backend.raw() as db:
            stored = {r[0] for r in db.execute("SELECT id FROM decisions").fetchall()}
        assert told <= stored, "a decision the placer was handed is not stored"
        assert len(stored - told) <= round_ + 1, "more than one unreported decision per kill"
        assert violations(backend) == []


def test_admitter_killed_during_a_preemption_places_the_victim_once(backend: Backend, opa_home: Path) -> None:
    """Issue 32, 2, with faults: an admitter preempting a low-priority workload for a high one is
    killed at a random moment (marking, releasing and admitting, placing the victim again); the
    next passes finish what it left, and the preemptor's release admits no copy: the victim has
    one live placement or one waiting row, never both, never two."""
    from examlops_policy.model import Pool, Workload

    hw = open_hardware(backend, opa_home)
    try:
        hw.apply([
            Pool("nv-spot", "hpc", "nvidia", 2, "eu", cost_per_hour=0.5, carbon_factor=10, spot=True),
            Pool("nv-od", "hpc", "nvidia", 2, "eu", cost_per_hour=2.0, carbon_factor=10),
        ])  # fmt: skip
        hw.place(Workload("victim", "nvidia", count=2, priority="low", spot="allow"))
    finally:
        hw.close()
    # The killed process queues the boss itself: the preemption happens in its place --queue.
    started = SPAWN.Event()
    admitter = SPAWN.Process(target=admit_until_killed, args=(backend, str(opa_home), started), daemon=True)
    admitter.start()
    try:
        assert started.wait(60)
        time.sleep(random.uniform(0.05, 1.5))
    finally:
        admitter.kill()
        admitter.join(10)
    hw = open_hardware(backend, opa_home)
    try:
        if not any(r.workload == "boss" for r in hw.store.queue_rows(("queued", "admitted"))):
            # Killed before the boss was queued: queue it now, as the next caller would.
            hw.place(Workload("boss", "nvidia", count=2, priority="high", spot="require"), queue=True)
        hw.admit()
        hw.admit()
        boss = [g for g in hw.store.live_grants() if g.workload == "boss"]
        assert len(boss) == 1
        hw.release(boss[0].id)
        hw.admit()
        live = [g for g in hw.store.live_grants() if g.workload == "victim"]
        waiting = [r for r in hw.store.queue_rows(("queued",)) if r.workload == "victim"]
        assert len(live) + len(waiting) == 1, (live, waiting)
        report = hw.verify_audit()
        assert report.ok, report.problems
    finally:
        hw.close()
    assert violations(backend) == []


# -- PostgreSQL restarted --------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_restarted_during_a_run(opa_home: Path, tmp_path: Path) -> None:
    """Sessions are cut mid-transaction; placers reconnect and carry on; nothing lost or doubled."""
    with fresh_backend("postgres", tmp_path) as backend:
        if not managed_postgres():
            pytest.skip("restarting needs the cluster scripts/pg-up manages")

        def restart_midway() -> None:
            wait_for_decisions(backend, 30)
            restart_postgres()

        run = run_load(backend, opa_home, tmp_path, procs=4, per_proc=40, during=restart_midway)
        assert run.errors == {}, [s for r in run.reports for s in r.error_samples]
        assert run.reconnects >= 1
        assert violations(backend, run.reports) == []

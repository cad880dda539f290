"""Leases end on time (issue 25, item 2), on SQLite and on PostgreSQL, through the library and the CLI.

A placement with a lease that is neither submitted nor renewed holds its devices until the lease
ends, and not a moment longer: every read sees it ended from then on (pools, a pool's devices, a dry
run, the decision and the decision list, FinOps) without any write; the write that then releases it
stamps the lease's end as its release, so the ledger bills nothing after it; the lease is counted
from the commit that records the placement. The store's clock is a test clock here, so nothing
sleeps; the CLI cases use the real clock and a lease of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Placement, Pool, Rejection, Workload
from examlops_policy._core import leases
from reliability.backends import Backend
from tests.backend_support import backend, clocked  # noqa: F401 - fixtures
from tests.clock_support import T0, Clock
from tests.conftest import EXA, exa_json, run_exa, shared_opa_env

MI300 = Pool("mi300", "hpc", "amd", 2, "eu", cost_per_hour=2.0, carbon_factor=100.0)
TRAIN = Workload("train", "amd", engine="vllm", count=2)
pytestmark = pytest.mark.hw_pools(MI300)


def stored(backend: Backend, ident: str) -> tuple[Any, ...]:
    """(released_at, lease_expires_at) as the store holds them, read under the product."""
    with backend.raw() as db:
        return tuple(db.execute("SELECT released_at, lease_expires_at FROM decisions WHERE id = '%s'" % ident).fetchone())


def kinds(hw: Hardware) -> list[str]:
    return [json.loads(row.canonical)["kind"] for row in hw.store.audit_rows()]


def test_the_lease_is_counted_from_the_commit(clocked: tuple[Hardware, Clock]) -> None:
    hw, clock = clocked
    record = hw.place(TRAIN, lease=timedelta(seconds=10))
    assert record.created_at == leases.text_of(T0)
    assert record.lease_expires_at == leases.text_of(T0 + timedelta(seconds=10))


def test_every_read_sees_an_ended_lease_ended_before_any_write(clocked: tuple[Hardware, Clock], backend: Backend) -> None:
    hw, clock = clocked
    record = hw.place(TRAIN, lease=timedelta(minutes=10))
    end = leases.text_of(T0 + timedelta(minutes=10))
    clock.move(timedelta(minutes=9))
    assert {s.pool.name: s.free for s in hw.pools()} == {"mi300": 0}
    assert isinstance(hw.what_if(TRAIN), Rejection)

    clock.move(timedelta(days=3))  # a quiet system: no write for days
    audited = kinds(hw)
    assert {s.pool.name: (s.free, s.capacity.whole) for s in hw.pools()} == {"mi300": (2, 2)}
    assert hw.pool("mi300").holdings == () and hw.pool("mi300").devices == ("free", "free")
    assert isinstance(hw.what_if(TRAIN), Placement)
    read = hw.decision(record.id)
    assert (read.released_at, read.lease_ended) == (end, True)
    page = hw.decision_page().decisions
    assert [(d.released_at, d.lease_ended) for d in page] == [(end, True)]
    # FinOps bills the ten minutes held, not the days until some write: 2 devices x 1/6 h x $2.
    assert hw.finops().cost == pytest.approx(2 * 2.0 * 10 / 60)
    # ... and none of that wrote anything.
    assert stored(backend, record.id) == (None, end)
    assert kinds(hw) == audited

    # The next write releases it, stamped with the lease's end; the ledger does not move.
    again = hw.place(TRAIN)
    assert isinstance(again.decision, Placement)
    assert stored(backend, record.id) == (end, end)
    expired = [json.loads(r.canonical) for r in hw.store.audit_rows() if json.loads(r.canonical)["kind"] == "expired"]
    assert [(e["decision_id"], e["released_at"]) for e in expired] == [(record.id, end)]
    assert hw.finops().cost == pytest.approx(2 * 2.0 * 10 / 60)
    assert hw.verify_audit().ok


def test_renew_after_the_lease_ended_says_when_and_releases_it(clocked: tuple[Hardware, Clock], backend: Backend) -> None:
    hw, clock = clocked
    record = hw.place(TRAIN, lease=timedelta(minutes=10))
    clock.move(timedelta(minutes=5))
    renewed = hw.renew(record.id, timedelta(minutes=10))  # before the end: moved, from now
    assert renewed.lease_expires_at == leases.text_of(T0 + timedelta(minutes=15))
    clock.move(timedelta(minutes=11))
    end = leases.text_of(T0 + timedelta(minutes=15))
    with pytest.raises(SpecError, match=f"is not a live placement: its lease ended at {end} and its devices were released; nothing was renewed"):
        hw.renew(record.id, timedelta(hours=1))
    # Saying so wrote the release it found (stamped at the lease's end), and nothing else.
    assert stored(backend, record.id) == (end, end)
    assert kinds(hw)[-2:] == ["renew", "expired"]
    with pytest.raises(SpecError, match="its lease ended at"):
        hw.set_job(record.id, "42", scheduler="slurm")
    released = hw.release(record.id)
    assert released.already and released.record.lease_ended and released.record.released_at == end


def test_a_retry_of_a_placement_whose_lease_ended_says_so(clocked: tuple[Hardware, Clock]) -> None:
    hw, clock = clocked
    first = hw.place(TRAIN, request_id="job-7", lease=timedelta(minutes=1))
    clock.move(timedelta(minutes=2))
    retry = hw.place(TRAIN, request_id="job-7")
    assert retry.id == first.id
    assert (retry.released_at, retry.lease_ended) == (first.lease_expires_at, True)


def test_a_submitted_placement_keeps_its_devices_past_its_lease(clocked: tuple[Hardware, Clock]) -> None:
    hw, clock = clocked
    record = hw.place(TRAIN, lease=timedelta(minutes=1))
    hw.set_job(record.id, "42", scheduler="slurm")
    clock.move(timedelta(hours=1))
    assert {s.pool.name: s.free for s in hw.pools()} == {"mi300": 0}
    assert hw.decision(record.id).released_at is None
    assert isinstance(hw.place(TRAIN).decision, Rejection)


# -- the command line, on the real clock ------------------------------------------------------------


def test_the_cli_sees_an_ended_lease_ended_and_bills_only_the_lease(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "mi300", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
            "--cost-per-hour", "2.0", check=True)  # fmt: skip
    placed = exa_json(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--count", "2", "--lease", "1s", "--request-id", "r1")
    assert leases.instant(placed["lease_expires_at"]) - leases.instant(placed["created_at"]) == timedelta(seconds=1)
    time.sleep(1.2)
    pools = exa_json(exa_home, "hardware", "pools")
    assert [(p["name"], p["free"]) for p in pools] == [("mi300", 2)]
    dry = run_exa(exa_home, "hardware", "place", "next", "--accelerator", "amd", "--count", "2", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith("✓ next → pool mi300"), dry.stdout + dry.stderr
    listed = run_exa(exa_home, "hardware", "decisions", check=True).stdout
    assert "lease-ended" in listed
    renew = run_exa(exa_home, "hardware", "renew", placed["id"], "--lease", "1h")
    assert renew.returncode == 2 and f"its lease ended at {placed['lease_expires_at']}" in renew.stderr, renew.stderr
    retry = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--count", "2", "--request-id", "r1")
    assert retry.returncode == 2 and retry.stdout == "", retry.stdout  # it places nothing now: not reported as placed
    assert f"request id 'r1' was placed by decision {placed['id'][:12]} (train → pool mi300) and its lease ended at {placed['lease_expires_at']}" in retry.stderr
    # Billed one second, whenever FinOps is asked.
    time.sleep(0.5)
    totals = exa_json(exa_home, "finops", "cost")["totals"]
    assert totals["cost"] == pytest.approx(2 * 2.0 / 3600, abs=2e-6)


def test_concurrent_writers_release_an_ended_lease_once(exa_home: Path) -> None:
    """Several exa processes write at once after a lease ended: it is released once (one expired
    entry), nothing is oversubscribed, the chain verifies."""
    run_exa(exa_home, "hardware", "add-pool", "mi300", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu", check=True)
    placed = exa_json(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--count", "2", "--lease", "1s")
    time.sleep(1.2)
    env = {**os.environ, "EXA_HOME": str(exa_home), **shared_opa_env()}
    procs = [
        subprocess.Popen([str(EXA), "hardware", "place", f"w{i}", "--accelerator", "amd", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]  # fmt: skip
    outcomes = [json.loads(p.communicate(timeout=120)[0])["outcome"] for p in procs]
    assert sorted(outcomes) == ["placed", "placed", "rejected", "rejected"]
    hw = Hardware(exa_home, policy=ManagedPolicy(exa_home))
    try:
        expired = [json.loads(r.canonical) for r in hw.store.audit_rows() if json.loads(r.canonical)["kind"] == "expired"]
        assert [(e["decision_id"], e["released_at"]) for e in expired] == [(placed["id"], placed["lease_expires_at"])]
        assert hw.verify_audit().ok
        assert sum(s.free for s in hw.pools()) == 0
    finally:
        hw.close()

"""Pool lifecycle (issue 25, item 8), on SQLite and on PostgreSQL, through the library and the CLI.

Drain (no new grants, live ones kept: the policy denies a drained pool, ``pool_drained``, not_now)
and undrain; remove a pool (now without live grants; when its last live grant ends once it is
drained; refused, naming them, otherwise); shrink below live grants refused, naming the grants on
the devices it would drop; ``apply --prune`` removes the pools a file leaves out, all or nothing;
every change audited and previewed (``dry_run``) by the code that makes it, writing nothing.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Placement, Pool, Rejection, Workload
from examlops_policy.store.api import StaleFleet
from examlops_policy._core import commit
from examlops_policy._core.request import Request
from reliability.backends import Backend
from tests.backend_support import backend, hw  # noqa: F401 - fixtures
from tests.clock_support import Clock
from tests.conftest import run_exa

CHEAP = Pool("cheap", "hpc", "amd", 2, "eu", cost_per_hour=1.0)
DEAR = Pool("dear", "hpc", "amd", 2, "eu", cost_per_hour=3.0)
ONE = Workload("one", "amd", engine="vllm")


pytestmark = pytest.mark.hw_pools(CHEAP, DEAR)


def audited(hw: Hardware) -> list[dict[str, Any]]:
    return [json.loads(row.canonical) for row in hw.store.audit_rows()]


def placed_on(hw: Hardware, w: Workload = ONE) -> tuple[str, str]:
    record = hw.place(w)
    assert isinstance(record.decision, Placement), record.decision
    return record.id, record.decision.pool


# -- drain and undrain -------------------------------------------------------------------------------


def test_a_drained_pool_takes_no_new_grants_and_keeps_its_live_ones(hw: Hardware) -> None:
    first, pool = placed_on(hw)
    assert pool == "cheap"
    change = hw.drain("cheap")
    assert (change.action, change.holders) == ("drained", (first,))
    # New work goes elsewhere; the policy says why the cheaper pool was passed over (not now).
    ident, pool = placed_on(hw)
    assert pool == "dear"
    verdict = next(v for v in hw.decision(ident).decision.verdicts if v.pool == "cheap")
    assert [(r.code, r.kind) for r in verdict.reasons] == [("pool_drained", "not_now")]
    # The live grant is kept, and releasing it frees its device on the drained pool.
    assert [h for h in hw.pool("cheap").holdings] and hw.decision(first).released_at is None
    assert not hw.release(first).already
    assert {s.pool.name: s.free for s in hw.pools()}["cheap"] == 2
    assert placed_on(hw)[1] == "dear"
    # Undrained, it takes new grants again.
    assert hw.undrain("cheap").action == "undrained"
    assert placed_on(hw)[1] == "cheap"
    assert [(e["action"], e["pool"]["name"]) for e in audited(hw) if e["kind"] == "pool" and e["action"] in ("drained", "undrained")] == [
        ("drained", "cheap"), ("undrained", "cheap"),
    ]  # fmt: skip
    assert hw.verify_audit().ok


def test_draining_twice_changes_nothing_and_a_dry_run_writes_nothing(hw: Hardware) -> None:
    before = len(audited(hw))
    assert hw.drain("cheap", dry_run=True).action == "drained"
    assert not next(s for s in hw.pools() if s.pool.name == "cheap").pool.drained
    assert len(audited(hw)) == before
    hw.drain("cheap")
    assert hw.drain("cheap").action == "unchanged" and hw.undrain("dear").action == "unchanged"
    assert len(audited(hw)) == before + 1
    with pytest.raises(NotFoundError):
        hw.drain("nowhere")


def test_only_a_drained_pool_left_is_a_shortfall_for_now_not_ineligible(hw: Hardware) -> None:
    hw.drain("cheap")
    hw.drain("dear")
    decision = hw.place(ONE).decision
    assert isinstance(decision, Rejection) and decision.code == "no_capacity"
    # Not "no pool has free capacity": the pools are drained, not full.
    assert decision.reason == "no pool can take one now (2 checked: pool_drained on 2 pools)"


def test_apply_keeps_a_pool_drained_and_a_pool_is_not_registered_drained(hw: Hardware) -> None:
    hw.drain("cheap")
    changes = hw.apply([CHEAP, DEAR])
    assert [c.action for c in changes] == ["unchanged", "unchanged"]
    changes = hw.apply([Pool("cheap", "hpc", "amd", 3, "eu", cost_per_hour=1.0), DEAR])
    assert changes[0].action == "updated" and changes[0].changed_fields == ("count",)
    assert next(s for s in hw.pools() if s.pool.name == "cheap").pool.drained
    with pytest.raises(SpecError, match="a pool is not registered drained"):
        hw.apply([Pool("cheap", "hpc", "amd", 3, "eu", drained=True)])


def test_a_placement_decided_before_a_drain_committed_is_decided_again(hw: Hardware) -> None:
    """Concurrency: a placer that judged the fleet before the drain cannot commit onto the drained
    pool (the fleet changed: it asks again), and its next round goes elsewhere."""
    made = hw.cycle.decide(Request(ONE))
    snap, under, prepared, starts, decided = made.snapshot, made.under, made.prepared, made.starts, made.decision
    assert isinstance(decided, Placement) and decided.pool == "cheap"
    hw.drain("cheap")
    with pytest.raises(StaleFleet):
        commit.place(hw.store, prepared, decided, snap, under.capacities, source="test", starts=starts)
    assert placed_on(hw)[1] == "dear"


# -- remove ------------------------------------------------------------------------------------------


def test_a_pool_without_live_grants_is_removed_and_its_decisions_stay_readable(hw: Hardware) -> None:
    ident, _ = placed_on(hw)
    hw.release(ident)
    assert hw.remove_pool("cheap", dry_run=True).action == "removed"
    assert {s.pool.name for s in hw.pools()} == {"cheap", "dear"}
    assert hw.remove_pool("cheap").action == "removed"
    assert {s.pool.name for s in hw.pools()} == {"dear"}
    with pytest.raises(NotFoundError):
        hw.pool("cheap")
    with pytest.raises(NotFoundError):
        hw.remove_pool("cheap")
    # The decision made on it rebuilds as it was made, and replays.
    record = hw.decision(ident)
    assert isinstance(record.decision, Placement) and record.decision.pool == "cheap"
    assert hw.replay(ident).same
    assert placed_on(hw)[1] == "dear"
    # Registered again under its name, it starts afresh.
    assert hw.add_pool(CHEAP).action == "added"
    assert {s.pool.name: s.free for s in hw.pools()} == {"cheap": 2, "dear": 1}
    assert hw.decision(ident).decision.pool == "cheap"  # type: ignore[union-attr]
    assert hw.verify_audit().ok


def test_removing_a_pool_that_live_grants_hold_is_refused_unless_drained(hw: Hardware) -> None:
    first, _ = placed_on(hw)
    second, _ = placed_on(hw)
    before = audited(hw)
    with pytest.raises(SpecError, match=rf"cannot remove pool 'cheap': 2 live grants hold it \(({first[:12]}|{second[:12]}), .*not drained. Drain first \(exa hardware drain cheap"):
        hw.remove_pool("cheap")
    assert audited(hw) == before and {s.pool.name for s in hw.pools()} == {"cheap", "dear"}
    hw.drain("cheap")
    pending = hw.remove_pool("cheap")
    assert (pending.action, sorted(pending.holders)) == ("removal_pending", sorted([first, second]))
    state = next(s for s in hw.pools() if s.pool.name == "cheap")
    assert state.removing is not None and state.pool.drained
    assert hw.remove_pool("cheap").action == "removal_pending"  # asked again: nothing more
    # It goes when its last live grant ends.
    assert not hw.release(first).pool_removed
    assert "cheap" in {s.pool.name for s in hw.pools()}
    assert hw.release(second).pool_removed
    assert {s.pool.name for s in hw.pools()} == {"dear"}
    removed = [e for e in audited(hw) if e["kind"] == "pool" and e["action"] == "removed"]
    assert [(e["pool"], e["after"]) for e in removed] == [("cheap", second)]
    assert hw.verify_audit().ok


def test_undraining_cancels_a_pending_removal(hw: Hardware) -> None:
    placed_on(hw)
    hw.drain("cheap")
    hw.remove_pool("cheap")
    change = hw.undrain("cheap")
    assert (change.action, change.removal_cancelled) == ("undrained", True)
    state = next(s for s in hw.pools() if s.pool.name == "cheap")
    assert state.removing is None and not state.pool.drained


def test_a_pool_pending_removal_goes_when_its_last_lease_ends(backend: Backend, opa_home: Path) -> None:
    clock = Clock()
    hw = Hardware(opa_home, store=backend.open(clock=clock), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([CHEAP, DEAR])
        leased = hw.place(ONE, lease=timedelta(minutes=5))
        hw.drain("cheap")
        assert hw.remove_pool("cheap").action == "removal_pending"
        clock.at += timedelta(minutes=6)
        hw.place(Workload("later", "amd", engine="vllm"))  # a write: the lease is released, the pool goes
        assert {s.pool.name for s in hw.pools()} == {"dear"}
        assert hw.decision(leased.id).lease_ended
    finally:
        hw.close()


# -- shrink and prune --------------------------------------------------------------------------------


def test_shrinking_below_live_grants_is_refused_naming_the_grants_on_the_dropped_devices(hw: Hardware) -> None:
    two = hw.place(Workload("two", "amd", engine="vllm", count=2, max_cost_per_hour=2.5))  # both devices of cheap
    assert isinstance(two.decision, Placement) and two.decision.pool == "cheap"
    with pytest.raises(SpecError, match=rf"count 1 would drop device\(s\) 1 that live decisions hold \({two.id[:12]}\)"):
        hw.apply([Pool("cheap", "hpc", "amd", 1, "eu", cost_per_hour=1.0), DEAR])
    assert next(s for s in hw.pools() if s.pool.name == "cheap").pool.count == 2


def test_apply_prune_removes_the_pools_a_file_leaves_out_all_or_nothing(hw: Hardware) -> None:
    extra = Pool("extra", "hpc", "nvidia", 1, "eu")
    hw.apply([extra])
    held, _ = placed_on(hw, Workload("gpu", "nvidia", engine="vllm"))
    # extra holds a live grant and is not drained: the whole apply is refused, nothing written.
    before = audited(hw)
    with pytest.raises(SpecError, match="cannot remove pool 'extra': 1 live grant holds it"):
        hw.apply([Pool("cheap", "hpc", "amd", 3, "eu", cost_per_hour=1.0)], prune=True)
    assert audited(hw) == before and {s.pool.name: s.pool.count for s in hw.pools()} == {"cheap": 2, "dear": 2, "extra": 1}
    # Drained first: dear goes now, extra when its grant ends; the preview says so and writes nothing.
    hw.drain("extra")
    preview = hw.apply([Pool("cheap", "hpc", "amd", 3, "eu", cost_per_hour=1.0)], prune=True, dry_run=True)
    assert [(c.name, c.action) for c in preview] == [("cheap", "updated"), ("dear", "removed"), ("extra", "removal_pending")]
    assert {s.pool.name: s.pool.count for s in hw.pools()} == {"cheap": 2, "dear": 2, "extra": 1}
    changes = hw.apply([Pool("cheap", "hpc", "amd", 3, "eu", cost_per_hour=1.0)], prune=True)
    assert [(c.name, c.action) for c in changes] == [(c.name, c.action) for c in preview]
    assert {s.pool.name: s.pool.count for s in hw.pools()} == {"cheap": 3, "extra": 1}
    assert hw.release(held).pool_removed
    assert {s.pool.name for s in hw.pools()} == {"cheap"}
    assert hw.verify_audit().ok


# -- the command line --------------------------------------------------------------------------------


def test_the_cli_drains_removes_and_prunes_with_the_diff_shown_first(exa_home: Path, tmp_path: Path) -> None:
    for name, price in (("cheap", "1.0"), ("dear", "3.0")):
        run_exa(exa_home, "hardware", "add-pool", name, "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu",
                "--cost-per-hour", price, check=True)  # fmt: skip
    first = json.loads(run_exa(exa_home, "hardware", "place", "one", "--accelerator", "amd", "--json", check=True).stdout)
    refused = run_exa(exa_home, "hardware", "remove-pool", "cheap")
    assert refused.returncode == 2 and f"cannot remove pool 'cheap': 1 live grant holds it ({first['id'][:12]})" in refused.stderr
    preview = run_exa(exa_home, "hardware", "drain", "cheap", "--dry-run", check=True).stdout.splitlines()
    assert preview == [
        f"~ cheap drained: takes no new grants; its live grant ({first['id'][:12]}) is kept",
        "dry run: nothing was changed (run it again without --dry-run to make these changes)",
    ]
    assert run_exa(exa_home, "hardware", "drain", "cheap", check=True).stdout.splitlines() == preview[:1]
    assert run_exa(exa_home, "hardware", "drain", "cheap", check=True).stdout.splitlines() == ["= cheap drained already; nothing changed"]
    assert "cheap (drained)" in run_exa(exa_home, "hardware", "pools", check=True).stdout
    assert run_exa(exa_home, "hardware", "place", "two", "--accelerator", "amd", check=True).stdout.startswith("✓ two → pool dear")
    pending = json.loads(run_exa(exa_home, "hardware", "remove-pool", "cheap", "--json", check=True).stdout)
    assert (pending["action"], pending["live_grants"], pending["dry_run"]) == ("removal_pending", [first["id"]], False)
    released = run_exa(exa_home, "hardware", "release", first["id"], check=True).stdout.splitlines()
    assert released[-1] == "- cheap removed: its removal was pending on its last live grant, this one"
    assert run_exa(exa_home, "hardware", "pool", "cheap").returncode == 8
    # apply --prune: the diff first (dry run), then the same changes.
    fleet = tmp_path / "pools.yaml"
    fleet.write_text("pools:\n  - {name: solo, target: hpc, accelerator: amd, count: 1, region: eu}\n", encoding="utf-8")
    dear_grant = [d for d in json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout) if d["workload"] == "two"][0]
    run_exa(exa_home, "hardware", "release", dear_grant["id"], check=True)
    shown = run_exa(exa_home, "hardware", "apply", "-f", str(fleet), "--prune", "--dry-run", check=True).stdout.splitlines()
    assert shown == [
        "+ solo added",
        "- dear removed",
        "1 added, 0 updated, 0 unchanged, 1 removed",
        "dry run: nothing was changed (run it again without --dry-run to make these changes)",
    ]
    assert run_exa(exa_home, "hardware", "apply", "-f", str(fleet), "--prune", check=True).stdout.splitlines() == shown[:3]
    assert [p["name"] for p in json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)] == ["solo"]
    kinds = [(e["kind"], e.get("action")) for e in (json.loads(line) for line in _audit_lines(exa_home))]
    assert ("pool", "removal_pending") in kinds and kinds.count(("pool", "removed")) == 2
    assert run_exa(exa_home, "audit", "verify").returncode == 0


def _audit_lines(home: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(home / "state.db") as db:
        return [bytes(r[0]).decode("utf-8") for r in db.execute("SELECT entry FROM audit_log ORDER BY seq")]

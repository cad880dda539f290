"""Every workflow the CLI offers, through the library alone (``Hardware``), with the real OPA.

The CLI parses, calls one of these methods and renders; a service calls the same methods.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

import examlops_policy
from examlops_policy import Hardware, Placement, Pool, Rejection, SpecError, Workload
from examlops_policy.errors import NotFoundError
from examlops_policy import explain
from tests.conftest import SEED_POOLS

SEED_YAML = """\
pools:
  - {name: hpc-nvidia, target: hpc, accelerator: nvidia, count: 8, region: eu, cost_per_hour: 2.5, carbon_factor: 300, supports_fractions: true}
  - {name: hpc-mi300, target: hpc, accelerator: amd, count: 4, region: eu}
  - {name: cloud-a100, target: cloud, accelerator: nvidia, count: 100, region: us}
"""


def test_pools_are_added_applied_listed_and_shown_device_by_device(hardware: Hardware, tmp_path: Path) -> None:
    assert hardware.add_pool(SEED_POOLS[0]).action == "added"
    with pytest.raises(SpecError, match="already"):
        hardware.add_pool(SEED_POOLS[0])
    (tmp_path / "pools.yaml").write_text(SEED_YAML, encoding="utf-8")
    assert [(c.name, c.action) for c in hardware.apply_file(tmp_path / "pools.yaml")] == [
        ("hpc-nvidia", "unchanged"), ("hpc-mi300", "added"), ("cloud-a100", "added"),
    ]  # fmt: skip
    views = hardware.pool_views()
    costs = [(v.cost_per_hour, v.pool.name) for v in views]
    assert costs == sorted(costs) and len(costs) == 3  # cheapest first, then by name
    nvidia = next(v for v in views if v.pool.name == "hpc-nvidia")
    assert (nvidia.packing, nvidia.cost_per_hour, nvidia.cost_default, nvidia.carbon_default) == ("mig", 2.5, False, False)
    assert nvidia.placeable is not None and "7g" in nvidia.placeable
    mi300 = next(v for v in views if v.pool.name == "hpc-mi300")
    assert mi300.cost_default and mi300.carbon_default and mi300.placeable is None
    detail = hardware.pool("hpc-nvidia")
    assert len(detail.devices) == 8 and detail.holdings == ()
    with pytest.raises(NotFoundError):
        hardware.pool("nope")


def test_place_burst_decisions_explain_renew_release_and_account(seeded: Hardware) -> None:
    hw = seeded
    record = hw.place(Workload("infer", accelerator="nvidia", engine="vllm", fraction=0.5), lease=timedelta(minutes=30))
    placed = record.decision
    assert isinstance(placed, Placement) and placed.decision_id == record.id
    assert record.lease_expires_at is not None
    assert [(h.profile, h.units) for h in hw.pool("hpc-nvidia").holdings] == [("4g", 4)]

    burst = hw.burst(Workload("data", accelerator="nvidia", residency="eu-only"))
    assert isinstance(burst.decision, Rejection) and burst.decision.burst_blocked
    assert [e.verdict for e in hw.burst_events()] == ["blocked"]

    page = hw.decision_page(limit=1)
    assert [d.id for d in page.decisions] == [burst.id] and page.cursor is not None
    rest = hw.decision_page(limit=1, cursor=page.cursor)
    assert [d.id for d in rest.decisions] == [record.id]
    assert hw.decision_page(since="2999-01-01").decisions == ()
    with pytest.raises(SpecError, match="since"):
        hw.decision_page(since="yesterday")

    assert hw.decision(record.id[:10]).id == record.id
    renewed = hw.renew(record.id, timedelta(hours=2))
    assert renewed.lease_expires_at is not None and renewed.lease_expires_at > (record.lease_expires_at or "")
    cost = hw.accounting(record.id, 10)
    assert cost["cost"] == pytest.approx(2.5 * 4 / 7 * 10, abs=0.01)
    with pytest.raises(SpecError, match="placed nothing"):
        hw.accounting(burst.id, 10)

    replay = hw.replay(record.id)
    assert replay.same and replay.decision_id == record.id, replay.differences

    released = hw.release(record.id)
    assert not released.already and released.record.released_at is not None and released.job_deleted is None
    again = hw.release(record.id)
    assert again.already and again.record.released_at == released.record.released_at
    assert hw.pool("hpc-nvidia").holdings == ()


def test_portable_and_what_if(seeded: Hardware) -> None:
    ok = seeded.portable("vllm", "amd")
    assert ok.portable and ok.backend == "rocm" and ok.reason is None
    no = seeded.portable("sglang", "amd")
    assert not no.portable and no.reason is not None and no.reason.code == "backend_unsupported"
    decision = seeded.what_if(Workload("train", accelerator="amd", engine="vllm"))
    assert isinstance(decision, Placement) and decision.decision_id is None
    assert seeded.decision_page().decisions == ()  # a what-if records nothing


def test_explanation_ranks_the_winners_tier_under_each_objective(hardware: Hardware) -> None:
    pools = [
        Pool("cheap-dirty", "hpc", "nvidia", 4, "eu", cost_per_hour=1.0, carbon_factor=900),
        Pool("dear-clean", "hpc", "nvidia", 4, "eu", cost_per_hour=3.0, carbon_factor=30),
        Pool("middle", "hpc", "nvidia", 4, "eu", cost_per_hour=2.0, carbon_factor=300),
    ]
    winners = {}
    for objective in ("cost", "carbon", "balanced"):
        decision = hardware.what_if(Workload("w", accelerator="nvidia", optimize=objective, carbon_weight=0.5), pools)
        assert isinstance(decision, Placement)
        ex = explain(decision)
        assert ex.objective == objective and ex.tier == 0
        assert ex.standings[0].pool == decision.pool and len(ex.standings) == 3
        winners[objective] = decision.pool
    assert winners == {"cost": "cheap-dirty", "carbon": "dear-clean", "balanced": "middle"}
    balanced = explain(hardware.what_if(Workload("w", accelerator="nvidia", optimize="balanced"), pools))
    scores = [s.score for s in balanced.standings]
    assert scores == sorted(scores)  # type: ignore[type-var]


def test_finops_models_cost_and_the_report_data(seeded: Hardware) -> None:
    seeded.place(Workload("train", accelerator="amd", engine="vllm", target="hpc"))
    seeded.place(Workload("train", accelerator="amd", engine="vllm", target="hpc"))
    seeded.place(Workload("serve", accelerator="nvidia", engine="vllm", fraction=0.5))
    finops = seeded.finops(10)
    assert finops.decisions == 3
    assert finops.cost == pytest.approx(2 * 18.0 + 2.5 * 4 / 7 * 10, abs=0.01)
    models = seeded.models_cost(10)
    assert [r.workload for r in models.rows] == ["train", "serve"] and models.cost == pytest.approx(finops.cost)
    data = seeded.finops_report()
    assert data.totals.decisions == 3
    with pytest.raises(SpecError, match="hours"):
        seeded.finops(float("nan"))


def test_discover_local_submit_dry_run_manifest_and_status(seeded: Hardware, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no vendor tools: this machine is a cpu pool
    found = seeded.discover("local", region="eu")
    assert not found.applied and [c.action for c in found.changes] == ["add"]
    assert found.changes[0].pool.accelerator == "cpu"
    assert seeded.discover("local", region="eu", apply=True).applied
    assert any(v.pool.accelerator == "cpu" for v in seeded.pool_views())
    with pytest.raises(SpecError, match="source"):
        seeded.discover("mainframe")

    slurm_pool = Pool("gpu-a100", "hpc", "nvidia", 4, "eu", partition="gpu", gres_type="a100", cost_per_hour=0.5)
    seeded.add_pool(slurm_pool)
    record = seeded.place(Workload("job", accelerator="nvidia", target="hpc"))
    assert isinstance(record.decision, Placement) and record.decision.pool == "gpu-a100"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n", encoding="utf-8")
    planned = seeded.submit(record.id, "slurm", dry_run=True, script=script)
    assert not planned.submitted and planned.command is not None and "--partition=gpu" in planned.command
    assert seeded.decision(record.id).job_id is None  # a dry run records nothing
    job = seeded.manifest(record.id, image="vllm/vllm-openai:v0.6.0")
    assert job["kind"] == "Job"
    with pytest.raises(SpecError, match="not submitted"):
        seeded.job_status(record.id)
    with pytest.raises(SpecError, match="scheduler"):
        seeded.submit(record.id, "pbs")


def test_audit_verify_and_checkpoint(seeded: Hardware) -> None:
    seeded.place(Workload("train", accelerator="amd", engine="vllm"))
    report = seeded.verify_audit()
    assert report.ok and report.size > 0
    cp = seeded.checkpoint()
    assert (cp.size, cp.head) == (report.size, report.head)
    assert seeded.verify_audit(cp).ok


def test_opa_status_starts_nothing(tmp_path: Path) -> None:
    hw = Hardware(tmp_path / "home")
    try:
        assert not hw.opa_status().running
    finally:
        hw.close()


def test_the_public_surface_is_listed_sorted_and_importable() -> None:
    names = examlops_policy.__all__
    assert list(names) == sorted(names)
    for name in names:
        assert hasattr(examlops_policy, name), name
    assert "CapacityConflict" not in names and "ReasonKind" not in names
    assert dataclasses.is_dataclass(examlops_policy.Workload)

"""place() through the real OPA: every example of the E8 specification, and the rules around them."""

from __future__ import annotations

from pathlib import Path

import pytest

from examlops_policy import Placement, Pool, Rejection, Workload, device_accounting
from examlops_policy.hardware import Hardware
from examlops_policy.store.sqlite import SQLiteStore
from tests.conftest import SEED_POOLS


def what_if(hw: Hardware, workload: Workload, pools: tuple[Pool, ...] = SEED_POOLS) -> Placement | Rejection:
    return hw.what_if(workload, list(pools))


def test_amd_vllm_hpc_is_placed_on_the_mi300_pool(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("train", accelerator="amd", engine="vllm", target="hpc"))
    assert isinstance(decision, Placement)
    assert (decision.pool, decision.accelerator, decision.target, decision.region) == ("hpc-mi300", "amd", "hpc", "eu")
    assert decision.fallback is False and decision.fraction_honored is True and decision.note is None


def test_sglang_on_amd_is_rejected_with_the_specified_message(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("train", accelerator="amd", engine="sglang"))
    assert isinstance(decision, Rejection)
    assert decision.reason == "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"
    assert decision.code == "backend_unsupported"
    # Never silently placed elsewhere, though NVIDIA pools that sglang could use are free.
    assert not any(v.eligible for v in decision.verdicts)


def test_tpu_falls_back_to_the_cheapest_compatible_hpc_pool_and_says_so(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("train", accelerator="tpu", engine="generic", target="hpc"))
    assert isinstance(decision, Placement)
    assert decision.pool == "hpc-mi300" and decision.accelerator == "amd"
    assert decision.fallback is True
    assert decision.note == "requested tpu unavailable — fell back to amd"


def test_fraction_on_amd_takes_a_whole_device_and_says_so(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("train", accelerator="amd", engine="vllm", fraction=0.5))
    assert isinstance(decision, Placement)
    assert decision.pool == "hpc-mi300"
    assert decision.fraction_honored is False
    assert decision.grant.devices == 1 and decision.grant.share == 1 and decision.grant.units == 1
    assert decision.note is not None and "whole device" in decision.note


def test_fraction_on_nvidia_with_supports_fractions_is_honored_as_a_mig_slice(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("infer", accelerator="nvidia", engine="vllm", fraction=0.5))
    assert isinstance(decision, Placement)
    assert decision.pool == "hpc-nvidia" and decision.fraction_honored is True
    assert decision.grant.scheme == "mig" and decision.grant.profile == "4g"
    assert decision.grant.share == pytest.approx(4 / 7) and decision.grant.units == 1


def test_fraction_on_a_named_model_gets_that_models_mig_profile(hardware: Hardware) -> None:
    pools = (Pool("h200", "hpc", "nvidia", 4, "de-juelich", model="H200", supports_fractions=True),)
    decision = what_if(hardware, Workload("infer", accelerator="nvidia", engine="vllm", fraction=0.1), pools)
    assert isinstance(decision, Placement) and decision.grant.profile == "1g.18gb"


def test_mig_is_not_claimed_for_a_model_that_has_none(hardware: Hardware) -> None:
    pools = (Pool("t4", "cloud", "nvidia", 4, "us-east-1", model="T4", supports_fractions=True),)
    decision = what_if(hardware, Workload("infer", accelerator="nvidia", engine="vllm", fraction=0.25, target="cloud"), pools)
    assert isinstance(decision, Placement) and decision.fraction_honored is False
    assert decision.grant.why == "nvidia model 't4' has no isolated partitioning"


def test_cheapest_eligible_pool_wins_with_a_name_tie_break(hardware: Hardware) -> None:
    pools = (
        Pool("b-pool", "hpc", "nvidia", 2, "eu", cost_per_hour=1.0),
        Pool("a-pool", "hpc", "nvidia", 2, "eu", cost_per_hour=1.0),
        Pool("dear", "hpc", "nvidia", 2, "eu", cost_per_hour=0.9, capabilities=("fp16",)),
        Pool("cheap-but-full", "hpc", "nvidia", 2, "eu", cost_per_hour=0.1),
    )
    decision = hardware.what_if(Workload("w", accelerator="nvidia", engine="vllm", count=2, capabilities=("fp16",)), list(pools))
    assert isinstance(decision, Placement) and decision.pool == "dear"
    decision = hardware.what_if(Workload("w", accelerator="nvidia", engine="vllm"), list(pools[:2]))
    assert isinstance(decision, Placement) and decision.pool == "a-pool"


def test_capabilities_may_come_from_the_model_table(hardware: Hardware) -> None:
    pools = (Pool("a100", "hpc", "nvidia", 4, "eu", model="A100", cost_per_hour=1), Pool("h100", "hpc", "nvidia", 4, "eu", model="H100", cost_per_hour=3))
    decision = what_if(hardware, Workload("w", accelerator="nvidia", engine="vllm", capabilities=("fp8",)), pools)
    assert isinstance(decision, Placement) and decision.pool == "h100"


@pytest.mark.parametrize(
    ("residency", "region", "placed"),
    [
        ("open", "us-east-1", True),
        ("eu-only", "eu-central-1", True),
        ("eu-only", "eu-west-2", False),  # London: named "eu", not in the EU
        ("eu-only", "eu-central-2", False),  # Zurich
        ("eu-only", "norwayeast", False),  # EEA, not EU
        ("no-egress", "eu-central-1", False),
        ("restricted", "eu-central-1", False),
    ],
)
def test_residency_governs_cloud_bursts(hardware: Hardware, residency: str, region: str, placed: bool) -> None:
    pools = (Pool("cloud", "cloud", "nvidia", 8, region),)
    decision = what_if(hardware, Workload("w", accelerator="nvidia", engine="vllm", target="cloud", residency=residency), pools)
    assert decision.burst.attempted is True
    assert decision.ok is placed
    if not placed:
        assert isinstance(decision, Rejection) and decision.burst_blocked
        if residency == "eu-only":
            assert decision.reason == f"data-residency {residency} forbids egress to region '{region}'"
        else:
            assert decision.reason.startswith(f"data-residency {residency} forbids egress to cloud region '{region}' (DE): only HPC pools")


def test_eu_only_also_constrains_hpc_pools_outside_the_eu(hardware: Hardware) -> None:
    pools = (Pool("alps", "hpc", "nvidia", 8, "ch-lugano", cost_per_hour=1), Pool("jupiter", "hpc", "nvidia", 8, "de-juelich", cost_per_hour=2))
    decision = what_if(hardware, Workload("w", accelerator="nvidia", engine="vllm", residency="eu-only"), pools)
    assert isinstance(decision, Placement) and decision.pool == "jupiter"
    alps = next(v for v in decision.verdicts if v.pool == "alps")
    assert [r.code for r in alps.reasons] == ["residency_forbids"]


def test_cloud_is_reached_only_when_bursting_is_allowed(hardware: Hardware) -> None:
    full = (Pool("hpc", "hpc", "nvidia", 1, "eu"), Pool("cloud", "cloud", "nvidia", 8, "eu-west-1"))
    states_hw = hardware
    decision = states_hw.what_if(Workload("w", accelerator="nvidia", engine="vllm", count=2), list(full))
    assert isinstance(decision, Rejection) and decision.burst.attempted is False
    cloud = next(v for v in decision.verdicts if v.pool == "cloud")
    assert [r.code for r in cloud.reasons] == ["burst_not_allowed"]
    decision = states_hw.what_if(Workload("w", accelerator="nvidia", engine="vllm", count=2, allow_burst=True), list(full))
    assert isinstance(decision, Placement) and decision.pool == "cloud"
    assert decision.burst.verdict == "allowed"


def test_hpc_is_preferred_over_a_cheaper_cloud_pool_even_with_burst_allowed(hardware: Hardware) -> None:
    pools = (Pool("hpc", "hpc", "nvidia", 8, "eu", cost_per_hour=5), Pool("cloud", "cloud", "nvidia", 8, "eu-west-1", cost_per_hour=1))
    decision = what_if(hardware, Workload("w", accelerator="nvidia", engine="vllm", allow_burst=True), pools)
    assert isinstance(decision, Placement) and decision.pool == "hpc" and decision.burst.attempted is False
    cloud = next(v for v in decision.verdicts if v.pool == "cloud")
    assert [r.code for r in cloud.reasons] == ["burst_not_needed"]


def test_every_pool_gets_a_verdict_with_stable_codes(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("w", accelerator="amd", engine="vllm", capabilities=("fp8",)))
    assert isinstance(decision, Rejection)
    codes = {v.pool: sorted(r.code for r in v.reasons) for v in decision.verdicts}
    assert codes == {
        "hpc-nvidia": ["capability_missing"],
        "hpc-mi300": ["capability_missing"],
        "cloud-a100": ["burst_not_allowed", "capability_missing"],
    }
    assert decision.code == "no_eligible_pool"


def test_device_accounting_matches_the_specification(hardware: Hardware) -> None:
    decision = what_if(hardware, Workload("train-llm", accelerator="amd", engine="vllm", target="hpc"))
    assert isinstance(decision, Placement)
    assert device_accounting(decision, hours=10) == {"device": "amd", "region": "eu", "hours": 10, "cost": 18.0, "carbon_g": 2500.0}


def test_device_accounting_adds_a_grounded_figure_where_power_is_known(hardware: Hardware) -> None:
    pools = (Pool("lumi", "hpc", "amd", 8, "fi-kajaani", model="MI250X", cost_per_hour=1.0, carbon_factor=100),)
    decision = what_if(hardware, Workload("w", accelerator="amd", engine="vllm", count=2), pools)
    assert isinstance(decision, Placement)
    result = device_accounting(decision, hours=10)
    # 280 W x PUE 1.56 x 72.25 g/kWh (Finland, Ember 2024) = 31.5588 g per device-hour; 2 devices, 10 hours.
    assert result["cost"] == 20.0 and result["carbon_g"] == 2000.0
    assert result["carbon_g_grounded"] == pytest.approx(631.176, abs=0.01)


def test_decisions_carry_their_provenance(hardware: Hardware) -> None:
    a = what_if(hardware, Workload("w", accelerator="amd", engine="vllm"))
    b = what_if(hardware, Workload("w", accelerator="amd", engine="vllm"))
    c = what_if(hardware, Workload("w", accelerator="amd", engine="generic"))
    assert (a.provenance.input_digest, a.provenance.policy_revision) == (b.provenance.input_digest, b.provenance.policy_revision)
    assert (a.provenance.verdicts, b.provenance.verdicts) == ("fresh", "reused")
    assert a.provenance.input_digest != c.provenance.input_digest
    assert a.provenance.policy_revision.startswith("sha256:") and a.provenance.opa_version == "1.22.3"


def test_recorded_placement_reserves_capacity_until_released(seeded: Hardware) -> None:
    records = [seeded.place(Workload(f"w{i}", accelerator="amd", engine="vllm", target="hpc")) for i in range(5)]
    pools = [(r.decision.pool, r.decision.fallback) for r in records if isinstance(r.decision, Placement)]
    # Four MI300 devices, then an honest fallback to the NVIDIA pool vLLM can also use.
    assert pools == [("hpc-mi300", False)] * 4 + [("hpc-nvidia", True)]
    sglang = [seeded.place(Workload(f"s{i}", accelerator="nvidia", engine="sglang", target="hpc", count=4)) for i in range(2)]
    assert [r.decision.ok for r in sglang] == [True, False]
    assert isinstance(sglang[1].decision, Rejection) and sglang[1].decision.code == "no_capacity"
    assert "capacity_exhausted" in sglang[1].decision.reason
    seeded.release(records[0].id)
    again = seeded.place(Workload("w5", accelerator="amd", engine="vllm", target="hpc"))
    assert isinstance(again.decision, Placement) and again.decision.pool == "hpc-mi300"


def test_seed_import_path_is_the_same_implementation() -> None:
    import examlops.hardware as alias
    import examlops_policy

    assert alias.place is examlops_policy.place and alias.Workload is examlops_policy.Workload
    assert alias.device_accounting is examlops_policy.device_accounting


def test_public_api_is_sorted_and_importable() -> None:
    import examlops_policy

    assert examlops_policy.__all__ == sorted(examlops_policy.__all__)
    for name in examlops_policy.__all__:
        assert hasattr(examlops_policy, name)


def test_module_level_place_records_on_the_default_state(tmp_path, monkeypatch, opa_home) -> None:  # type: ignore[no-untyped-def]
    from examlops_policy import place

    monkeypatch.setenv("EXA_HOME", str(tmp_path))
    hw = Hardware(tmp_path)
    hw.add_pool(Pool("hpc-mi300", "hpc", "amd", 4, "eu"))
    hw.close()
    placement = place(Workload("train-llm", accelerator="amd", capabilities=[], target="hpc", engine="vllm", fraction=1.0))  # type: ignore[arg-type]
    assert isinstance(placement, Placement) and placement.pool == "hpc-mi300"
    store = SQLiteStore(tmp_path / "state.db")
    assert [row.free for row in store.rows().pools] == [3]
    store.close()
    from examlops_policy.opa import stop_server

    stop_server(tmp_path)


def test_library_imports_without_the_cli_stack() -> None:
    import subprocess
    import sys

    code = "import sys, examlops_policy, examlops.hardware; print(sorted(m for m in ('rich', 'aiohttp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize(
    "workload",
    [
        Workload("a", accelerator="amd", engine="vllm", target="hpc"),
        Workload("b", accelerator="tpu", engine="generic", target="hpc"),
        Workload("c", accelerator="amd", engine="sglang"),
        Workload("d", accelerator="nvidia", engine="vllm", target="cloud", residency="eu-only"),
        Workload("e", accelerator="nvidia", engine="vllm", fraction=0.3, capabilities=("fp8",), allow_burst=True),
    ],
    ids=lambda w: w.name,
)
def test_python_selects_exactly_as_the_policys_reference_decision(hardware: Hardware, workload: Workload) -> None:
    """Selection is the one piece of decision logic in Python; the policy's own complete
    ``decision`` rule must say the same pool, burst verdict and reasons for every pool."""
    from examlops_policy._core.engine import differences, reference_input
    from examlops_policy.model import Capacity, PoolState
    from examlops_policy.specs import pools_from_file

    fleet = pools_from_file(Path(__file__).resolve().parent.parent / "examples" / "fleet.yaml")
    states = [PoolState(p, float(p.count), Capacity(p.count if i % 3 else 0)) for i, p in enumerate(fleet)]  # some pools full
    engine = hardware.engine
    prepared = engine.prepare(workload, [s.pool for s in states])
    ordered = sorted(states, key=lambda s: s.pool.name)
    decision = prepared.decide([s.capacity for s in ordered], hardware.tables)
    reference = hardware.policy.decision(reference_input(workload, prepared.judged.fleet, [s.capacity for s in ordered], prepared.about))
    assert differences(decision, reference) == []

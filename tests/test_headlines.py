"""What a workload that could run later is told: the headline names what stops the pools that
could take it (the policy's texts, composer.headline), not always "no pool has free capacity":

* capacity alone: "no pool has free capacity for W";
* the wait (no start estimate, e.g. Slurm cannot be asked, or one too late): "no pool is expected
  to start W within its waiting limits";
* the project's quota: "no pool is within the quota W may use";
* several of these, or another not-now reason (a drained pool): "no pool can take W now".

The code stays ``no_capacity`` (the workload may wait in the queue). Python's summary and the
policy's reference decision word it alike (tests/test_invariants.py holds them equal). And, off by
default, the layer's own capacity may stand in for a scheduler that gives no estimate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from examlops_policy.estimates.gather import StartEstimator
from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Placement, Pool, Rejection, Workload
from examlops_policy.store.sqlite import SQLiteStore

SLURM_POOL = Pool("gpu-h100", "hpc", "nvidia", 24, "eu", partition="gpu", gres_type="h100", cost_per_hour=2.0)


@pytest.fixture()
def make(tmp_path: Path, opa_home: Path):  # type: ignore[no-untyped-def]
    """A Hardware on fresh state whose start estimator has no Slurm to ask (as where Slurm is not
    installed or its controller is down), with the layer's own capacity standing in or not."""
    made: list[Hardware] = []

    def _make(*pools: Pool, own_capacity: bool = False) -> Hardware:
        home = tmp_path / f"hw-{len(made)}"
        hw = Hardware(home, store=SQLiteStore(home / "state.db"), policy=ManagedPolicy(Path(os.environ["EXA_TEST_OPA_HOME"])),
                      estimator=StartEstimator(own_capacity=own_capacity))  # fmt: skip
        made.append(hw)
        hw.apply(list(pools))
        return hw

    yield _make
    for hw in made:
        hw.close()


def rejection(hw: Hardware, w: Workload) -> Rejection:
    decision = hw.place(w).decision
    assert isinstance(decision, Rejection), decision
    return decision


def test_a_slurm_pool_with_free_devices_that_slurm_cannot_be_asked_about_is_not_called_full(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(SLURM_POOL)
    d = rejection(hw, Workload("train", "nvidia", max_wait="1h"))
    assert (d.code, d.reason) == ("no_capacity", "no pool is expected to start train within its waiting limits (1 checked: estimate_unknown on 1 pool)")


def test_a_full_pool_is_still_no_free_capacity(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(Pool("small", "hpc", "amd", 1, "eu"))
    assert isinstance(hw.place(Workload("a", "amd")).decision, Placement)
    d = rejection(hw, Workload("b", "amd"))
    assert (d.code, d.reason) == ("no_capacity", "no pool has free capacity for b (1 checked: capacity_exhausted on 1 pool)")


def test_a_full_pool_under_a_waiting_limit_is_told_by_the_wait(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(Pool("small", "hpc", "amd", 1, "eu"))
    hw.place(Workload("a", "amd"))
    d = rejection(hw, Workload("b", "amd", max_wait="5m"))
    assert d.reason == "no pool is expected to start b within its waiting limits (1 checked: capacity_exhausted on 1 pool, estimate_unknown on 1 pool)"


def test_only_the_quota_blocks(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(Pool("big", "hpc", "nvidia", 40, "eu", cost_per_hour=0.5, carbon_factor=10))
    hw.place(Workload("w1", "nvidia", count=10, project="inference-eu"))  # inference-eu: 16 nvidia devices
    d = rejection(hw, Workload("w2", "nvidia", count=10, project="inference-eu"))
    assert (d.code, d.reason) == ("no_capacity", "no pool is within the quota w2 may use (1 checked: quota_exceeded on 1 pool)")


def test_pools_stopped_for_different_reasons_are_told_no_pool_can_take_it_now(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(Pool("full", "hpc", "amd", 1, "eu"), Pool("drained", "hpc", "amd", 1, "eu"))
    hw.drain("drained")
    hw.place(Workload("a", "amd"))
    d = rejection(hw, Workload("b", "amd"))
    assert (d.code, d.reason) == ("no_capacity", "no pool can take b now (2 checked: capacity_exhausted on 1 pool, pool_drained on 1 pool)")


def test_the_layers_own_capacity_is_the_estimate_only_when_asked_for(make) -> None:  # type: ignore[no-untyped-def]
    hw = make(SLURM_POOL, own_capacity=True)
    placed = hw.place(Workload("train", "nvidia", max_wait="1h")).decision
    assert isinstance(placed, Placement) and placed.pool == "gpu-h100"
    assert placed.estimate is not None and (placed.estimate.source, placed.estimate.facts.get("instead_of")) == ("now", "slurm")

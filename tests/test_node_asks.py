"""What a workload asks of a node beside its devices, where the pool cannot or does not check it:

* a Slurm partition allocates whole CPUs (``--cpus-per-task``): a fraction of a CPU is refused at
  placement by the policy (``cpu_not_whole``, never), not placed and then refused by ``submit``;
* a pool whose nodes do not say their CPU or memory takes any amount of them: the placement's note
  says what was not checked there (the policy's grant note)."""

from __future__ import annotations

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, Placement, Pool, Rejection, Workload

SLURM = Pool("gpu-h100", "hpc", "nvidia", 4, "eu", partition="gpu", gres_type="h100", cost_per_hour=1.0)
PLAIN = Pool("plain", "hpc", "nvidia", 4, "eu", cost_per_hour=2.0)


def test_half_a_cpu_is_refused_on_a_slurm_pool_at_placement(hardware: Hardware) -> None:
    hardware.apply([SLURM])
    decision = hardware.place(Workload("half", "nvidia", cpu=0.5)).decision
    assert isinstance(decision, Rejection) and decision.code == "no_eligible_pool", decision
    (verdict,) = decision.verdicts
    assert [(r.code, r.kind) for r in verdict.reasons] == [("cpu_not_whole", "never")]
    assert verdict.reasons[0].message == (
        "the pool's scheduler (Slurm) allocates whole CPUs, and the workload asks 0.5 CPU cores per node: ask for whole cores (e.g. 1)"
    )
    assert not hardware.decisions(limit=5)[0].decision.ok  # recorded as refused, never placed


def test_half_a_cpu_goes_to_a_pool_that_allocates_fractions_and_whole_cores_to_slurm(hardware: Hardware) -> None:
    hardware.apply([SLURM, PLAIN])
    half = hardware.place(Workload("half", "nvidia", cpu=0.5)).decision
    assert isinstance(half, Placement) and half.pool == "plain"
    whole = hardware.place(Workload("whole", "nvidia", cpu=1)).decision
    assert isinstance(whole, Placement) and whole.pool == "gpu-h100"  # the cheaper one, now that it can


@pytest.mark.parametrize(
    ("pool", "note"),
    [
        (PLAIN, "CPU and memory not checked: the pool does not say its nodes' CPU and memory"),
        (Pool("cores", "hpc", "nvidia", 4, "eu", nodes=2, cpu_per_node=64), "memory not checked: the pool does not say its nodes' memory"),
        (Pool("listed", "hpc", "nvidia", 4, "eu", nodes=(Node("a", 2, memory="1Ti"), Node("b", 2, cpu=8, memory="1Ti"))),
         "CPU not checked: the pool does not say its nodes' CPU"),
    ],
)  # fmt: skip
def test_cpu_and_memory_a_pool_does_not_say_are_not_checked_and_the_placement_says_so(hardware: Hardware, pool: Pool, note: str) -> None:
    hardware.apply([pool])
    huge = "1Ti" if pool.name != "listed" else "512Gi"
    decision = hardware.place(Workload("huge", "nvidia", cpu=5000 if pool.name != "cores" else 8, memory=huge)).decision
    assert isinstance(decision, Placement), decision
    assert decision.note == note


def test_a_pool_whose_nodes_say_both_checks_both_and_notes_nothing(hardware: Hardware) -> None:
    hardware.apply([Pool("sized", "hpc", "nvidia", 4, "eu", nodes=2, cpu_per_node=64, memory_per_node="256Gi")])
    fits = hardware.place(Workload("fits", "nvidia", cpu=8, memory="64Gi")).decision
    assert isinstance(fits, Placement) and fits.note is None
    too_big = hardware.place(Workload("huge", "nvidia", cpu=5000, memory="100Ti")).decision
    assert isinstance(too_big, Rejection) and [r.code for r in too_big.verdicts[0].reasons][0] == "no_node_fits"

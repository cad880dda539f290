"""Pools that tie under the objective: the node packer chooses among their nodes together (issue 30).

Two pools of one GPU model at one price tie (same tier, same grant cost). Before, the first by name
took the work and the packer saw its nodes alone: a one-GPU request went to ``big``'s empty 4-GPU
node although ``small``'s 1-GPU node takes it whole, leaving ``big`` a node that can still take a
4-GPU job. Now the packer's best node among both pools decides, in ``place``, in a dry run, in the
replay's layer, and the record rebuilds, replays and verifies: the policy's reference decision
names the pools that tie, and the pool chosen is one of them.
"""

from __future__ import annotations

from examlops_policy import Placement, Pool, Workload
from examlops_policy.hardware import Hardware
from examlops_policy.model import Node
from examlops_policy._core import joint

from tests.placement_support import placed_with_id

BIG = Pool("big", "hpc", "nvidia", 4, "eu", model="l4", cost_per_hour=1.0, nodes=(Node("b0", 4, 32, 131072),))
SMALL = Pool("small", "hpc", "nvidia", 1, "eu", model="l4", cost_per_hour=1.0, nodes=(Node("s0", 1, 32, 131072),))


def test_the_packers_best_node_among_tied_pools_takes_the_work(hardware: Hardware) -> None:
    hardware.apply([BIG, SMALL])
    ident, one = placed_with_id(hardware, "one", count=1)
    assert (one.pool, [a.node for a in one.allocations]) == ("small", ["s0"])
    assert one.tied == ("big", "small")
    # The 4-GPU node is still whole: a job of 4 fits.
    _, four = placed_with_id(hardware, "four", count=4)
    assert (four.pool, four.tied) == ("big", ())  # small is full: nothing ties
    # The record rebuilds as placed, the policy's reference decision agrees, the chain verifies.
    record = hardware.decision(ident)
    assert isinstance(record.decision, Placement) and record.decision.pool == "small"
    assert record.decision.tied == ("big", "small")
    replayed = hardware.replay(ident)
    assert replayed.same, replayed.differences
    assert hardware.verify_audit().ok


def test_a_dry_run_says_the_pool_and_node_a_placement_gets(hardware: Hardware) -> None:
    hardware.apply([BIG, SMALL])
    dry = hardware.what_if(Workload("dry", "nvidia", count=1), where=True)
    assert isinstance(dry, Placement) and (dry.pool, [a.node for a in dry.allocations]) == ("small", ["s0"])
    over = hardware.what_if(Workload("over", "nvidia", count=1), [BIG, SMALL], where=True)
    assert isinstance(over, Placement) and (over.pool, [a.node for a in over.allocations]) == ("small", ["s0"])


def test_equal_scores_go_to_the_first_pool_by_name(hardware: Hardware) -> None:
    twin = Pool("twin", "hpc", "nvidia", 4, "eu", model="l4", cost_per_hour=1.0, nodes=(Node("t0", 4, 32, 131072),))
    hardware.apply([twin, BIG])
    _, first = placed_with_id(hardware, "first", count=1)
    assert (first.pool, first.tied) == ("big", ("big", "twin"))
    # The partly used node packs better than the empty one: the work stays with it.
    _, second = placed_with_id(hardware, "second", count=1)
    assert [a.node for a in second.allocations] == ["b0"]


def test_a_replay_whose_pool_is_not_among_the_tied_pools_differs(hardware: Hardware) -> None:
    """The check the replay makes can fail: a pool outside the policy's tied pools is a difference."""
    from examlops_policy._core.engine import differences

    hardware.apply([BIG, SMALL])
    _, one = placed_with_id(hardware, "one", count=1)
    reference = {"outcome": "placed", "pool": "big", "tied": ["big"], "burst": {"attempted": False}, "verdicts": {}}
    found = differences(one, reference)
    assert "pool: small here, big by the policy" in found
    assert "tied pools: big, small here, big by the policy" in found


def test_a_decision_that_tied_with_nothing_is_left_as_it_is() -> None:
    class Unused:
        def tied_grants(self, *_: object) -> object:
            raise AssertionError("asked for tied grants of a decision that tied with nothing")

    decision = Placement.__new__(Placement)
    object.__setattr__(decision, "tied", ())
    assert joint.choose(Unused(), decision, [], None, None, lambda name: None) == (decision, None, None)  # type: ignore[arg-type]


def test_tied_pools_whose_starts_come_from_a_source_are_all_asked_and_compete(hardware: Hardware) -> None:
    """Cloud pools start by their provisioning table (a start estimate's source): the pool chosen
    without estimates and every pool tied with it are asked, so the packer's best node among them
    still decides. Before, only the first by name was asked, and an unasked tied pool could not be
    chosen over its estimate (``joint.choose``): ``big`` took the work."""
    import dataclasses

    big, small = (dataclasses.replace(p, target="cloud", region="eu-central-1") for p in (BIG, SMALL))
    hardware.apply([big, small])
    decision = hardware.place(Workload("one", "nvidia", target="cloud", count=1)).decision
    assert isinstance(decision, Placement) and (decision.pool, [a.node for a in decision.allocations]) == ("small", ["s0"])
    assert decision.tied == ("big", "small") and decision.estimate is not None and decision.estimate.source == "table"

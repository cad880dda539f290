"""Devices, slices and partitions (issue 9), case by case, through the real OPA and the real store.

Each case states exactly where a grant lands (pool, profile, device, start), what it costs per hour
(price per device-hour x the share of a device held) and, when refused, the reason code and message.
The geometry each case is checked against is written out here from the shared reference
(``hardware-and-regions.md``, "How slices pack onto a device"), not read from the product's tables,
so a wrong table fails these tests too. Random sequences are tests/test_invariants.py's business.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from examlops_policy import Placement, Pool, Rejection, Workload
from examlops_policy.hardware import Hardware
from examlops_policy.model import Holding, PoolVerdict
from examlops_policy.specs import workload_from_file
from tests.conftest import run_exa
from tests.placement_support import placed, placed_with_id, refused, verdict

ROOT = Path(__file__).resolve().parent.parent

# NVIDIA MIG, any model: (compute slices, memory slices in the run, allowed starts) per profile size.
MIG_COMPUTE, MIG_MEMORY = 7, 8
MIG = {"1g": (1, 1, (0, 1, 2, 3, 4, 5, 6)), "2g": (2, 2, (0, 2, 4)), "3g": (3, 4, (0, 4)), "4g": (4, 4, (0,)), "7g": (7, 8, (0,))}
# AMD MI300X / MI325X: partitions per device in each compute-partition mode.
AMD_MODES = {"spx": 1, "dpx": 2, "qpx": 4, "cpx": 8}


def r9(x: float) -> float:
    """Costs and shares compare at the precision the policy computes them (9 decimals)."""
    return round(x, 9)


def h100s(name: str, count: int, price: float = 2.0, region: str = "eu") -> Pool:
    return Pool(name, "hpc", "nvidia", count, region, cost_per_hour=price, supports_fractions=True, model="h100")


def mi300xs(name: str, count: int, price: float = 4.0) -> Pool:
    return Pool(name, "hpc", "amd", count, "eu", cost_per_hour=price, supports_fractions=True, model="mi300x")


def reasons(v: PoolVerdict) -> list[tuple[str, str]]:
    return [(r.code, r.message) for r in v.reasons]


def assert_real_geometry(hw: Hardware, pool: str) -> None:
    """What every device of ``pool`` holds is a layout real hardware allows."""
    detail = hw.pool(pool)
    count = detail.view.pool.count
    by_device: dict[int, list[Holding]] = {}
    for h in detail.holdings:
        assert 0 <= h.device < count
        by_device.setdefault(h.device, []).append(h)
    for device, held in by_device.items():
        if any(h.profile is None for h in held):
            assert len(held) == 1, f"device {device} is held whole and shared: {held}"
        elif detail.view.packing == "mig":
            memory: list[int] = []
            compute = 0
            for h in held:
                c, m, starts = MIG[str(h.profile).split(".")[0]]
                assert h.start in starts, f"{h.profile} at start {h.start}"
                memory += range(int(h.start), int(h.start) + m)
                compute += c
                assert h.units == c
            assert len(memory) == len(set(memory)) and max(memory) < MIG_MEMORY, f"device {device}: overlapping runs {held}"
            assert compute <= MIG_COMPUTE, f"device {device}: {compute} compute slices"
        elif detail.view.packing == "amd-compute-partition":
            modes = {h.profile for h in held}
            assert len(modes) == 1, f"device {device} mixes modes {modes}"
            indexes = [h.start for h in held]
            assert len(indexes) == len(set(indexes)) and len(held) <= AMD_MODES[str(held[0].profile)]


# -- 1. fractions of 0.5 on 2 x H100 ----------------------------------------------------------------


def test_1_three_halves_on_two_h100s_one_4g_per_device_and_the_third_falls_back_as_full(hardware: Hardware) -> None:
    """0.5 of a device is a 4g.40gb (3g = 3/7 < 0.5). 4g + 4g never share an H100, so two H100s
    hold two of them, although 3 x 4/7 = 1.71 devices would fit in a sum of shares (the old model
    accepted all three, leaving "0.285714/2" free)."""
    hw = hardware
    hw.add_pool(h100s("h100x2", 2))
    hw.add_pool(mi300xs("mi300x", 1, price=3.0))

    first = placed(hw, "half-0", fraction=0.5)
    second = placed(hw, "half-1", fraction=0.5)
    for p, device in ((first, 0), (second, 1)):
        assert (p.pool, p.fallback, p.fraction_honored, p.note) == ("h100x2", False, True, None)
        assert (p.grant.scheme, p.grant.profile, p.grant.units, r9(p.grant.share)) == ("mig", "4g.40gb", 1, r9(4 / 7))
        assert p.holdings == (Holding(device, "4g.40gb", 0, 4),)
        assert p.grant_cost_per_hour == pytest.approx(2.0 * 4 / 7)  # $1.142857/h, not $2
    detail = hw.pool("h100x2")
    assert detail.devices == ("4g.40gb@0", "4g.40gb@0")
    assert detail.view.placeable == "1g x6, 2g x2, 3g x2"
    # The sum of shares still says 6/7 of a device is free, more than a 4g's 4/7: the old overbooking.
    assert detail.view.state.free == pytest.approx(2 - 8 / 7) and detail.view.state.free > 4 / 7
    assert detail.view.state.capacity.slices["4g.40gb"] == 0

    third = placed(hw, "half-2", fraction=0.5)
    assert (third.pool, third.accelerator, third.fallback) == ("mi300x", "amd", True)
    assert third.note == "requested nvidia pools are full — fell back to amd"
    assert (third.grant.profile, third.grant.share, third.holdings) == ("dpx", 0.5, (Holding(0, "dpx", 0, 4),))
    assert third.grant_cost_per_hour == pytest.approx(1.5)
    h100 = verdict(third, "h100x2")
    assert (h100.eligible, h100.admissible) == (False, False)
    # Nor is there room for the one larger slice that covers a half (a 7g: a device of its own).
    assert reasons(h100) == [
        ("slice_unavailable", "no H100 in the pool has room for a 4g.40gb beside the slices it holds, nor for a larger one the budget allows (7g.80gb)")
    ]
    assert h100.reasons[0].kind == "not_now"

    # The MI300X's second DPX partition, then nothing anywhere: no_capacity, each pool saying why.
    assert placed(hw, "half-3", fraction=0.5).holdings == (Holding(0, "dpx", 1, 4),)
    fifth = refused(hw, "half-4", fraction=0.5)
    assert (fifth.code, fifth.reason) == ("no_capacity", "no pool has free capacity for half-4 (2 checked: slice_unavailable on 2 pools)")
    assert reasons(verdict(fifth, "mi300x")) == [
        ("slice_unavailable", "no MI300X in the pool has room for a dpx beside the slices it holds, nor for a larger one the budget allows (spx)")
    ]
    assert hw.pool("h100x2").holdings == (Holding(0, "4g.40gb", 0, 4), Holding(1, "4g.40gb", 0, 4))
    assert_real_geometry(hw, "h100x2")
    assert_real_geometry(hw, "mi300x")


# -- 2. MIG geometry on one H100 ---------------------------------------------------------------------


def test_2_3g_and_3g_fill_an_h100_so_a_1g_is_refused_though_the_shares_sum_to_one(hardware: Hardware) -> None:
    """3/7 + 3/7 + 1/7 = 1 device, but two 3g.40gb take all 8 memory slices (runs 0-3 and 4-7)."""
    hw = hardware
    hw.add_pool(h100s("h100", 1))
    a = placed(hw, "a", fraction=0.4)  # 2g = 2/7 < 0.4 <= 3/7: a 3g
    # A lone 3g goes to start 4: that keeps the 4g (start 0) placeable.
    assert (a.grant.profile, a.holdings, r9(a.grant_cost_per_hour)) == ("3g.40gb", (Holding(0, "3g.40gb", 4, 3),), r9(2.0 * 3 / 7))
    assert hw.pool("h100").view.placeable == "1g x4, 2g x2, 3g x1, 4g x1"
    b = placed(hw, "b", fraction=0.4)
    assert b.holdings == (Holding(0, "3g.40gb", 0, 3),)
    detail = hw.pool("h100")
    assert (detail.devices, detail.view.placeable) == (("3g.40gb@0, 3g.40gb@4",), "none")

    c = refused(hw, "c", fraction=0.1)
    assert (c.code, c.reason) == ("no_capacity", "no pool has free capacity for c (1 checked: slice_unavailable on 1 pool)")
    v = verdict(c, "h100")
    assert reasons(v) == [
        ("slice_unavailable", "no H100 in the pool has room for a 1g.10gb beside the slices it holds, nor for a larger one the budget allows "
         "(2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)")
    ]  # fmt: skip
    assert (v.grant.profile, v.grant_cost_per_hour) == ("1g.10gb", r9(2.0 / 7))
    assert hw.pool("h100").holdings == (Holding(0, "3g.40gb", 4, 3), Holding(0, "3g.40gb", 0, 3))
    assert_real_geometry(hw, "h100")


def test_2_a_4g_beside_a_3g_and_1g_slices_where_they_strand_least(hardware: Hardware) -> None:
    """A lone 3g takes start 4; 1g slices then go to 0 and 1 (4-6 are the 3g's). A 4g no longer fits
    (its run 0-3 is taken and 2 compute sevenths are left); the last 2g takes start 2."""
    hw = hardware
    hw.add_pool(h100s("h100", 1))
    assert placed(hw, "a", fraction=0.4).holdings == (Holding(0, "3g.40gb", 4, 3),)
    assert placed(hw, "b", fraction=0.1).holdings == (Holding(0, "1g.10gb", 0, 1),)
    assert placed(hw, "c", fraction=0.1).holdings == (Holding(0, "1g.10gb", 1, 1),)
    assert hw.pool("h100").devices == ("1g.10gb@0, 1g.10gb@1, 3g.40gb@4",)
    assert hw.pool("h100").view.placeable == "1g x2, 2g x1"
    d = refused(hw, "d", fraction=0.5)
    assert reasons(verdict(d, "h100")) == [
        ("slice_unavailable", "no H100 in the pool has room for a 4g.40gb beside the slices it holds, nor for a larger one the budget allows (7g.80gb)")
    ]
    # The 2g that is still placeable goes to the one start left (2).
    assert placed(hw, "e", fraction=0.25).holdings == (Holding(0, "2g.20gb", 2, 2),)
    assert hw.pool("h100").view.placeable == "none"  # 7 compute slices used
    assert_real_geometry(hw, "h100")


def test_2_a_4g_and_a_3g_share_an_h100(hardware: Hardware) -> None:
    hw = hardware
    hw.add_pool(h100s("h100", 1))
    assert placed(hw, "big", fraction=0.5).holdings == (Holding(0, "4g.40gb", 0, 4),)
    assert placed(hw, "small", fraction=3 / 7).holdings == (Holding(0, "3g.40gb", 4, 3),)
    assert hw.pool("h100").devices == ("4g.40gb@0, 3g.40gb@4",)
    assert_real_geometry(hw, "h100")


@pytest.mark.parametrize(
    "fractions",
    [(0.1, 0.5), (0.25, 0.5), (0.1, 0.25, 0.5), (0.25, 0.1, 0.5), (0.1, 0.1, 0.1, 0.5)],
    ids=["1g-4g", "2g-4g", "1g-2g-4g", "2g-1g-4g", "1g-1g-1g-4g"],
)
def test_2_slices_that_fit_an_h100_beside_a_4g_are_all_placed_in_any_order(hardware: Hardware, fractions: tuple[float, ...]) -> None:
    """Small slices keep the 4g's only start (0) free: 1g@6 and 2g@4 leave it, and the 4g arrives
    after them on the same device."""
    hw = hardware
    hw.add_pool(h100s("h100", 1))
    for i, fraction in enumerate(fractions):
        placed(hw, f"w{i}", fraction=fraction)
    layout = hw.pool("h100").devices[0]
    assert "4g.40gb@0" in layout, layout
    assert_real_geometry(hw, "h100")


def test_2_a_1g_then_a_4g_keep_the_second_a100_whole_for_a_whole_device_job(hardware: Hardware) -> None:
    """One node of 2 A100s: the 1g goes to start 6 of device 0, the 4g beside it at 0, and the
    whole-device job takes device 1 (a 1g at 0 would have sent the 4g to device 1 and refused it)."""
    hw = hardware
    hw.add_pool(Pool("a100", "hpc", "nvidia", 2, "eu", cost_per_hour=2.0, model="a100", supports_fractions=True, nodes=1))
    assert placed(hw, "small", fraction=0.1).holdings == (Holding(0, "1g.10gb", 6, 1),)
    assert placed(hw, "half", fraction=0.5).holdings == (Holding(0, "4g.40gb", 0, 4),)
    assert placed(hw, "whole").holdings == (Holding(1),)
    assert hw.pool("a100").nodes[0].layout == "device 1 whole, device 0: 4g.40gb@0, 1g.10gb@6"


def test_2_seven_1g_fill_an_h100_and_memory_slice_7_is_no_1g_start(hardware: Hardware) -> None:
    hw = hardware
    hw.add_pool(h100s("h100", 1))
    starts = [placed(hw, f"s{i}", fraction=0.1).holdings[0].start for i in range(7)]
    assert sorted(int(s or 0) for s in starts) == [0, 1, 2, 3, 4, 5, 6] and None not in starts
    # The first 1g goes where only a 1g fits (6): the 4g (start 0) and the 3g at 0 stay placeable.
    assert starts[0] == 6
    eighth = refused(hw, "s7", fraction=0.1)
    assert reasons(verdict(eighth, "h100")) == [
        ("slice_unavailable", "no H100 in the pool has room for a 1g.10gb beside the slices it holds, nor for a larger one the budget allows "
         "(2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)")
    ]  # fmt: skip
    assert_real_geometry(hw, "h100")


# -- 3. AMD MI300X compute-partition modes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fraction", "profile", "share"),
    [(0.125, "cpx", 0.125), (0.2, "qpx", 0.25), (0.25, "qpx", 0.25), (0.3, "dpx", 0.5), (0.5, "dpx", 0.5), (0.6, "spx", 1.0)],
)
def test_3_mi300x_fractions_map_to_the_smallest_covering_mode(hardware: Hardware, fraction: float, profile: str, share: float) -> None:
    decision = hardware.what_if(Workload("w", accelerator="amd", fraction=fraction), [mi300xs("mi300x", 1)])
    assert isinstance(decision, Placement)
    assert (decision.grant.scheme, decision.grant.profile, decision.grant.share, decision.fraction_honored) == (
        "amd-compute-partition", profile, share, True,
    )  # fmt: skip
    assert decision.grant_cost_per_hour == pytest.approx(4.0 * share)


def test_3_mi300x_runs_one_partition_mode_per_device_and_an_empty_device_switches(hardware: Hardware) -> None:
    hw = hardware
    hw.add_pool(mi300xs("mi300x", 2))
    c1_id, c1 = placed_with_id(hw, "c1", "amd", fraction=0.125)
    assert (c1.grant.profile, c1.holdings, c1.grant_cost_per_hour) == ("cpx", (Holding(0, "cpx", 0, 1),), 0.5)
    assert hw.pool("mi300x").devices == ("cpx mode: 1/8 partitions held", "free")
    assert hw.pool("mi300x").view.placeable == "cpx x15, qpx x4, dpx x2, spx x1"

    # Device 0 runs CPX, so the DPX partition goes to the empty device 1.
    d1 = placed(hw, "d1", "amd", fraction=0.5)
    assert (d1.grant.profile, d1.holdings, d1.grant_cost_per_hour) == ("dpx", (Holding(1, "dpx", 0, 4),), 2.0)
    assert hw.pool("mi300x").devices == ("cpx mode: 1/8 partitions held", "dpx mode: 1/2 partitions held")
    assert hw.pool("mi300x").view.placeable == "cpx x7, dpx x1"

    # A QPX partition fits no device: one runs CPX (7 of 8 free), the other DPX (1 of 2 free). The
    # free DPX half is the smallest partition that covers a quarter: granted, flagged larger, priced
    # as granted ($4/h x 1/2).
    q1_id, q1 = placed_with_id(hw, "q1", "amd", fraction=0.25)
    assert (q1.grant.profile, q1.grant.larger, q1.holdings, q1.grant_cost_per_hour) == ("dpx", True, (Holding(1, "dpx", 1, 4),), 2.0)
    assert q1.note == "no qpx had room: fraction 0.25 honored with a larger partition, dpx, priced as granted"
    assert hw.pool("mi300x").devices == ("cpx mode: 1/8 partitions held", "dpx mode: 2/2 partitions held")
    # Now nothing covers a quarter: CPX partitions are too small, and device 1 is full.
    q0 = refused(hw, "q0", "amd", fraction=0.25)
    assert (q0.code, q0.reason) == ("no_capacity", "no pool has free capacity for q0 (1 checked: slice_unavailable on 1 pool)")
    assert reasons(verdict(q0, "mi300x")) == [
        ("slice_unavailable", "no MI300X in the pool has room for a qpx beside the slices it holds, nor for a larger one the budget allows (dpx, spx)")
    ]
    hw.release(q1_id)

    c2_id, c2 = placed_with_id(hw, "c2", "amd", fraction=0.125)
    assert c2.holdings == (Holding(0, "cpx", 1, 1),)
    assert hw.pool("mi300x").devices == ("cpx mode: 2/8 partitions held", "dpx mode: 1/2 partitions held")
    assert_real_geometry(hw, "mi300x")

    # Device 0 empty again: it takes any mode, so now the QPX partition fits there.
    hw.release(c1_id)
    hw.release(c2_id)
    assert hw.pool("mi300x").devices == ("free", "dpx mode: 1/2 partitions held")
    q2 = placed(hw, "q2", "amd", fraction=0.25)
    assert (q2.grant.profile, q2.holdings, q2.grant_cost_per_hour) == ("qpx", (Holding(0, "qpx", 0, 2),), 1.0)
    assert hw.pool("mi300x").devices == ("qpx mode: 1/4 partitions held", "dpx mode: 1/2 partitions held")
    assert hw.pool("mi300x").view.placeable == "qpx x3, dpx x1"
    assert_real_geometry(hw, "mi300x")


def test_3_earliest_ranks_a_larger_partition_by_its_cost_without_estimates_and_by_its_start_with_them(hardware: Hardware) -> None:
    """``optimize: earliest`` decided with no start estimates at all (a record from before them,
    replayed; the engine's own ``decide``) ranks every pool as "no estimate", so by cost: a pool
    that only has room for a larger partition ranks where that one's cost puts it. With estimates,
    the soonest start wins, whatever the partition it has room for costs. Both as the policy's
    reference decision decides."""
    from datetime import datetime, timedelta, timezone

    from examlops_policy._core.engine import differences, reference_input
    from examlops_policy._core.waiting import Starts
    from examlops_policy.model import StartEstimate

    hw = hardware
    hw.add_pool(mi300xs("a", 1, price=4.0))
    hw.add_pool(mi300xs("b", 1, price=6.0))
    assert placed(hw, "d1", "amd", fraction=0.5).pool == "a"  # device 0 of a runs DPX, one half free
    # A quarter: a's QPX ($1.00/h) has no room, its free DPX half costs $2.00/h; b's QPX $1.50/h.
    w = Workload("q", accelerator="amd", fraction=0.25, optimize="earliest")
    states = sorted((v.state for v in hw.pool_views()), key=lambda s: s.pool.name)
    decision = hw.engine.decide(w, states)
    assert isinstance(decision, Placement)
    assert (decision.pool, decision.grant.profile, decision.grant_cost_per_hour) == ("b", "qpx", 1.5)
    prepared = hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    assert differences(decision, hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about))) == []
    # With estimates, the start ranks first: a starts now (its larger partition, at its cost), b in an hour.
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    starts = Starts(now, {
        "a": StartEstimate("a", now, "now", now, "now: free"), "b": StartEstimate("b", now + timedelta(hours=1), "slurm", now, "slurm: in 1 h"),
    })  # fmt: skip
    soonest = prepared.decide(caps, hw.tables, starts=starts)
    assert isinstance(soonest, Placement)
    assert (soonest.pool, soonest.grant.profile, soonest.grant.larger, soonest.grant_cost_per_hour) == ("a", "dpx", True, 2.0)
    assert soonest.estimate == starts.of("a")
    assert differences(soonest, hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about, starts))) == []


# -- 4. the cheapest grant, not the cheapest device ---------------------------------------------------


def test_4_a_quarter_goes_to_a_2g_slice_of_an_h100_not_a_whole_t4(hardware: Hardware) -> None:
    """$2/h x 2/7 = $0.571/h for a 2g.20gb beats $1.50/h for a whole T4 (no MIG)."""
    t4 = Pool("t4", "hpc", "nvidia", 1, "eu", cost_per_hour=1.5, supports_fractions=True, model="t4")
    w = Workload("quarter", accelerator="nvidia", fraction=0.25)
    decision = hardware.what_if(w, [h100s("h100", 1), t4])
    assert isinstance(decision, Placement)
    assert (decision.pool, decision.grant.profile, r9(decision.grant.share), decision.fraction_honored) == ("h100", "2g.20gb", r9(2 / 7), True)
    assert decision.cost_per_hour == 2.0 and decision.grant_cost_per_hour == pytest.approx(4 / 7)
    # Both pools are eligible; the explanation ranks them by the price of the grant.
    assert [(v.pool, v.eligible, v.grant_cost_per_hour) for v in decision.verdicts] == [("h100", True, 0.571428571), ("t4", True, 1.5)]
    whole = verdict(decision, "t4").grant
    assert (whole.honored, whole.profile, whole.share, whole.devices) == (False, None, 1, 1)
    assert whole.why == "nvidia model 't4' has no isolated partitioning"

    # A T4 at $0.50/h is a cheaper grant than the 2g slice: it wins, and says the fraction was not honored.
    cheap_t4 = dataclasses.replace(t4, cost_per_hour=0.5)
    decision = hardware.what_if(w, [h100s("h100", 1), cheap_t4])
    assert isinstance(decision, Placement)
    assert (decision.pool, decision.fraction_honored, decision.grant.profile, decision.grant_cost_per_hour) == ("t4", False, None, 0.5)
    assert decision.note == "fraction 0.25 not honored (nvidia model 't4' has no isolated partitioning) — whole device allocated"


# -- 5. fallback never silently to a CPU --------------------------------------------------------------


def test_5_a_tpu_workload_does_not_fall_back_to_a_cpu_unless_allowed(hardware: Hardware) -> None:
    """examples/workloads/tpu-finetune.yaml (tpu, engine generic, no-egress) on a full TPU pool and
    two cheap CPU pools, all EU HPC."""
    hw = hardware
    for pool in (
        Pool("tpu", "hpc", "tpu", 1, "fi-kajaani", cost_per_hour=1.2),
        Pool("cpu-a", "hpc", "cpu", 4, "fi-kajaani", cost_per_hour=0.05),
        Pool("cpu-b", "hpc", "cpu", 4, "de-juelich", cost_per_hour=0.08),
    ):
        hw.add_pool(pool)
    w = workload_from_file(ROOT / "examples" / "workloads" / "tpu-finetune.yaml")
    assert (w.accelerator, w.engine, w.residency, w.allow_cpu_fallback) == ("tpu", "generic", "no-egress", False)
    first = hw.place(w).decision
    assert isinstance(first, Placement) and (first.pool, first.fallback) == ("tpu", False)

    second = hw.place(w).decision
    assert isinstance(second, Rejection)
    assert (second.code, second.reason) == (
        "no_capacity",
        "no pool has free capacity for tpu-finetune (3 checked: capacity_exhausted on 1 pool, fallback_not_allowed on 2 pools)",
    )
    assert reasons(verdict(second, "tpu")) == [("capacity_exhausted", "needs 1 whole tpu device(s) with nothing on them, more than are free")]
    for cpu in ("cpu-a", "cpu-b"):
        assert reasons(verdict(second, cpu)) == [
            ("fallback_not_allowed", "cpu may not stand in for tpu (not in the fallback table, and allow_cpu_fallback is off)")
        ]
    assert verdict(second, "cpu-a").reasons[0].details["stand_ins"] == ["nvidia", "amd", "intel-gaudi"]

    third = hw.place(dataclasses.replace(w, allow_cpu_fallback=True)).decision
    assert isinstance(third, Placement)
    assert (third.pool, third.accelerator, third.fallback, third.grant_cost_per_hour) == ("cpu-a", "cpu", True, 0.05)
    assert third.note == "requested tpu pools are full — fell back to cpu"
    assert third.holdings == (Holding(0),)


# -- 6. residency never loosens -------------------------------------------------------------------------

RESIDENCY_POOLS = (
    Pool("hpc-us", "hpc", "nvidia", 4, "us", cost_per_hour=0.5),
    Pool("hpc-bristol", "hpc", "nvidia", 4, "uk-bristol", cost_per_hour=0.6),
    Pool("hpc-eu", "hpc", "nvidia", 4, "eu", cost_per_hour=1.0),
    Pool("hpc-juelich", "hpc", "nvidia", 4, "de-juelich", cost_per_hour=1.1),
    Pool("cloud-eu-west-2", "cloud", "nvidia", 4, "eu-west-2", cost_per_hour=0.1),  # London
    Pool("cloud-eu-central-2", "cloud", "nvidia", 4, "eu-central-2", cost_per_hour=0.2),  # Zurich
    Pool("cloud-frankfurt", "cloud", "nvidia", 4, "eu-central-1", cost_per_hour=0.3),
)


@pytest.mark.parametrize(
    ("residency", "data_region", "admitted", "winner"),
    [
        ("open", None, {p.name for p in RESIDENCY_POOLS}, "hpc-us"),
        ("eu-only", None, {"hpc-eu", "hpc-juelich", "cloud-frankfurt"}, "hpc-eu"),
        ("no-egress", None, {"hpc-eu", "hpc-juelich"}, "hpc-eu"),
        ("no-egress", "de-juelich", {"hpc-juelich"}, "hpc-juelich"),
        ("restricted", "de-juelich", {"hpc-juelich"}, "hpc-juelich"),
        ("restricted", None, {"hpc-eu", "hpc-juelich"}, "hpc-eu"),
        # Data in the US: eu-only already refuses the US, so the stricter classes cannot admit it.
        ("no-egress", "us", set(), None),
        ("restricted", "us", set(), None),
    ],
)
def test_6_residency_classes_admit_nested_sets_of_pools(
    hardware: Hardware, residency: str, data_region: str | None, admitted: set[str], winner: str | None
) -> None:
    w = Workload("data", accelerator="nvidia", residency=residency, data_region=data_region, allow_burst=True)
    decision = hardware.what_if(w, list(RESIDENCY_POOLS))
    assert {v.pool for v in decision.verdicts if v.admissible} == admitted
    for v in decision.verdicts:
        if v.pool not in admitted:
            assert [r.code for r in v.reasons] == ["residency_forbids"]
    if winner is None:
        # Nothing on HPC, so the burst was tried; residency blocked it (the cheapest cloud pool named).
        assert isinstance(decision, Rejection) and decision.burst_blocked
        assert (decision.code, decision.burst.pool) == ("residency_forbids", "cloud-eu-west-2")
        assert decision.reason == (
            f"data-residency {residency} forbids egress to cloud region 'eu-west-2' (GB): outside the EU; data in US (region us)"
        )
    else:
        assert isinstance(decision, Placement) and decision.pool == winner


def test_6_residency_reasons_name_the_class_the_data_and_the_pool(hardware: Hardware) -> None:
    def why(residency: str, data_region: str | None, pool: str) -> str:
        w = Workload("data", accelerator="nvidia", residency=residency, data_region=data_region, allow_burst=True)
        (message,) = [r.message for r in verdict(hardware.what_if(w, list(RESIDENCY_POOLS)), pool).reasons]
        return message

    assert why("eu-only", None, "cloud-eu-west-2") == "data-residency eu-only forbids egress to region 'eu-west-2'"
    assert why("eu-only", None, "hpc-us") == "data-residency eu-only forbids egress to region 'us'"
    assert why("no-egress", None, "cloud-frankfurt") == (
        "data-residency no-egress forbids egress to cloud region 'eu-central-1' (DE): only HPC pools; no data_region given, so EU HPC pools only"
    )
    assert why("no-egress", "de-juelich", "hpc-eu") == (
        "data-residency no-egress forbids egress to region 'eu' (EU): outside the data's jurisdiction; data in DE (region de-juelich)"
    )
    assert why("restricted", "us", "hpc-us") == (
        "data-residency restricted forbids egress to region 'us' (US): outside the EU; data in US (region us)"
    )
    assert why("restricted", "de-juelich", "hpc-bristol") == (
        "data-residency restricted forbids egress to region 'uk-bristol' (GB): outside the EU; data in DE (region de-juelich)"
    )


def test_6_an_eu_only_burst_never_lands_outside_the_eu_whatever_the_region_is_called(hardware: Hardware) -> None:
    clouds = [p for p in RESIDENCY_POOLS if p.target == "cloud"]
    w = Workload("data", accelerator="nvidia", target="cloud", residency="eu-only")
    decision = hardware.what_if(w, clouds)
    assert isinstance(decision, Placement) and (decision.pool, decision.region) == ("cloud-frankfurt", "eu-central-1")
    # Without Frankfurt, the cheaper "eu-" regions (London, Zurich) still refuse: the burst is blocked.
    decision = hardware.what_if(w, [p for p in clouds if p.name != "cloud-frankfurt"])
    assert isinstance(decision, Rejection) and decision.burst_blocked
    assert (decision.code, decision.burst.pool) == ("residency_forbids", "cloud-eu-west-2")
    assert decision.reason == "data-residency eu-only forbids egress to region 'eu-west-2'"


# -- 7. fixed slices ---------------------------------------------------------------------------------


def test_7_a_pool_of_fixed_1g_slices_gives_whole_slices_and_refuses_a_half(hardware: Hardware) -> None:
    """A scheduler exposing MIG 1g.10gb as its own resource (Slurm gpu:1g.10gb:2): count counts
    slices, each unit is one slice (1/7 of an H100, priced so), and a share larger than a slice is
    never served there: the partition check denies it (slice_too_small)."""
    hw = hardware
    hw.add_pool(Pool("mig-1g", "hpc", "nvidia", 2, "eu", cost_per_hour=1.4, model="h100", fixed_profile="1g.10gb"))
    hw.add_pool(h100s("h100", 1, price=2.0))
    assert (hw.pool("mig-1g").view.packing, hw.pool("mig-1g").view.placeable) == ("fixed", "1g.10gb x2")

    first = placed(hw, "tiny-0", fraction=0.1)
    assert (first.pool, first.grant.profile, first.grant.units, r9(first.grant.share)) == ("mig-1g", "1g.10gb", 1, r9(1 / 7))
    assert first.grant_cost_per_hour == pytest.approx(0.2)  # $1.40 x 1/7, cheaper than the MIG pool's 1g at $2 x 1/7
    assert first.holdings == (Holding(0, "1g.10gb"),)
    assert placed(hw, "tiny-1", fraction=1 / 7).holdings == (Holding(1, "1g.10gb"),)
    assert hw.pool("mig-1g").devices == ("1g.10gb held", "1g.10gb held")
    assert hw.pool("mig-1g").view.placeable == "1g.10gb x0"

    # The slices are gone: the next 1g is carved on the MIG pool, which says why the fixed one did not serve.
    third_id, third = placed_with_id(hw, "tiny-2", fraction=0.1)
    assert (third.pool, third.holdings) == ("h100", (Holding(0, "1g.10gb", 6, 1),))
    assert reasons(verdict(third, "mig-1g")) == [("capacity_exhausted", "needs 1 free 1g.10gb slice(s), more than are free")]
    hw.release(third_id)  # the H100 is empty again for the half

    half = placed(hw, "half", fraction=0.5)
    assert (half.pool, half.grant.profile) == ("h100", "4g.40gb")
    fixed = verdict(half, "mig-1g")
    assert reasons(fixed) == [
        ("slice_too_small", "the pool's fixed 1g.10gb slices are smaller than the 0.5 of a device asked for"),
        ("capacity_exhausted", "needs 1 free 1g.10gb slice(s), more than are free"),
    ]
    assert fixed.reasons[0].kind == "never"


def test_7_a_fixed_slice_pool_alone_refuses_a_half_and_whole_devices(hardware: Hardware) -> None:
    pool = Pool("mig-1g", "hpc", "nvidia", 7, "eu", cost_per_hour=1.4, model="h100", fixed_profile="1g.10gb")
    for w, asked in ((Workload("half", accelerator="nvidia", fraction=0.5), "0.5"), (Workload("two", accelerator="nvidia", count=2), "1")):
        decision = hardware.what_if(w, [pool])
        assert isinstance(decision, Rejection)
        assert (decision.code, decision.reason) == ("no_eligible_pool", f"no pool is eligible for {w.name} (1 checked: slice_too_small on 1 pool)")
        (reason,) = verdict(decision, "mig-1g").reasons
        assert (reason.code, reason.message) == ("slice_too_small", f"the pool's fixed 1g.10gb slices are smaller than the {asked} of a device asked for")


def test_7_a_fixed_slice_pool_counts_its_free_slices(hardware: Hardware) -> None:
    hw = hardware
    hw.add_pool(Pool("mig-1g", "hpc", "nvidia", 2, "eu", cost_per_hour=1.4, model="h100", fixed_profile="1g.10gb"))
    placed(hw, "tiny-0", fraction=0.1)
    placed(hw, "tiny-1", fraction=0.1)
    view = hw.pool("mig-1g").view
    assert view.placeable == "1g.10gb x0"
    assert view.state.free == 0


# -- 8. release frees exactly what was held ---------------------------------------------------------


def test_8_release_frees_exactly_the_slice_held_and_it_is_used_again(hardware: Hardware) -> None:
    hw = hardware
    hw.add_pool(h100s("h100x2", 2))
    a_id, a = placed_with_id(hw, "a", fraction=0.5)
    b_id, b = placed_with_id(hw, "b", fraction=0.5)
    c_id, c = placed_with_id(hw, "c", fraction=0.4)
    assert (a.holdings, b.holdings, c.holdings) == ((Holding(0, "4g.40gb", 0, 4),), (Holding(1, "4g.40gb", 0, 4),), (Holding(0, "3g.40gb", 4, 3),))
    assert hw.pool("h100x2").devices == ("4g.40gb@0, 3g.40gb@4", "4g.40gb@0")
    whole = refused(hw, "whole", count=1)
    assert reasons(verdict(whole, "h100x2")) == [("capacity_exhausted", "needs 1 whole H100 device(s) with nothing on them, more than are free")]

    report = hw.release(a_id)
    assert report.already is False and report.record.released_at is not None
    detail = hw.pool("h100x2")
    assert detail.holdings == (Holding(1, "4g.40gb", 0, 4), Holding(0, "3g.40gb", 4, 3))
    assert detail.devices == ("3g.40gb@4", "4g.40gb@0")
    assert hw.release(a_id).already is True
    assert hw.pool("h100x2").holdings == detail.holdings  # a second release frees nothing more

    # The 4g that was freed is placeable again, exactly where it was.
    assert placed(hw, "a2", fraction=0.5).holdings == (Holding(0, "4g.40gb", 0, 4),)
    for ident in (b_id, c_id):
        hw.release(ident)
    assert hw.pool("h100x2").holdings == (Holding(0, "4g.40gb", 0, 4),)
    assert hw.pool("h100x2").devices == ("4g.40gb@0", "free")
    whole_after = placed(hw, "whole", count=1)
    assert (whole_after.holdings, whole_after.grant.profile, whole_after.grant_cost_per_hour) == ((Holding(1),), None, 2.0)
    assert hw.pool("h100x2").devices == ("4g.40gb@0", "whole device held")
    assert_real_geometry(hw, "h100x2")


def test_3_through_the_cli_a_quarter_takes_the_free_dpx_half_not_a_stand_in(exa_home: Path) -> None:
    """Issue 25 item 1, as a user types it: one MI300X half held in DPX mode, an NVIDIA pool beside.
    A 0.25 request gets the free DPX half (flagged, priced as granted), not "no capacity" and not
    the NVIDIA pool with "requested amd pools are full"; then the MI300X is really full."""
    for args in (
        ("mi300x", "--accelerator", "amd", "--model", "MI300X", "--cost-per-hour", "4.0"),
        ("nv", "--accelerator", "nvidia", "--cost-per-hour", "2.0"),
    ):
        run_exa(exa_home, "hardware", "add-pool", args[0], "--target", "hpc", "--count", "1", "--region", "eu", "--supports-fractions", *args[1:], check=True)
    run_exa(exa_home, "hardware", "place", "half", "--accelerator", "amd", "--fraction", "0.5", check=True)
    quarter = run_exa(exa_home, "hardware", "place", "quarter", "--accelerator", "amd", "--fraction", "0.25")
    assert quarter.returncode == 0, quarter.stderr
    assert quarter.stdout.splitlines() == [
        "✓ quarter → pool mi300x · amd on hpc",
        "  no qpx had room: fraction 0.25 honored with a larger partition, dpx, priced as granted",
        "  fraction 0.25 honored as AMD compute partition dpx (0.5 of a device) on device 0",
    ]
    rows = {line.split()[2]: line for line in run_exa(exa_home, "hardware", "decisions", check=True).stdout.splitlines()[2:]}
    assert rows["quarter"].endswith("larger-partition") and not rows["half"].endswith("larger-partition")
    listed = {d["workload"]: d for d in json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)}
    assert listed["quarter"]["devices"] == 0.5 and listed["quarter"]["larger_partition"] is True
    third = run_exa(exa_home, "hardware", "place", "third", "--accelerator", "amd", "--fraction", "0.25")
    assert third.stdout.splitlines()[:2] == ["✓ third → pool nv · nvidia on hpc (fallback)", "  requested amd pools are full — fell back to nvidia"]

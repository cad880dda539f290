"""The packer on its own (no OPA): where slices go on MIG and AMD devices, what stays placeable.

tests/test_devices.py checks the same rules through the policy and the store; these are the fast
unit tests of the pure part (``examlops_policy._core.packing``), with the reviewed tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examlops_policy._core import packing
from examlops_policy._core.selection import balanced_scores, carbon_per_hour, effective_cost, fits, grant_cost
from examlops_policy.model import Capacity, Grant, Holding, Pool
from examlops_policy.tables import load_tables

TABLES = load_tables()
H100 = Pool("h100", "hpc", "nvidia", 2, "eu", model="h100", supports_fractions=True)
MI300X = Pool("mi300x", "hpc", "amd", 2, "eu", model="mi300x", supports_fractions=True)
FIXED = Pool("mig-1g", "hpc", "nvidia", 3, "eu", model="h100", fixed_profile="1g.10gb")


def place(pool: Pool, holdings: Sequence[Holding], profile: str | None, units: int = 1) -> tuple[Holding, ...] | None:
    return packing.choose(packing.layout_of(pool, TABLES), holdings, profile, units)


def filled_with(pool: Pool, *profiles: str) -> list[Holding]:
    """Place each profile in turn (each must fit); the holdings afterwards."""
    held: list[Holding] = []
    for profile in profiles:
        got = place(pool, held, profile)
        assert got is not None, f"{profile} after {held}"
        held.extend(got)
    return held


def placeable(pool: Pool, holdings: Sequence[Holding], held_outside: float = 0.0) -> Capacity:
    return packing.summarize(packing.layout_of(pool, TABLES), holdings, held_outside)


# -- layouts ---------------------------------------------------------------------------------------


def test_a_pool_without_fractions_or_a_scheme_packs_whole_devices() -> None:
    assert packing.layout_of(Pool("a", "hpc", "nvidia", 4, "eu", model="h100"), TABLES).kind == "whole"
    assert packing.layout_of(Pool("t4", "hpc", "nvidia", 4, "eu", model="t4", supports_fractions=True), TABLES).kind == "whole"
    assert packing.layout_of(Pool("tpu", "cloud", "tpu", 4, "us", supports_fractions=True), TABLES).kind == "whole"


def test_mig_and_amd_layouts_come_from_the_tables() -> None:
    mig = packing.layout_of(H100, TABLES)
    assert (mig.kind, mig.compute_slices, mig.memory_slices) == ("mig", 7, 8)
    assert mig.profiles_large_first == ["7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.10gb"]
    amd = packing.layout_of(MI300X, TABLES)
    assert amd.kind == "amd-compute-partition"
    assert {p: s.partitions for p, s in amd.shares.items()} == {"cpx": 8, "qpx": 4, "dpx": 2, "spx": 1}


# -- MIG -------------------------------------------------------------------------------------------


def test_a_4g_and_a_3g_share_one_device() -> None:
    held = filled_with(H100, "4g.40gb", "3g.40gb")
    assert {h.device for h in held} == {0}
    assert sorted((h.profile, h.start) for h in held) == [("3g.40gb", 4), ("4g.40gb", 0)]


def test_two_4g_never_share_a_device() -> None:
    held = filled_with(H100, "4g.40gb", "4g.40gb")
    assert sorted(h.device for h in held) == [0, 1]
    assert place(H100, held, "4g.40gb") is None


def test_two_3g_fill_the_memory_so_a_1g_is_refused_though_compute_is_left() -> None:
    one_device = Pool("h", "hpc", "nvidia", 1, "eu", model="h100", supports_fractions=True)
    held = filled_with(one_device, "3g.40gb", "3g.40gb")
    assert sorted(h.start for h in held) == [0, 4]
    assert place(one_device, held, "1g.10gb") is None
    assert placeable(one_device, held) == Capacity(0, {p: 0 for p in packing.layout_of(one_device, TABLES).shares})


def test_seven_1g_fill_a_device_and_memory_slice_7_is_no_1g_start() -> None:
    one_device = Pool("h", "hpc", "nvidia", 1, "eu", model="h100", supports_fractions=True)
    held = filled_with(one_device, *["1g.10gb"] * 7)
    assert sorted(h.start for h in held) == list(range(7))
    assert place(one_device, held, "1g.10gb") is None


def test_small_slices_go_beside_slices_and_keep_empty_devices_whole() -> None:
    held = filled_with(H100, "3g.40gb", "1g.10gb", "1g.10gb")
    assert {h.device for h in held} == {0}
    assert placeable(H100, held).whole == 1


def test_a_whole_device_is_given_only_when_nothing_is_on_it() -> None:
    held = filled_with(H100, "1g.10gb")
    assert place(H100, held, None, 1) == (Holding(1),)
    assert place(H100, held, None, 2) is None


def test_held_outside_takes_whole_devices_first() -> None:
    assert placeable(H100, [], held_outside=0.5).whole == 1  # a busy half device is a device taken
    assert place(H100, [], None, 2) is not None
    assert packing.choose(packing.layout_of(H100, TABLES), [], None, 2, held_outside=1) is None


def test_a_pool_of_a_million_devices_costs_what_its_holdings_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capacity is never a list of every device (issue 25 item 7): summarising and choosing on a
    1,000,000-device pool makes as many device objects as on an 8-device one holding the same."""
    made: list[int] = []
    real = packing._Device

    class Counted(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(packing, "_Device", Counted)

    def cost(count: int) -> tuple[int, Capacity, tuple[Holding, ...] | None, tuple[Holding, ...] | None]:
        made.clear()
        pool = Pool("big", "hpc", "nvidia", count, "eu", model="h100", supports_fractions=True)
        held = [Holding(0), Holding(1, "1g.10gb", 0, 1), Holding(3)]
        summary = placeable(pool, held)
        whole = place(pool, held, None, 3)
        mig = place(pool, held, "3g.40gb")
        return len(made), summary, whole, mig

    small, big = cost(8), cost(1_000_000)
    assert small[0] == big[0] < 32
    assert big[1].whole == 1_000_000 - 3 and small[1].whole == 8 - 3
    assert big[2] == small[2] == (Holding(2), Holding(4), Holding(5))
    assert big[3] == small[3] and big[3] is not None and big[3][0].device == 1


# -- AMD compute partitions ------------------------------------------------------------------------


def test_an_amd_device_runs_one_mode_and_an_empty_one_takes_another() -> None:
    held = filled_with(MI300X, "qpx")
    assert held == [Holding(0, "qpx", 0, 2)]
    nxt = place(MI300X, held, "cpx")
    assert nxt == (Holding(1, "cpx", 0, 1),)  # device 0 runs qpx: a cpx partition goes to the empty one
    held += [*nxt, *filled_with(MI300X)]
    assert placeable(MI300X, held) == Capacity(0, {"cpx": 7, "qpx": 3, "dpx": 0, "spx": 0})


def test_an_amd_device_in_one_mode_fills_to_its_partition_count() -> None:
    one = Pool("m", "hpc", "amd", 1, "eu", model="mi300x", supports_fractions=True)
    held = filled_with(one, *["dpx"] * 2)
    assert place(one, held, "dpx") is None and place(one, held, "cpx") is None


# -- fixed slices ----------------------------------------------------------------------------------


def test_an_amd_device_half_held_in_dpx_takes_no_qpx_but_the_other_dpx_half() -> None:
    """The case a larger partition is for: a device in DPX mode with one half held takes no QPX (one
    mode per device), but the free DPX half covers a quarter."""
    one = Pool("mi", "hpc", "amd", 1, "eu", model="mi300x", supports_fractions=True)
    held = filled_with(one, "dpx")
    assert placeable(one, held).slices == {"cpx": 0, "qpx": 0, "dpx": 1, "spx": 0}
    assert place(one, held, "qpx") is None
    assert place(one, held, "dpx") == (Holding(0, "dpx", 1, 4),)


def _mig_layouts() -> list[list[tuple[str, int]]]:
    """Every set of MIG instances one device can hold together (profile, start), by the geometry
    table alone: allowed starts, runs that do not overlap, compute slices adding up to at most 7."""
    scheme: Any = TABLES.scheme_for("nvidia", "h100")
    geometry: Any = TABLES.geometry["mig-7c8m"]
    shares = [(geometry["shares"][str(s["units"])], str(s["profile"])) for s in scheme["slices"]]
    out: list[list[tuple[str, int]]] = []

    def grow(layout: list[tuple[str, int]], memory: frozenset[int], compute: int, after: tuple[int, int]) -> None:
        out.append(layout)
        for k, (share, profile) in enumerate(shares):
            for start in share["starts"]:
                run = frozenset(range(start, start + share["memory"]))
                if (k, start) > after and not memory & run and compute + share["compute"] <= geometry["compute_slices"]:
                    grow([*layout, (profile, start)], memory | run, compute + share["compute"], (k, start))

    grow([], frozenset(), 0, (-1, -1))
    return out


def test_on_the_reviewed_mig_geometry_a_larger_slice_never_fits_where_a_smaller_one_does_not() -> None:
    """Why a MIG fraction never needs a larger slice on the reviewed tables: over every layout one
    H100 can hold, whenever a larger profile still fits, every smaller one does too (the rule that
    gives a larger share when the smallest covering one has no room applies to MIG alike; a
    geometry without this property would use it)."""
    one = Pool("h", "hpc", "nvidia", 1, "eu", model="h100", supports_fractions=True)
    layout = packing.layout_of(one, TABLES)
    order = layout.profiles_large_first[::-1]
    layouts = _mig_layouts()
    assert len(layouts) > 50
    for held in layouts:
        slices = packing.summarize(layout, [Holding(0, p, start, layout.shares[p].units) for p, start in held]).slices
        for i, small in enumerate(order):
            for large in order[i + 1 :]:
                assert not (slices[large] > 0 and slices[small] == 0), (held, small, large)


def test_a_pool_of_fixed_slices_counts_its_slices_and_gives_only_its_profile() -> None:
    assert placeable(FIXED, []) == Capacity(0, {"1g.10gb": 3})
    held = list(place(FIXED, [], "1g.10gb", 2) or ())
    assert held == [Holding(0, "1g.10gb"), Holding(1, "1g.10gb")]
    assert placeable(FIXED, held) == Capacity(0, {"1g.10gb": 1})
    assert place(FIXED, held, "2g.20gb") is None and place(FIXED, held, None) is None


# -- what people see -------------------------------------------------------------------------------


def test_describe_and_device_layouts_say_what_is_left_and_where() -> None:
    layout = packing.layout_of(H100, TABLES)
    held = filled_with(H100, "4g.40gb", "1g.10gb")
    # The 1g goes to memory slice 6, not 4: a 2g still fits at 4 beside it.
    assert packing.device_layouts(layout, held) == ["4g.40gb@0, 1g.10gb@6", "free"]
    assert packing.describe(placeable(H100, held), layout) == "1g x9, 2g x4, 3g x2, 4g x1, 7g x1"
    amd = packing.layout_of(MI300X, TABLES)
    assert packing.device_layouts(amd, filled_with(MI300X, "qpx", "qpx")) == ["qpx mode: 2/4 partitions held", "free"]
    assert packing.describe(placeable(FIXED, []), packing.layout_of(FIXED, TABLES)) == "1g.10gb x3"


# -- the invariant: placeable says exactly what choose can place -----------------------------------


@settings(max_examples=200, deadline=None)
@given(
    pool=st.sampled_from([H100, MI300X, Pool("h3", "hpc", "nvidia", 3, "eu", model="h100", supports_fractions=True)]),
    steps=st.lists(st.integers(0, 10), max_size=14),
)
def test_a_profile_is_placeable_exactly_when_choose_finds_room(pool: Pool, steps: list[int]) -> None:
    layout = packing.layout_of(pool, TABLES)
    profiles = [*layout.profiles_large_first, None]
    held: list[Holding] = []
    for step in steps:
        got = place(pool, held, profiles[step % len(profiles)])
        if got is not None:
            held.extend(got)
        summary = placeable(pool, held)
        for profile in layout.shares:
            assert (summary.slices[profile] > 0) == (place(pool, held, profile) is not None), (profile, held)
        assert (summary.whole > 0) == (place(pool, held, None) is not None)
        # Nothing overlaps: MIG runs on one device are disjoint and within 7 compute slices.
        for device in range(layout.devices):
            on = [h for h in held if h.device == device]
            if any(h.profile is None for h in on):
                assert len(on) == 1
            elif layout.kind == "mig":
                runs = [set(range(h.start or 0, (h.start or 0) + layout.shares[h.profile or ""].memory)) for h in on]
                assert sum(len(r) for r in runs) == len(set().union(*runs)) <= layout.memory_slices
                assert sum(layout.shares[h.profile or ""].compute for h in on) <= layout.compute_slices
            else:
                assert len({h.profile for h in on}) <= 1


# -- pricing helpers -------------------------------------------------------------------------------


def test_a_grant_costs_its_share_of_the_device_price() -> None:
    slice_ = Grant(requested=0.5, honored=True, share=4 / 7, units=1, devices=4 / 7, scheme="mig", geometry="mig-7c8m", profile="4g.40gb")
    assert grant_cost(2.0, slice_) == round(2.0 * 4 / 7, 9)
    assert fits(slice_, Capacity(0, {"4g.40gb": 1})) and not fits(slice_, Capacity(3, {}))
    whole = Grant(requested=2, honored=True, share=1.0, units=2, devices=2.0)
    assert grant_cost(2.5, whole) == 5.0
    assert fits(whole, Capacity(2, {})) and not fits(whole, Capacity(1, {"4g.40gb": 9}))


def test_prices_and_carbon_default_from_the_tables() -> None:
    bare = Pool("p", "hpc", "amd", 1, "eu")
    assert effective_cost(bare, TABLES) == TABLES.default_cost("amd")
    assert effective_cost(Pool("p", "hpc", "amd", 1, "eu", cost_per_hour=1.25), TABLES) == 1.25
    assert carbon_per_hour(Pool("p", "hpc", "amd", 1, "eu", carbon_factor=99), TABLES) == 99
    assert carbon_per_hour(bare, TABLES) == TABLES.default_carbon_factor("eu")


def test_balanced_scores_weigh_cost_and_carbon_each_against_the_highest() -> None:
    assert balanced_scores([(1.0, 100.0), (2.0, 50.0)], 0.5) == [0.75, 0.75]
    assert balanced_scores([(1.0, 100.0), (2.0, 50.0)], 0.0) == [0.5, 1.0]
    assert balanced_scores([(1.0, 100.0), (2.0, 50.0)], 1.0) == [1.0, 0.5]
    assert balanced_scores([(0.0, 0.0)], 0.3) == [0.0]


@pytest.mark.parametrize("raw", [[[0, None, None, None]], [[1, "1g.10gb", 3, 1], [0, "cpx", 2, 1]], []])
def test_holdings_read_back_as_written(raw: list[list[object]]) -> None:
    assert packing.holdings_to_json(packing.holdings_from_json(raw)) == raw

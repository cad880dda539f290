"""Placement invariants, property-based, through the real OPA.

Random fleets and workloads go through the product (``Hardware.what_if``, the decision core over
arbitrary free capacity, and ``Hardware.place`` on a real SQLite store); every decision is checked
against a small reference oracle written here from the reviewed tables
(policies/examlops/tables/*.yaml) and the README's semantics, not from the Rego:

* portability: the engine supports the backend of the placed accelerator;
* residency: open anywhere known; eu-only only in an EU region (the explicit EU-27 table);
  no-egress also HPC only and in the data's jurisdiction, restricted also in the data's own
  region (EU HPC only without a data region); each class admits a subset of the laxer one's pools;
* capabilities: the pool (plus its model's table entry) advertises every requested tag;
* capacity: the grant fits what the pool can place (empty devices, or a placeable slice); a
  fraction gets the smallest slice that covers it, or, when that one has no room, the smallest
  larger one with room that the budget allows (flagged larger, priced as granted); a pool that
  lists no nodes is one node of all its devices, and one with fewer in all than the workload asks
  of one node can never take it (pool_too_small, never: it may not wait for it);
* HPC first: cloud only by burst (target cloud, or allow_burst when no HPC pool can take it);
  fallback tiers (requested accelerator before a stand-in the reviewed fallback table allows;
  never a CPU unless the workload allows it);
* the chosen pool holds the cheapest grant (price per device-hour x devices granted; ties by name);
* ``fallback`` is true exactly when the placed accelerator differs from the requested one;
* ``fraction_honored`` is false whenever the pool cannot partition;
* quotas: a project may hold at most its nominal quota of a class, or borrow within its borrowing
  limit what its cohort leaves unused; a grant no quota could hold, or of a class the project has
  no quota of, is refused (never); device-hours used up stop new work (not now).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from examlops_policy.hardware import Hardware
from examlops_policy.model import Decision, Placement, Pool, PoolState, Rejection, Workload
from examlops_policy.model import Capacity, Holding, StartEstimate
from examlops_policy._core.waiting import Starts
from examlops_policy.opa import stop_server
from tests.conftest import open_hardware

ROOT = Path(__file__).resolve().parents[1]
# The tables the product evaluates with (EXA_POLICY_DIR wins, as in examlops_policy.tables).
TABLE_DIR = Path(os.environ.get("EXA_POLICY_DIR") or ROOT / "policies") / "examlops" / "tables"

# --- the reviewed tables, read independently of examlops_policy.tables ------------------------


def _tables() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted(TABLE_DIR.glob("*.yaml")):
        merged.update(yaml.safe_load(path.read_text(encoding="utf-8")))
    return merged


T = _tables()
BACKEND: dict[str, str] = {a: v["backend"] for a, v in T["accelerators"].items()}
ENGINE_BACKENDS: dict[str, set[str]] = {e: set(v["backends"]) for e, v in T["engines"].items()}
MODELS: dict[str, dict[str, Any]] = T["models"]
REGIONS: dict[str, dict[str, Any]] = T["regions"]
EU_STATES: set[str] = set(T["eu_member_states"])
BY_VENDOR: dict[str, str] = T["partitioning"]["by_vendor"]
BY_MODEL: dict[str, str] = T["partitioning"]["by_model"]
SCHEMES: dict[str, dict[str, Any]] = T["partitioning"]["schemes"]
DEFAULT_COST: dict[str, float] = T["accounting"]["default_cost_per_hour"]
STAND_INS: dict[str, list[str]] = T["fallback"]["stand_ins"]
PROJECTS: dict[str, dict[str, float]] = T["budgets"]["projects"]
QUOTAS: dict[str, dict[str, Any]] = T["quotas"]["projects"]
UNASSIGNED: str = T["budgets"]["unassigned"]
DEFAULT_CARBON: dict[str, float] = T["accounting"]["default_carbon_factor"]
WORK_CLASSES: dict[str, dict[str, Any]] = T["throughput"]["classes"]
RESIDENCY_LEVEL = {"open": 0, "eu-only": 1, "no-egress": 2, "restricted": 3}

ACCELERATORS = sorted(BACKEND)
ENGINES = sorted(ENGINE_BACKENDS)
TOLERANCE = 1e-6  # granted MIG shares are sevenths; capacity compares with this slack

# --- the reference oracle ---------------------------------------------------------------------


def portable(engine: str, accelerator: str) -> bool:
    return BACKEND[accelerator] in ENGINE_BACKENDS[engine]


def in_eu(region: str) -> bool:
    entry = REGIONS[region]
    return entry.get("area") == "EU" or entry.get("country") in EU_STATES


def jurisdiction(region: str) -> str:
    entry = REGIONS[region]
    return str(entry.get("country") or entry.get("area"))


def residency_allows(pool: Pool, residency: str, data_region: str | None) -> bool:
    """The residency classes as the README states them, each at least as strict as the one before."""
    level = RESIDENCY_LEVEL[residency]
    if level >= 1 and not in_eu(pool.region):
        return False
    if level >= 2 and pool.target == "cloud":
        return False
    if level >= 2 and data_region is not None and jurisdiction(pool.region) != jurisdiction(data_region):
        return False
    return not (level >= 3 and data_region is not None and pool.region != data_region)


def may_stand_in(requested: str, accelerator: str, allow_cpu: bool) -> bool:
    return accelerator == requested or accelerator in STAND_INS.get(requested, []) or (accelerator == "cpu" and allow_cpu)


def advertised(pool: Pool) -> set[str]:
    tags = set(pool.capabilities)
    if pool.model is not None:
        tags |= set(MODELS[pool.model.lower()].get("capabilities", []))
    return tags


def partition_scheme(pool: Pool) -> dict[str, Any] | None:
    """The scheme a pool can cut its devices with, or None when it cannot partition."""
    if not pool.supports_fractions:
        return None
    name = BY_MODEL.get(pool.model.lower()) if pool.model is not None else BY_VENDOR.get(pool.accelerator)
    return SCHEMES[name] if name else None


def can_partition(pool: Pool) -> bool:
    return partition_scheme(pool) is not None


@dataclass(frozen=True)
class Expected:
    honored: bool
    devices: float
    profile: str | None
    codes: frozenset[str]
    tier: int
    larger: bool = False

    @property
    def admissible(self) -> bool:
        return not self.codes


# A pool with nothing on it: every slice fits one of its devices.
EMPTY = None


def expected_grant(pool: Pool, w: Workload) -> tuple[bool, float, str | None, int]:
    """(honored, devices held, slice profile or None for whole devices, units)."""
    if w.fraction >= 1:
        return True, float(w.count), None, w.count
    scheme = partition_scheme(pool)
    if scheme is None:
        return False, float(w.count), None, w.count
    of = scheme["of"]
    best = min((s for s in scheme["slices"] if Fraction(s["units"], of) >= Fraction(w.fraction)), key=lambda s: s["units"])
    return True, best["units"] / of, best["profile"], 1


Use = dict[str, dict[str, dict[str, float]]]  # {"devices": {project: {class: n}}, "device_hours": {...}}
EPS = 1e-9
NEVER_BY_QUOTA = frozenset({"quota_too_small", "quota_unknown"})  # whatever the projects hold


def quota_codes(pool: Pool, w: Workload, devices: float, use: Use) -> set[str]:
    """quotas.yaml as its comments state it (Kueue's ClusterQueue and cohort): a project not listed
    has no quota; a listed one only the classes it lists; within the nominal quota, or borrowing
    within the borrowing limit what the cohort's members leave of theirs; device-hours per period."""
    project = w.project or UNASSIGNED
    q = QUOTAS.get(project)
    if q is None:
        return set()
    entry = q["accelerators"].get(pool.accelerator)
    if entry is None:
        return {"quota_unknown"}
    held = use.get("devices", {})
    codes: set[str] = set()
    nominal = entry.get("devices")
    if nominal is not None:
        cohort = q.get("cohort")
        members = [p for p, other in QUOTAS.items() if cohort is not None and other.get("cohort") == cohort and "devices" in other["accelerators"].get(pool.accelerator, {})]
        pooled = sum(QUOTAS[m]["accelerators"][pool.accelerator]["devices"] for m in members)
        limit = entry.get("borrowing_limit")
        most = nominal if cohort is None else min(nominal + (limit if limit is not None else pooled), pooled)
        if devices > most + EPS:
            return {"quota_too_small"}
        mine = held.get(project, {}).get(pool.accelerator, 0.0)
        within = mine + devices <= nominal + EPS
        borrowing = (
            cohort is not None
            and (limit is None or mine + devices <= nominal + limit + EPS)
            and sum(held.get(m, {}).get(pool.accelerator, 0.0) for m in members) + devices <= pooled + EPS
        )
        if not within and not borrowing:
            codes.add("quota_exceeded")
    hours = entry.get("device_hours")
    if hours is not None and use.get("device_hours", {}).get(project, {}).get(pool.accelerator, 0.0) >= hours - EPS:
        codes.add("quota_exceeded")
    return codes


def covering_slices(pool: Pool, w: Workload) -> list[tuple[float, str]]:
    """(devices, profile) of every slice of the pool's scheme that covers the fraction, smallest
    first; empty where the pool cannot partition or no fraction is asked."""
    scheme = partition_scheme(pool)
    if scheme is None or w.fraction >= 1:
        return []
    of = scheme["of"]
    slices = sorted((s for s in scheme["slices"] if Fraction(s["units"], of) >= Fraction(w.fraction)), key=lambda s: s["units"])
    return [(s["units"] / of, s["profile"]) for s in slices]


def room(pool: Pool, capacity: Capacity | None, profile: str | None, units: int) -> bool:
    if capacity is EMPTY:
        return profile is not None or pool.count >= units
    return capacity.whole >= units if profile is None else capacity.slices.get(profile, 0) >= units


def expect(pool: Pool, capacity: Capacity | None, w: Workload, use: Use | None = None) -> Expected:
    target = w.target or "any"
    honored, devices, profile, units = expected_grant(pool, w)
    # The pool gives the first of its grants with room in capacity and quota: the smallest covering
    # slice, then (when the budget allows that one) each larger covering slice the budget allows and
    # no quota refuses outright; with none, the first with room in capacity (over its quota); with
    # none, the smallest.
    options = [(devices, profile)]
    if pool.region in REGIONS and not over_budget(pool, w, devices):
        options += [(d, p) for d, p in covering_slices(pool, w)[1:]
                    if not over_budget(pool, w, d) and not quota_codes(pool, w, d, {}) & NEVER_BY_QUOTA]  # fmt: skip
    spacious = [o for o in options if room(pool, capacity, o[1], units)]
    roomy = [o for o in spacious if not quota_codes(pool, w, o[0], use or {})]
    given = roomy[0] if roomy else spacious[0] if spacious else options[0]
    larger = given != options[0]
    devices, profile = given
    codes: set[str] = set()
    if not portable(w.engine, pool.accelerator):
        codes.add("backend_unsupported")
    if pool.target == "cloud" and target != "cloud" and not w.allow_burst:
        codes.add("burst_not_allowed")
    elif pool.target == "hpc" and target == "cloud":
        codes.add("target_mismatch")
    if not set(w.capabilities) <= advertised(pool):
        codes.add("capability_missing")
    if pool.region not in REGIONS:
        codes.add("region_unknown")
    elif not residency_allows(pool, w.residency, w.data_region):
        codes.add("residency_forbids")
    if not may_stand_in(w.accelerator, pool.accelerator, w.allow_cpu_fallback):
        codes.add("fallback_not_allowed")
    if pool.drained:
        codes.add("pool_drained")
    if pool.spot and w.spot == "never":
        codes.add("spot_not_accepted")
    elif not pool.spot and w.spot == "require":
        codes.add("spot_required")
    if pool.region in REGIONS and over_budget(pool, w, devices):
        codes.add("budget_exceeded")
    codes |= quota_codes(pool, w, devices, use or {})
    if not pool.node_tracked and profile is None and units > pool.count:
        codes.add("pool_too_small")  # one node of all its devices, fewer than asked: never
    if not spacious:
        codes.add("capacity_exhausted" if profile is None else "slice_unavailable")
    tier = 2 * (pool.target == "cloud") + (pool.accelerator != w.accelerator)
    return Expected(honored, devices, profile, frozenset(codes), tier, larger)


def cost(pool: Pool) -> float:
    return pool.cost_per_hour if pool.cost_per_hour is not None else DEFAULT_COST[pool.accelerator]


def carbon(pool: Pool) -> float:
    """gCO2e per device-hour as the README states it: the pool's factor, else board power x PUE x
    grid intensity where the power is known, else its family's reference power (a CPU socket's,
    or the reference accelerator's: the region's reviewed default) x PUE x grid intensity."""
    if pool.carbon_factor is not None:
        return pool.carbon_factor
    power = pool.power_w if pool.power_w is not None else (MODELS[pool.model].get("power_w") if pool.model else None)
    region = REGIONS[pool.region]
    pue = pool.pue if pool.pue is not None else region.get("pue")
    grid = region.get("grid_gco2_per_kwh")
    if power is not None and pue is not None and grid is not None:
        return round(power / 1000.0 * pue * grid, 3)
    reference = T["accounting"]["reference_power_w"]
    watts = T["accounting"].get("reference_power_w_by_accelerator", {}).get(pool.accelerator, reference)
    if pool.region in DEFAULT_CARBON and watts == reference:
        return float(DEFAULT_CARBON[pool.region])
    if grid is None:
        return round(float(T["accounting"]["fallback_carbon_factor"]) * watts / reference, 1)
    return round(watts / 1000.0 * T["accounting"]["reference_pue"] * grid, 1)


def caps(w: Workload) -> tuple[float | None, float | None]:
    """The lower of the workload's and its project's caps on cost and carbon per hour."""
    project = PROJECTS.get(w.project or "", {}) if w.project else {}
    out = []
    for mine, theirs in ((w.max_cost_per_hour, project.get("max_cost_per_hour")), (w.max_carbon_per_hour, project.get("max_carbon_per_hour"))):
        given = [c for c in (mine, theirs) if c is not None]
        out.append(min(given) if given else None)
    return out[0], out[1]


def over_budget(pool: Pool, w: Workload, devices: float) -> bool:
    max_cost, max_carbon = caps(w)
    return (max_cost is not None and cost(pool) > max_cost / devices + 1e-9) or (
        max_carbon is not None and carbon(pool) > max_carbon / devices + 1e-9
    )


def choose(w: Workload, eligible: frozenset[str], by_name: dict[str, Pool], per_pool: dict[str, Expected]) -> str | None:
    """The workload's objective over the eligible pools: cost, carbon (then cost) or balanced."""
    if not eligible:
        return None
    money = {n: round(cost(by_name[n]) * per_pool[n].devices, 9) for n in eligible}
    grams = {n: round(carbon(by_name[n]) * per_pool[n].devices, 9) for n in eligible}
    if w.optimize == "cost":
        return min(eligible, key=lambda n: (money[n], n))
    if w.optimize == "carbon":
        return min(eligible, key=lambda n: (grams[n], money[n], n))
    if w.optimize in ("work-cost", "work-carbon", "work-time"):
        return min(eligible, key=lambda n: work_order(w, by_name[n], per_pool[n], money[n], grams[n]))
    top_money, top_grams = max(money.values()), max(grams.values())

    def score(n: str) -> float:
        a = money[n] / top_money if top_money else 0.0
        b = grams[n] / top_grams if top_grams else 0.0
        return round((1 - w.carbon_weight) * a + w.carbon_weight * b, 9)

    return min(eligible, key=lambda n: (score(n), money[n], n))


def work_rate(w: Workload, pool: Pool, e: Expected) -> float | None:
    """What the grant does of the workload's work per second, from the table read here: a whole
    device's row x devices; no row for a slice (the table measures no profile yet), nor for a pool
    of no model or a model the class lacks."""
    if w.work_class is None or pool.model is None or e.profile is not None:
        return None
    row = WORK_CLASSES[w.work_class]["models"].get(pool.model.lower())
    return None if row is None else float(row["per_second"]) * e.devices


def work_order(w: Workload, pool: Pool, e: Expected, money: float, grams: float) -> tuple[Any, ...]:
    """The README's ranking by work, without start estimates: pools whose throughput is known first,
    by the job's cost, carbon or run time; the others as they rank by cost or carbon per hour."""
    rate = work_rate(w, pool, e)
    per_hour = grams if w.optimize == "work-carbon" else money
    if w.optimize == "work-time":
        return (1, 0, money, pool.name) if rate is None else (0, w.work / rate, money, pool.name)  # type: ignore[operator]
    return (1, per_hour, money, pool.name) if rate is None else (0, per_hour * w.work / (rate * 3600), money, pool.name)  # type: ignore[operator]


@dataclass(frozen=True)
class Oracle:
    per_pool: dict[str, Expected]
    eligible: frozenset[str]
    chosen: str | None
    portable: bool
    burst_attempted: bool


NOT_NOW = frozenset({"capacity_exhausted", "slice_unavailable", "quota_exceeded"})


def refuse_budget_fallbacks(per_pool: dict[str, Expected], w: Workload) -> dict[str, Expected]:
    """A workload that does not fall back for budget: a stand-in is refused where a better tier
    holds a pool of the requested accelerator stopped by the budget alone and none that only lacks
    room (the README's rule, from the codes above)."""
    if w.allow_budget_fallback or caps(w) == (None, None):
        return per_pool
    requested = [e for e in per_pool.values() if e.tier % 2 == 0]
    out = {}
    for name, e in per_pool.items():
        better = [r for r in requested if r.tier < e.tier]
        full = any(not (r.codes - NOT_NOW) for r in better)
        over = any(r.codes - NOT_NOW == {"budget_exceeded"} for r in better)
        refused = e.tier % 2 == 1 and over and not full
        out[name] = dataclasses.replace(e, codes=e.codes | {"budget_fallback_forbidden"}) if refused else e
    return out


def oracle(w: Workload, pools: Sequence[Pool], capacities: dict[str, Capacity | None], use: Use | None = None) -> Oracle:
    per_pool = refuse_budget_fallbacks({p.name: expect(p, capacities.get(p.name, EMPTY), w, use) for p in pools}, w)
    ok = portable(w.engine, w.accelerator)
    admissible = {n: e for n, e in per_pool.items() if e.admissible} if ok else {}
    eligible: frozenset[str] = frozenset()
    if admissible:
        best = min(e.tier for e in admissible.values())
        eligible = frozenset(n for n, e in admissible.items() if e.tier == best)
    by_name = {p.name: p for p in pools}
    chosen = choose(w, eligible, by_name, per_pool)
    hpc_admissible = any(e.tier < 2 for e in admissible.values())
    target = w.target or "any"
    attempted = ok and (target == "cloud" or (w.allow_burst and not hpc_admissible))
    return Oracle(per_pool, eligible, chosen, ok, attempted)


# --- checking a decision ----------------------------------------------------------------------


def check(
    decision: Decision, w: Workload, pools: Sequence[Pool], capacities: dict[str, Capacity | None] | None = None, use: Use | None = None
) -> Oracle:
    """Assert every invariant of ``decision`` against the oracle; return the oracle's view.

    ``capacities``: what each pool can place (EMPTY: nothing is held on it); ``use``: what the
    projects hold (nothing when not given)."""
    capacities = capacities or {}
    want = oracle(w, pools, capacities, use)
    by_name = {p.name: p for p in pools}
    if not want.portable:
        assert isinstance(decision, Rejection), f"non-portable workload was placed: {decision}"
        assert decision.code == "backend_unsupported"
        return want

    # Every pool's verdict: eligibility, tier, grant and the reasons that stop it.
    assert {v.pool for v in decision.verdicts} == set(by_name)
    for v in decision.verdicts:
        e = want.per_pool[v.pool]
        never_or_not_now = {r.code for r in v.reasons if r.kind != "preference"}
        assert never_or_not_now == e.codes, f"{v.pool}: reasons {sorted(never_or_not_now)}, expected {sorted(e.codes)}"
        assert v.admissible == e.admissible, v.pool
        assert v.tier == e.tier, v.pool
        assert v.eligible == (v.pool in want.eligible), v.pool
        assert v.fallback == (by_name[v.pool].accelerator != w.accelerator), v.pool
        assert v.burst == (by_name[v.pool].target == "cloud"), v.pool
        assert v.grant.honored == e.honored, v.pool
        assert v.grant.devices == pytest.approx(e.devices, abs=1e-9), v.pool
        assert v.grant.profile == e.profile, v.pool
        assert v.grant.larger == e.larger, v.pool
        assert v.cost_per_hour == cost(by_name[v.pool]), v.pool

    assert decision.burst.attempted == want.burst_attempted

    if want.chosen is None:
        assert isinstance(decision, Rejection), f"placed on {getattr(decision, 'pool', None)}; oracle finds no eligible pool"
        if decision.burst.verdict == "blocked":
            # A blocked burst names a cloud pool stopped by residency alone.
            blocked = want.per_pool[decision.burst.pool or ""]
            assert by_name[decision.burst.pool or ""].target == "cloud"
            assert blocked.codes and blocked.codes <= {"residency_forbids", "region_unknown"}
        return want

    assert isinstance(decision, Placement), f"rejected ({decision}); oracle places on {want.chosen}"
    pool = by_name[decision.pool]
    target = w.target or "any"
    # The chosen pool is the objective's best of the eligible pools (cheapest grant by default).
    assert decision.pool == want.chosen
    if w.optimize == "cost":
        grant_costs = [round(cost(by_name[n]) * want.per_pool[n].devices, 9) for n in want.eligible]
        assert round(decision.grant_cost_per_hour, 9) == min(grant_costs)
    max_cost, max_carbon = caps(w)
    assert max_cost is None or decision.grant_cost_per_hour <= max_cost + 1e-6
    assert max_carbon is None or decision.carbon_factor * decision.grant.devices <= max_carbon + 1e-6
    # Portability, residency, capabilities, capacity: never violated.
    assert portable(w.engine, decision.accelerator)
    assert pool.region in REGIONS
    assert residency_allows(pool, w.residency, w.data_region)
    for laxer in [r for r, level in RESIDENCY_LEVEL.items() if level < RESIDENCY_LEVEL[w.residency]]:
        assert residency_allows(pool, laxer, w.data_region), f"{w.residency} admits {pool.name} but {laxer} does not"
    assert set(w.capabilities) <= advertised(pool)
    assert may_stand_in(w.accelerator, pool.accelerator, w.allow_cpu_fallback)
    expected = want.per_pool[pool.name]
    assert room(pool, capacities.get(pool.name, EMPTY), expected.profile, decision.grant.units)
    # HPC first; cloud only by burst.
    if pool.target == "cloud":
        assert target == "cloud" or w.allow_burst
        assert target == "cloud" or not any(want.per_pool[n].admissible and by_name[n].target == "hpc" for n in by_name)
        assert decision.burst.attempted and decision.burst.verdict == "allowed"
    else:
        assert target != "cloud"
    # Honest fallback: exactly when the accelerator differs; preferred only when no requested one fits.
    assert decision.fallback == (decision.accelerator != w.accelerator)
    if decision.fallback:
        assert not any(
            want.per_pool[n].admissible and by_name[n].accelerator == w.accelerator and by_name[n].target == pool.target
            for n in by_name
        )
    # Fractions: honored only on a partitionable pool with supports_fractions.
    if not can_partition(pool):
        assert decision.fraction_honored is (w.fraction >= 1)
    if w.fraction >= 1:
        assert decision.fraction_honored is True
        assert decision.grant.devices == w.count
    if decision.fraction_honored and w.fraction < 1:
        assert pool.supports_fractions and can_partition(pool)
        assert w.fraction - 1e-9 <= decision.grant.share < 1 + 1e-12
    return want


# --- strategies -------------------------------------------------------------------------------

NAMES = ["a", "b", "c", "hpc-1", "hpc-2", "cloud-1", "cloud.2", "Z9", "m_1", "zz"]
TAGS = ["fp8", "bf16", "fp4", "hbm3"]
PRICES = [None, None, 1.5, 1.8, 2.5]  # 1.5 and 1.8 are also default prices: ties are common, broken by name
REGION_NAMES = sorted(REGIONS)
COARSE = ["eu", "us", "ch", "uk", "eu-west-2", "eu-central-2", "eu-west-1", "norwayeast"]
# Exact slice boundaries (k/7 for MIG, k/8 for AMD compute partitions) and values between them.
EXACT = [k / 7 for k in range(1, 7)] + [k / 8 for k in range(1, 8)]
FRACTIONS = [0.999, 0.9, 0.6, 0.3, 0.2, 0.1, 0.01]


@st.composite
def pools_strategy(draw: st.DrawFn, min_size: int = 0, max_size: int = 7) -> list[Pool]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=min_size, max_size=max_size, unique=True))
    pools = []
    for name in names:
        accelerator = draw(st.sampled_from(ACCELERATORS))
        models = sorted(m for m, e in MODELS.items() if e["accelerator"] == accelerator)
        model = draw(st.sampled_from([None, *models, *models])) if models else None
        if model is not None and draw(st.booleans()):
            model = model.upper()  # pools name models case-insensitively
        pools.append(
            Pool(
                name=name,
                target=draw(st.sampled_from(["hpc", "cloud"])),
                accelerator=accelerator,
                count=draw(st.integers(1, 8)),
                region=draw(st.sampled_from(COARSE) | st.sampled_from(REGION_NAMES)),
                cost_per_hour=draw(st.sampled_from(PRICES)),
                supports_fractions=draw(st.booleans()),
                capabilities=tuple(draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True))),
                model=model,
                spot=draw(st.sampled_from([False, False, False, True])),
                drained=draw(st.sampled_from([False, False, False, False, False, True])),
            )
        )
    return pools


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    fraction = draw(
        st.just(1.0)
        | st.sampled_from(EXACT)
        | st.sampled_from(FRACTIONS)
        | st.floats(min_value=0.001, max_value=1.0, exclude_min=True)
    )
    count = 1 if fraction < 1 else draw(st.integers(1, 10))
    accelerator = draw(st.sampled_from(ACCELERATORS))
    # Mostly an engine that can run on the requested accelerator (else the workload is rejected
    # outright and no pool is examined); sometimes any engine.
    compatible = [e for e in ENGINES if portable(e, accelerator)]
    engine = draw(st.sampled_from(compatible) | st.sampled_from(compatible) | st.sampled_from(ENGINES))
    return Workload(
        name=draw(st.sampled_from(["train", "w-1", "Serve.2"])),
        accelerator=accelerator,
        capabilities=tuple(draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True))),
        target=draw(st.sampled_from([None, "hpc", "cloud", "any"])),
        engine=engine,
        fraction=fraction,
        count=count,
        residency=draw(st.sampled_from(["open", "eu-only", "no-egress", "restricted"])),
        allow_burst=draw(st.booleans()),
        data_region=draw(st.sampled_from([None, None, "eu", "de-juelich", "fi-kajaani", "eu-central-1", "us-east-1"])),
        allow_cpu_fallback=draw(st.booleans()),
        optimize=draw(st.sampled_from(["cost", "cost", "carbon", "balanced", "work-cost", "work-carbon", "work-time"])),
        carbon_weight=draw(st.sampled_from([0.0, 0.5, 0.8, 1.0])),
        max_cost_per_hour=draw(st.sampled_from([None, None, None, 1.0, 2.5, 8.0])),
        max_carbon_per_hour=draw(st.sampled_from([None, None, None, 150.0, 500.0])),
        project=draw(st.sampled_from([None, None, *sorted(PROJECTS), *sorted(QUOTAS)])),
        spot=draw(st.sampled_from(["never", "never", "allow", "require"])),
        allow_budget_fallback=draw(st.sampled_from([True, True, False])),
        **draw(work_of()),
    )


@st.composite
def work_of(draw: st.DrawFn) -> dict[str, Any]:
    """A workload's work: mostly a class of the throughput table and an amount; sometimes none."""
    if draw(st.integers(0, 3)) == 0:
        return {}
    return {"work_class": draw(st.sampled_from(sorted(WORK_CLASSES))), "work": draw(st.sampled_from([1.0, 500.0, 20000.0, 3e6]))}


@st.composite
def budget_fallback_cases(draw: st.DrawFn) -> tuple[list[Pool], Workload]:
    """A capped workload over pools of the requested accelerator (some over its cap) and of its
    stand-ins, with a few drawn freely beside them: the cases where a stand-in is reached for
    budget, for capacity or because the requested accelerator is unavailable, which the free
    strategies above seldom draw together."""
    requested = draw(st.sampled_from([a for a in ACCELERATORS if STAND_INS.get(a)]))
    stand_ins = STAND_INS[requested]
    names = iter(draw(st.permutations(NAMES)))
    pools = []
    for accelerator in [requested] * draw(st.integers(1, 2)) + [draw(st.sampled_from(stand_ins)) for _ in range(draw(st.integers(1, 2)))]:
        pools.append(
            Pool(
                name=next(names),
                target=draw(st.sampled_from(["hpc", "hpc", "cloud"])),
                accelerator=accelerator,
                count=draw(st.integers(1, 4)),
                region=draw(st.sampled_from(["eu", "us", "de-juelich", "fi-kajaani"])),
                cost_per_hour=draw(st.sampled_from([0.5, 0.9, 1.5, 2.5, 4.0])),
                spot=draw(st.sampled_from([False, False, True])),
            )
        )
    extra = draw(pools_strategy(max_size=2))
    pools += [dataclasses.replace(p, name=next(names)) for p in extra]
    w = Workload(
        "train",
        requested,
        engine="generic",
        target=draw(st.sampled_from([None, "hpc", "any"])),
        allow_burst=draw(st.booleans()),
        max_cost_per_hour=draw(st.sampled_from([None, 1.0, 2.0])),
        max_carbon_per_hour=draw(st.sampled_from([None, None, 150.0, 400.0])),
        project=draw(st.sampled_from([None, None, *sorted(PROJECTS)])),
        optimize=draw(st.sampled_from(["cost", "carbon", "balanced"])),
        spot=draw(st.sampled_from(["never", "allow"])),
        allow_budget_fallback=draw(st.sampled_from([False, False, True])),
        allow_cpu_fallback=draw(st.booleans()),
    )
    return pools, w


@st.composite
def capacities_for(draw: st.DrawFn, pools: list[Pool]) -> dict[str, Capacity | None]:
    """What each pool can place: nothing held, or empty devices and placeable slices drawn freely
    (the decision only compares them; how they pack is the store's, checked further down)."""
    out: dict[str, Capacity | None] = {}
    for p in pools:
        if draw(st.booleans()):
            out[p.name] = EMPTY
            continue
        scheme = partition_scheme(p)
        slices = {s["profile"]: draw(st.integers(0, 3)) for s in scheme["slices"]} if scheme else {}
        out[p.name] = Capacity(draw(st.integers(0, p.count)), slices)
    return out


def states_of(pools: Sequence[Pool], capacities: dict[str, Capacity | None], tables: Any) -> list[PoolState]:
    from examlops_policy._core.packing import layout_of, summarize

    states = []
    for p in pools:
        cap = capacities.get(p.name, EMPTY)
        states.append(PoolState(p, float(p.count), summarize(layout_of(p, tables), []) if cap is EMPTY else cap))
    return states


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def module_hw(tmp_path_factory: pytest.TempPathFactory, opa_home: Path) -> Iterator[Hardware]:
    """A Hardware deciding with the session's real OPA (``opa_home``, started on demand)."""
    for var in ("EXA_OPA_URL", "EXA_DB_URL"):
        if os.environ.get(var):
            pytest.skip(f"{var} is set; these tests run against the local OPA and policies")
    home = tmp_path_factory.mktemp("invariants")
    hardware = open_hardware(home)
    try:
        yield hardware
    finally:
        hardware.close()
        stop_server(home)


SETTINGS = settings(
    max_examples=int(os.environ.get("EXA_INVARIANT_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=os.environ.get("EXA_HYPOTHESIS_DERANDOMIZE") == "1",
)

# --- the properties ---------------------------------------------------------------------------


@SETTINGS
@given(pools=pools_strategy(), w=workloads())
def test_what_if_placement_satisfies_every_invariant(module_hw: Hardware, pools: list[Pool], w: Workload) -> None:
    """Over pools with nothing held on them (what_if), the decision is exactly the oracle's."""
    decision = module_hw.what_if(w, pools)
    check(decision, w, pools)


@SETTINGS
@given(pools=pools_strategy(min_size=1), w=workloads(), data=st.data(), rotate=st.integers(0, 6))
def test_decision_over_partly_used_pools_respects_capacity(module_hw: Hardware, pools: list[Pool], w: Workload, data: st.DataObject, rotate: int) -> None:
    """The decision core over pools with arbitrary capacity; the input order does not matter."""
    capacities = data.draw(capacities_for(pools))
    states = states_of(pools, capacities, module_hw.tables)
    decision = module_hw.engine.decide(w, states)
    check(decision, w, pools, capacities)
    shifted = states[rotate % len(states):] + states[: rotate % len(states)]
    again = module_hw.engine.decide(w, list(reversed(shifted)))
    assert type(again) is type(decision)
    assert getattr(again, "pool", None) == getattr(decision, "pool", None)
    assert again.provenance.input_digest == decision.provenance.input_digest


@st.composite
def quota_use(draw: st.DrawFn, w: Workload) -> Use:
    """What the projects hold: for the workload's project, around the edges of its quotas (its
    nominal quota and its cohort's, less what the workload asks, give or take); for the others,
    drawn freely; device-hours around green-research's period quota."""
    asks = float(w.count) if w.fraction >= 1 else w.fraction
    devices: dict[str, dict[str, float]] = {}
    for project in [*sorted(QUOTAS), UNASSIGNED]:
        for accelerator in ("nvidia", "amd"):
            entry = QUOTAS.get(project, {}).get("accelerators", {}).get(accelerator, {})
            edges = [0.0, 1.0, 4.0, 16.0, 64.0, 70.0, 96.0]
            if project == (w.project or UNASSIGNED) and "devices" in entry:
                edge = entry["devices"] - asks
                edges += [edge - 1, edge, edge + 0.5, edge + 1, edge + entry.get("borrowing_limit", 0)]
            n = max(0.0, draw(st.sampled_from(edges)))
            if n:
                devices.setdefault(project, {})[accelerator] = n
    hours = draw(st.sampled_from([0.0, 0.0, 1999.5, 2000.0, 2500.0]))
    out: Use = {"devices": devices}
    if hours:
        out["device_hours"] = {"green-research": {"nvidia": hours}}
    return out


@SETTINGS
@given(pools=pools_strategy(min_size=1), w=workloads(), data=st.data())
def test_python_selection_equals_the_policys_reference_decision(module_hw: Hardware, pools: list[Pool], w: Workload, data: st.DataObject) -> None:
    """Selection is the one piece of decision logic in Python: the policy's complete reference rule
    gives the same pool or rejection, burst verdict and reasons, over random fleets, capacity and
    what the projects hold (their quotas); and both are the oracle's."""
    from examlops_policy._core.engine import differences, reference_input
    from examlops_policy._core.quota import QuotaUse

    capacities = data.draw(capacities_for(pools))
    use = data.draw(quota_use(w))
    states = sorted(states_of(pools, capacities, module_hw.tables), key=lambda s: s.pool.name)
    prepared = module_hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    decision = prepared.decide(caps, module_hw.tables, quota=QuotaUse.from_json(use))
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about, quota_use=dict(use)))  # type: ignore[arg-type]
    assert differences(decision, reference) == []
    check(decision, w, pools, capacities, use)


@SETTINGS
@given(case=budget_fallback_cases(), data=st.data())
def test_a_fallback_for_budget_is_decided_alike_by_selection_the_policy_and_the_oracle(
    module_hw: Hardware, case: tuple[list[Pool], Workload], data: st.DataObject
) -> None:
    """A stand-in reached because the requested accelerator is over the budget: the note says so,
    and a workload that does not fall back for budget has it denied (budget_fallback_forbidden),
    the same in Python selection, the policy's reference rule and the oracle."""
    from examlops_policy._core.engine import differences, reference_input

    pools, w = case
    capacities = data.draw(capacities_for(pools))
    states = sorted(states_of(pools, capacities, module_hw.tables), key=lambda s: s.pool.name)
    prepared = module_hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    decision = prepared.decide(caps, module_hw.tables)
    check(decision, w, pools, capacities)
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about))
    assert differences(decision, reference) == []


# 2026-12-01T12:00:00Z: the decision's time of the cases with start estimates.
NOON = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
# Starts relative to the decision: past (means now), now, soon, later; None: no estimate.
OFFSETS = [-600, 0, 0, 1, 2, 600, 3600, 7200, None]


@st.composite
def starts_for(draw: st.DrawFn, pools: list[Pool]) -> Starts:
    """Start estimates for some of the pools (a pool not named has none; one named may have no
    start, with its reason), at NOON."""
    estimates = {}
    for p in pools:
        if draw(st.integers(0, 4)) == 0:
            continue  # not asked
        offset = draw(st.sampled_from(OFFSETS))
        source = draw(st.sampled_from(["slurm", "table", "now", "kubernetes"]))
        if offset is None:
            estimates[p.name] = StartEstimate(p.name, None, source, NOON, f"{source}: no estimate: busy", "busy")
        else:
            estimates[p.name] = StartEstimate(p.name, NOON + timedelta(seconds=offset), source, NOON, f"{source}: soon")
    return Starts(NOON, estimates)


@st.composite
def waiting_workloads(draw: st.DrawFn) -> Workload:
    """A workload of the free strategy with the waiting fields drawn: the earliest start, max_wait
    and a deadline (some already passed), often together."""
    w = draw(workloads())
    return dataclasses.replace(
        w,
        optimize=draw(st.sampled_from(["earliest", "earliest", "work-time", "work-time", "cost", w.optimize])),
        max_wait=draw(st.sampled_from([None, None, 0, 600, 3600, 86400])),
        deadline=draw(st.sampled_from([None, None, "2026-12-01T13:00:00Z", "2026-12-01T11:00:00Z", "2026-12-02T12:00:00+01:00"])),
        walltime=draw(st.sampled_from([None, 1800])),
    )


def _start_s(starts: Starts, name: str) -> int | None:
    """When a pool starts as the README says: its estimate, now when that is at most a second away."""
    e = starts.of(name)
    if e is None or e.at is None:
        return None
    at, now = int(e.at.timestamp()), int(NOON.timestamp())
    return now if at <= now + 1 else at


@SETTINGS
@given(pools=pools_strategy(min_size=1), w=waiting_workloads(), data=st.data())
def test_selection_with_start_estimates_equals_the_policys_reference_decision(
    module_hw: Hardware, pools: list[Pool], w: Workload, data: st.DataObject
) -> None:
    """With start estimates, max_wait, deadlines and the earliest start, Python selection and the
    policy's reference rule give the same pool or rejection and the same reasons; and, from the
    estimates alone: the chosen pool starts within the workload's limits, and under earliest no
    other eligible pool of its tier starts sooner."""
    from examlops_policy._core.engine import differences, reference_input

    capacities = data.draw(capacities_for(pools))
    starts = data.draw(starts_for(pools))
    states = sorted(states_of(pools, capacities, module_hw.tables), key=lambda s: s.pool.name)
    prepared = module_hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    decision = prepared.decide(caps, module_hw.tables, starts=starts)
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about, starts))
    assert differences(decision, reference) == []
    if not isinstance(decision, Placement):
        return
    assert decision.estimate == starts.of(decision.pool)
    start = _start_s(starts, decision.pool)
    now = int(NOON.timestamp())
    if w.max_wait is not None:
        assert start is not None and start <= now + w.max_wait + 1
    if w.deadline is not None:
        deadline = int(datetime.fromisoformat(w.deadline.replace("Z", "+00:00")).timestamp())
        assert now <= deadline + 1 and start is not None and start <= deadline + 1
    if w.optimize == "earliest":
        rivals = [_start_s(starts, v.pool) for v in decision.verdicts if v.eligible and v.pool != decision.pool]
        if start is None:
            assert all(r is None for r in rivals)
        else:
            assert all(r is None or r >= start for r in rivals)
    if w.optimize == "work-time" and w.work is not None:
        # No eligible pool whose start and throughput are known completes sooner than the chosen one.
        def done(v: Any) -> float | None:
            begins = _start_s(starts, v.pool)
            return None if v.work_rate is None or begins is None else begins + w.work / v.work_rate  # type: ignore[operator]

        mine = next(done(v) for v in decision.verdicts if v.pool == decision.pool)
        if mine is not None:
            assert all(d is None or d >= mine - 1e-6 for v in decision.verdicts if v.eligible and v.pool != decision.pool for d in [done(v)])


@settings(SETTINGS, max_examples=max(5, SETTINGS.max_examples // 8))
@given(pools=pools_strategy(min_size=1, max_size=5), ws=st.lists(workloads(), min_size=1, max_size=6))
# green-research borrows its cohort's AMD quota for one device; four more are over it (the quota
# counts what the first placement holds)
@example(
    pools=[Pool("a", "hpc", "amd", 1, "eu"), Pool("b", "hpc", "amd", 4, "eu")],
    ws=[Workload("train", "amd", engine="generic", project="green-research"), Workload("train", "amd", engine="generic", count=4, project="green-research")],
)
def test_recorded_placements_never_oversubscribe(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, pools: list[Pool], ws: list[Workload]
) -> None:
    """Placements recorded one after another on a real store: each one is the oracle's choice over
    what the pools can place then and what the projects hold then (their quotas), and no device
    ever holds more than fits on it."""
    home = tmp_path_factory.mktemp("store")
    accelerator = {p.name: p.accelerator for p in pools}
    held: dict[str, dict[str, float]] = {}  # project -> accelerator class -> devices, from the placements
    store_hw = Hardware(home=home, policy=module_hw.policy, tables=module_hw.tables)
    try:
        store_hw.apply([dataclasses.replace(p, drained=False) for p in pools])
        for p in pools:
            if p.drained:
                store_hw.drain(p.name)  # a pool is drained once registered
        for w in ws:
            before = {s.pool.name: s.capacity for s in store_hw.pools()}
            record = store_hw.place(w)
            check(record.decision, w, pools, dict(before), {"devices": {p: dict(row) for p, row in held.items()}})
            if isinstance(record.decision, Placement):
                row = held.setdefault(w.project or UNASSIGNED, {})
                cls = accelerator[record.decision.pool]
                row[cls] = row.get(cls, 0.0) + record.decision.grant.devices
            for p in pools:
                detail = store_hw.pool(p.name)
                state, holdings = detail.view.state, detail.holdings
                assert_devices_sound(state.pool, holdings)
        assert store_hw.verify_audit().ok
    finally:
        store_hw.close()


# --- devices: slices pack, modes do not mix, release frees exactly the slice -------------------

GEOMETRY: dict[str, Any] = T["geometry"]


def assert_devices_sound(pool: Pool, holdings: Sequence[Holding]) -> None:
    """What the reference says of a device, checked independently of the packer: a whole device
    holds nothing else; MIG runs sit at allowed starts, never overlap, and hold at most 7 compute
    slices; an AMD device runs one mode and at most its partitions."""
    scheme = partition_scheme(pool)
    geometry = GEOMETRY.get(scheme["geometry"]) if scheme else None
    by_device: dict[int, list[Holding]] = {}
    for h in holdings:
        assert 0 <= h.device < pool.count, f"{pool.name}: device {h.device} is not one of its {pool.count}"
        by_device.setdefault(h.device, []).append(h)
    for device, held in by_device.items():
        if any(h.profile is None for h in held):
            assert len(held) == 1, f"{pool.name} device {device}: a whole device shares with {held}"
            continue
        assert geometry is not None and scheme is not None, f"{pool.name}: slices on a pool that cannot partition"
        units = {s["profile"]: s["units"] for s in scheme["slices"]}
        if geometry["kind"] == "mig":
            memory: set[int] = set()
            compute = 0
            for h in held:
                share = geometry["shares"][str(units[h.profile])]
                assert h.start in share["starts"], f"{pool.name} device {device}: {h.profile} may not start at {h.start}"
                run = set(range(h.start, h.start + share["memory"]))
                assert not memory & run, f"{pool.name} device {device}: {h.profile}@{h.start} overlaps {sorted(memory & run)}"
                memory |= run
                compute += share["compute"]
            assert compute <= geometry["compute_slices"], f"{pool.name} device {device}: {compute} compute slices"
        else:
            modes = {h.profile for h in held}
            assert len(modes) == 1, f"{pool.name} device {device} mixes partition modes {sorted(modes)}"
            partitions = geometry["shares"][str(units[held[0].profile])]["partitions"]
            starts = [h.start for h in held]
            assert len(starts) == len(set(starts)) <= partitions, f"{pool.name} device {device}: partitions {starts}"


@st.composite
def slice_sequences(draw: st.DrawFn) -> tuple[Pool, list[tuple[str, float]]]:
    """A MIG or MI300X pool and a random sequence of slice requests ("place", fraction) and
    releases ("release", index into what is live)."""
    model = draw(st.sampled_from(["h100", "a100-40gb", "h200", "mi300x", "mi325x"]))
    accelerator = MODELS[model]["accelerator"]
    pool = Pool("p", "hpc", accelerator, draw(st.integers(1, 3)), "eu", model=model, supports_fractions=True)
    steps = draw(
        st.lists(
            st.tuples(st.just("place"), st.sampled_from(EXACT + [0.05, 0.3, 0.6, 1.0]))
            | st.tuples(st.just("release"), st.floats(0, 1, exclude_max=True)),
            min_size=1,
            max_size=25,
        )
    )
    return pool, steps


@settings(SETTINGS, max_examples=max(10, SETTINGS.max_examples // 4))
@given(case=slice_sequences())
def test_random_slice_requests_and_releases_never_overlap_or_mix_modes(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, case: tuple[Pool, list[tuple[str, float]]]
) -> None:
    """Random slice requests and releases on a MIG or MI300X pool: no device ever holds overlapping
    slices or mixed modes, the store's summary is what the devices say, a request is refused only
    when nothing fits, and a release frees exactly its slice."""
    from examlops_policy._core.packing import choose, layout_of, summarize

    pool, steps = case
    home = tmp_path_factory.mktemp("slices")
    store_hw = Hardware(home=home, policy=module_hw.policy, tables=module_hw.tables)
    layout = layout_of(pool, module_hw.tables)
    live: list[str] = []
    try:
        store_hw.apply([pool])
        for action, value in steps:
            before_detail = store_hw.pool("p")
            state, before = before_detail.view.state, before_detail.holdings
            if action == "place":
                w = Workload("s", accelerator=pool.accelerator, engine="generic", fraction=value, target="hpc")
                record = store_hw.place(w)
                if isinstance(record.decision, Placement):
                    live.append(record.id)
                    mine = set(record.decision.holdings)
                    after = store_hw.pool("p").holdings
                    assert sorted(map(repr, after)) == sorted(map(repr, [*before, *mine])), "a placement moved other slices"
                    # The smallest covering slice with room: a larger one only when the smaller have none.
                    covering = [c for _, c in covering_slices(pool, w)]
                    if covering:
                        fitting = [c for c in covering if choose(layout, before, c, 1) is not None]
                        assert record.decision.grant.profile == fitting[0]
                        assert record.decision.grant.larger == (fitting[0] != covering[0])
                else:
                    # Refused only when neither the grant nor a larger slice that covers it fits on any device.
                    grant = next(v.grant for v in record.decision.verdicts if v.pool == "p")
                    assert choose(layout, before, grant.profile, grant.units) is None
                    assert all(choose(layout, before, c, 1) is None for _, c in covering_slices(pool, w))
            elif live:
                ident = live.pop(int(value * len(live)))
                released = store_hw.decision(ident).decision
                assert isinstance(released, Placement)
                store_hw.release(ident)
                after = store_hw.pool("p").holdings
                assert sorted(map(repr, after)) == sorted(map(repr, [h for h in before if h not in released.holdings])) or (
                    len(before) - len(after) == len(released.holdings)
                ), "a release freed other slices"
            final = store_hw.pool("p")
            state, holdings = final.view.state, final.holdings
            assert_devices_sound(pool, holdings)
            assert state.capacity == summarize(layout, holdings), "the stored summary is not what the devices hold"
            for profile, n in state.capacity.slices.items():
                assert (n > 0) == (choose(layout, holdings, profile, 1) is not None), f"summary and packer disagree on {profile}"
        assert store_hw.verify_audit().ok
    finally:
        store_hw.close()


def amd_takes(pool: Pool, holdings: Sequence[Holding], profile: str | None) -> bool:
    """Whether one more ``profile`` (None: a whole device) fits on the MI300X-class pool, from the
    geometry table alone: a device runs one mode at a time, and takes a partition of its mode while
    it holds fewer than the mode's partitions, or any mode (or a whole device) when it is empty."""
    scheme = partition_scheme(pool)
    assert scheme is not None
    partitions = {s["profile"]: GEOMETRY[scheme["geometry"]]["shares"][str(s["units"])]["partitions"] for s in scheme["slices"]}
    held: dict[int, list[Holding]] = {}
    for h in holdings:
        held.setdefault(h.device, []).append(h)
    for device in range(pool.count):
        mine = held.get(device, [])
        if not mine:
            return True
        if profile is not None and all(h.profile == profile for h in mine) and len(mine) < partitions[profile]:
            return True
    return False


@st.composite
def amd_sequences(draw: st.DrawFn) -> tuple[Pool, list[tuple[str, float]]]:
    """An MI300X-class pool (beside an NVIDIA pool that may stand in for it) and a random sequence
    of fraction requests and releases."""
    model = draw(st.sampled_from(["mi300x", "mi325x"]))
    pool = Pool("amd-p", "hpc", "amd", draw(st.integers(1, 2)), "eu", model=model, supports_fractions=True)
    steps = draw(
        st.lists(
            st.tuples(st.just("place"), st.sampled_from([1 / 8, 0.2, 0.25, 0.3, 0.5, 0.6, 1.0]))
            | st.tuples(st.just("release"), st.floats(0, 1, exclude_max=True)),
            min_size=2,
            max_size=16,
        )
    )
    return pool, steps


@settings(SETTINGS, max_examples=max(10, SETTINGS.max_examples // 4))
@given(case=amd_sequences())
@example(case=(Pool("amd-p", "hpc", "amd", 1, "eu", model="mi300x", supports_fractions=True), [("place", 0.5), ("place", 0.25), ("place", 0.5)]))
@example(case=(Pool("amd-p", "hpc", "amd", 1, "eu", model="mi300x", supports_fractions=True), [("place", 0.25), ("place", 0.125), ("place", 0.25)]))
def test_amd_fractions_take_the_smallest_free_partition_that_covers_them(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, case: tuple[Pool, list[tuple[str, float]]]
) -> None:
    """AMD fraction requests and releases on a real store, an NVIDIA pool beside: each request gets
    the smallest partition that covers it among those a device can take now (a larger one is
    flagged, priced as granted, and said in the note), goes to the NVIDIA stand-in only when no
    covering partition fits, and Python selection equals the policy's reference rule at every step."""
    from examlops_policy._core.engine import differences, reference_input

    amd, steps = case
    nvidia = Pool("nv-p", "hpc", "nvidia", 1, "eu", supports_fractions=True)
    store_hw = Hardware(home=tmp_path_factory.mktemp("amd"), policy=module_hw.policy, tables=module_hw.tables)
    live: list[str] = []
    try:
        store_hw.apply([amd, nvidia])
        for action, value in steps:
            if action == "release":
                if live:
                    store_hw.release(live.pop(int(value * len(live))))
                continue
            w = Workload(f"w{len(live)}", "amd", engine="generic", fraction=value, target="hpc")
            before = store_hw.pool("amd-p").holdings
            states = sorted(store_hw.pools(), key=lambda s: s.pool.name)
            prepared = store_hw.engine.prepare(w, [s.pool for s in states])
            caps = [s.capacity for s in states]
            reference = store_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about))
            assert differences(prepared.decide(caps, store_hw.tables), reference) == []
            covering = [c for _, c in covering_slices(amd, w)] or [None]
            takes = [c for c in covering if amd_takes(amd, before, c)]
            record = store_hw.place(w)
            decision = record.decision
            if takes:
                assert isinstance(decision, Placement) and decision.pool == "amd-p", (covering, before, decision)
                assert decision.grant.profile == takes[0]
                larger = takes[0] != covering[0]
                assert decision.grant.larger == larger
                assert ("honored with a larger partition" in (decision.note or "")) == larger
                assert decision.grant_cost_per_hour == pytest.approx(cost(amd) * decision.grant.devices)
            else:
                assert not (isinstance(decision, Placement) and decision.pool == "amd-p")
                amd_verdict = next(v for v in decision.verdicts if v.pool == "amd-p")
                assert [r.code for r in amd_verdict.reasons if r.kind == "not_now"] == ["slice_unavailable" if covering[0] else "capacity_exhausted"]
            if isinstance(decision, Placement):
                live.append(record.id)
            assert_devices_sound(amd, store_hw.pool("amd-p").holdings)
        assert store_hw.verify_audit().ok
    finally:
        store_hw.close()


def _mig_layout(draw: st.DrawFn, model: str, *, largest_first: bool) -> list[dict[str, Any]]:
    """Slices one MIG device of ``model`` can hold together, drawn by the geometry table alone
    (independently of the packer); without memory slice 7 unless ``largest_first``."""
    scheme = SCHEMES[BY_MODEL[model]]
    geometry = GEOMETRY[scheme["geometry"]]
    # A 7g is a whole device (a fraction of 1 is not a slice).
    profiles = [s for s in scheme["slices"] if s["units"] < 7]
    memory: set[int] = set()
    compute = 0
    layout: list[dict[str, Any]] = []
    for slice_ in draw(st.lists(st.sampled_from(profiles), min_size=1, max_size=12)):
        share = geometry["shares"][str(slice_["units"])]
        starts = [
            s for s in share["starts"]
            if not memory & set(range(s, s + share["memory"])) and (largest_first or s + share["memory"] <= 7)
        ]  # fmt: skip
        if not starts or compute + share["compute"] > geometry["compute_slices"]:
            continue
        start = draw(st.sampled_from(starts))
        memory |= set(range(start, start + share["memory"]))
        compute += share["compute"]
        layout.append(slice_)
    return layout


@st.composite
def fitting_mig_sequences(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Slice requests, in arrival order, that one MIG device can hold together: a layout drawn by
    the geometry table alone (independently of the packer), then its slices either in any order,
    when the layout leaves memory slice 7 unused, or largest first, of any layout. (No rule places
    every order of every layout: 1g then 4g needs the 1g away from 0-3, 1g, 1g, 2g, 3g needs the
    3g's run 4-7; the packer keeps the larger profiles' starts.)"""
    model = draw(st.sampled_from(["h100", "a100-40gb", "h200"]))
    largest_first = draw(st.booleans())
    layout = _mig_layout(draw, model, largest_first=largest_first)
    order = sorted(layout, key=lambda s: -s["units"]) if largest_first else draw(st.permutations(layout))
    return model, [s["profile"] for s in order]


@settings(SETTINGS, max_examples=max(10, SETTINGS.max_examples // 4))
@given(case=fitting_mig_sequences())
@example(case=("h100", ["1g.10gb", "4g.40gb"]))
@example(case=("h100", ["2g.20gb", "4g.40gb"]))
@example(case=("h100", ["1g.10gb", "2g.20gb", "4g.40gb"]))
@example(case=("h100", ["1g.10gb", "2g.20gb", "3g.40gb"]))
@example(case=("h100", ["3g.40gb", "3g.40gb"]))
def test_slices_that_fit_one_device_together_are_all_placed(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, case: tuple[str, list[str]]
) -> None:
    """A sequence of MIG slice requests that one device can hold together (see the strategy) is
    placed in full on a pool of that one device: the packer's starts never strand the capacity a
    later request of the sequence needs (1g then 4g on one H100 ends 1g@6, 4g@0)."""
    model, profiles = case
    scheme = SCHEMES[BY_MODEL[model]]
    of = scheme["of"]
    units = {s["profile"]: s["units"] for s in scheme["slices"]}
    pool = Pool("p", "hpc", MODELS[model]["accelerator"], 1, "eu", model=model, supports_fractions=True)
    store_hw = Hardware(home=tmp_path_factory.mktemp("fitting"), policy=module_hw.policy, tables=module_hw.tables)
    try:
        store_hw.apply([pool])
        for i, profile in enumerate(profiles):
            w = Workload(f"s{i}", accelerator=pool.accelerator, engine="generic", fraction=units[profile] / of, target="hpc")
            decision = store_hw.place(w).decision
            assert isinstance(decision, Placement), (
                f"{profile} ({i + 1} of {profiles}) refused on one {model} holding {store_hw.pool('p').devices[0]}: {decision.reason}"
            )
            assert decision.grant.profile == profile
        assert_devices_sound(pool, store_hw.pool("p").holdings)
    finally:
        store_hw.close()


@st.composite
def slices_and_whole_devices(draw: st.DrawFn) -> tuple[str, int | None, int, list[str | None]]:
    """A pool of MIG devices (no node information, or 1 to 3 nodes of 1 to 3 devices each), and
    requests in any order: one device's worth of slices (a layout without memory slice 7, see
    fitting_mig_sequences) and one whole device for every other device of the pool (None)."""
    model = draw(st.sampled_from(["h100", "a100", "a100-40gb", "h200"]))
    nodes = draw(st.sampled_from([None, 1, 2, 3]))
    count = (nodes or 1) * draw(st.integers(1, 3))
    slices: list[str | None] = [s["profile"] for s in _mig_layout(draw, model, largest_first=False)]
    wholes: list[str | None] = [None] * (count - 1)
    return model, nodes, count, draw(st.permutations(slices + wholes))


@settings(SETTINGS, max_examples=max(10, SETTINGS.max_examples // 4))
@given(case=slices_and_whole_devices())
@example(case=("a100", 1, 2, ["1g.10gb", "4g.40gb", None]))
@example(case=("h100", None, 2, ["2g.20gb", "4g.40gb", None]))
@example(case=("h100", 2, 4, [None, "1g.10gb", None, "2g.20gb", "4g.40gb", None]))
def test_slices_never_take_a_device_that_whole_device_requests_need(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, case: tuple[str, int | None, int, list[str | None]]
) -> None:
    """Slices that fit one device together, and a whole device for each other device, arriving in
    any order on a pool of devices or of nodes, are all placed: a slice never takes an empty
    device while a start on a device holding slices keeps what later requests need (on one node of
    2 A100s, 1g, 4g, then a whole device: 1g@6 and 4g@0 on device 0, device 1 whole)."""
    model, nodes, count, requests = case
    scheme = SCHEMES[BY_MODEL[model]]
    units = {s["profile"]: s["units"] for s in scheme["slices"]}
    pool = Pool("p", "hpc", MODELS[model]["accelerator"], count, "eu", model=model, supports_fractions=True, nodes=nodes)
    store_hw = Hardware(home=tmp_path_factory.mktemp("mixed"), policy=module_hw.policy, tables=module_hw.tables)
    try:
        store_hw.apply([pool])
        by_node: dict[str, list[Holding]] = {}
        for i, profile in enumerate(requests):
            fraction = 1.0 if profile is None else units[profile] / scheme["of"]
            w = Workload(f"r{i}", accelerator=pool.accelerator, engine="generic", fraction=fraction, target="hpc")
            decision = store_hw.place(w).decision
            assert isinstance(decision, Placement), (
                f"{profile or 'a whole device'} ({i + 1} of {requests}) refused holding {by_node}: {decision.reason}"
            )
            assert decision.grant.profile == profile
            for a in decision.allocations:
                by_node.setdefault(a.node, []).extend(a.holdings)
            if not decision.allocations:
                by_node.setdefault("", []).extend(decision.holdings)
        per_node = Pool("n", "hpc", pool.accelerator, count // (nodes or 1), "eu", model=model, supports_fractions=True)
        for held in by_node.values():
            assert_devices_sound(per_node, held)
    finally:
        store_hw.close()


@st.composite
def close_contenders(draw: st.DrawFn) -> tuple[list[Pool], Workload]:
    """Several pools that all take the workload, at few distinct prices: the choice is the price
    (then the name) alone."""
    accelerator = draw(st.sampled_from(ACCELERATORS))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=2, max_size=6, unique=True))
    pools = [
        Pool(name, "hpc", accelerator, draw(st.integers(1, 4)), draw(st.sampled_from(["eu", "de-juelich", "eu-west-3"])),
             cost_per_hour=draw(st.sampled_from([None, DEFAULT_COST[accelerator], 0.0, 3.0])))
        for name in names
    ]  # fmt: skip
    return pools, Workload("train", accelerator, engine="generic", residency=draw(st.sampled_from(["open", "eu-only", "no-egress"])))


@SETTINGS
@given(case=close_contenders())
def test_cheapest_eligible_pool_wins_and_ties_go_to_the_first_name(module_hw: Hardware, case: tuple[list[Pool], Workload]) -> None:
    pools, w = case
    decision = module_hw.what_if(w, pools)
    check(decision, w, pools)
    assert isinstance(decision, Placement)
    assert decision.pool == min(pools, key=lambda p: (cost(p), p.name)).name


PARTITIONABLE = [(a, m) for a, m in [("nvidia", None), ("amd", None)] + [(e["accelerator"], m) for m, e in sorted(MODELS.items())]]


@st.composite
def fraction_cases(draw: st.DrawFn) -> tuple[list[Pool], Workload]:
    """Fractional requests on pools that may or may not partition, at and between slice edges."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    pools = []
    for name in names:
        accelerator, model = draw(st.sampled_from(PARTITIONABLE))
        pools.append(Pool(name, "hpc", accelerator, draw(st.integers(1, 3)), "eu", model=model,
                          supports_fractions=draw(st.booleans()), cost_per_hour=draw(st.sampled_from([None, 1.0, 2.0]))))  # fmt: skip
    fraction = draw(st.sampled_from(EXACT) | st.floats(min_value=0.001, max_value=1.0, exclude_min=True, exclude_max=True))
    accelerator = draw(st.sampled_from(["nvidia", "amd"]))
    return pools, Workload("slice", accelerator, engine="generic", fraction=fraction)


@SETTINGS
@given(case=fraction_cases())
def test_fractions_are_honored_only_where_the_pool_can_partition(module_hw: Hardware, case: tuple[list[Pool], Workload]) -> None:
    """The smallest slice that covers the fraction, on a partitioning pool; a whole device, said so,
    elsewhere."""
    pools, w = case
    decision = module_hw.what_if(w, pools)
    check(decision, w, pools)
    for v in decision.verdicts:
        pool = next(p for p in pools if p.name == v.pool)
        if not can_partition(pool):
            assert not v.grant.honored and v.grant.devices == 1 and v.grant.why
        else:
            assert v.grant.honored and v.grant.share >= w.fraction - 1e-12
            scheme = partition_scheme(pool)
            assert scheme is not None
            shares = [s["units"] / scheme["of"] for s in scheme["slices"]]
            assert any(v.grant.share == pytest.approx(share) for share in shares), "not a slice of the device"
            smaller = [share for share in shares if share < v.grant.share - 1e-9]
            assert all(share < w.fraction for share in smaller), "a smaller slice would have covered the request"


# --- the oracle itself, on the specification's examples (so a wrong oracle cannot hide) ------------


def _spec_fleet() -> list[Pool]:
    return [
        Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5, carbon_factor=300, supports_fractions=True),
        Pool("hpc-mi300", "hpc", "amd", 4, "eu"),
        Pool("cloud-a100", "cloud", "nvidia", 100, "us"),
    ]


@pytest.mark.parametrize(
    ("w", "pool", "fallback", "honored"),
    [
        pytest.param(Workload("train", "amd", engine="vllm", target="hpc"), "hpc-mi300", False, True, id="amd-vllm-hpc"),
        pytest.param(Workload("train", "amd", engine="sglang"), None, None, None, id="sglang-on-amd-rejected"),
        pytest.param(Workload("train", "tpu", engine="generic", target="hpc"), "hpc-mi300", True, True, id="tpu-falls-back-to-amd"),
        pytest.param(Workload("train", "amd", engine="vllm", fraction=0.5), "hpc-mi300", False, False, id="amd-fraction-whole"),
        pytest.param(Workload("train", "nvidia", engine="vllm", fraction=0.5, target="hpc"), "hpc-nvidia", False, True, id="nvidia-mig"),
        pytest.param(Workload("train", "nvidia", target="cloud", allow_burst=True, residency="eu-only"), None, None, None, id="eu-only-burst-blocked"),
        pytest.param(Workload("train", "nvidia", target="cloud", allow_burst=True), "cloud-a100", False, True, id="open-burst"),
    ],
)
def test_oracle_and_product_agree_on_the_specification_examples(
    module_hw: Hardware, w: Workload, pool: str | None, fallback: bool | None, honored: bool | None
) -> None:
    fleet = _spec_fleet()
    assert oracle(w, fleet, {}).chosen == pool  # the oracle reproduces the specification by itself
    decision = module_hw.what_if(w, fleet)
    check(decision, w, fleet)
    if pool is None:
        assert isinstance(decision, Rejection)
    else:
        assert isinstance(decision, Placement)
        assert (decision.pool, decision.fallback, decision.fraction_honored) == (pool, fallback, honored)


def test_eu_membership_comes_from_the_table_not_the_region_name(module_hw: Hardware) -> None:
    """eu-west-2 (London) and eu-central-2 (Zurich) are not in the EU; an eu-only burst must skip them."""
    fleet = [
        Pool("london", "cloud", "nvidia", 4, "eu-west-2", cost_per_hour=0.5),
        Pool("zurich", "cloud", "nvidia", 4, "eu-central-2", cost_per_hour=0.6),
        Pool("paris", "cloud", "nvidia", 4, "eu-west-3", cost_per_hour=3.0),
    ]
    assert not in_eu("eu-west-2") and not in_eu("eu-central-2") and in_eu("eu-west-3")
    w = Workload("train", "nvidia", target="cloud", residency="eu-only")
    decision = module_hw.what_if(w, fleet)
    check(decision, w, fleet)
    assert isinstance(decision, Placement) and decision.pool == "paris"


# --- nodes: selection and the policy agree node by node; nothing on a node is held twice --------

NODE_MODELS = ["h100", "a100", "t4", "mi300x"]


@st.composite
def node_pools(draw: st.DrawFn, min_size: int = 1, max_size: int = 4) -> list[Pool]:
    """Pools of nodes (counted, or listed with CPU, memory, state and topology labels), shared
    pools among them, and now and then a pool without nodes."""
    from examlops_policy.model import Node

    names = draw(st.lists(st.sampled_from(NAMES), min_size=min_size, max_size=max_size, unique=True))
    pools = []
    for name in names:
        model = draw(st.sampled_from(NODE_MODELS))
        accelerator = MODELS[model]["accelerator"]
        common = {"cost_per_hour": draw(st.sampled_from([1.0, 1.5, 2.5])), "region": "eu", "model": model}
        kind = draw(st.sampled_from(["counted", "listed", "listed", "shared", "flat"]))
        if kind == "flat":
            pools.append(Pool(name, "hpc", accelerator, draw(st.integers(1, 8)), supports_fractions=draw(st.booleans()), **common))  # type: ignore[arg-type]
        elif kind == "counted":
            n, each = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4]))
            pools.append(Pool(name, "hpc", accelerator, n * each, nodes=n, cpu_per_node=draw(st.sampled_from([None, 8, 32])),
                              memory_per_node=draw(st.sampled_from([None, 65536])), supports_fractions=draw(st.booleans()), **common))  # type: ignore[arg-type]
        else:
            nodes = tuple(
                Node(
                    f"{name}-n{i}", draw(st.sampled_from([1, 2, 4])), cpu=draw(st.sampled_from([None, 8, 32])),
                    memory=draw(st.sampled_from([None, 65536, 262144])), state=draw(st.sampled_from(["up", "up", "up", "drained"])),
                    block=draw(st.sampled_from([None, "b1", "b2"])), switch=draw(st.sampled_from([None, "s1"])),
                )  # fmt: skip
                for i in range(draw(st.integers(1, 4)))
            )
            sharing = {"sharing": draw(st.sampled_from(["time-slice", "mps"] if accelerator == "nvidia" else ["time-slice"])), "shares_per_device": draw(st.sampled_from([2, 4, 16]))} if kind == "shared" else {}
            pools.append(Pool(name, "hpc", accelerator, sum(n.devices for n in nodes), nodes=nodes, supports_fractions=draw(st.booleans()), **sharing, **common))  # type: ignore[arg-type]
    return pools


@st.composite
def node_workloads(draw: st.DrawFn) -> Workload:
    fraction = draw(st.sampled_from([1.0, 1.0, 0.25, 0.5, 0.1]))
    nodes = 1 if fraction < 1 else draw(st.sampled_from([1, 1, 2, 3]))
    topology = draw(st.sampled_from([None, None, "same-block", "same-switch"]))
    accelerator = draw(st.sampled_from(["nvidia", "nvidia", "amd"]))
    models = draw(st.sampled_from([(), (), ("h100",), ("t4", "a100")] if accelerator == "nvidia" else [(), ("mi300x",)]))
    return Workload(
        "w", accelerator, engine="generic", fraction=fraction,
        count=1 if fraction < 1 else draw(st.sampled_from([1, 2, 4, 5])), nodes=nodes,
        cpu=draw(st.sampled_from([None, 2, 8, 33])), memory=draw(st.sampled_from([None, 1024, 131072])),
        topology=topology, topology_mode=None if topology is None else draw(st.sampled_from(["required", "preferred"])),
        models=models, isolation=draw(st.sampled_from(["any", "any", "required"])),
        allow_cpu_fallback=False,
    )  # fmt: skip


@st.composite
def node_capacities(draw: st.DrawFn, pools: list[Pool], tables: Any) -> list[PoolState]:
    """Each pool with nothing held, or node by node with free devices, CPU, memory, shares and
    slices drawn freely (the decision only compares them)."""
    from examlops_policy._core.state import Capacities
    from examlops_policy.model import NodeRoom

    capacities = Capacities(tables)
    states = []
    for p in pools:
        empty = capacities.empty(p)
        if empty.capacity.nodes is None or draw(st.booleans()):
            states.append(empty)
            continue
        rows: dict[NodeRoom, int] = {}
        for room in empty.capacity.nodes:
            for _ in range(room.count):
                drawn = NodeRoom(
                    draw(st.integers(0, room.whole)),
                    None if room.cpu is None else draw(st.sampled_from([0, 2000, room.cpu])),
                    None if room.memory is None else draw(st.sampled_from([0, 1024, room.memory])),
                    draw(st.integers(0, (p.shares_per_device or 1) - 1)) if p.sharing else 0,
                    tuple((name, draw(st.integers(0, n))) for name, n in room.slices),
                    room.block, room.switch,
                )  # fmt: skip
                rows[drawn] = rows.get(drawn, 0) + 1
        rooms = tuple(NodeRoom(r.whole, r.cpu, r.memory, r.shares, r.slices, r.block, r.switch, n) for r, n in sorted(rows.items(), key=repr))
        states.append(PoolState(p, empty.free, Capacity(sum(r.whole * r.count for r in rooms), dict(empty.capacity.slices), rooms)))
    return states


@SETTINGS
@given(pools=node_pools(), w=node_workloads(), data=st.data())
@example(
    pools=[Pool("a", "hpc", "nvidia", 8, "eu", model="h100", cost_per_hour=1.0, nodes=2)],
    w=Workload("w", "nvidia", engine="generic", count=4, nodes=2),
    data=None,  # type: ignore[arg-type]
)
def test_python_selection_equals_the_policys_reference_decision_node_by_node(module_hw: Hardware, pools: list[Pool], w: Workload, data: st.DataObject) -> None:
    """Pools of nodes, gangs, CPU, memory, shares, models, isolation and topology: the capacity
    check Python makes node by node (``selection.fits``) and the policy's reference rule give the
    same pool or rejection and the same reasons."""
    from examlops_policy._core.engine import differences, reference_input

    drawn = data.draw(node_capacities(pools, module_hw.tables)) if data is not None else [module_hw.cycle.capacities.empty(p) for p in pools]
    states = sorted(drawn, key=lambda s: s.pool.name)
    prepared = module_hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    decision = prepared.decide(caps, module_hw.tables)
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about))
    assert differences(decision, reference) == []


@settings(SETTINGS, max_examples=max(5, SETTINGS.max_examples // 8))
@given(pools=node_pools(max_size=3), ws=st.lists(node_workloads(), min_size=1, max_size=8), data=st.data())
def test_recorded_node_grants_never_hold_a_device_share_core_or_mib_twice(
    module_hw: Hardware, tmp_path_factory: pytest.TempPathFactory, pools: list[Pool], ws: list[Workload], data: st.DataObject
) -> None:
    """Placements and releases recorded on a real store over pools of nodes: each grant is what
    its capacity said fits (placed exactly when selection over the stored capacity places it), and
    no device, slice, share, core or MiB of any node is ever held twice."""
    import sqlite3

    from examlops_policy._core.selection import fits
    from reliability.harness import node_violations

    home = tmp_path_factory.mktemp("nodes")
    store_hw = Hardware(home=home, policy=module_hw.policy, tables=module_hw.tables)
    live: list[str] = []
    try:
        store_hw.apply(pools)
        for w in ws:
            before = {s.pool.name: s.capacity for s in store_hw.pools()}
            record = store_hw.place(w)
            decision = record.decision
            if isinstance(decision, Placement):
                assert fits(decision.grant, before[decision.pool])
                pool = next(p for p in pools if p.name == decision.pool)
                if pool.node_tracked:
                    assert len(decision.allocations) == decision.grant.nodes
                    assert len({a.node for a in decision.allocations}) == decision.grant.nodes
                live.append(record.id)
            if live and data.draw(st.booleans()):
                store_hw.release(live.pop(data.draw(st.integers(0, len(live) - 1))))
            with sqlite3.connect(home / "state.db") as db:
                holdings = db.execute(
                    "SELECT h.pool, h.node, h.device, h.profile, h.share, h.shares FROM holdings h "
                    "JOIN allocations a ON a.decision_id = h.decision_id WHERE a.released_at IS NULL"
                ).fetchall()
                grants = db.execute(
                    "SELECT g.pool, g.node, g.cpu_milli, g.memory_mib FROM node_grants g "
                    "JOIN allocations a ON a.decision_id = g.decision_id WHERE a.released_at IS NULL"
                ).fetchall()
            assert node_violations({p.name: p for p in pools}, holdings, grants) == []
        assert store_hw.verify_audit().ok
    finally:
        store_hw.close()


# --- ranking by work (throughput.yaml) -------------------------------------------------------------


@st.composite
def work_cases(draw: st.DrawFn) -> tuple[list[Pool], Workload]:
    """Pools of the models the throughput table measures (and some it does not, or of no model), at
    GCP's prices of Gavel's GPUs and others; a workload that says its work and ranks by it."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    pools = [
        Pool(
            name=name,
            target=draw(st.sampled_from(["hpc", "hpc", "cloud"])),
            accelerator="nvidia",
            count=draw(st.integers(1, 8)),
            region=draw(st.sampled_from(COARSE)),
            cost_per_hour=draw(st.sampled_from([0.45, 1.46, 2.48, 0.3, 4.0, *PRICES])),
            model=draw(st.sampled_from(["k80", "p100", "v100", "V100", "K80", "a100", None])),
            supports_fractions=draw(st.booleans()),
        )
        for name in names
    ]
    fraction = draw(st.sampled_from([1.0, 1.0, 0.5]))
    w = Workload(
        "job", "nvidia", engine="generic", allow_burst=draw(st.booleans()), count=1 if fraction < 1 else draw(st.integers(1, 3)),
        fraction=fraction, optimize=draw(st.sampled_from(["work-cost", "work-carbon", "work-time"])), **draw(work_of()),
    )  # fmt: skip
    return pools, w


@SETTINGS
@given(case=work_cases(), data=st.data())
def test_ranking_by_work_is_decided_alike_by_selection_the_policy_and_the_oracle(
    module_hw: Hardware, case: tuple[list[Pool], Workload], data: st.DataObject
) -> None:
    """Under work-cost, work-carbon and work-time, Python selection and the policy's reference rule
    choose the same pool with the same reasons (with and without start estimates), and without
    estimates the oracle's: the cheapest, lowest-carbon or fastest job among the pools whose
    throughput is known, then the others as they rank by the hour."""
    from examlops_policy._core.engine import differences, reference_input

    pools, w = case
    capacities = data.draw(capacities_for(pools))
    states = sorted(states_of(pools, capacities, module_hw.tables), key=lambda s: s.pool.name)
    prepared = module_hw.engine.prepare(w, [s.pool for s in states])
    caps = [s.capacity for s in states]
    decision = prepared.decide(caps, module_hw.tables)
    check(decision, w, pools, capacities)
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about))
    assert differences(decision, reference) == []
    starts = data.draw(starts_for(pools))
    timed = prepared.decide(caps, module_hw.tables, starts=starts)
    reference = module_hw.policy.decision(reference_input(w, prepared.judged.fleet, caps, prepared.about, starts))
    assert differences(timed, reference) == []

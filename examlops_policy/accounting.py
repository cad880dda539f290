"""Per-device cost and carbon accounting, so heterogeneous fleets compare.

Cost is the pool's price per device-hour (or the accelerator's reviewed default) times the devices
held (a granted fraction counts as its share) times hours. Carbon per device-hour comes from one
of four methods (``carbon_basis``, the one source of the figure; ``CARBON_METHODS`` says each):

* ``pool``: the pool's own carbon factor (``--carbon-factor``);
* ``power``: board power (the pool's ``power_w``, else its model's in models.yaml) x PUE (the
  pool's, else its region's) x the region's grid intensity;
* ``reference``: no power known: the reviewed reference power of the device's family
  (accounting.yaml: a 750 W accelerator, a 280 W CPU socket) x the reference PUE x the region's
  grid intensity (the per-region figures of accounting.yaml for the reference accelerator);
* ``fallback``: no grid intensity known for the region: accounting.yaml's fallback factor (scaled
  to the family's reference power).

Where power, PUE and grid intensity are all known, the grounded figure (the ``power`` method) is
given beside whatever the headline figure is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from examlops_policy.quantities import shown
from examlops_policy.errors import SpecError
from examlops_policy.model import Placement, Pool, Queued, Rejection
from examlops_policy.tables import Tables

CARBON_METHODS: Final[dict[str, str]] = {
    "pool": "the pool's own carbon factor",
    "power": "board power x PUE x grid intensity",
    "reference": "a reference device's power (no power known) x PUE x grid intensity",
    "fallback": "the reviewed fallback factor (no grid intensity known for the region)",
}
# The method of a decision older than its stored fleet: not recorded.
UNRECORDED: Final = "unrecorded"


@dataclass(frozen=True)
class CarbonBasis:
    """A pool's gCO2e per device-hour, the method it came from (a key of ``CARBON_METHODS``), and
    the grounded figure (board power x PUE x grid intensity) where all three are known."""

    per_hour: float
    method: str
    grounded: float | None


def carbon_basis(pool: Pool, tables: Tables) -> CarbonBasis:
    """The headline gCO2e per device-hour of ``pool`` and how it was found: its own carbon factor,
    else the grounded figure where its power (its own or its model's) is known, else its family's
    reference power at its region's grid intensity, else the fallback."""
    power = pool.power_w if pool.power_w is not None else tables.model_power(pool.model)
    pue = pool.pue if pool.pue is not None else tables.region_pue(pool.region)
    intensity = tables.grid_intensity(pool.region)
    grounded = None if power is None or pue is None or intensity is None else round(power / 1000.0 * pue * intensity, 3)
    if pool.carbon_factor is not None:
        return CarbonBasis(pool.carbon_factor, "pool", grounded)
    if grounded is not None:
        return CarbonBasis(grounded, "power", grounded)
    method = "reference" if intensity is not None else "fallback"
    return CarbonBasis(tables.default_carbon_factor(pool.region, pool.accelerator), method, grounded)


def carbon_method_text(method: str, tables: Tables) -> str:
    """What ``method`` means, for people, with the reviewed figures it uses."""
    if method == "reference":
        accelerator = float(tables.accounting["reference_power_w"])  # type: ignore[arg-type]
        cpu = tables.reference_power("cpu")
        return f"a reference device's power (no power known: {accelerator:g} W accelerator, {cpu:g} W CPU socket) x PUE x grid intensity"
    if method == UNRECORDED:
        return "not recorded (a decision older than the fleet it was decided on being stored)"
    return CARBON_METHODS.get(method, "not recorded")


def carbon_method_of_spec(spec: Mapping[str, object], tables: Tables) -> str | None:
    """The carbon method of a pool as a decision's stored fleet document gives it (None when the
    stored spec is not a pool this library reads)."""
    try:
        values = dict(spec)
        values["capabilities"] = tuple(values.get("capabilities") or ())  # type: ignore[arg-type]
        return carbon_basis(Pool(**values), tables).method  # type: ignore[arg-type]
    except (SpecError, TypeError, ValueError):
        return None


def device_accounting(placement: Placement, hours: float) -> dict[str, object]:
    """Cost and carbon of ``placement`` held for ``hours``.

    ``{"device": "amd", "region": "eu", "hours": 10, "cost": 18.0, "carbon_g": 2500.0}``, plus
    ``carbon_g_grounded`` where the pool's power, PUE and grid intensity are known.
    """
    if not isinstance(placement, Placement):
        what = (
            "a rejection (nothing was placed)" if isinstance(placement, Rejection)
            else "a queued workload (nothing is placed until it is admitted)" if isinstance(placement, Queued)
            else type(placement).__name__
        )  # fmt: skip
        raise SpecError(f"device_accounting needs a Placement; got {what}, which holds no devices", field="placement")
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise SpecError(f"hours must be a finite number of at least 0 (got {shown(hours)})", field="hours")
    devices = placement.grant.devices
    result: dict[str, object] = {
        "device": placement.accelerator,
        "region": placement.region,
        "hours": hours,
        "cost": round(placement.cost_per_hour * devices * hours, 6),
        "carbon_g": round(placement.carbon_factor * devices * hours, 6),
    }
    if placement.grounded_carbon_per_hour is not None:
        result["carbon_g_grounded"] = round(placement.grounded_carbon_per_hour * devices * hours, 3)
    return result

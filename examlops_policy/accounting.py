"""Per-device cost and carbon accounting, so heterogeneous fleets compare.

Cost is the pool's price per device-hour (or the accelerator's reviewed default) times the devices
held (a granted fraction counts as its share) times hours. Carbon uses the pool's flat carbon factor
(or the region's reviewed default), in gCO2e per device-hour; where the pool's board power, PUE and
grid intensity are all known, a grounded figure is given beside it.
"""

from __future__ import annotations

import math

from examlops_policy.errors import SpecError
from examlops_policy.model import Placement, Rejection


def device_accounting(placement: Placement, hours: float) -> dict[str, object]:
    """Cost and carbon of ``placement`` held for ``hours``.

    ``{"device": "amd", "region": "eu", "hours": 10, "cost": 18.0, "carbon_g": 2500.0}``, plus
    ``carbon_g_grounded`` where the pool's power, PUE and grid intensity are known.
    """
    if not isinstance(placement, Placement):
        what = "a rejection (nothing was placed)" if isinstance(placement, Rejection) else type(placement).__name__
        raise SpecError(f"device_accounting needs a Placement; got {what}, which holds no devices", field="placement")
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise SpecError(f"hours must be a finite number of at least 0 (got {hours!r})", field="hours")
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

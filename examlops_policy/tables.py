"""The reviewed data tables (accelerators, engines, models, partitioning, regions, accounting).

The same YAML files are loaded by OPA as ``data.examlops.tables`` and read here for what Python
needs them for: validating specs early, pricing and carbon defaults, and the policy revision.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Final, cast

import yaml

from examlops_policy.errors import PolicyError
from examlops_policy.model import JSONObject

_PACKAGE_DIR: Final = Path(__file__).resolve().parent


def policy_dir() -> Path:
    """Where the Rego policies and tables live.

    ``EXA_POLICY_DIR`` wins; else the copy bundled in a wheel; else ``policies/`` beside the package
    in a source checkout.
    """
    env = os.environ.get("EXA_POLICY_DIR")
    candidates = [Path(env)] if env else [_PACKAGE_DIR / "_policies", _PACKAGE_DIR.parent / "policies"]
    for candidate in candidates:
        if (candidate / "examlops").is_dir():
            return candidate
    raise PolicyError(f"no policy directory found (looked in {', '.join(map(str, candidates))})")


def schema_dir() -> Path:
    """Where the JSON Schemas live (bundled copy first, then the source checkout)."""
    for candidate in (_PACKAGE_DIR / "_schemas", _PACKAGE_DIR.parent / "schemas"):
        if candidate.is_dir():
            return candidate
    raise PolicyError("no schema directory found")


def policy_files(root: Path) -> list[Path]:
    """The files that make up the policy: Rego (tests excluded) and the data tables, sorted."""
    files = [
        p
        for p in root.rglob("*")
        if p.is_file()
        and (p.suffix in {".yaml", ".yml", ".json"} or (p.suffix == ".rego" and not p.name.endswith("_test.rego")))
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def revision(root: Path) -> str:
    """A digest of every policy and data file: the policy half of a decision's provenance."""
    digest = hashlib.sha256()
    for path in policy_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Tables:
    """The reviewed tables as plain mappings."""

    accelerators: JSONObject
    engines: JSONObject
    models: JSONObject
    partitioning: JSONObject
    regions: JSONObject
    eu_member_states: tuple[str, ...]
    accounting: JSONObject
    geometry: JSONObject
    fallback: JSONObject

    def region_known(self, region: str) -> bool:
        return region in self.regions

    def scheme_for(self, accelerator: str, model: str | None) -> JSONObject | None:
        """The partitioning scheme of a device: by model where one is named, else by vendor."""
        part = self.partitioning
        by = cast(JSONObject, part["by_model"] if model is not None else part["by_vendor"])
        name = by.get(model if model is not None else accelerator)
        if name is None:
            return None
        return cast(JSONObject, cast(JSONObject, part["schemes"])[str(name)])

    def default_cost(self, accelerator: str) -> float:
        costs = cast(JSONObject, self.accounting["default_cost_per_hour"])
        return float(cast(float, costs[accelerator]))

    def grid_intensity(self, region: str) -> float | None:
        entry = cast(JSONObject, self.regions.get(region) or {})
        value = entry.get("grid_gco2_per_kwh")
        return None if value is None else float(cast(float, value))

    def region_pue(self, region: str) -> float | None:
        entry = cast(JSONObject, self.regions.get(region) or {})
        value = entry.get("pue")
        return None if value is None else float(cast(float, value))

    def model_power(self, model: str | None) -> float | None:
        if model is None:
            return None
        entry = cast(JSONObject, self.models.get(model) or {})
        value = entry.get("power_w")
        return None if value is None else float(cast(float, value))

    def reference_power(self, accelerator: str) -> float:
        """Watts of one device of ``accelerator`` whose pool names no power (accounting.yaml: the
        family's own reference, else the reference accelerator's)."""
        acc = self.accounting
        by_family = cast(JSONObject, acc.get("reference_power_w_by_accelerator") or {})
        return float(cast(float, by_family.get(accelerator, acc["reference_power_w"])))

    def default_carbon_factor(self, region: str, accelerator: str | None = None) -> float:
        """gCO2e per device-hour for a pool that states no carbon factor and no power: the
        reference power of its family (None: the reference accelerator's) x the reference PUE x
        the region's grid intensity (the reviewed per-region figures for the reference
        accelerator; see accounting.yaml)."""
        acc = self.accounting
        watts = self.reference_power(accelerator or "")
        reference = float(cast(float, acc["reference_power_w"]))
        by_region = cast(JSONObject, acc["default_carbon_factor"])
        if region in by_region and watts == reference:
            return float(cast(float, by_region[region]))
        intensity = self.grid_intensity(region)
        if intensity is None:
            return round(float(cast(float, acc["fallback_carbon_factor"])) * watts / reference, 1)
        return round(watts / 1000.0 * float(cast(float, acc["reference_pue"])) * intensity, 1)


def _load_yaml(path: Path) -> JSONObject:
    try:
        # libyaml's C loader when present: tables load on every command.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 - a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read policy table: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: a policy table must be a mapping")
    return cast(JSONObject, data)


@lru_cache(maxsize=4)
def load_tables(root: Path | None = None) -> Tables:
    """Read every table under ``<policy dir>/examlops/tables``."""
    base = (root or policy_dir()) / "examlops" / "tables"
    merged: JSONObject = {}
    for path in sorted(base.glob("*.yaml")):
        merged.update(_load_yaml(path))
    try:
        return Tables(
            accelerators=cast(JSONObject, merged["accelerators"]),
            engines=cast(JSONObject, merged["engines"]),
            models=cast(JSONObject, merged["models"]),
            partitioning=cast(JSONObject, merged["partitioning"]),
            regions=cast(JSONObject, merged["regions"]),
            eu_member_states=tuple(cast(list[str], merged["eu_member_states"])),
            accounting=cast(JSONObject, merged["accounting"]),
            geometry=cast(JSONObject, merged["geometry"]),
            fallback=cast(JSONObject, merged["fallback"]),
        )
    except KeyError as exc:
        raise PolicyError(f"{base}: table {exc} is missing") from exc

"""The reviewed Slurm GRES table (``policies/examlops/tables/gres.yaml``).

Which accelerator family and model a GPU GRES type is, and how a site names the GRES type of one
isolated share of a device. Discovery and ``exa hardware submit`` both read it; neither guesses
what the table does not say.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from examlops_policy.errors import PolicyError, SpecError
from examlops_policy.specs import read_yaml
from examlops_policy.tables import policy_dir

TABLE = Path("examlops") / "tables" / "gres.yaml"


@dataclass(frozen=True)
class GresType:
    """One GPU GRES type: the accelerator family and, when the type says it, the model."""

    name: str
    accelerator: str
    model: str | None


@dataclass(frozen=True)
class GresTable:
    """GPU GRES types by lower-case name, and slice type formats by partitioning kind."""

    types: dict[str, GresType]
    slice_types: dict[str, str]

    def lookup(self, gres_type: str) -> GresType | None:
        """The entry for ``gres_type`` (case-insensitive), None when the table does not know it."""
        return self.types.get(gres_type.lower())

    def slice_type(self, kind: str, gres_type: str, profile: str) -> str:
        """The GRES type of one ``profile`` share of a ``gres_type`` device (``kind``: mig, ...)."""
        template = self.slice_types.get(kind)
        if template is None:
            raise SpecError(
                f"no GRES slice type for partitioning kind {kind!r} "
                f"(known: {', '.join(sorted(self.slice_types)) or 'none'}; see {TABLE})"
            )
        return template.replace("{type}", gres_type).replace("{profile}", profile)


def load_gres_table(root: Path | None = None) -> GresTable:
    """Read and check the table under the policy directory (``EXA_POLICY_DIR`` or the bundled one)."""
    path = (root or policy_dir()) / TABLE
    try:
        data = read_yaml(path)
    except SpecError as exc:
        raise PolicyError(str(exc)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("gres_types"), dict):
        raise PolicyError(f"{path}: expected a mapping with 'gres_types'")
    types: dict[str, GresType] = {}
    for name, entry in data["gres_types"].items():
        if not isinstance(name, str) or not isinstance(entry, dict) or not isinstance(entry.get("accelerator"), str):
            raise PolicyError(f"{path}: gres_types.{name}: expected {{accelerator: ..., model: ...}}")
        model = entry.get("model")
        if model is not None and not isinstance(model, str):
            raise PolicyError(f"{path}: gres_types.{name}.model: expected a model name or null")
        types[name.lower()] = GresType(name.lower(), entry["accelerator"], model)
    slices = data.get("gres_slice_types") or {}
    if not isinstance(slices, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in slices.items()):
        raise PolicyError(f"{path}: gres_slice_types: expected a mapping of kind -> format")
    return GresTable(types, dict(slices))

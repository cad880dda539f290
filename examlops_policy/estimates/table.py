"""Start estimates from the reviewed table of provisioning delays (``tables/provisioning.yaml``),
for cloud pools with no scheduler to ask.

A row is found by the provider of the pool's region (``regions.yaml``) and the pool's accelerator
(else the provider's ``*`` row). Its typical delay is used when the table has one, else its upper
bound; the estimate's detail says which, what the figure means and where it comes from. A pool
whose provider or region has no row gets no estimate, said so: a table never guesses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, cast

from examlops_policy.quantities import shown
from examlops_policy.errors import PolicyError
from examlops_policy.estimates import StartEstimate, iso, unknown
from examlops_policy.model import JSONObject, Pool
from examlops_policy.quantities import MAX_DURATION_S, duration_text
from examlops_policy.tables import Tables, policy_dir, read_table

TABLE: Final = "provisioning.yaml"
ANY: Final = "*"


@dataclass(frozen=True)
class Delay:
    """One row's figure: ``seconds``, whether it is ``typical`` (else an upper bound), what it
    means and its source (a key of the table's sources)."""

    seconds: int
    typical: bool
    means: str
    source: str


class ProvisioningTable:
    """The table's rows by provider and accelerator, checked on reading; with the regions table
    to find a pool's provider."""

    def __init__(self, rows: Mapping[str, Mapping[str, Delay]], regions: Mapping[str, object]) -> None:
        self.rows = rows
        self.regions = regions

    @classmethod
    def load(cls, root: Path | None = None) -> ProvisioningTable:
        """The table as the policy directory holds it (the same files OPA serves)."""
        base = (root or policy_dir()) / "examlops" / "tables"
        return cls.from_data(read_table(base / TABLE), read_table(base / "regions.yaml"), where=str(base / TABLE))

    @classmethod
    def from_tables(cls, tables: Tables) -> ProvisioningTable:
        """The table of a policy snapshot's tables (what a decision made under that snapshot uses)."""
        return cls.from_data({"provisioning": tables.provisioning}, {"regions": tables.regions}, where=TABLE)

    @classmethod
    def from_data(cls, table: JSONObject, regions: JSONObject, *, where: str = TABLE) -> ProvisioningTable:
        providers = table.get("provisioning")
        if not isinstance(providers, dict):
            raise PolicyError(f"{where}: expected a mapping 'provisioning' of providers")
        rows: dict[str, dict[str, Delay]] = {}
        for provider, by_accelerator in providers.items():
            if not isinstance(by_accelerator, dict):
                raise PolicyError(f"{where}: provisioning.{provider}: expected accelerators with their delays")
            rows[provider] = {acc: _delay(row, f"{where}: provisioning.{provider}.{acc}") for acc, row in by_accelerator.items()}
        known = regions.get("regions")
        if not isinstance(known, dict):
            raise PolicyError("regions.yaml: expected a mapping 'regions'")
        return cls(rows, cast(Mapping[str, object], known))

    def provider(self, pool: Pool) -> str | None:
        entry = self.regions.get(pool.region)
        value = entry.get("provider") if isinstance(entry, dict) else None
        return value if isinstance(value, str) else None

    def delay(self, pool: Pool) -> tuple[str | None, Delay | None]:
        """The pool's provider and the row's figure for its accelerator (None where there is none)."""
        provider = self.provider(pool)
        if provider is None:
            return None, None
        by_accelerator = self.rows.get(provider, {})
        return provider, by_accelerator.get(pool.accelerator) or by_accelerator.get(ANY)

    def estimate(self, pool: Pool, now: datetime) -> StartEstimate:
        """When a cloud pool with no scheduler to ask would start a workload asked for ``now``."""
        provider, delay = self.delay(pool)
        if provider is None:
            return unknown(pool.name, "table", f"provider not in the provisioning table: region {pool.region} names no cloud provider in regions.yaml", now)
        if delay is None:
            return unknown(pool.name, "table", f"provider not in the provisioning table: {TABLE} has no provisioning delay for {provider} {pool.accelerator}",
                           now, {"provider": provider})  # fmt: skip
        at = now + timedelta(seconds=delay.seconds)
        kind = "typical" if delay.typical else "at most"
        facts: JSONObject = {
            "provider": provider, "accelerator": pool.accelerator, "delay_s": delay.seconds, "typical": delay.typical,
            "means": delay.means, "source": delay.source,
        }  # fmt: skip
        detail = (f"table: expected start {iso(at)}, provisioning {kind} {duration_text(delay.seconds)} for {provider} "
                  f"{pool.accelerator} ({delay.means}; source: {delay.source})")  # fmt: skip
        return StartEstimate(pool.name, at, "table", now, detail, facts=facts)


def _delay(row: object, where: str) -> Delay:
    if not isinstance(row, dict):
        raise PolicyError(f"{where}: expected typical_s or bound_s with their meaning and source")
    for kind in ("typical", "bound"):
        seconds = row.get(f"{kind}_s")
        if seconds is None:
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_DURATION_S:
            raise PolicyError(f"{where}.{kind}_s: expected whole seconds between 0 and {MAX_DURATION_S} (got {shown(seconds)})")
        means, source = row.get(f"{kind}_means"), row.get(f"{kind}_source")
        if not isinstance(means, str) or not means or not isinstance(source, str) or not source:
            raise PolicyError(f"{where}: {kind}_s needs {kind}_means and {kind}_source (what the figure means, where it comes from)")
    typical, bound = row.get("typical_s"), row.get("bound_s")
    if typical is None and bound is None:
        raise PolicyError(f"{where}: expected typical_s or bound_s")
    if isinstance(typical, int) and isinstance(bound, int) and typical > bound:
        raise PolicyError(f"{where}: typical_s ({typical}) is above bound_s ({bound})")
    kind = "typical" if typical is not None else "bound"
    return Delay(int(cast(int, row[f"{kind}_s"])), kind == "typical", str(row[f"{kind}_means"]), str(row[f"{kind}_source"]))


__all__ = ["Delay", "ProvisioningTable"]

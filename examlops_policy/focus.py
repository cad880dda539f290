"""The bill in FOCUS, the FinOps Foundation's open billing format (``exa finops export``).

One row per placement per UTC hour it held devices in (charge periods are whole hours,
half-open: ``[start, end)``), split into the part its job ran (``x_UsageKind`` ``used``) and the
rest of what it held (``idle``: reserved but idle, as reconcile recorded the job's start and end;
a placement submitted to no scheduler is all used). The idle part is charged to the project that
held the devices when accounting.yaml's ``charge_idle`` says so; otherwise its list cost is shown
and its billed cost is 0. Every mandatory FOCUS 1.2 column is written, the conditional ones that
apply (resource, region, SKU, unit prices, consumed quantity, sub-account for the project, tags),
and ``x_`` columns for what only this layer knows (``X_COLUMNS``).

``--focus-version 1.3`` splits the cost of each device-hour that slices or shares of one device
made (MIG slices by compute slices, AMD partitions by eighths, time-slice and MPS shares by
shares): one row per grant, whose ``AllocatedRatio`` is its part of the device for the part of
the hour it held it, plus one row for what no grant held, so that per device-hour the ratios sum
to 1 and the costs and quantities to the device's hour (``AllocatedMethodDetails``, FOCUS 1.3
split cost allocation). Rows are streamed: memory stays bounded by one page of placements (and,
for 1.3, the shared device-hours of the hours one page reaches).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from examlops_policy.errors import SpecError

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware
    from examlops_policy.views import UsageRow

VERSIONS: Final = ("1.2", "1.3")
HOUR: Final = 3600.0
PAGE: Final = 1000
UNIT: Final = "Hours"  # a device-hour: PricingQuantity and ConsumedQuantity count devices x hours

FOCUS_COLUMNS: Final = (
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingAccountType", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd",
    "ChargePeriodStart", "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "EffectiveCost", "InvoiceId", "InvoiceIssuerName",
    "ListCost", "ListUnitPrice", "PricingCategory", "PricingCurrency", "PricingQuantity", "PricingUnit", "ProviderName",
    "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceId", "SubAccountId", "SubAccountName", "SubAccountType", "Tags",
)  # fmt: skip
ALLOCATION_COLUMNS: Final = ("AllocatedMethodId", "AllocatedMethodDetails", "AllocatedResourceId", "AllocatedResourceName", "AllocatedTags")
X_COLUMNS: Final = (
    "x_DecisionId", "x_PolicyRevision", "x_AuditEntryHash", "x_Project", "x_Workload", "x_Grant", "x_UsageKind", "x_CarbonG",
    "x_CarbonMethod", "x_EnergyKWh", "x_WaitSeconds", "x_JobId", "x_Scheduler",
)  # fmt: skip
UNASSIGNED: Final = "unassigned"  # the project of a workload that named none
# The allocation method of the 1.3 split: a device-hour shared by compute slices (MIG sevenths, AMD
# eighths) or shares (time-slice, MPS), split by the part of the device each grant held, for the
# part of the hour it held it; what no grant held is the unallocated row.
METHOD: Final = "examlops-device-share"


def columns(version: str) -> tuple[str, ...]:
    return FOCUS_COLUMNS + (ALLOCATION_COLUMNS if version == "1.3" else ()) + X_COLUMNS


def parse_hour(text: str, field: str) -> datetime:
    """An ISO 8601 time on a whole UTC hour (``2026-12-01T00:00Z``; a date is its midnight)."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(f"expected an ISO 8601 time on a whole hour, UTC (e.g. 2026-12-01T00:00Z), got {text!r}", field=field) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    if moment.minute or moment.second or moment.microsecond:
        raise SpecError(f"charge periods are whole UTC hours: {text!r} is not on an hour", field=field)
    return moment


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _month(ts: float) -> tuple[str, str, str]:
    """The billing period (calendar month, UTC) that ``ts`` falls in: start, end, invoice month."""
    moment = datetime.fromtimestamp(ts, timezone.utc)
    first = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (first + timedelta(days=32)).replace(day=1)
    return first.strftime("%Y-%m-%dT%H:%M:%SZ"), following.strftime("%Y-%m-%dT%H:%M:%SZ"), first.strftime("%Y-%m")


def _number(value: float, places: int = 10) -> str:
    """A decimal without an exponent, always with a decimal point (FOCUS's numeric columns are
    decimals: a reader that infers types must not take a column of whole numbers for integers)."""
    text = f"{round(value, places) + 0.0:.{places}f}".rstrip("0")
    return "0.0" if text in ("0.", "-0.") else text + "0" if text.endswith(".") else text


@dataclass(frozen=True)
class PoolFacts:
    """What the bill needs of a pool as a decision's fleet gave it."""

    carbon_method: str
    kwh_per_device_hour: float | None
    sharing: str | None
    shares_per_device: int | None


def grant_text(accelerator: str, holdings: tuple[tuple[str, int, str | None, int | None, float, int | None], ...], facts: PoolFacts | None) -> str:
    """What a grant held, for people: ``2 whole``, ``MIG 3g.40gb``, ``AMD cpx``, ``mps 2 of 8 shares``."""
    whole = sum(1 for h in holdings if h[2] is None and h[5] is None)
    parts = [f"{whole} whole"] if whole else []
    for _, _, profile, _, _, shares in holdings:
        if shares is not None and facts is not None:
            parts.append(f"{facts.sharing} {shares} of {facts.shares_per_device} shares")
        elif profile is not None:
            parts.append(f"{'MIG' if accelerator == 'nvidia' else 'AMD' if accelerator == 'amd' else accelerator} {profile}")
    return " + ".join(parts) or "-"


def device_ratio(holding: tuple[str, int, str | None, int | None, float, int | None], accelerator: str, facts: PoolFacts | None) -> tuple[float, str, int, int]:
    """A holding's part of its device and by what it is counted: (ratio, unit, quantity, of)."""
    _, _, profile, units, share, shares = holding
    if shares is not None and facts is not None and facts.shares_per_device:
        return shares / facts.shares_per_device, "Shares", shares, facts.shares_per_device
    if profile is not None and units is not None:
        of = 7 if accelerator == "nvidia" else 8
        return units / of, "Compute slices" if accelerator == "nvidia" else "Compute partitions", units, of
    return share, "Devices", 1, 1


class Exporter:
    """Writes the FOCUS rows of ``[start, end)`` for a façade's state."""

    def __init__(self, hw: Hardware, start: datetime, end: datetime, version: str = "1.2") -> None:
        if version not in VERSIONS:
            raise SpecError(f"expected a FOCUS version of {', '.join(VERSIONS)}, got {version!r}", field="--focus-version")
        if end <= start:
            raise SpecError(f"the period ends ({end.isoformat()}) before it starts ({start.isoformat()})", field="--to")
        self.hw, self.version = hw, version
        self.start_ts, self.end_ts = start.timestamp(), end.timestamp()
        self.start, self.end = _iso(self.start_ts), _iso(self.end_ts)
        self.billing = hw.tables.billing()
        self.charge_idle = hw.tables.charge_idle
        self._facts: dict[str | None, dict[str, PoolFacts]] = {}
        self._hours: dict[float, dict[str, str]] = {}
        self.rows_written = 0

    # -- what each placement's pool was -----------------------------------------------------

    def facts(self, fleet: str | None, pool: str) -> PoolFacts | None:
        found = self._facts.get(fleet)
        if found is None:
            found = self._load_facts(fleet)
            if len(self._facts) > 32:
                self._facts.clear()
            self._facts[fleet] = found
        return found.get(pool)

    def _load_facts(self, fleet: str | None) -> dict[str, PoolFacts]:
        from examlops_policy.accounting import carbon_basis
        from examlops_policy.model import Pool

        tables = self.hw.tables
        specs: list[dict[str, object]] = []
        if fleet is not None:  # None: a decision from before decisions kept their fleet
            entries = self.hw.records.document("fleets", fleet).get("pools") or []
            for entry in entries if isinstance(entries, list) else []:
                spec = entry.get("pool") if isinstance(entry, dict) else None
                if isinstance(spec, dict):
                    specs.append(dict(spec))
        out: dict[str, PoolFacts] = {}
        for values in specs:
            try:
                values["capabilities"] = tuple(values.get("capabilities") or ())  # type: ignore[arg-type]
                pool = Pool(**values)  # type: ignore[arg-type]
            except (SpecError, TypeError, ValueError):
                continue
            power = pool.power_w if pool.power_w is not None else tables.model_power(pool.model)
            if power is None:
                power = tables.reference_power(pool.accelerator)
            pue = pool.pue if pool.pue is not None else tables.region_pue(pool.region)
            if pue is None:
                pue = float(tables.accounting.get("reference_pue") or 1.0)  # type: ignore[arg-type]
            out[pool.name] = PoolFacts(carbon_basis(pool, tables).method, power / 1000.0 * pue, pool.sharing, pool.shares_per_device)
        return out

    # -- rows -----------------------------------------------------------------------------

    def placements(self) -> Iterator[tuple[UsageRow, str]]:
        """Every placement that held devices in the period, page by page, with its audit entry's hash."""
        after: tuple[str, str] | None = None
        while True:
            page = self.hw.store.usage_page(self.start, self.end, after=after, limit=PAGE)
            if not page:
                return
            hashes = self.hw.store.decision_audit_hashes([p.id for p in page], page[0].created_at)
            for p in page:
                yield p, hashes.get(p.id, "")
            after = (page[-1].created_at, page[-1].id)

    def usage_rows(self) -> Iterator[dict[str, str]]:
        """The 1.2 rows: per placement, per hour it held devices in the period, used then idle."""
        for p, entry_hash in self.placements():
            facts = self.facts(p.fleet_revision, p.pool)
            yield from self._rows_of(p, self._base(p, entry_hash, facts), facts)

    def _run(self, p: UsageRow) -> tuple[float, float]:
        """When the placement's job ran, within its holding (all of it without a scheduler)."""
        if p.job_id is None:
            return p.held_from, p.held_until
        if p.job_started is None:
            return 0.0, 0.0
        return max(p.held_from, p.job_started), min(p.held_until, p.job_ended if p.job_ended is not None else p.held_until)

    def _base(self, p: UsageRow, entry_hash: str, facts: PoolFacts | None) -> dict[str, str]:
        b = self.billing
        project = p.project or UNASSIGNED
        waited = max(0.0, (p.job_started if p.job_started is not None else p.held_from) - (p.asked_at if p.asked_at is not None else p.held_from))
        tags = {"workload": p.workload, "project": project, "pool": p.pool, "accelerator": p.accelerator}
        return {
            "BillingAccountId": b["account_id"], "BillingAccountName": b["account_name"], "BillingAccountType": "Fleet",
            "BillingCurrency": b["currency"], "PricingCurrency": b["currency"], "ChargeCategory": "Usage", "ChargeClass": "",
            "ChargeFrequency": "Usage-Based", "InvoiceIssuerName": b["provider"], "ProviderName": b["provider"], "PublisherName": b["provider"],
            "PricingCategory": "Standard", "PricingUnit": UNIT, "ConsumedUnit": UNIT, "ListUnitPrice": _number(p.cost_per_hour),
            "RegionId": p.region, "RegionName": p.region, "ResourceId": f"{p.pool}/{p.id}", "ResourceName": f"{p.workload} on {p.pool}",
            "ResourceType": "Accelerator grant", "ServiceCategory": "AI and Machine Learning", "ServiceName": "Accelerator placement",
            "ServiceSubcategory": "Other (AI and Machine Learning)", "SkuId": f"{p.accelerator}:{p.model or '-'}",
            "SkuPriceId": f"{p.pool}:{_number(p.cost_per_hour)}", "SkuMeter": "Device-hours",
            "SubAccountId": project, "SubAccountName": project, "SubAccountType": "Project", "Tags": json.dumps(tags, sort_keys=True),
            "x_DecisionId": p.id, "x_PolicyRevision": p.policy_revision, "x_AuditEntryHash": entry_hash, "x_Project": project,
            "x_Workload": p.workload, "x_Grant": grant_text(p.accelerator, p.holdings, facts),
            "x_CarbonMethod": facts.carbon_method if facts is not None else "unrecorded", "x_WaitSeconds": _number(waited, 3),
            "x_JobId": p.job_id or "", "x_Scheduler": p.scheduler or "",
        }  # fmt: skip

    def _hour(self, hour: float) -> dict[str, str]:
        """The columns that depend on the charge period alone (kept for the hours last asked)."""
        found = self._hours.get(hour)
        if found is None:
            period_start, period_end, month = _month(hour)
            found = {"ChargePeriodStart": _iso(hour), "ChargePeriodEnd": _iso(hour + HOUR), "BillingPeriodStart": period_start,
                     "BillingPeriodEnd": period_end, "InvoiceId": f"{self.billing['account_id']}-{month}"}  # fmt: skip
            if len(self._hours) > 4096:
                self._hours.clear()
            self._hours[hour] = found
        return found

    def _row(
        self, base: dict[str, str], p: UsageRow, facts: PoolFacts | None, hour: float, kind: str, device_hours: float, period: dict[str, str] | None = None
    ) -> dict[str, str]:
        row = dict(base)
        list_cost = p.cost_per_hour * device_hours
        billed = list_cost if kind == "used" or self.charge_idle else 0.0
        row.update(period if period is not None else self._hour(hour))
        row.update({
            "PricingQuantity": _number(device_hours), "ConsumedQuantity": _number(device_hours),
            "ListCost": _number(list_cost), "BilledCost": _number(billed), "EffectiveCost": _number(billed), "ContractedCost": _number(billed),
            "ChargeDescription": (f"{p.accelerator} device-hours on {p.pool} used by {p.workload}" if kind == "used"
                                  else f"{p.accelerator} device-hours on {p.pool} reserved by {p.workload} but idle"
                                  + ("" if self.charge_idle else " (not charged)")),
            "x_UsageKind": kind, "x_CarbonG": _number(p.carbon_factor * device_hours, 6),
            "x_EnergyKWh": "" if facts is None or facts.kwh_per_device_hour is None else _number(facts.kwh_per_device_hour * device_hours, 6),
        })  # fmt: skip
        return row

    # -- 1.3: split cost of shared devices --------------------------------------------------

    def split_rows(self) -> Iterator[dict[str, str]]:
        """The 1.3 rows: whole-device grants as in 1.2; each device-hour that slices or shares
        made one row per grant (its part of the device for the part of the hour it held it) and
        one row for the rest, with the allocation columns."""
        shared: dict[tuple[str, str, int, float], list[tuple[UsageRow, str, PoolFacts | None, dict[str, str], float, float, str, int, int]]] = {}
        flushed = -math.inf
        for p, entry_hash in self.placements():
            # Placements come in the order they were made: a device-hour that ended before this one
            # was made has every grant it will have, so it is written and forgotten.
            if p.held_from >= flushed + HOUR:
                flushed = math.floor(p.held_from / HOUR) * HOUR
                for key in sorted(key for key in shared if key[3] + HOUR <= p.held_from):
                    yield from self._device_hour(*key, shared.pop(key))
            facts = self.facts(p.fleet_revision, p.pool)
            base = self._base(p, entry_hash, facts)
            parts = [h for h in p.holdings if h[2] is not None or h[5] is not None]
            if not parts:
                for row in self._rows_of(p, base, facts):
                    yield self._with_allocation(row, "", "", "", "")
                continue
            first, last = max(p.held_from, self.start_ts), min(p.held_until, self.end_ts)
            hour = math.floor(first / HOUR) * HOUR
            while hour < last:
                held = _overlap(p.held_from, p.held_until, hour, hour + HOUR) / HOUR
                for h in parts:
                    ratio, unit, quantity, of = device_ratio(h, p.accelerator, facts)
                    shared.setdefault((p.pool, h[0], h[1], hour), []).append((p, entry_hash, facts, base, ratio * held, ratio, unit, quantity, of))
                hour += HOUR
        for (pool, node, device, hour), grants in sorted(shared.items()):
            yield from self._device_hour(pool, node, device, hour, grants)

    def _rows_of(self, p: UsageRow, base: dict[str, str], facts: PoolFacts | None) -> Iterator[dict[str, str]]:
        for hour, kind, device_hours in self._hours_of(p):
            yield self._row(base, p, facts, hour, kind, device_hours)

    def _device_hour(
        self, pool: str, node: str, device: int, hour: float,
        grants: list[tuple[UsageRow, str, PoolFacts | None, dict[str, str], float, float, str, int, int]],
    ) -> Iterator[dict[str, str]]:  # fmt: skip
        resource = f"{pool}/{node}/{device}"
        price = grants[0][0].cost_per_hour
        total = sum(g[4] for g in grants)
        scale = 1.0 / total if total > 1.0 else 1.0  # never more than the device (a record that overlapped)
        # Each allocated charge's own element (FOCUS 1.3: its AllocatedRatio of the origin charge,
        # the device-hour; the ratios of all the charges of one device-hour sum to 1). UsageQuantity:
        # the slices or shares it held, for the part of the hour it held them.
        ratios = [round(g[4] * scale, 12) for g in grants]
        elements = [{"AllocatedRatio": r, "UsageUnit": g[6], "UsageQuantity": round(g[7] * r / g[5], 12) if g[5] else 0.0, "x_Of": g[8]}
                    for r, g in zip(ratios, grants)]  # fmt: skip
        idle = round(max(0.0, 1.0 - sum(ratios)), 12)
        method = METHOD
        for (p, _, facts, base, *_), ratio, element in zip(grants, ratios, elements):
            details = json.dumps({"Elements": [element], "x_OriginResourceId": resource}, sort_keys=True)
            row = self._row(base, p, facts, hour, "used" if self._ran_in(p, hour) else "idle", ratio)
            row.update({"ResourceId": resource, "ResourceName": f"{pool} {node} device {device}", "ResourceType": "Shared accelerator",
                        "ListUnitPrice": _number(price)})  # fmt: skip
            tags = json.dumps({"workload": p.workload, "project": p.project or UNASSIGNED}, sort_keys=True)
            yield self._with_allocation(row, method, details, f"{p.pool}/{p.id}", f"{p.workload} on {p.pool}", tags)
        if idle > 1e-12:
            p, _, facts, base, *_ = grants[0]
            row = self._row(base, p, facts, hour, "idle", idle)
            b = self.billing
            list_cost = price * idle
            billed = list_cost if self.charge_idle else 0.0
            row.update({
                "ResourceId": resource, "ResourceName": f"{pool} {node} device {device}", "ResourceType": "Shared accelerator",
                "SubAccountId": "", "SubAccountName": "", "SubAccountType": "", "x_Project": "", "x_Workload": "", "x_DecisionId": "",
                "x_AuditEntryHash": "", "x_Grant": "unallocated", "x_JobId": "", "x_Scheduler": "", "x_WaitSeconds": "0",
                "BilledCost": _number(billed), "EffectiveCost": _number(billed), "ContractedCost": _number(billed), "ListCost": _number(list_cost),
                "ChargeDescription": f"{p.accelerator} device-hour on {pool} held by no grant" + ("" if self.charge_idle else " (not charged)"),
                "Tags": json.dumps({"pool": pool, "accelerator": p.accelerator}, sort_keys=True), "BillingAccountId": b["account_id"],
            })  # fmt: skip
            details = json.dumps({"Elements": [{"AllocatedRatio": idle, "UsageUnit": "Unallocated", "UsageQuantity": idle}], "x_OriginResourceId": resource},
                                 sort_keys=True)  # fmt: skip
            # FOCUS 1.3: the unallocated portion of the origin charge has a null AllocatedResourceId.
            yield self._with_allocation(row, method, details, "", "", json.dumps({"unallocated": "true"}))

    def _ran_in(self, p: UsageRow, hour: float) -> bool:
        run_from, run_until = self._run(p)
        return run_until > run_from and _overlap(run_from, run_until, hour, hour + HOUR) > 0

    @staticmethod
    def _with_allocation(row: dict[str, str], method: str, details: str, resource: str, name: str, tags: str = "") -> dict[str, str]:
        row.update({"AllocatedMethodId": method, "AllocatedMethodDetails": details, "AllocatedResourceId": resource,
                    "AllocatedResourceName": name, "AllocatedTags": tags})  # fmt: skip
        return row

    def rows(self) -> Iterator[dict[str, str]]:
        return self.split_rows() if self.version == "1.3" else self.usage_rows()

    def usage_lines(self) -> Iterator[str]:
        """The 1.2 rows as CSV lines, as ``usage_rows`` gives them, written fast: a placement's
        rows differ from hour to hour only in the charge and billing period columns (and, in a
        first or last hour, its quantities), so each (placement, kind, quantity) is rendered once
        as CSV with markers where those columns go, and each hour fills them in."""
        names = columns("1.2")
        marked = {key: f"\x01{key}\x01" for key in ("ChargePeriodStart", "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd", "InvoiceId")}
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        period_order = tuple(c for c in names if c in marked)
        hours: dict[float, tuple[str, ...]] = {}
        for p, entry_hash in self.placements():
            facts = self.facts(p.fleet_revision, p.pool)
            base = self._base(p, entry_hash, facts)
            templates: dict[tuple[str, float], str] = {}
            for hour, kind, device_hours in self._hours_of(p):
                template = templates.get((kind, device_hours))
                if template is None:
                    row = self._row(base, p, facts, hour, kind, device_hours, marked)
                    buffer.seek(0)
                    buffer.truncate()
                    writer.writerow([row.get(c, "") for c in names])
                    # "%s" where each period column goes (in column order), every other "%" doubled.
                    pieces = buffer.getvalue().replace("%", "%%").split("\x01")
                    order = tuple(pieces[1::2])
                    assert order == period_order, order
                    template = templates[kind, device_hours] = "%s".join(pieces[0::2])
                periods = hours.get(hour)
                if periods is None:
                    period = self._hour(hour)
                    periods = hours[hour] = tuple(period[key] for key in period_order)
                    if len(hours) > 4096:
                        hours.clear()
                        hours[hour] = periods
                yield template % periods

    def _hours_of(self, p: UsageRow) -> Iterator[tuple[float, str, float]]:
        """(hour, used or idle, device-hours) of each row of ``p``: the part of each hour in the
        period it held its devices, and of that the part its job ran (arithmetic inline: it runs
        once per row)."""
        held_from, held_until = p.held_from, p.held_until
        last = min(held_until, self.end_ts)
        hour = math.floor(max(held_from, self.start_ts) / HOUR) * HOUR
        run_from, run_until = self._run(p)
        ran = run_until > run_from
        devices = p.devices
        while hour < last:
            end = hour + HOUR
            held = (held_until if held_until < end else end) - (held_from if held_from > hour else hour)
            used = 0.0
            if ran:
                used = (run_until if run_until < end else end) - (run_from if run_from > hour else hour)
                used = 0.0 if used < 0 else held if used > held else used
            if used > 1e-9:
                yield hour, "used", devices * used / HOUR
            if held - used > 1e-9:
                yield hour, "idle", devices * (held - used) / HOUR
            hour = end

    def write(self, out: IO[str]) -> int:
        """Write the CSV (header, then every row) to ``out``; the number of rows."""
        names = columns(self.version)
        csv.writer(out, lineterminator="\n").writerow(names)
        count = 0
        if self.version == "1.2":
            lines = self.usage_lines()
            while chunk := list(itertools.islice(lines, 8192)):
                out.write("".join(chunk))
                count += len(chunk)
        else:
            writer = csv.DictWriter(out, fieldnames=names, extrasaction="ignore", lineterminator="\n")
            for row in self.rows():
                writer.writerow(row)
                count += 1
        self.rows_written = count
        return count


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def export(hw: Hardware, start: datetime, end: datetime, path: Path, *, version: str = "1.2") -> int:
    """Write the FOCUS CSV of ``[start, end)`` at ``path``, whole or not at all (a temporary file
    beside it, renamed over it); the number of rows."""
    if path.suffix.lower() != ".csv":
        raise SpecError(f"the export is written as CSV: name a .csv file (got {path.name!r})", field="--out", source=str(path))
    exporter = Exporter(hw, start, end, version)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as out:
            count = exporter.write(out)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SpecError(f"cannot write {path}: {exc.strerror or exc}", source=str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count

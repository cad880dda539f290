"""Cost and carbon read back from the recorded placements: the FinOps table, cost per workload,
how far start estimates were from actual starts, and the FinOps report's data."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, cast

from examlops_policy.app.cycle import DecisionCycle
from examlops_policy.app.records import day_of, hours_of, period
from examlops_policy.views import EstimateError, FinopsReport, ModelsCost, estimate_error_s, estimate_errors

if TYPE_CHECKING:
    from examlops_policy.report import ReportData


def finops(cycle: DecisionCycle, hours: float | None, *, methods: bool) -> FinopsReport:
    """Cost and carbon of placed decisions by device type and region, with totals. Hours are
    ``hours`` for every decision when given, else the time each placement held its devices.
    ``methods``: say how each row's carbon was found (it reads the fleets the placements were
    decided on; a cost table that does not show it can leave it out)."""
    from examlops_policy.accounting import UNRECORDED, carbon_method_text

    store, tables = cycle.store, cycle.tables
    found: dict[tuple[str, str], set[str]] = {}
    for device, region, pool, fleet in store.placed_pools() if methods else ():
        method = cycle.records.carbon_method(fleet, pool)
        found.setdefault((device, region), set()).add(method or UNRECORDED)
    rows = tuple(
        dataclasses.replace(r, carbon_methods=tuple(sorted(found.get((r.device, r.region), ()))))
        for r in store.finops(hours=hours_of(hours), charge_idle=tables.charge_idle)
    )  # fmt: skip
    return FinopsReport(
        rows,
        sum(r.decisions for r in rows),
        round(sum(r.device_hours for r in rows), 6),
        round(sum(r.cost for r in rows), 6),
        round(sum(r.carbon_g for r in rows), 6),
        tuple((m, carbon_method_text(m, tables)) for m in sorted({m for r in rows for m in r.carbon_methods})),
        used_device_hours=round(sum(r.used_device_hours for r in rows), 6),
        idle_device_hours=round(sum(r.idle_device_hours for r in rows), 6),
        used_cost=round(sum(r.used_cost for r in rows), 6),
        idle_cost=round(sum(r.idle_cost for r in rows), 6),
    )


def start_errors(cycle: DecisionCycle, *, since: str | None, until: str | None) -> tuple[EstimateError, ...]:
    """How far start estimates were from the actual starts of placements made over a period
    (``since``/``until`` as for ``decision_page``): per estimate source, the median and 90th
    percentile of actual minus estimated start, over the placements with both."""
    start, end = period(since, until)
    rows = cycle.store.estimate_starts(since=start, until=end)
    return estimate_errors([(source, error) for source, _, est, actual in rows if (error := estimate_error_s(est, actual)) is not None])


def models_cost(cycle: DecisionCycle, hours: float | None) -> ModelsCost:
    """Cost and carbon per workload name (``exa models cost``), most expensive first."""
    rows = tuple(cycle.store.cost_by_workload(hours=hours_of(hours), charge_idle=cycle.tables.charge_idle))
    return ModelsCost(
        rows, round(sum(r.cost for r in rows), 6), round(sum(r.carbon_g for r in rows), 6),
        used_cost=round(sum(r.used_cost for r in rows), 6), idle_cost=round(sum(r.idle_cost for r in rows), 6),
    )  # fmt: skip


def finops_report(cycle: DecisionCycle, *, since: str | None, until: str | None, title: str, now: datetime | None) -> ReportData:
    """The FinOps report's data over a period (default: from the first decision to now), for
    ``report.render_html``."""
    from examlops_policy.report import report_from_rows

    now = now or datetime.now(timezone.utc)
    since, until = period(since, until)
    decisions, bursts = cycle.store.report_rows(since=since, until=until)
    records = cycle.records
    for row in decisions:
        # How each placement's carbon was found, from the fleet it was decided on.
        pool, fleet = row.pop("pool", None), row.pop("fleet", None)
        if row["outcome"] == "placed":
            row["carbon_method"] = records.carbon_method(cast("str | None", fleet), cast("str | None", pool))
    start = day_of(since) if since else min((day_of(str(d["created_at"])) for d in decisions), default=now.date())
    end = (day_of(until) - timedelta(days=1)) if until else now.date()
    return report_from_rows(title, start, max(start, end), now, decisions=decisions, bursts=bursts, charge_idle=cycle.tables.charge_idle)

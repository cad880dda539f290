"""The FinOps report: one self-contained HTML page of cost, carbon and decision honesty.

    data = report_from_rows("EU fleet, March", date(2025, 3, 1), date(2025, 3, 31), now,
                            decisions=[{...}, ...], bursts=[{...}, ...])
    Path("report.html").write_text(render_html(data), encoding="utf-8")

``ReportData`` is what the page shows; ``report_from_rows`` builds it from plain rows (mappings,
as a database cursor or a test gives them) and checks them; ``render_html`` draws it. The page
has inline CSS and charts drawn here as inline SVG: nothing is fetched when it is viewed and no
script runs. Every chart has a title, a description, labelled axes and a table beside it with
the same numbers. The totals carry stable ids (``total-cost``, ``total-carbon``,
``total-decisions``) and their exact value in ``data-value``, so a test can read them back.
Every string that comes from data is HTML-escaped.

Pure: no I/O, no clock (``generated_at`` is given), the same data gives the same page.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from html import escape
from typing import Final, Literal

from examlops_policy.accounting import CARBON_METHODS, UNRECORDED
from examlops_policy.errors import SpecError
from examlops_policy.views import EstimateError, FinopsRow, WorkloadCost, duration_text, estimate_error_s, estimate_errors

OUTCOMES: Final = ("placed", "rejected", "blocked")
BURST_VERDICTS: Final = ("allowed", "blocked", "unavailable")
MAX_DAYS: Final = 366  # one bar per day; a longer period is a different report
TOP_WORKLOADS: Final = 10

Outcome = Literal["placed", "rejected", "blocked"]


# --- what the page shows -------------------------------------------------------------------------


@dataclass(frozen=True)
class DayOutcomes:
    """Decisions made on one day, by outcome."""

    day: date
    placed: int
    rejected: int
    blocked: int

    @property
    def total(self) -> int:
        return self.placed + self.rejected + self.blocked


@dataclass(frozen=True)
class BurstCounts:
    """Burst attempts of workloads with one data residency, by verdict."""

    residency: str
    allowed: int
    blocked: int
    unavailable: int


@dataclass(frozen=True)
class Honesty:
    """Placements on another accelerator than asked (fallbacks), and fractions given as asked."""

    placements: int
    fallbacks: int
    fractions_requested: int  # placements that asked for less than a whole device
    fractions_honored: int  # ... and got that share (a partition), not a whole device

    @property
    def fractions_not_honored(self) -> int:
        return self.fractions_requested - self.fractions_honored


@dataclass(frozen=True)
class Totals:
    cost: float
    carbon_g: float
    decisions: int


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows. Build it with ``report_from_rows`` (which checks it)."""

    title: str
    period_start: date
    period_end: date  # inclusive
    generated_at: datetime  # timezone-aware
    cost_carbon: tuple[FinopsRow, ...]  # by device, then region (as finops.totals gives them)
    days: tuple[DayOutcomes, ...]  # every day of the period, in order
    bursts: tuple[BurstCounts, ...]  # by residency
    top_workloads: tuple[WorkloadCost, ...]  # most expensive first
    honesty: Honesty
    totals: Totals
    currency: str = "USD"
    # gCO2e per carbon method (a key of accounting.CARBON_METHODS, or "unrecorded"), largest first.
    carbon_methods: tuple[tuple[str, float], ...] = ()
    # How far start estimates were from the actual starts, per estimate source (slurm, kubernetes,
    # table, now), over the placements with both.
    estimate_errors: tuple[EstimateError, ...] = ()


# --- from plain rows -----------------------------------------------------------------------------


def _where(kind: str, index: int, key: str) -> str:
    return f"{kind}[{index}].{key}"


def _text(row: Mapping[str, object], key: str, where: str, *, optional: bool = False) -> str | None:
    value = row.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"expected a non-empty string (got {value!r:.60})", field=where)
    return value


def _number(row: Mapping[str, object], key: str, where: str, default: float = 0.0) -> float:
    value = row.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(f"expected a finite number of at least 0 (got {value!r:.60})", field=where)
    return float(value)


def _flag(row: Mapping[str, object], key: str, where: str) -> bool:
    value = row.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(f"expected true or false (got {value!r:.60})", field=where)
    return value


def _day(row: Mapping[str, object], where: str) -> date:
    value = row.get("created_at")
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).date() if value.tzinfo else value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed.astimezone(timezone.utc).date() if parsed.tzinfo else parsed.date()
    raise SpecError(f"expected an ISO 8601 date or time (got {value!r:.60})", field=where)


def report_from_rows(
    title: str,
    period_start: date,
    period_end: date,
    generated_at: datetime,
    *,
    decisions: Iterable[Mapping[str, object]],
    bursts: Iterable[Mapping[str, object]] = (),
    top: int = TOP_WORKLOADS,
    currency: str = "USD",
    charge_idle: bool = True,
) -> ReportData:
    """Build ``ReportData`` from plain rows, checking each one.

    A decision row: ``workload`` (str), ``created_at`` (ISO 8601 or date/datetime; times are
    taken in UTC), ``outcome`` (placed, rejected or blocked); for a placement also ``device``
    and ``region`` (str), ``device_hours``, ``cost``, ``carbon_g`` (numbers >= 0, default 0),
    ``fallback`` (bool), ``fraction`` (requested share of a device, default 1.0),
    ``fraction_honored`` (bool) and ``carbon_method`` (how its carbon per device-hour was found: a
    key of ``accounting.CARBON_METHODS``; absent or None: not recorded) and, where its start was
    estimated and its job's actual start is known, ``estimate_source``, ``estimated_start`` and
    ``actual_start`` (RFC 3339); ``used_device_hours`` and ``used_cost`` say how much of that its
    job ran (default: all of it), the rest being reserved but idle, counted in the cost only when
    ``charge_idle``. A burst row: ``residency`` (str) and ``verdict`` (allowed,
    blocked or unavailable). Raises ``SpecError`` naming the row and field; a decision outside
    the period is an error too (the caller selects the period).
    """
    if not title.strip():
        raise SpecError("the report needs a title", field="title")
    if period_end < period_start:
        raise SpecError(f"the period ends ({period_end}) before it starts ({period_start})", field="period")
    days_in_period = (period_end - period_start).days + 1
    if days_in_period > MAX_DAYS:
        raise SpecError(f"the period is {days_in_period} days; at most {MAX_DAYS} fit one report", field="period")
    if generated_at.tzinfo is None:
        raise SpecError("generated_at must carry a time zone", field="generated_at")
    if top < 1:
        raise SpecError(f"top must be at least 1 (got {top})", field="top")

    per_day = {period_start + timedelta(days=i): dict.fromkeys(OUTCOMES, 0) for i in range(days_in_period)}
    groups: dict[tuple[str, str], list[float]] = {}
    workloads: dict[str, list[float]] = {}
    placements = fallbacks = requested = honored = 0
    methods: dict[str, float] = {}
    group_methods: dict[tuple[str, str], set[str]] = {}
    errors: list[tuple[str, float]] = []
    for index, row in enumerate(decisions):

        def where(key: str, index: int = index) -> str:
            return _where("decisions", index, key)

        name = _text(row, "workload", where("workload"))
        outcome = row.get("outcome")
        if outcome not in OUTCOMES:
            raise SpecError(f"expected one of {', '.join(OUTCOMES)} (got {outcome!r:.60})", field=where("outcome"))
        day = _day(row, where("created_at"))
        if day not in per_day:
            raise SpecError(f"{day} is outside the period {period_start} to {period_end}", field=where("created_at"))
        per_day[day][str(outcome)] += 1
        spent = workloads.setdefault(str(name), [0, 0.0, 0.0, 0.0])
        spent[0] += 1
        if outcome != "placed":
            continue
        device, region = _text(row, "device", where("device")), _text(row, "region", where("region"))
        hours, held_cost, carbon = (_number(row, k, where(k)) for k in ("device_hours", "cost", "carbon_g"))
        used_hours = min(hours, _number(row, "used_device_hours", where("used_device_hours"), default=hours))
        used_cost = min(held_cost, _number(row, "used_cost", where("used_cost"), default=held_cost))
        cost = held_cost if charge_idle else used_cost
        group = groups.setdefault((str(device), str(region)), [0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        group[4] += used_hours
        group[5] += used_cost
        group[6] += held_cost - used_cost
        group_methods.setdefault((str(device), str(region)), set()).add(str(row.get("carbon_method") or UNRECORDED))
        group[0] += 1
        group[1] += hours
        group[2] += cost
        group[3] += carbon
        spent[1] += cost
        spent[2] += carbon
        method = row.get("carbon_method")
        if method is not None and method not in CARBON_METHODS:
            raise SpecError(f"expected one of {', '.join(CARBON_METHODS)} (got {method!r:.60})", field=where("carbon_method"))
        methods[str(method or UNRECORDED)] = methods.get(str(method or UNRECORDED), 0.0) + carbon
        estimated, actual = row.get("estimated_start"), row.get("actual_start")
        if estimated is not None and actual is not None:
            source = _text(row, "estimate_source", where("estimate_source"))
            try:
                error = estimate_error_s(_text(row, "estimated_start", where("estimated_start")), _text(row, "actual_start", where("actual_start")))
            except ValueError:
                raise SpecError(f"expected RFC 3339 times (got {estimated!r:.40} and {actual!r:.40})", field=where("actual_start")) from None
            if error is not None:
                errors.append((str(source), error))
        spent[3] += hours
        placements += 1
        fallbacks += _flag(row, "fallback", where("fallback"))
        fraction = _number(row, "fraction", where("fraction"), default=1.0)
        if not 0 < fraction <= 1:
            raise SpecError(f"a fraction is in (0, 1] (got {fraction})", field=where("fraction"))
        if fraction < 1:
            requested += 1
            honored += _flag(row, "fraction_honored", where("fraction_honored"))

    verdicts: dict[str, dict[str, int]] = {}
    for index, row in enumerate(bursts):
        residency = _text(row, "residency", _where("bursts", index, "residency"))
        verdict = row.get("verdict")
        if verdict not in BURST_VERDICTS:
            raise SpecError(f"expected one of {', '.join(BURST_VERDICTS)} (got {verdict!r:.60})", field=_where("bursts", index, "verdict"))
        verdicts.setdefault(str(residency), dict.fromkeys(BURST_VERDICTS, 0))[str(verdict)] += 1

    cost_carbon = tuple(
        FinopsRow(device, region, int(g[0]), round(g[1], 6), round(g[2], 6), round(g[3], 6), used_device_hours=round(g[4], 6),
                  idle_device_hours=round(max(0.0, g[1] - g[4]), 6), used_cost=round(g[5], 6), idle_cost=round(max(0.0, g[6]), 6),
                  idle_charged=charge_idle,
                  carbon_methods=tuple(sorted(group_methods[device, region])))  # fmt: skip
        for (device, region), g in sorted(groups.items())
    )
    # Only workloads that cost something are "most expensive" (a workload only ever rejected is not).
    ranked = sorted((item for item in workloads.items() if item[1][1] > 0), key=lambda item: (-item[1][1], -item[1][2], item[0]))
    return ReportData(
        title=title,
        period_start=period_start,
        period_end=period_end,
        generated_at=generated_at,
        cost_carbon=cost_carbon,
        days=tuple(DayOutcomes(d, c["placed"], c["rejected"], c["blocked"]) for d, c in per_day.items()),
        bursts=tuple(BurstCounts(r, v["allowed"], v["blocked"], v["unavailable"]) for r, v in sorted(verdicts.items())),
        top_workloads=tuple(WorkloadCost(n, int(w[0]), round(w[3], 6), round(w[1], 6), round(w[2], 6)) for n, w in ranked[:top]),
        honesty=Honesty(placements, fallbacks, requested, honored),
        totals=Totals(
            cost=round(sum(r.cost for r in cost_carbon), 6),
            carbon_g=round(sum(r.carbon_g for r in cost_carbon), 6),
            decisions=sum(sum(c.values()) for c in per_day.values()),
        ),
        currency=currency,
        carbon_methods=tuple(sorted(((m, round(g, 6)) for m, g in methods.items()), key=lambda mg: (-mg[1], mg[0]))),
        estimate_errors=estimate_errors(errors),
    )


# --- numbers for people ---------------------------------------------------------------------------


def _money(value: float, currency: str) -> str:
    """Cents, and below a cent two significant digits: an amount that is not zero never reads
    $0.00."""
    symbol = "$" if currency == "USD" else f"{escape(currency)} "
    if 0 < value < 0.01:
        return f"{symbol}{value:.2g}" if value >= 0.0001 else f"<{symbol}0.0001"
    return f"{symbol}{value:,.2f}"


def _carbon(grams: float) -> str:
    """gCO2e, in the unit that keeps the number readable; grams to a tenth, as ``exa finops``
    prints them (0.1 g never reads 0 g)."""
    if grams >= 1_000_000:
        return f"{grams / 1_000_000:,.2f} t CO₂e"
    if grams >= 1_000:
        return f"{grams / 1_000:,.1f} kg CO₂e"
    if 0 < grams < 0.05:
        return "<0.1 g CO₂e"
    return f"{grams:,.1f} g CO₂e"


def _signed_duration(seconds: float) -> str:
    """An estimate's error for people: ``+2 h 05 m`` later, ``-30 s`` sooner, ``0 s``."""
    sign = "+" if seconds > 0 else "-" if seconds < 0 else ""
    return sign + duration_text(abs(seconds))


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def _axis(value: float, *, whole: bool = False) -> tuple[float, float]:
    """An axis maximum at or above ``value`` and its step: a 1, 2, 2.5 or 5 x 10^k step, at most
    6 steps. ``whole``: whole-number steps only (counts)."""
    if value <= 0:
        return 1.0, 1.0
    magnitude = 10.0 ** (math.floor(math.log10(value)) - 1)
    while True:
        for factor in (1, 2, 2.5, 5):
            step = factor * magnitude
            if whole and step != int(step):
                continue
            steps = math.ceil(value / step - 1e-9)
            if steps <= 6:
                return round(steps * step, 9), step
        magnitude *= 10


def _decimals(step: float) -> int:
    """The decimals that tell apart the multiples of ``step`` (0.005 needs 3, 0.25 needs 2)."""
    return next((d for d in range(10) if abs(round(step, d) - step) < step * 1e-6), 9)


def _tick(value: float, step: float = 1.0) -> str:
    """An axis tick: as many decimals as the step needs, so that no two ticks read the same."""
    text = f"{value:,.{_decimals(step)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _clip(label: str, limit: int = 26) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


# --- charts (inline SVG) --------------------------------------------------------------------------

_PALETTE: Final = {
    "placed": "#1b7f5b",
    "rejected": "#b8860b",
    "blocked": "#b3261e",
    "allowed": "#1b7f5b",
    "unavailable": "#6b6b6b",
    "cost": "#2f5fa7",
    "carbon": "#6a4c93",
}


def _svg_open(chart_id: str, title: str, desc: str, width: int, height: int) -> list[str]:
    return [
        f'<svg id="{chart_id}" class="chart" role="img" aria-labelledby="{chart_id}-title {chart_id}-desc" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-title">{escape(title)}</title>',
        f'<desc id="{chart_id}-desc">{escape(desc)}</desc>',
    ]


def _hbars(
    chart_id: str, title: str, desc: str, rows: Sequence[tuple[str, float, str]], colour: str, axis: str, *, whole: bool = False
) -> str:
    """Horizontal bars: (label, value, value as text) per row, a labelled value axis below."""
    left, right, bar, gap, top = 190, 90, 20, 8, 12
    width, plot = 620, 620 - 190 - 90
    height = top + len(rows) * (bar + gap) + 48
    peak, step = _axis(max((v for _, v, _ in rows), default=0.0), whole=whole)
    out = _svg_open(chart_id, title, desc, width, height)
    axis_y = top + len(rows) * (bar + gap)
    for k in range(round(peak / step) + 1):
        x = left + plot * k * step / peak
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis_y}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{_tick(k * step, step)}</text>')
    for i, (label, value, shown) in enumerate(rows):
        y = top + i * (bar + gap)
        length = plot * value / peak
        out.append(f'<text class="label" x="{left - 8}" y="{y + bar * 0.7:.1f}" text-anchor="end">{escape(_clip(label))}<title>{escape(label)}</title></text>')
        out.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" fill="{colour}"><title>{escape(label)}: {escape(shown)}</title></rect>')
        out.append(f'<text class="value" x="{left + length + 6:.1f}" y="{y + bar * 0.7:.1f}">{escape(shown)}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{left + plot}" y2="{axis_y}"/>')
    out.append(f'<text class="axis-label" x="{left + plot / 2:.1f}" y="{axis_y + 36}" text-anchor="middle">{escape(axis)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _stacked_columns(chart_id: str, title: str, desc: str, columns: Sequence[tuple[str, Mapping[str, int]]], keys: Sequence[str], axis_x: str, axis_y: str) -> str:
    """Stacked columns (one per label) of integer counts, a legend, both axes labelled."""
    left, bottom, top, right = 56, 70, 34, 16
    width = max(620, left + right + 14 * len(columns))
    height = 300
    plot_w, plot_h = width - left - right, height - top - bottom
    peak, step = _axis(max((sum(c.values()) for _, c in columns), default=0), whole=True)
    out = _svg_open(chart_id, title, desc, width, height)
    for i, key in enumerate(keys):  # legend
        lx = left + i * 120
        out.append(f'<rect x="{lx}" y="8" width="12" height="12" fill="{_PALETTE[key]}"/>')
        out.append(f'<text class="legend" x="{lx + 18}" y="18">{escape(key)}</text>')
    for k in range(round(peak / step) + 1):
        y = top + plot_h - plot_h * k * step / peak
        out.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick(k * step, step)}</text>')
    slot = plot_w / max(len(columns), 1)
    bar = max(2.0, min(28.0, slot * 0.7))
    every = max(1, math.ceil(len(columns) / 12))  # at most ~12 x labels
    for i, (label, counts) in enumerate(columns):
        x = left + i * slot + (slot - bar) / 2
        base = float(top + plot_h)
        for key in keys:
            value = counts.get(key, 0)
            if value:
                h = plot_h * value / peak
                base -= h
                out.append(f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{_PALETTE[key]}"><title>{escape(label)}: {value} {escape(key)}</title></rect>')
        if i % every == 0:
            cx = x + bar / 2
            out.append(f'<text class="tick" x="{cx:.1f}" y="{top + plot_h + 14}" text-anchor="end" transform="rotate(-40 {cx:.1f} {top + plot_h + 14})">{escape(label)}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>')
    out.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>')
    out.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">{escape(axis_x)}</text>')
    out.append(f'<text class="axis-label" x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" transform="rotate(-90 14 {top + plot_h / 2:.1f})">{escape(axis_y)}</text>')
    out.append("</svg>")
    return "\n".join(out)


# --- the page ---------------------------------------------------------------------------------------

_CSS: Final = """
:root { color-scheme: light; --ink: #1d1d1f; --muted: #5a5a5f; --line: #d8d8de; --panel: #f6f6f8; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 32px 48px; }
h1 { font-size: 1.7rem; margin: 0 0 4px; }
h2 { font-size: 1.2rem; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
.meta { color: var(--muted); margin: 0; }
.totals { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 16px; margin: 22px 0 8px; }
.total { background: var(--panel); border-radius: 10px; padding: 14px 18px; }
.total h2 { border: 0; margin: 0; padding: 0; font-size: .85rem; font-weight: 600; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.figure { font-size: 2.1rem; font-weight: 700; margin: 4px 0 0; font-variant-numeric: tabular-nums; }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 24px; align-items: start; }
.pair > div { min-width: 0; overflow-x: auto; }
.pair table { font-size: .88rem; }
.pair th, .pair td { padding: 4px 6px; }
@media (max-width: 900px) { .pair { grid-template-columns: 1fr; } }
.chart { max-width: 100%; height: auto; display: block; }
.chart text { font: 12px system-ui, "DejaVu Sans", sans-serif; fill: var(--ink); }
.chart .tick { fill: var(--muted); font-size: 11px; }
.chart .axis-label { font-weight: 600; }
.chart .grid { stroke: #ececf0; }
.chart .axis { stroke: #8a8a90; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding-bottom: 6px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; }
tbody th, tbody td { white-space: nowrap; }
td.n, th.n { text-align: right; }
tbody tr:nth-child(even) { background: #fafafb; }
.empty { color: var(--muted); font-style: italic; }
footer { margin-top: 40px; color: var(--muted); font-size: .85rem; }
"""


def _table(caption: str, headers: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]], table_id: str) -> str:
    """A table; ``headers`` are (text, numeric). Cell strings must already be escaped."""
    numeric_class = ' class="n"'
    head = "".join(f'<th scope="col"{numeric_class if numeric else ""}>{escape(text)}</th>' for text, numeric in headers)
    body = []
    for row in rows:
        cells = []
        for i, (cell, (_, numeric)) in enumerate(zip(row, headers)):
            tag = "th" if i == 0 else "td"
            scope = ' scope="row"' if i == 0 else ""
            cells.append(f'<{tag}{scope}{numeric_class if numeric else ""}>{cell}</{tag}>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        body.append(f'<tr><td class="empty" colspan="{len(headers)}">none in this period</td></tr>')
    return f'<table id="{table_id}"><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _total(element_id: str, label: str, value: str, shown: str, note: str) -> str:
    return (
        f'<section class="total" aria-labelledby="{element_id}-label"><h2 id="{element_id}-label">{escape(label)}</h2>'
        f'<p class="figure" id="{element_id}" data-value="{escape(value)}">{escape(shown)}</p>'
        f'<p class="meta" id="{element_id}-note">{escape(note)}</p></section>'
    )


METHOD_UNRECORDED: Final = "a method not recorded (a decision older than its stored fleet)"


def _carbon_note(data: ReportData) -> str:
    """How the total carbon was found: each method used, with its share of the total."""
    used = [(CARBON_METHODS.get(m, METHOD_UNRECORDED), g) for m, g in data.carbon_methods]
    if not used:
        return "gCO₂e of placed work (none in this period)"
    if len(used) == 1:
        return f"gCO₂e per device-hour from {used[0][0]}"
    total = sum(g for _, g in used)
    return "gCO₂e per device-hour from " + "; ".join(f"{_percent(g, total)} {text}" for text, g in used)


def _percent(part: float, whole: float) -> str:
    share = 100 * part / whole if whole else 0.0
    return "<1%" if 0 < share < 1 else f"{share:.0f}%"


def render_html(data: ReportData) -> str:
    """The report as one self-contained HTML page (UTF-8 text; no scripts, no external resources)."""
    cur = data.currency
    t, h = data.totals, data.honesty
    period = f"{data.period_start.isoformat()} to {data.period_end.isoformat()}"
    generated = data.generated_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    used_hours = sum(r.used_device_hours for r in data.cost_carbon)
    idle_hours = sum(r.idle_device_hours for r in data.cost_carbon)
    idle_cost = sum(r.idle_cost for r in data.cost_carbon)
    charged = all(r.idle_charged for r in data.cost_carbon)
    parts: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network at view time: nothing but inline styles and images.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(data.title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<header><h1>{escape(data.title)}</h1>",
        f'<p class="meta">Period <time datetime="{data.period_start.isoformat()}">{data.period_start.isoformat()}</time> to '
        f'<time datetime="{data.period_end.isoformat()}">{data.period_end.isoformat()}</time> · generated '
        f'<time datetime="{generated}">{generated}</time></p></header>',
        '<div class="totals">',
        _total("total-cost", "Total cost", f"{t.cost:.6f}", _money(t.cost, cur), f"{cur}, placed work over the period"),
        _total("total-carbon", "Total carbon", f"{t.carbon_g:.6f}", _carbon(t.carbon_g), _carbon_note(data)),
        _total("total-decisions", "Decisions", str(t.decisions), f"{t.decisions:,}", f"{h.placements:,} placed"),
        _total("total-idle", "Reserved but idle", f"{idle_hours:.6f}", f"{idle_hours:,.1f} device-h",
               f"of {used_hours + idle_hours:,.1f} held; {_money(idle_cost, cur)} {'charged' if charged else 'not charged'}"),
        "</div>",
    ]

    rows = data.cost_carbon
    labels = [f"{r.device} · {r.region}" for r in rows]
    parts += [
        '<section aria-labelledby="by-device-h"><h2 id="by-device-h">Cost and carbon by device type and region</h2>',
        '<div class="pair"><div>',
        _hbars("chart-cost", "Cost by device type and region", f"Cost in {cur} of placed work, one bar per device type and region.",
               [(lbl, r.cost, _money(r.cost, cur)) for lbl, r in zip(labels, rows)], _PALETTE["cost"], f"Cost ({cur})"),
        _hbars("chart-carbon", "Carbon by device type and region", "Carbon in kg CO2e of placed work, one bar per device type and region.",
               [(lbl, r.carbon_g / 1000, _carbon(r.carbon_g)) for lbl, r in zip(labels, rows)], _PALETTE["carbon"], "Carbon (kg CO₂e)"),
        "</div><div>",
        _table(
            "Placed work by device type and region",
            [("Device", False), ("Region", False), ("Decisions", True), ("Device-hours", True), ("Used", True), ("Idle", True),
             (f"Idle cost ({cur})", True), (f"Cost ({cur})", True), ("Carbon (g CO₂e)", True)],
            ([escape(r.device), escape(r.region), f"{r.decisions:,}", f"{r.device_hours:,.1f}", f"{r.used_device_hours:,.1f}",
              f"{r.idle_device_hours:,.1f}", f"{r.idle_cost:,.2f}", f"{r.cost:,.2f}", f"{r.carbon_g:,.0f}"] for r in rows),
            "table-cost-carbon",
        ),
        "</div></div></section>",
    ]  # fmt: skip

    parts += [
        '<section aria-labelledby="per-day-h"><h2 id="per-day-h">Decisions per day</h2>',
        '<div class="pair"><div>',
        _stacked_columns(
            "chart-days", "Decisions per day by outcome",
            "Stacked columns, one per day: placed, rejected and blocked decisions.",
            [(d.day.isoformat(), {"placed": d.placed, "rejected": d.rejected, "blocked": d.blocked}) for d in data.days],
            OUTCOMES, "Day (UTC)", "Decisions",
        ),
        '</div><div>',
        _table(
            "Decisions per day",
            [("Day", False), ("Placed", True), ("Rejected", True), ("Blocked", True), ("Total", True)],
            ([d.day.isoformat(), str(d.placed), str(d.rejected), str(d.blocked), str(d.total)] for d in data.days if d.total),
            "table-days",
        ),
        "</div></div></section>",
    ]  # fmt: skip

    parts += [
        '<section aria-labelledby="bursts-h"><h2 id="bursts-h">Burst attempts by data residency</h2>',
        '<div class="pair"><div>',
        _stacked_columns(
            "chart-bursts", "Burst attempts by residency and verdict",
            "Stacked columns, one per data residency class: allowed, blocked and unavailable bursts to cloud.",
            [(b.residency, {"allowed": b.allowed, "blocked": b.blocked, "unavailable": b.unavailable}) for b in data.bursts],
            BURST_VERDICTS, "Data residency", "Burst attempts",
        ),
        "</div><div>",
        _table(
            "Burst attempts",
            [("Residency", False), ("Allowed", True), ("Blocked", True), ("Unavailable", True)],
            ([escape(b.residency), str(b.allowed), str(b.blocked), str(b.unavailable)] for b in data.bursts),
            "table-bursts",
        ),
        "</div></div></section>",
    ]  # fmt: skip

    parts += [
        '<section aria-labelledby="top-h"><h2 id="top-h">Most expensive workloads</h2>',
        _table(
            f"Top {len(data.top_workloads)} workloads by cost",
            [("Workload", False), ("Decisions", True), (f"Cost ({cur})", True), ("Carbon (g CO₂e)", True)],
            ([escape(w.workload), f"{w.decisions:,}", f"{w.cost:,.2f}", f"{w.carbon_g:,.0f}"] for w in data.top_workloads),
            "table-workloads",
        ),
        "</section>",
    ]

    parts += [
        '<section aria-labelledby="honesty-h"><h2 id="honesty-h">Honesty: fallbacks and fractions</h2>',
        '<div class="pair"><div>',
        _hbars(
            "chart-honesty", "Placements as asked and not",
            "Horizontal bars: placements that fell back to another accelerator, and requested fractions honored or given a whole device.",
            [
                ("fallbacks", h.fallbacks, f"{h.fallbacks} of {h.placements} placements"),
                ("fractions honored", h.fractions_honored, f"{h.fractions_honored} of {h.fractions_requested} asked"),
                ("fractions not honored", h.fractions_not_honored, f"{h.fractions_not_honored} of {h.fractions_requested} asked"),
            ],
            _PALETTE["rejected"], "Placements", whole=True,
        ),
        "</div><div>",
        _table(
            "Fallbacks and fractions",
            [("", False), ("Count", True), ("Share", True)],
            [
                ["Placements", f'<span id="placements">{h.placements}</span>', ""],
                ["Fallbacks", f'<span id="fallbacks">{h.fallbacks}</span>', _share(h.fallbacks, h.placements)],
                ["Fractions requested", f'<span id="fractions-requested">{h.fractions_requested}</span>', ""],
                ["Fractions honored", f'<span id="fractions-honored">{h.fractions_honored}</span>', _share(h.fractions_honored, h.fractions_requested)],
                ["Fractions not honored", f'<span id="fractions-not-honored">{h.fractions_not_honored}</span>', _share(h.fractions_not_honored, h.fractions_requested)],
            ],
            "table-honesty",
        ),
        "</div></div></section>",
    ]  # fmt: skip

    errs = data.estimate_errors
    parts += [
        '<section aria-labelledby="starts-h"><h2 id="starts-h">Start estimates against actual starts</h2>',
        _table(
            "Actual minus estimated start, per estimate source (positive: later than estimated)",
            [("Estimated by", False), ("Placements", True), ("Median", True), ("90th percentile", True)],
            ([escape(e.source), f"{e.decisions:,}", _signed_duration(e.median_s), _signed_duration(e.p90_s)] for e in errs),
            "table-estimates",
        )
        if errs
        else '<p id="no-estimates">No placement in the period has both an estimated start and its job\'s actual start '
        "(reconcile records actual starts).</p>",
        "</section>",
    ]

    parts += [
        "<footer>Cost uses each pool's price per device-hour (or the reviewed default); carbon each pool's gCO₂e "
        "per device-hour: its own factor, else board power x PUE x grid intensity, else the reviewed reference "
        "power of its device family (an accelerator, or a CPU socket) x PUE x grid intensity, as "
        "<code>exa finops</code> does (the carbon total says which were used). A fallback is a placement on "
        "another accelerator than requested; a fraction not honored got a whole device. "
        f"Period: {escape(period)}. This page is self-contained: it loads nothing and runs no script.</footer>",
        "</main>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"

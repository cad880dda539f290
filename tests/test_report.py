"""The FinOps HTML report: built from plain rows, drawn as one self-contained page, and read back
from a real headless Chromium (marker ``chromium``; skipped without one unless
EXA_REQUIRE_SERVICES=1, then it fails).
"""

from __future__ import annotations

import math
import re
import sys
from datetime import date, datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from examlops_policy.errors import SpecError
from examlops_policy.report import ReportData, render_html, report_from_rows
from tests.chromium_support import png_facts, run_chromium

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from finops_report import example_report  # noqa: E402 - the shipped example, generated from a seed

NOW = datetime(2025, 3, 8, 9, 30, tzinfo=timezone.utc)
START, END = date(2025, 3, 1), date(2025, 3, 7)


def placed_row(workload: str, day: str, cost: float, carbon: float, **extra: object) -> dict[str, object]:
    return {
        "workload": workload, "created_at": f"{day}T10:00:00Z", "outcome": "placed", "device": "nvidia",
        "region": "eu", "device_hours": 10.0, "cost": cost, "carbon_g": carbon, **extra,
    }  # fmt: skip


ROWS: list[dict[str, object]] = [
    placed_row("train", "2025-03-01", 25.0, 3000.0),
    placed_row("train", "2025-03-02", 25.0, 3000.0, fallback=True),
    placed_row("infer", "2025-03-02", 2.5, 300.0, fraction=0.25, fraction_honored=True),
    placed_row("infer", "2025-03-03", 18.0, 2500.0, device="amd", fraction=0.5, fraction_honored=False),
    {"workload": "sglang-on-amd", "created_at": "2025-03-03T08:00:00Z", "outcome": "rejected"},
    {"workload": "burst", "created_at": "2025-03-07T23:59:59+00:00", "outcome": "blocked"},
]
BURSTS = [{"residency": "eu-only", "verdict": "blocked"}, {"residency": "eu-only", "verdict": "allowed"}, {"residency": "open", "verdict": "unavailable"}]


def report(rows: list[dict[str, object]] = ROWS, **kwargs: object) -> ReportData:
    return report_from_rows("March, week 1", START, END, NOW, decisions=rows, bursts=BURSTS, **kwargs)  # type: ignore[arg-type]


class Elements(HTMLParser):
    """Every element's tag and attributes, and the text inside elements that carry an id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "line", "rect", "br", "img", "input", "link"):
            self._open.append(dict(attrs).get("id"))
            if self._open[-1]:
                self.text[str(self._open[-1])] = ""

    def handle_endtag(self, tag: str) -> None:
        if self._open and tag not in ("meta", "line", "rect"):
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element in self._open:
            if element:
                self.text[element] += data

    def by_id(self, element: str) -> dict[str, str | None]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == element)


def parse(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


# --- the data --------------------------------------------------------------------------------


def test_rows_become_totals_groups_days_and_honesty() -> None:
    data = report()
    assert (data.totals.cost, data.totals.carbon_g, data.totals.decisions) == (70.5, 8800.0, 6)
    assert [(r.device, r.region, r.decisions, r.cost) for r in data.cost_carbon] == [("amd", "eu", 1, 18.0), ("nvidia", "eu", 3, 52.5)]
    assert [d.day.isoformat() for d in data.days] == [f"2025-03-0{i}" for i in range(1, 8)]  # every day, even empty ones
    assert [(d.placed, d.rejected, d.blocked) for d in data.days if d.total] == [(1, 0, 0), (2, 0, 0), (1, 1, 0), (0, 0, 1)]
    assert [(b.residency, b.allowed, b.blocked, b.unavailable) for b in data.bursts] == [("eu-only", 1, 1, 0), ("open", 0, 0, 1)]
    assert [(w.workload, w.decisions, w.cost) for w in data.top_workloads][:2] == [("train", 2, 50.0), ("infer", 2, 20.5)]
    h = data.honesty
    assert (h.placements, h.fallbacks, h.fractions_requested, h.fractions_honored, h.fractions_not_honored) == (4, 1, 2, 1, 1)


def test_only_the_most_expensive_workloads_are_listed() -> None:
    assert [w.workload for w in report(top=1).top_workloads] == ["train"]


BAD = [
    pytest.param([{**ROWS[0], "cost": -1}], "decisions[0].cost", "finite number of at least 0", id="negative-cost"),
    pytest.param([{**ROWS[0], "carbon_g": math.nan}], "decisions[0].carbon_g", "finite number", id="nan-carbon"),
    pytest.param([{**ROWS[0], "cost": "12"}], "decisions[0].cost", "finite number", id="cost-as-text"),
    pytest.param([{**ROWS[0], "outcome": "won"}], "decisions[0].outcome", "placed, rejected, blocked", id="unknown-outcome"),
    pytest.param([{**ROWS[0], "created_at": "2025-04-01"}], "decisions[0].created_at", "outside the period", id="outside-period"),
    pytest.param([{**ROWS[0], "created_at": "yesterday"}], "decisions[0].created_at", "ISO 8601", id="not-a-date"),
    pytest.param([{**ROWS[0], "workload": ""}], "decisions[0].workload", "non-empty string", id="empty-workload"),
    pytest.param([{**ROWS[0], "device": None}], "decisions[0].device", "non-empty string", id="placed-without-device"),
    pytest.param([{**ROWS[0], "fraction": 0}], "decisions[0].fraction", "(0, 1]", id="fraction-zero"),
    pytest.param([{**ROWS[0], "fraction": 0.5, "fraction_honored": "yes"}], "decisions[0].fraction_honored", "true or false", id="honored-not-bool"),
    pytest.param([{**ROWS[0], "fallback": 1}], "decisions[0].fallback", "true or false", id="fallback-not-bool"),
]


@pytest.mark.parametrize(("rows", "field", "message"), BAD)
def test_bad_rows_are_refused_naming_the_row_and_field(rows: list[dict[str, object]], field: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        report(rows)
    assert caught.value.field == field and message in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"period_end": date(2025, 2, 1)}, "ends (2025-02-01) before it starts", id="period-reversed"),
        pytest.param({"period_end": date(2026, 3, 2)}, "at most 366 fit one report", id="period-too-long"),
        pytest.param({"generated_at": datetime(2025, 3, 8)}, "time zone", id="naive-time"),
        pytest.param({"bursts": [{"residency": "eu-only", "verdict": "maybe"}]}, "allowed, blocked, unavailable", id="bad-verdict"),
    ],
)
def test_bad_report_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"title": "t", "period_start": START, "period_end": END, "generated_at": NOW, "decisions": ROWS, **kwargs}
    with pytest.raises(SpecError, match=re.escape(message)):
        report_from_rows(**arguments)  # type: ignore[arg-type]


# --- the page --------------------------------------------------------------------------------


def test_totals_carry_stable_ids_and_exact_values() -> None:
    page = parse(render_html(report()))
    assert page.by_id("total-cost")["data-value"] == "70.500000"
    assert page.by_id("total-carbon")["data-value"] == "8800.000000"
    assert page.by_id("total-decisions")["data-value"] == "6"
    assert page.text["total-cost"] == "$70.50" and page.text["total-carbon"] == "8.8 kg CO₂e"
    assert (page.text["fallbacks"], page.text["fractions-requested"], page.text["fractions-honored"]) == ("1", "2", "1")


def test_every_string_from_data_is_escaped() -> None:
    hostile = placed_row('<script>alert("x")</script>', "2025-03-04", 1.0, 1.0, device='gpu" onmouseover="x', region="eu&<b>")
    page = render_html(report([*ROWS, hostile]))
    assert "<script" not in page and 'onmouseover="x' not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "eu&amp;&lt;b&gt;" in page
    title = render_html(report_from_rows("<img src=x onerror=alert(1)>", START, END, NOW, decisions=ROWS))
    assert "<img" not in title and "&lt;img src=x onerror=alert(1)&gt;" in title


def test_the_page_is_self_contained_and_accessible() -> None:
    html = render_html(report())
    page = parse(html)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for _, attrs in page.tags:  # nothing to fetch: no sources, no links, no event handlers
        assert not {"src", "href", "srcset", "action"} & set(attrs) and not any(a.startswith("on") for a in attrs)
    assert "url(" not in html and "@import" not in html
    charts = [attrs for tag, attrs in page.tags if tag == "svg"]
    assert len(charts) == 5
    for chart in charts:
        assert chart["role"] == "img" and chart["aria-labelledby"] == f"{chart['id']}-title {chart['id']}-desc"
        assert page.text[f"{chart['id']}-title"] and page.text[f"{chart['id']}-desc"]
    assert html.count('class="axis-label"') == 7  # every axis that carries values is labelled
    assert {"table-cost-carbon", "table-days", "table-bursts", "table-workloads", "table-honesty"} <= set(page.text)


def test_the_same_data_draws_the_same_page_and_an_empty_period_still_renders() -> None:
    assert render_html(report()) == render_html(report())
    empty = parse(render_html(report_from_rows("Quiet week", START, END, NOW, decisions=[])))
    assert empty.by_id("total-cost")["data-value"] == "0.000000" and "none in this period" in empty.text["table-workloads"]


# --- what the page says of small figures, the carbon method and the rows it lists ---------------

# A small week: one tenth of a gram and fractions of a cent, two workloads that only were rejected.
SMALL: list[dict[str, object]] = [
    placed_row("tiny", "2025-03-01", 0.004, 0.1, carbon_method="power"),
    placed_row("tinier", "2025-03-02", 0.002, 0.05, carbon_method="reference", device="cpu"),
    {"workload": "never-placed", "created_at": "2025-03-03T08:00:00Z", "outcome": "rejected"},
    {"workload": "blocked-only", "created_at": "2025-03-04T08:00:00Z", "outcome": "blocked"},
]


def ticks(page: str, chart: str) -> list[str]:
    svg = page.split(f'<svg id="{chart}"', 1)[1].split("</svg>", 1)[0]
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg)


def test_small_figures_never_read_zero_and_axis_ticks_never_repeat() -> None:
    page = render_html(report(SMALL))
    dom = parse(page)
    assert dom.text["total-carbon"] == "0.1 g CO₂e"  # 0.15 g: not "0 g" where exa finops says 0.1
    assert "$0.004" in page and "$0.002" in page and "$0.00<" not in page  # a bar of two thirds is not "$0.00"
    for chart in ("chart-cost", "chart-carbon"):
        shown = ticks(page, chart)
        assert len(shown) == len(set(shown)) >= 3, (chart, shown)  # "0 0 0.01 0.01" before
    assert ticks(page, "chart-cost")[:3] == ["0", "0.001", "0.002"]


def test_only_workloads_that_cost_something_are_the_most_expensive() -> None:
    data = report(SMALL)
    assert [w.workload for w in data.top_workloads] == ["tiny", "tinier"]
    nothing = parse(render_html(report(SMALL[2:])))
    assert "none in this period" in nothing.text["table-workloads"]


def test_every_day_with_decisions_is_listed_in_full_without_a_scroll_box() -> None:
    """A printout or a screenshot shows every row: no box of fixed height that scrolls."""
    rows = [placed_row("w", f"2025-01-{d:02d}", 1.0, 1.0) for d in range(1, 32)] + [placed_row("w", f"2025-02-{d:02d}", 1.0, 1.0) for d in range(1, 29)]
    page = render_html(report_from_rows("Two months", date(2025, 1, 1), date(2025, 2, 28), NOW, decisions=rows))
    assert "max-height" not in page and "overflow: auto" not in page and 'class="scroll"' not in page
    assert parse(page).text["table-days"].count("2025-") == 59


def test_the_carbon_total_says_which_methods_gave_it() -> None:
    page = parse(render_html(report(SMALL)))
    assert page.text["total-carbon-note"] == "gCO₂e per device-hour from 67% board power x PUE x grid intensity; 33% a reference device's power (no power known) x PUE x grid intensity"
    one = parse(render_html(report([placed_row("w", "2025-03-01", 1.0, 10.0, carbon_method="pool")])))
    assert one.text["total-carbon-note"] == "gCO₂e per device-hour from the pool's own carbon factor"
    unknown = parse(render_html(report([placed_row("w", "2025-03-01", 1.0, 10.0)])))
    assert unknown.text["total-carbon-note"] == "gCO₂e per device-hour from a method not recorded (a decision older than its stored fleet)"
    with pytest.raises(SpecError, match="expected one of pool, power, reference, fallback"):
        report([placed_row("w", "2025-03-01", 1.0, 10.0, carbon_method="flat")])


# --- in a real browser -------------------------------------------------------------------------

@pytest.mark.chromium
def test_chromium_reads_back_the_totals_and_draws_the_page(tmp_path: Path) -> None:
    data = example_report()
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(data), encoding="utf-8")

    dom = parse(run_chromium(tmp_path, "--dump-dom", page_file.as_uri()).stdout)
    assert float(str(dom.by_id("total-cost")["data-value"])) == pytest.approx(data.totals.cost, abs=1e-6)
    assert float(str(dom.by_id("total-carbon")["data-value"])) == pytest.approx(data.totals.carbon_g, abs=1e-6)
    assert int(str(dom.by_id("total-decisions")["data-value"])) == data.totals.decisions == sum(d.total for d in data.days)
    assert dom.text["total-cost"] == f"${data.totals.cost:,.2f}"
    assert sum(1 for tag, _ in dom.tags if tag == "svg") == 5

    shot = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", page_file.as_uri())
    width, height, distinct = png_facts(shot)
    assert (width, height) == (1280, 2000)
    assert shot.stat().st_size > 50_000 and distinct > 100  # text and charts, not a blank page


@pytest.mark.chromium
def test_chromium_shows_small_figures_distinct_ticks_the_carbon_method_and_every_day(tmp_path: Path) -> None:
    """The page as a browser has it: 0.1 g (not 0 g), fractions of a cent (not $0.00), ticks that
    never repeat, the carbon methods used, every day of two months listed (no scroll box) and only
    workloads that cost something among the most expensive."""
    days = [placed_row("w", f"2025-03-{d:02d}", 0.001, 0.01) for d in range(1, 8)]
    data = report([*SMALL, *days])
    page_file = tmp_path / "small.html"
    page_file.write_text(render_html(data), encoding="utf-8")
    html = run_chromium(tmp_path, "--dump-dom", page_file.as_uri()).stdout
    dom = parse(html)
    assert dom.text["total-carbon"] == "0.2 g CO₂e"
    assert dom.text["total-carbon-note"].startswith("gCO₂e per device-hour from ") and "board power x PUE x grid intensity" in dom.text["total-carbon-note"]
    values = re.findall(r'<text class="value"[^>]*>([^<]*)</text>', html.split('<svg id="chart-cost"', 1)[1].split("</svg>", 1)[0])
    assert "$0.00" not in values and "$0.002" in values, values
    for chart in ("chart-cost", "chart-carbon", "chart-days"):
        shown = ticks(html, chart)
        assert len(shown) == len(set(shown)), (chart, shown)
    assert dom.text["table-days"].count("2025-03-") == 7 and "max-height" not in html
    assert [row for row in ("never-placed", "blocked-only") if row in dom.text["table-workloads"]] == []
    shot = tmp_path / "small.png"
    run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", page_file.as_uri())
    assert png_facts(shot)[:2] == (1280, 2400)

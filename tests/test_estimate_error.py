"""Start estimates checked against what happened: per placement, its actual start minus its
estimated start; per estimate source (slurm, kubernetes, table, now), their median and 90th
percentile, in ``exa hardware decisions --json``, ``Hardware.estimate_errors`` and the FinOps
report.

Actual starts are recorded by reconcile (the queue's work) from the scheduler; the estimate-error
figures read them through one column expression (``store._sql.ACTUAL_START``). These tests give
that column values on a real SQLite state (adding reconcile's column where the state has none yet)
and read every figure back through the product.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from examlops_policy import report
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Workload
from examlops_policy.store import _sql
from examlops_policy.views import EstimateError, estimate_error_s, estimate_errors
from examlops_policy.cli.render import summary_json
from tests.conftest import run_exa

COLUMN = "job_started_at"  # reconcile's column (migration 0009, the queue)


def test_the_error_is_actual_minus_estimated_in_whole_seconds() -> None:
    assert estimate_error_s("2026-12-01T14:00:00Z", "2026-12-01T14:02:05Z") == 125
    assert estimate_error_s("2026-12-01T14:00:00Z", "2026-12-01T13:59:30.900000Z") == -30
    assert estimate_error_s(None, "2026-12-01T14:00:00Z") is None
    assert estimate_error_s("2026-12-01T14:00:00Z", None) is None


def test_median_and_p90_per_source() -> None:
    pairs = [("slurm", float(e)) for e in (50, -10, 30, 0, 900, 20, 40, 10, 60, 70)] + [("now", 5.0)]
    found = {e.source: e for e in estimate_errors(pairs)}
    # slurm, sorted: -10 0 10 20 30 40 50 60 70 900: median (30+40)/2, p90 the 9th value (nearest rank).
    assert found["slurm"] == EstimateError("slurm", 10, 35.0, 70.0)
    assert found["now"] == EstimateError("now", 1, 5.0, 5.0)
    assert [e.source for e in estimate_errors(pairs)] == ["now", "slurm"]
    assert estimate_errors([("table", 1.0), ("table", 3.0), ("table", 2.0)])[0] == EstimateError("table", 3, 2.0, 3.0)


@pytest.fixture()
def started(hardware: Hardware, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hardware]:
    """A state whose decisions can carry actual starts: the column reconcile writes them to."""
    hardware.pools()  # migrated
    with sqlite3.connect(hardware.home / "state.db") as db:
        have = {row[1] for row in db.execute("PRAGMA table_info(decisions)")}
        if COLUMN not in have:
            db.execute(f"ALTER TABLE decisions ADD COLUMN {COLUMN} TEXT")
    monkeypatch.setattr(_sql, "ACTUAL_START", COLUMN)
    yield hardware


def _start(hw: Hardware, ident: str, at: datetime) -> None:
    with sqlite3.connect(hw.home / "state.db") as db:
        db.execute(f"UPDATE decisions SET {COLUMN} = ? WHERE id = ?", (at.isoformat().replace("+00:00", "Z"), ident))


def test_each_placement_shows_its_error_and_each_source_its_median_and_p90(started: Hardware, tmp_path: Path) -> None:
    hw = started
    hw.apply([
        Pool("hpc-a", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0),
        Pool("cloud-eu", "cloud", "nvidia", 8, "eu-central-1", cost_per_hour=2.0),
    ])  # fmt: skip
    placed = [hw.place(Workload(f"w{i}", "nvidia", target="hpc")) for i in range(3)]
    burst = hw.place(Workload("burst", "nvidia", target="cloud"))
    later = hw.place(Workload("never-started", "nvidia", target="hpc"))
    for record in (*placed, burst, later):
        assert isinstance(record.decision, Placement) and record.decision.estimate is not None
    assert placed[0].decision.estimate.source == "now" and burst.decision.estimate.source == "table"  # type: ignore[union-attr]
    # The jobs really started: 10 s, 20 s and 90 s after their "now" estimates; the cloud one 2 min
    # before the table's bound.
    for record, late in zip(placed, (10, 20, 90)):
        _start(hw, record.id, record.decision.estimate.at + timedelta(seconds=late))  # type: ignore[union-attr, operator]
    _start(hw, burst.id, burst.decision.estimate.at - timedelta(seconds=120))  # type: ignore[union-attr, operator]

    page = {s.workload: s for s in hw.decision_page(limit=10).decisions}
    assert [page[f"w{i}"].estimate_error_s for i in range(3)] == [10, 20, 90]
    assert page["burst"].estimate_error_s == -120 and page["burst"].estimate_source == "table"
    assert page["never-started"].estimate_error_s is None and page["never-started"].estimated_start is not None
    assert hw.estimate_errors() == (EstimateError("now", 3, 20.0, 90.0), EstimateError("table", 1, -120.0, -120.0))

    # decisions --json (each summary as the command prints it): both times and the error.
    shown = json.loads(json.dumps(summary_json(page["w2"])))
    assert shown["estimate_error_s"] == 90 and shown["estimate_source"] == "now"
    assert shown["actual_start"] is not None and {"estimated_start", "submitted_at"} <= set(shown)

    # The FinOps report: per source, the median and p90.
    data = hw.finops_report()
    assert data.estimate_errors == hw.estimate_errors()
    page_html = report.render_html(data)
    assert '<table id="table-estimates"' in page_html or 'id="table-estimates"' in page_html
    assert "+20 s" in page_html and "+1 m 30 s" in page_html and "-2 m" in page_html


def test_decisions_json_shows_the_estimate_columns(seeded: Hardware) -> None:
    """Without an actual start the error is null; the estimate is there from the decision."""
    seeded.place(Workload("train", "amd", engine="vllm", target="hpc"))
    listed = json.loads(run_exa(seeded.home, "hardware", "decisions", "--json", check=True).stdout)
    assert [(d["estimate_source"], d["actual_start"], d["estimate_error_s"]) for d in listed] == [("now", None, None)]
    assert listed[0]["estimated_start"].endswith("Z") and listed[0]["submitted_at"] is None


def test_a_report_without_actual_starts_says_so(hardware: Hardware) -> None:
    hardware.apply([Pool("hpc-a", "hpc", "nvidia", 8, "eu", cost_per_hour=1.0)])
    hardware.place(Workload("w", "nvidia"))
    data = hardware.finops_report()
    assert data.estimate_errors == ()
    assert 'id="no-estimates"' in report.render_html(data)


def test_a_report_row_with_a_malformed_time_names_it() -> None:
    from examlops_policy.errors import SpecError

    now = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
    row = {"workload": "w", "created_at": "2026-12-01T10:00:00Z", "outcome": "placed", "device": "nvidia", "region": "eu",
           "estimate_source": "slurm", "estimated_start": "soon", "actual_start": "2026-12-01T10:00:00Z"}  # fmt: skip
    with pytest.raises(SpecError) as caught:
        report.report_from_rows("r", now.date(), now.date(), now, decisions=[row])
    assert caught.value.field == "decisions[0].actual_start"

"""Billing from what ran (issue 35), on SQLite and PostgreSQL with the real OPA.

Where reconcile recorded a job's start and end, the time it ran is billed as usage and the rest of
the reservation is reserved but idle, charged to the project that held it (accounting.yaml's
``charge_idle``); ``exa finops`` and ``exa models cost`` show used, idle and total. ``exa finops
export --format focus`` writes hourly, half-open UTC charge periods whose costs add up to those
totals, with the FOCUS 1.2 columns and this layer's ``x_`` columns; ``--focus-version 1.3`` splits
the device-hours of shared devices (tests written from FOCUS 1.3's split cost allocation text:
per device-hour the ratios sum to 1 and the costs and quantities to the device's hour). The store's
clock is a test clock, so nothing sleeps.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from examlops_policy import focus
from examlops_policy._core import commit, leases
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from tests.backend_support import backend, clocked  # noqa: F401 - fixtures
from tests.clock_support import T0, Clock

MI300 = Pool("mi300", "hpc", "amd", 2, "eu", cost_per_hour=2.0, carbon_factor=100.0, power_w=750.0)
MIG = Pool("a100-mig", "hpc", "nvidia", 1, "eu", model="a100", cost_per_hour=7.0, carbon_factor=70.0, supports_fractions=True)
TRAIN = Workload("train", "amd", count=2, project="llm-pretraining")
pytestmark = pytest.mark.hw_pools(MI300)


def at(minutes: float) -> str:
    return leases.text_of(T0 + timedelta(minutes=minutes))


def ran(hw: Hardware, clock: Clock, *, started: float, ended: float, released: float, job: str = "101") -> str:
    """A placement at T0 submitted as ``job``, whose job ran from ``started`` to ``ended`` minutes
    after T0, as reconcile records it; released (by reconcile) at ``released``."""
    record = hw.place(TRAIN)
    hw.set_job(record.id, job, scheduler="slurm")
    clock.move(minutes=started)
    assert commit.start_job(hw.store, record.id, job, at(started), scheduler="slurm", source="exa-hardware")
    clock.move(minutes=released - started)
    assert commit.end_job(hw.store, hw.cycle.capacities, record.id, job, "COMPLETED", at(started), at(ended), scheduler="slurm", source="exa-hardware")
    return record.id


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_used_time_is_billed_as_usage_and_the_rest_is_reserved_but_idle(clocked: tuple[Hardware, Clock]) -> None:
    hw, clock = clocked
    # Held 08:00-10:30 (2 devices, $2 per device-hour), the job ran 08:30-10:15: 3.5 used, 1.5 idle.
    ran(hw, clock, started=30, ended=135, released=150)
    found = hw.finops()
    assert (found.device_hours, found.used_device_hours, found.idle_device_hours) == (5.0, 3.5, 1.5)
    assert (found.cost, found.used_cost, found.idle_cost) == (10.0, 7.0, 3.0)
    row = found.rows[0]
    assert (row.used_device_hours, row.idle_device_hours, row.idle_charged) == (3.5, 1.5, True)
    models = hw.models_cost()
    assert (models.cost, models.used_cost, models.idle_cost) == (10.0, 7.0, 3.0)
    assert (models.rows[0].used_device_hours, models.rows[0].idle_device_hours) == (3.5, 1.5)
    report = hw.finops_report(now=clock.at)
    assert (report.cost_carbon[0].used_device_hours, report.cost_carbon[0].idle_cost, report.totals.cost) == (3.5, 3.0, 10.0)
    from examlops_policy.report import render_html

    page = render_html(report)
    assert 'id="total-idle"' in page and "1.5 device-h" in page and "of 5.0 held; $3.00 charged" in page


def test_idle_is_not_charged_when_the_setting_says_so(clocked: tuple[Hardware, Clock], monkeypatch: pytest.MonkeyPatch) -> None:
    hw, clock = clocked
    ran(hw, clock, started=30, ended=135, released=150)
    monkeypatch.setitem(hw.tables.accounting, "charge_idle", False)
    found = hw.finops()
    assert (found.cost, found.used_cost, found.idle_cost) == (7.0, 7.0, 3.0)
    assert hw.models_cost().cost == 7.0
    assert hw.finops_report(now=clock.at).totals.cost == 7.0
    monkeypatch.setitem(hw.tables.accounting, "charge_idle", "no")
    with pytest.raises(Exception, match="charge_idle must be true or false"):
        hw.finops()


def test_a_job_that_never_started_is_all_idle_and_one_without_a_scheduler_all_used(clocked: tuple[Hardware, Clock]) -> None:
    hw, clock = clocked
    never = hw.place(TRAIN)
    hw.set_job(never.id, "7", scheduler="slurm")
    clock.move(hours=1)
    assert commit.end_job(hw.store, hw.cycle.capacities, never.id, "7", "CANCELLED", None, at(60), scheduler="slurm", source="exa-hardware")
    free = hw.place(Workload("notebook", "amd", count=1))
    clock.move(hours=2)
    hw.release(free.id)
    found = hw.finops()
    assert (found.used_device_hours, found.idle_device_hours) == (2.0, 2.0)


def test_the_export_bills_hourly_half_open_periods_that_add_up_to_finops(clocked: tuple[Hardware, Clock], tmp_path: Path) -> None:
    hw, clock = clocked
    ident = ran(hw, clock, started=30, ended=135, released=150)
    out = tmp_path / "bill.csv"
    count = focus.export(hw, T0, T0 + timedelta(hours=3), out)
    rows = read(out)
    assert count == len(rows) == 5
    got = [(r["ChargePeriodStart"], r["ChargePeriodEnd"], r["x_UsageKind"], r["PricingQuantity"], r["BilledCost"]) for r in rows]
    assert got == [
        ("2030-01-01T08:00:00Z", "2030-01-01T09:00:00Z", "used", "1.0", "2.0"),
        ("2030-01-01T08:00:00Z", "2030-01-01T09:00:00Z", "idle", "1.0", "2.0"),
        ("2030-01-01T09:00:00Z", "2030-01-01T10:00:00Z", "used", "2.0", "4.0"),
        ("2030-01-01T10:00:00Z", "2030-01-01T11:00:00Z", "used", "0.5", "1.0"),
        ("2030-01-01T10:00:00Z", "2030-01-01T11:00:00Z", "idle", "0.5", "1.0"),
    ]
    assert sum(float(r["BilledCost"]) for r in rows if r["x_UsageKind"] == "used") == pytest.approx(7.0)
    assert sum(float(r["BilledCost"]) for r in rows) == pytest.approx(hw.finops().cost)
    assert sum(float(r["PricingQuantity"]) for r in rows) == pytest.approx(5.0)
    first = rows[0]
    assert set(focus.FOCUS_COLUMNS + focus.X_COLUMNS) == set(first)
    assert first["x_DecisionId"] == ident and first["x_Project"] == first["SubAccountId"] == "llm-pretraining"
    assert first["x_PolicyRevision"] == hw.decision(ident).decision.provenance.policy_revision
    entry = next(json.loads(r.canonical) for r in hw.store.audit_rows() if r.entry_hash.hex() == first["x_AuditEntryHash"])
    assert entry["kind"] == "decision" and entry["decision_id"] == ident
    assert first["x_Grant"] == "2 whole" and first["x_CarbonMethod"] == "pool" and first["x_CarbonG"] == "100.0"
    assert float(first["x_EnergyKWh"]) > 0 and first["x_WaitSeconds"] == "1800.0"
    assert json.loads(first["Tags"]) == {"accelerator": "amd", "pool": "mi300", "project": "llm-pretraining", "workload": "train"}
    # Half-open: an export of the hours after ones billed has none of them; two halves make the whole.
    part = tmp_path / "part.csv"
    focus.export(hw, T0, T0 + timedelta(hours=1), part)
    rest = tmp_path / "rest.csv"
    focus.export(hw, T0 + timedelta(hours=1), T0 + timedelta(hours=3), rest)
    assert len(read(part)) + len(read(rest)) == len(rows)


def test_the_export_reads_page_by_page_and_bills_each_placement_once(clocked: tuple[Hardware, Clock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hw, clock = clocked
    monkeypatch.setattr(focus, "PAGE", 2)  # pages of two placements
    made = []
    for n in range(5):
        clock.move(microseconds=123457)  # times off the millisecond, two at one instant
        made.append(hw.place(Workload(f"w{n}", "amd", count=1)).id)
        if n:
            hw.release(made[-2])
    clock.move(minutes=90)
    out = tmp_path / "paged.csv"
    focus.export(hw, T0, T0 + timedelta(hours=2), out)
    ids = [r["x_DecisionId"] for r in read(out)]
    assert sorted(set(ids)) == sorted(made) and len(ids) == len(set(ids)) + 1  # the live one spans two hours


def test_the_fast_writer_writes_what_the_rows_say(clocked: tuple[Hardware, Clock], tmp_path: Path) -> None:
    """The 1.2 file (lines rendered once per placement and filled in per hour) is the CSV of the rows."""
    import io

    hw, clock = clocked
    ran(hw, clock, started=30, ended=135, released=150)
    note = hw.place(Workload("notebook", "amd", count=1))
    assert note.decision.ok, note.decision
    clock.move(hours=3, seconds=7)
    exporter = focus.Exporter(hw, T0, T0 + timedelta(hours=6))
    fast = io.StringIO()
    assert exporter.write(fast) == 9
    plain = io.StringIO()
    writer = csv.DictWriter(plain, fieldnames=focus.columns("1.2"), lineterminator="\n")
    writer.writeheader()
    writer.writerows(exporter.usage_rows())
    assert fast.getvalue() == plain.getvalue()


def test_the_period_is_whole_utc_hours_and_nothing_is_written_on_bad_input(clocked: tuple[Hardware, Clock], tmp_path: Path) -> None:
    hw, _ = clocked
    with pytest.raises(SpecError, match="not on an hour"):
        focus.parse_hour("2030-01-01T08:30Z", "--from")
    with pytest.raises(SpecError, match="ISO 8601"):
        focus.parse_hour("yesterday", "--from")
    with pytest.raises(SpecError, match="before it starts"):
        focus.export(hw, T0, T0, tmp_path / "x.csv")
    with pytest.raises(SpecError, match=r"\.csv"):
        focus.export(hw, T0, T0 + timedelta(hours=1), tmp_path / "x.parquet")
    assert list(tmp_path.glob("*.csv")) == list(tmp_path.glob(".*tmp")) == []


def split(hw: Hardware, clock: Clock, tmp_path: Path) -> list[dict[str, str]]:
    hw.apply([MIG])
    # One A100 cut into MIG slices: one grant all hour, another for half of it.
    big = hw.place(Workload("big", "nvidia", fraction=0.4, project="llm-pretraining"))
    small = hw.place(Workload("small", "nvidia", fraction=0.25))
    clock.move(minutes=30)
    hw.release(small.id)
    clock.move(minutes=30)
    hw.release(big.id)
    out = tmp_path / "split.csv"
    focus.export(hw, T0, T0 + timedelta(hours=1), out, version="1.3")
    return read(out)


def test_the_13_split_of_a_shared_device_hour_sums_to_the_device(clocked: tuple[Hardware, Clock], tmp_path: Path) -> None:
    hw, clock = clocked
    rows = [r for r in split(hw, clock, tmp_path) if r["ResourceType"] == "Shared accelerator"]
    by_device: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        by_device[r["ResourceId"], r["ChargePeriodStart"]].append(r)
    assert by_device
    for group in by_device.values():
        # Each allocated charge carries its own ratio of the origin charge (the device-hour); the
        # ratios of all its charges sum to 1, and so do their quantities (device-hours) and costs.
        ratios = [sum(e["AllocatedRatio"] for e in json.loads(r["AllocatedMethodDetails"])["Elements"]) for r in group]
        assert sum(ratios) == pytest.approx(1.0)
        assert [float(r["PricingQuantity"]) for r in group] == pytest.approx(ratios)
        assert sum(float(r["ListCost"]) for r in group) == pytest.approx(float(group[0]["ListUnitPrice"]))
        assert {r["AllocatedMethodId"] for r in group} == {focus.METHOD}
        grants = [r for r in group if r["AllocatedResourceId"]]
        assert len(group) == len(grants) + 1  # one row per grant, one (with no AllocatedResourceId) for what no grant held
        for r in grants:
            (element,) = json.loads(r["AllocatedMethodDetails"])["Elements"]
            assert element["UsageUnit"] == "Compute slices" and element["x_Of"] == 7
            assert element["UsageQuantity"] == pytest.approx(element["AllocatedRatio"] * 7)
    grants = {r["x_Workload"]: r for r in rows if r["x_Workload"]}
    assert set(grants) == {"big", "small"}
    # big held a 3g (3 of 7 compute slices) all hour; small a 2g for half of it.
    assert {w: float(r["PricingQuantity"]) for w, r in grants.items()} == pytest.approx({"big": 3 / 7, "small": 1 / 7})
    assert grants["big"]["x_Grant"].startswith("MIG 3g") and grants["small"]["x_Grant"].startswith("MIG 2g")
    assert json.loads(grants["big"]["AllocatedTags"]) == {"project": "llm-pretraining", "workload": "big"}


SHARED = Pool("t4-mps", "hpc", "nvidia", 1, "eu", model="t4", cost_per_hour=0.8, carbon_factor=20.0, sharing="mps", shares_per_device=8)


def test_the_13_split_of_mps_shares_is_by_shares(clocked: tuple[Hardware, Clock], tmp_path: Path) -> None:
    hw, clock = clocked
    hw.apply([SHARED])
    a = hw.place(Workload("a", "nvidia", fraction=0.25))
    b = hw.place(Workload("b", "nvidia", fraction=0.5))
    clock.move(hours=1)
    for record in (a, b):
        hw.release(record.id)
    out = tmp_path / "mps.csv"
    focus.export(hw, T0, T0 + timedelta(hours=1), out, version="1.3")
    rows = read(out)
    by_workload = {r["x_Workload"]: r for r in rows}
    assert by_workload["a"]["x_Grant"] == "mps 2 of 8 shares" and by_workload["b"]["x_Grant"] == "mps 4 of 8 shares"
    assert [float(by_workload[w]["PricingQuantity"]) for w in ("a", "b", "")] == pytest.approx([0.25, 0.5, 0.25])
    assert sum(float(r["ListCost"]) for r in rows) == pytest.approx(0.8)
    (element,) = json.loads(by_workload["b"]["AllocatedMethodDetails"])["Elements"]
    assert (element["UsageUnit"], element["UsageQuantity"], element["x_Of"]) == ("Shares", 4.0, 8)
    assert by_workload[""]["AllocatedResourceId"] == "" and by_workload[""]["SubAccountId"] == ""



# -- the FinOps Foundation's validator -------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
TOTALS = re.compile(r"Total: (\d+) \| Pass: (\d+) \| Fail: (\d+) \| Skipped: (\d+)")


@pytest.fixture(scope="session")
def validator() -> Path:
    """The validator's tool environment, built by scripts/focus-validator-setup (once)."""
    made = subprocess.run([str(ROOT / "scripts" / "focus-validator-setup")], capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        why = f"no FOCUS validator: scripts/focus-validator-setup failed: {made.stderr.strip()[-400:]}"
        if os.environ.get("EXA_REQUIRE_SERVICES"):
            pytest.fail(why)
        pytest.skip(why)
    return Path(made.stdout.strip().splitlines()[-1])


def validate(data: Path) -> tuple[int, tuple[int, ...], list[str], list[str], str]:
    """scripts/focus-validate on ``data`` (the validator, offline, with its listed artefacts): its
    exit status, the validator's (total, pass, fail, skipped), the failed rules that are listed
    artefacts and those that are not, and its output."""
    done = subprocess.run([str(ROOT / "scripts" / "focus-validate"), str(data)], capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    found = TOTALS.search(out)
    assert found, f"the validator printed no totals (exit {done.returncode}):\n{out[-3000:]}"
    artefacts = re.findall(r"^  (\S+): FAIL \(a listed validator artefact\)$", out, re.MULTILINE)
    others = re.findall(r"^  (\S+): FAIL$", out, re.MULTILINE)
    return done.returncode, tuple(int(v) for v in found.groups()), artefacts, others, out


@pytest.mark.focus_validator
def test_the_finops_foundations_validator_passes_the_12_export(clocked: tuple[Hardware, Clock], validator: Path, tmp_path: Path) -> None:
    hw, clock = clocked
    hw.apply([MIG])
    ran(hw, clock, started=30, ended=135, released=150)  # used and idle hours, a project
    hw.place(Workload("notebook", "amd", count=1))  # no scheduler, no project, still live
    hw.place(Workload("slice", "nvidia", fraction=0.25))  # a MIG slice
    clock.move(hours=1)
    out = tmp_path / "bill.csv"
    assert focus.export(hw, T0, T0 + timedelta(hours=5), out) >= 6
    code, (total, passed, failed, skipped), artefacts, others, text = validate(out)
    assert code == 0 and others == [], text
    assert failed == len(artefacts) <= 3 and passed > 100 and total == passed + failed + skipped, text


@pytest.mark.focus_validator
def test_the_validator_catches_a_broken_export(clocked: tuple[Hardware, Clock], validator: Path, tmp_path: Path) -> None:
    """The check can fail: the export with a mandatory column left out and a cost that is not a number."""
    hw, clock = clocked
    ran(hw, clock, started=30, ended=135, released=150)
    good = tmp_path / "good.csv"
    focus.export(hw, T0, T0 + timedelta(hours=3), good)
    rows = read(good)
    broken = tmp_path / "broken.csv"
    with broken.open("w", encoding="utf-8", newline="") as f:
        fields = [c for c in rows[0] if c != "BillingCurrency"]
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "BilledCost": "lots"})
    code, _, _, others, text = validate(broken)
    assert code == 1 and others, text


def test_exa_finops_export_writes_the_csv_and_refuses_a_bad_period(exa_home: Path, tmp_path: Path) -> None:
    from tests.conftest import run_exa

    run_exa(exa_home, "hardware", "add-pool", "mi", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu", check=True)
    run_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", check=True)
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    out = tmp_path / "bill.csv"
    done = run_exa(exa_home, "finops", "export", "--format", "focus", "--from", (now - timedelta(hours=1)).isoformat(),
                   "--to", (now + timedelta(hours=1)).isoformat(), "--out", str(out), "--json", check=True)  # fmt: skip
    found = json.loads(done.stdout)
    rows = read(out)
    assert found["rows"] == len(rows) >= 1 and rows[0]["x_Workload"] == "w" and rows[0]["SubAccountId"] == "unassigned"
    bad = run_exa(exa_home, "finops", "export", "--from", "2030-01-01T08:30Z", "--to", "2030-01-01T10:00Z", "--out", str(tmp_path / "no.csv"))
    assert bad.returncode == 2 and "--from" in bad.stderr and "not on an hour" in bad.stderr
    assert not (tmp_path / "no.csv").exists()

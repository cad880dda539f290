"""An example FinOps report: two weeks of decisions over the example EU fleet.

    .venv/bin/python examples/finops_report.py out/finops-report-example.html

The workloads, days and hours are ILLUSTRATIVE, drawn from a fixed seed so the page is the same
every time. Prices and carbon are not invented: each placement is priced with its pool's price in
examples/fleet.yaml (or the reviewed default) and the carbon per device-hour the reviewed tables
give its pool (``accounting.carbon_basis``: its model's power, or its family's reference power, x
PUE x its region's grid intensity; policies/examlops/tables/*.yaml), as ``exa finops`` does.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

from examlops_policy.accounting import carbon_basis
from examlops_policy.model import Pool
from examlops_policy.report import ReportData, render_html, report_from_rows
from examlops_policy.specs import pools_from_file
from examlops_policy.tables import load_tables

FLEET = Path(__file__).resolve().parent / "fleet.yaml"
START, DAYS = date(2025, 3, 3), 14

# (workload, pools it lands on, devices, fraction asked, fallback?) - a plausible mix.
WORKLOADS = [
    ("train-llm-fp8", ["mn5-acc", "jupiter-booster"], 8, 1.0, False),
    ("infer-slice", ["leonardo-booster", "jupiter-booster"], 1, 0.25, False),
    ("embed-batch", ["lumi-g"], 4, 1.0, False),
    ("eval-suite", ["leonardo-booster"], 2, 1.0, False),
    ("tpu-finetune", ["lumi-g"], 8, 1.0, True),  # no TPU pool: falls back to AMD
    ("preprocess", ["lumi-c"], 32, 1.0, False),
    ("burst-train", ["aws-h200-stockholm", "aws-a100-frankfurt"], 8, 1.0, False),
    ("notebook-gpu", ["alps-gh200", "lumi-g"], 1, 0.5, False),
]


def _decisions(pools: dict[str, Pool], rng: random.Random) -> Iterator[dict[str, object]]:
    tables = load_tables()
    for offset in range(DAYS):
        day = START + timedelta(days=offset)
        weekend = day.weekday() >= 5
        for name, where, devices, fraction, fallback in WORKLOADS:
            for _ in range(rng.randint(0, 1 if weekend else 3)):
                pool = pools[rng.choice(where)]
                at = datetime.combine(day, time(rng.randint(0, 23), rng.randint(0, 59)), timezone.utc)
                hours = round(rng.uniform(0.5, 12.0), 1)
                honored = fraction < 1 and pool.supports_fractions
                held = fraction if honored else 1.0  # a fraction not honored holds a whole device
                price = pool.cost_per_hour if pool.cost_per_hour is not None else tables.default_cost(pool.accelerator)
                basis = carbon_basis(pool, tables)
                yield {
                    "workload": name, "created_at": at.isoformat(), "outcome": "placed",
                    "device": pool.accelerator, "region": pool.region, "device_hours": devices * held * hours,
                    "cost": price * devices * held * hours, "carbon_g": basis.per_hour * devices * held * hours,
                    "carbon_method": basis.method,
                    "fallback": fallback, "fraction": fraction, "fraction_honored": honored,
                }  # fmt: skip
        # Rejections (not portable: sglang on AMD) and bursts blocked by residency, now and then.
        for _ in range(rng.randint(0, 2)):
            at = datetime.combine(day, time(rng.randint(0, 23)), timezone.utc).isoformat()
            yield {"workload": "sglang-on-amd", "created_at": at, "outcome": "rejected"}
        if rng.random() < 0.4:
            at = datetime.combine(day, time(rng.randint(0, 23)), timezone.utc).isoformat()
            yield {"workload": "burst-train", "created_at": at, "outcome": "blocked"}


def _bursts(rng: random.Random) -> Iterator[dict[str, object]]:
    for residency, weights in (("open", (9, 0, 1)), ("eu-only", (6, 4, 1)), ("no-egress", (0, 3, 0)), ("restricted", (0, 2, 0))):
        for verdict, n in zip(("allowed", "blocked", "unavailable"), weights):
            for _ in range(n + rng.randint(0, 2) * (n > 0)):
                yield {"residency": residency, "verdict": verdict}


def example_report() -> ReportData:
    """The example report's data (deterministic)."""
    rng = random.Random(8)
    pools = {p.name: p for p in pools_from_file(FLEET)}
    return report_from_rows(
        "ExaMLOps FinOps report · example EU fleet",
        START,
        START + timedelta(days=DAYS - 1),
        datetime(2025, 3, 17, 6, 0, tzinfo=timezone.utc),
        decisions=list(_decisions(pools, rng)),
        bursts=list(_bursts(rng)),
    )


def main(argv: list[str]) -> int:
    target = Path(argv[1] if len(argv) > 1 else "out/finops-report-example.html")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(example_report()), encoding="utf-8")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The queue's policy entry points (admission order, preemption, the quotas report) answer what
docs/queue-design.md says, through the real OPA, for inputs their JSON Schemas accept; and the
schemas refuse what the policy would not read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import cast

import pytest
from jsonschema import Draft202012Validator, ValidationError

from tests.conftest import OPA_BIN

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"

ORDER_INPUT = {
    "now": "2026-12-01T12:00:00Z",
    "queue": [
        {"id": "q1", "project": "llm-pretraining", "priority": None, "queued_at": "2026-12-01T11:46:00Z", "accelerator": "nvidia", "devices": 2},
        {"id": "q2", "project": None, "priority": "high", "queued_at": "2026-12-01T11:59:00Z", "accelerator": "amd", "devices": 0.5},
        {"id": "q3", "project": "nope", "queued_at": "2026-12-01T10:00:00Z", "accelerator": "nvidia", "devices": 1},
    ],
    "usage": {"llm-pretraining": [[12, 40.0], [36, 10.0]], "green-research": [[12, 20.0]]},
}

PREEMPTION_INPUT = {
    "workload": {"id": "q2", "project": "llm-pretraining", "priority": "high"},
    "pools": [{"name": "spot-a100", "spot": True, "free": 0, "devices": 1}],
    "grants": [
        {"id": "d1", "project": "llm-pretraining", "priority": "low", "pool": "spot-a100", "accelerator": "nvidia", "devices": 1,
         "placed_at": "2026-12-01T09:00:00Z"},
        {"id": "d2", "project": "green-research", "priority": "normal", "pool": "spot-a100", "accelerator": "nvidia", "devices": 1,
         "placed_at": "2026-12-01T10:00:00Z"},
    ],
    "quota_use": {"devices": {"llm-pretraining": {"nvidia": 3}, "green-research": {"nvidia": 1}}},
}

REPORT_INPUT = {"quota_use": {"devices": {"llm-pretraining": {"nvidia": 70}}, "device_hours": {"green-research": {"nvidia": 2000}}}}


def schema(name: str) -> Draft202012Validator:
    doc = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(doc)
    assert doc["$id"].endswith(f"/{name}")
    return Draft202012Validator(doc)


def evaluate(query: str, policy_input: object) -> dict[str, object]:
    done = subprocess.run(
        [str(OPA_BIN), "eval", "--format", "json", "--ignore", "*_test.rego", "-d", str(ROOT / "policies"), "--stdin-input", query],
        input=json.dumps(policy_input), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return cast(dict[str, object], json.loads(done.stdout)["result"][0]["expressions"][0]["value"])


@pytest.mark.parametrize(
    ("name", "policy_input"),
    [
        ("queue-order-input.schema.json", ORDER_INPUT),
        ("preemption-input.schema.json", PREEMPTION_INPUT),
        ("quota-report-input.schema.json", REPORT_INPUT),
    ],
    ids=["order", "preemption", "report"],
)
def test_the_examples_are_valid_input(name: str, policy_input: dict[str, object]) -> None:
    schema(name).validate(policy_input)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("queue-order-input.schema.json", {**ORDER_INPUT, "pools": []}),
        ("queue-order-input.schema.json", {**ORDER_INPUT, "usage": {"x": [[1, -1]]}}),
        ("preemption-input.schema.json", {**PREEMPTION_INPUT, "pools": [{"name": "p", "free": 0}]}),
        ("quota-report-input.schema.json", {"quota_use": {"devices": {"p": {"nvidia": "2"}}}}),
    ],
    ids=["order: a field the policy does not read", "order: negative use", "preemption: a pool without its grant", "report: not a number"],
)
def test_the_schemas_refuse_what_the_policy_does_not_read(name: str, bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        schema(name).validate(bad)


def test_the_order_ranks_and_says_why() -> None:
    answer = evaluate("data.examlops.queue.order.ranked", ORDER_INPUT)
    order = cast(list[dict[str, object]], answer["order"])
    assert [(e["position"], e["id"], e["project"], e["priority"]) for e in order] == [(1, "q2", "default", "high"), (2, "q1", "llm-pretraining", "normal")]
    assert order[0]["reason"] == "priority high; project default at 0.00 of its fair share; queued 1 min ago"
    assert cast(str, order[1]["reason"]).startswith("priority normal; project llm-pretraining at ")
    invalid = cast(list[dict[str, object]], answer["invalid"])
    assert [(i["id"], [r["code"] for r in cast(list[dict[str, str]], i["reasons"])]) for i in invalid] == [("q3", ["project_unknown"])]
    assert answer["errors"] == [] and answer["fair_share"] == {"half_life_hours": 168, "window_hours": 672, "bucket_hours": 24, "usage_weight": "devices"}


def test_preemption_names_its_victims_and_spares_the_others() -> None:
    answer = evaluate("data.examlops.queue.preemption.victims", PREEMPTION_INPUT)
    assert answer["may_preempt"] is True
    assert [c["grant"] for c in cast(list[dict[str, object]], answer["candidates"])] == ["d1"]
    spared = {str(s["grant"]): [r["code"] for r in cast(list[dict[str, str]], s["reasons"])] for s in cast(list[dict[str, object]], answer["spared"])}
    assert spared == {"d2": ["victim_not_preemptible", "victim_within_quota"]}
    assert cast(dict[str, object], answer["plan"])["victims"] == ["d1"]


def test_the_quotas_report_rows() -> None:
    rows = cast(list[dict[str, object]], evaluate("data.examlops.queue.quotas.report", REPORT_INPUT))
    by_key = {(r["project"], r["accelerator"]): r for r in rows}
    pretraining = by_key[("llm-pretraining", "nvidia")]
    assert (pretraining["held"], pretraining["nominal"], pretraining["borrowed"], pretraining["cohort"]) == (70, 64, 6, "research")
    assert str(by_key[("green-research", "nvidia")]["summary"]).endswith(": used up, nothing more starts until older use ages out")

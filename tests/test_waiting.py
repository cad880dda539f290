"""The wait policy's limits read in Python, and the caller's comparison of an estimate with them,
held equal to the policy's own ``exceeded`` through the real OPA: a table of cases and generated
ones, in one ``opa eval`` each."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examlops_policy.errors import PolicyError
from examlops_policy.estimates import StartEstimate
from examlops_policy.estimates import duration_text
from examlops_policy.estimates.waiting import WaitLimits, epoch_s, exceeded, reasons_json
from examlops_policy.model import JSONObject
from tests.conftest import OPA_BIN, ROOT

NOON = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
TWO_PM = "2026-12-01T14:00:00Z"

Case = tuple[JSONObject, "StartEstimate | None", datetime]


def estimate(at: datetime | None) -> StartEstimate:
    if at is None:
        return StartEstimate("p", None, "slurm", NOON, "slurm: no estimate: down", "down")
    return StartEstimate("p", at, "slurm", NOON, "slurm: expected start")


def policy(cases: list[Case]) -> tuple[list[object], list[list[JSONObject]]]:
    """The policy's limits and its exceeded for each case, from one ``opa eval``."""
    doc = {
        "cases": [
            {"w": w, "e": None if e is None else e.policy_input(), "now": epoch_s(now)}
            for w, e, now in cases
        ]
    }  # fmt: skip
    query = (
        "[[wait.limits(c.w), wait.exceeded(wait.limits(c.w), c.e, c.now)] | some c in input.cases]"
    )
    done = subprocess.run(
        [str(OPA_BIN), "eval", "--format", "json", "-d", str(ROOT / "policies"), "--stdin-input",
         "--import", "data.examlops.hardware.checks.wait", query],
        input=json.dumps(doc), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = json.loads(done.stdout)["result"][0]["expressions"][0]["value"]
    return [r[0] for r in rows], [r[1] for r in rows]


def python(limits_raw: list[object], cases: list[Case]) -> list[list[JSONObject]]:
    return [reasons_json(exceeded(WaitLimits.from_json(raw), e, now)) for raw, (_, e, now) in zip(limits_raw, cases)]


HOUR = timedelta(hours=1)

TABLE: list[Case] = [
    ({}, estimate(NOON + 100 * HOUR), NOON),
    ({"max_wait": 7200}, estimate(NOON + HOUR), NOON),
    ({"max_wait": 7200}, estimate(NOON + 2 * HOUR), NOON),
    ({"max_wait": 7200}, estimate(NOON + 2 * HOUR + timedelta(seconds=1)), NOON),
    ({"max_wait": 7200}, estimate(NOON + 2 * HOUR + timedelta(seconds=2)), NOON),
    ({"max_wait": 0}, estimate(NOON), NOON + timedelta(microseconds=999_999)),
    ({"max_wait": 0}, estimate(NOON - HOUR), NOON),
    ({"max_wait": 7200}, estimate(None), NOON),
    ({"max_wait": 7200}, None, NOON),
    ({"deadline": TWO_PM}, estimate(NOON + 2 * HOUR), NOON),
    ({"deadline": TWO_PM}, estimate(NOON + 3 * HOUR), NOON),
    ({"deadline": TWO_PM}, estimate(NOON), NOON + 3 * HOUR),
    ({"deadline": "2026-12-01T14:00:00.5Z"}, estimate(NOON + 2 * HOUR + timedelta(seconds=1)), NOON),
    ({"deadline": "2026-12-01T14:00:00.5Z"}, estimate(NOON + 2 * HOUR + timedelta(seconds=2)), NOON),
    ({"max_wait": 3600, "deadline": TWO_PM}, estimate(NOON + 3 * HOUR), NOON),
    ({"max_wait": 3600, "deadline": TWO_PM}, estimate(None), NOON),
    ({"max_wait": -1}, estimate(NOON), NOON),
    ({"max_wait": "2h"}, estimate(NOON), NOON),
    ({"deadline": "tomorrow"}, None, NOON),
]


def test_the_comparison_is_the_policy_s_on_the_table() -> None:
    limits_raw, expected = policy(TABLE)
    assert python(limits_raw, TABLE) == expected
    # The table reaches every outcome.
    codes = {r["code"] for reasons in expected for r in reasons}
    assert codes == {"wait_exceeded", "deadline_missed", "deadline_passed", "estimate_unknown", "wait_invalid"}
    assert [] in expected


@st.composite
def cases(draw: st.DrawFn) -> Case:
    now = NOON + timedelta(seconds=draw(st.integers(-7200, 7200)), microseconds=draw(st.integers(0, 999_999)))
    w: JSONObject = {}
    if draw(st.booleans()):
        w["max_wait"] = draw(st.sampled_from([0, 1, 59, 60, 3600, 7200, 86400]))
    if draw(st.booleans()):
        offset = draw(st.integers(-3 * 3600, 3 * 3600))
        w["deadline"] = (NOON + timedelta(seconds=offset)).isoformat().replace("+00:00", "Z")
    e: StartEstimate | None = None
    kind = draw(st.sampled_from(["at", "at", "at", "unknown", "none"]))
    if kind == "at":
        e = estimate(now + timedelta(seconds=draw(st.integers(-600, 4 * 3600))))
    elif kind == "unknown":
        e = estimate(None)
    return w, e, now


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cases(), min_size=300, max_size=300))
def test_the_comparison_is_the_policy_s_on_generated_cases(generated: list[Case]) -> None:
    # One opa eval for the lot: hypothesis draws the 300 cases once.
    limits_raw, expected = policy(generated)
    assert python(limits_raw, generated) == expected


def test_limits_are_read_from_the_policy_s_answer() -> None:
    limits_raw, _ = policy([({"max_wait": 7500, "deadline": TWO_PM}, None, NOON)])
    lim = WaitLimits.from_json(limits_raw[0])
    assert (lim.start_within_s, lim.start_by_s, lim.invalid) == (7500, datetime.fromisoformat("2026-12-01T14:00:00+00:00").timestamp(), None)
    assert lim.any
    assert lim.reasons.max_wait is not None and lim.reasons.max_wait.message.endswith("within max_wait 2 h 05 m")
    assert not WaitLimits.from_json(policy([({}, None, NOON)])[0][0]).any


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([], "expected an object"),
        ({"start_within_s": "2h", "start_by_s": None, "invalid": None, "reasons": {}}, "start_within_s: expected a number"),
        ({"start_within_s": 60, "start_by_s": None, "invalid": None, "reasons": {}}, "start_within_s without reasons.max_wait"),
        ({"start_within_s": None, "start_by_s": None, "invalid": {"code": "x"}, "reasons": {}}, "at invalid: expected a reason"),
        ({"start_within_s": None, "start_by_s": None, "invalid": None}, "at reasons: expected an object"),
    ],
)
def test_a_malformed_answer_is_a_policy_error(raw: object, expected: str) -> None:
    with pytest.raises(PolicyError, match=expected):
        WaitLimits.from_json(raw)


def test_duration_text_is_the_policy_s() -> None:
    seconds = [0, 1, 45, 59, 60, 90, 3599, 3600, 7500, 7530, 86399, 86400, 90000, 31622400]
    done = subprocess.run(
        [str(OPA_BIN), "eval", "--format", "json", "-d", str(ROOT / "policies"), "--import", "data.examlops.hardware.checks.wait",
         f"[wait.duration_text(s) | some s in {json.dumps(seconds)}]"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert [duration_text(s) for s in seconds] == json.loads(done.stdout)["result"][0]["expressions"][0]["value"]
    assert duration_text(7500) == "2 h 05 m"

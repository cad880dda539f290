"""The Python/Rego seam: the policy's verdicts answer, as the real OPA gives it, is what
schemas/verdicts-answer.schema.json says, and the decoder takes exactly that.

Each workload below is judged over the specification's fleet and a generated one by the policy the
session's OPA serves; the raw answer is validated against the schema, then decoded into typed
values. Answers that break the schema (a missing field, an index past its list) are refused whole.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from examlops_policy._core.codec import content_key, decode_verdicts, views_key, workload_input
from examlops_policy._core.verdicts import Signature
from examlops_policy._policy import FLEET_PATH, VIEWS_KEPT, VIEWS_MIN_KEYS, OpaPolicy
from examlops_policy.errors import PolicyError
from examlops_policy.model import Pool, Workload
from examlops_policy.opa import connect, stop_server
from examlops_policy.tables import policy_dir
from tests.conftest import ROOT, SEED_POOLS

sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet  # noqa: E402

SCHEMA = json.loads((ROOT / "schemas" / "verdicts-answer.schema.json").read_text(encoding="utf-8"))
PATH = "/v1/data/examlops/hardware/placement"
WORKLOADS = [
    Workload("plain", "nvidia", engine="vllm"),
    Workload("fraction", "nvidia", fraction=0.3, target="hpc"),
    Workload("fallback", "tpu", target="hpc"),
    Workload("not-portable", "amd", engine="sglang"),
    Workload("eu-burst", "nvidia", residency="eu-only", allow_burst=True),
    Workload("cloud", "amd", target="cloud", capabilities=("fp8",)),
    Workload("capped", "nvidia", max_cost_per_hour=1.0, project="inference-eu", optimize="balanced"),
    Workload("restricted", "nvidia", residency="restricted", data_region="de-juelich", allow_cpu_fallback=True),
    Workload("no-budget-fallback", "nvidia", max_cost_per_hour=1.0, allow_budget_fallback=False),
    Workload("spot", "nvidia", target="cloud", spot="allow"),
]


@pytest.fixture(scope="module")
def opa(opa_home: Path) -> Iterator[Any]:
    transport = connect(opa_home).transport
    try:
        yield transport
    finally:
        transport.close()


def query(transport: Any, rule: str, policy_input: dict[str, Any]) -> Any:
    status, raw = transport.request("POST", f"{PATH}/{rule}", json.dumps({"input": policy_input}).encode())
    assert status == 200, raw
    return json.loads(raw)["result"]


def shapes_of(pools: list[Pool], signature: Signature) -> dict[str, Any]:
    return {content_key(s): s for s in (signature.shape_of(p) for p in pools)}


def fleets() -> list[list[Pool]]:
    return [list(SEED_POOLS), [s.pool for s in fleet.generate_fleet(120, 7)]]


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_every_answer_is_what_the_schema_says_and_decodes(opa: Any, workload: Workload) -> None:
    about = query(opa, "about", {})
    signature = Signature(tuple(about["signature"]["shape"]), tuple(about["signature"]["workload"]))
    validator = Draft202012Validator(SCHEMA)
    for pools in fleets():
        shapes = shapes_of(pools, signature)
        raw = query(opa, "verdicts", {"workload": signature.workload_of(workload_input(workload)), "keys": sorted(shapes), "shapes": shapes})
        errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
        answer = decode_verdicts(raw, sorted(shapes), "test")
        assert answer.missing == ()
        if answer.judged:
            assert set(answer.shapes) == set(shapes)


def test_an_invalid_workload_is_answered_as_the_schema_says(opa: Any) -> None:
    shapes = shapes_of(list(SEED_POOLS), Signature(("accelerator", "target"), ()))
    raw = query(opa, "verdicts", {"workload": {"name": "bad", "accelerator": "gpu"}, "keys": sorted(shapes), "shapes": shapes})
    assert list(Draft202012Validator(SCHEMA).iter_errors(raw)) == []
    assert raw["judged"] is False and raw["shapes"] == {} and raw["rejection"]["code"] == "accelerator_unknown"


def test_a_note_for_budget_and_a_forbidden_budget_fallback_decode(opa: Any) -> None:
    """With a cap, a stand-in's row names the note for when the requested accelerator's pools are
    over the budget; a workload that does not fall back for budget gets the reason its stand-ins
    are denied."""
    about = query(opa, "about", {})
    signature = Signature(tuple(about["signature"]["shape"]), tuple(about["signature"]["workload"]))
    shapes = shapes_of(list(SEED_POOLS), signature)
    w = Workload("capped", "nvidia", max_cost_per_hour=1.0, allow_budget_fallback=False)
    raw = query(opa, "verdicts", {"workload": signature.workload_of(workload_input(w)), "keys": sorted(shapes), "shapes": shapes})
    answer = decode_verdicts(raw, sorted(shapes), "test")
    assert answer.workload.budget_fallback is not None and answer.workload.budget_fallback.code == "budget_fallback_forbidden"
    notes = {v.note_budget for v in answer.shapes.values() if v.fallback}
    assert notes == {"requested nvidia pools are over the budget (max_cost_per_hour $1.00/h) — fell back to amd"}
    assert {v.note_budget for v in answer.shapes.values() if not v.fallback} == {None}


def test_the_wait_limits_decode(opa: Any) -> None:
    """The workload's max_wait and deadline come back as the wait check's limits, with the reasons
    a pool gets past them (its texts), once per workload."""
    about = query(opa, "about", {})
    signature = Signature(tuple(about["signature"]["shape"]), tuple(about["signature"]["workload"]))
    assert {"max_wait", "deadline"} <= set(signature.workload) and "walltime" not in signature.workload
    shapes = shapes_of(list(SEED_POOLS), signature)
    w = Workload("soon", "nvidia", max_wait="2h", deadline="2026-12-01T14:00:00Z", walltime="30m")
    raw = query(opa, "verdicts", {"workload": signature.workload_of(workload_input(w)), "keys": sorted(shapes), "shapes": shapes})
    assert list(Draft202012Validator(SCHEMA).iter_errors(raw)) == []
    wait = decode_verdicts(raw, sorted(shapes), "test").workload.wait
    assert (wait.start_within_s, wait.start_by_s, wait.invalid) == (7200, 1796133600, None)
    assert wait.reasons.max_wait is not None and wait.reasons.max_wait.message == "the pool is not expected to start the workload within max_wait 2 h"
    assert wait.as_json() == raw["wait"]
    plain = query(opa, "verdicts", {"workload": signature.workload_of(workload_input(Workload("w", "nvidia"))), "keys": [], "shapes": {}})
    assert not decode_verdicts(plain, [], "test").workload.wait.any


def _answer(opa: Any) -> tuple[dict[str, Any], list[str]]:
    about = query(opa, "about", {})
    signature = Signature(tuple(about["signature"]["shape"]), tuple(about["signature"]["workload"]))
    shapes = shapes_of(list(SEED_POOLS), signature)
    w = Workload("eu-burst", "tpu", residency="eu-only", allow_burst=True)
    return query(opa, "verdicts", {"workload": signature.workload_of(workload_input(w)), "keys": sorted(shapes), "shapes": shapes}), sorted(shapes)


@pytest.mark.parametrize(
    ("break_it", "says", "by_schema"),
    [
        (lambda a, k: a["shapes"][k[0]].pop("tier"), "missing 'tier'", True),
        (lambda a, k: a["shapes"][k[0]].update(note=-1), "expected an index below", True),
        (lambda a, k: a["grants"][0].pop("limits"), "missing 'limits'", True),
        (lambda a, k: a["preferences"][0].update(selected="0"), "expected a whole number", True),
        (lambda a, k: a.update(reasons={}), "expected an array", True),
        (lambda a, k: a["shapes"][k[0]].pop("note_budget"), "missing 'note_budget'", True),
        (lambda a, k: a.pop("budget_fallback"), "missing 'budget_fallback'", True),
        (lambda a, k: a.pop("wait"), "missing 'wait'", True),
        (lambda a, k: a["wait"].update(start_within_s="2h"), "expected a number or null", True),
        (lambda a, k: a["wait"]["reasons"].update(unknown={"code": "x"}), "expected a reason", True),
        # An index past its list: the schema cannot say it; the decoder does.
        (lambda a, k: a["shapes"][k[0]].update(grant=99), "expected an index below", False),
        (lambda a, k: a["shapes"][k[0]].update(denials=[len(a["reasons"])]), "expected an index below", False),
    ],
)
def test_an_answer_that_breaks_the_schema_is_refused_whole(opa: Any, break_it: Any, says: str, by_schema: bool) -> None:
    raw, keys = _answer(opa)
    broken = copy.deepcopy(raw)
    break_it(broken, keys)
    assert bool(list(Draft202012Validator(SCHEMA).iter_errors(broken))) == by_schema
    with pytest.raises(PolicyError, match=says):
        decode_verdicts(broken, keys, "test")


def test_about_of_a_policy_from_before_the_pool_stage_and_texts_were_published_still_decodes(opa: Any) -> None:
    """``exa policy impact --against`` asks older policies too: they ran exactly this pool stage
    and worded their summaries themselves."""
    from examlops_policy._core.codec import POOL_STAGE, decode_about

    raw = query(opa, "about", {})
    assert tuple(raw["pool_stage"]) == POOL_STAGE and set(raw["texts"]) >= {"no_capacity", "separator"}
    older = {k: v for k, v in raw.items() if k not in ("pool_stage", "texts")}
    about = decode_about(older, "test")
    assert about.texts == {} and about.signature.shape == tuple(raw["signature"]["shape"])
    # One from before the wait check ran budget and capacity alone: this engine runs those too.
    assert decode_about({**raw, "pool_stage": ["budget", "capacity"]}, "test").signature == about.signature
    # One from before the quota or the wait check ran: this engine runs those too.
    assert decode_about({**raw, "pool_stage": ["budget", "capacity", "quota"]}, "test").checks
    assert decode_about({**raw, "pool_stage": ["budget", "capacity", "wait"]}, "test").checks
    # One that names a pool-stage check this engine does not run places nothing.
    with pytest.raises(PolicyError, match="check\\(s\\) reservation at a stage this engine cannot run"):
        decode_about({**raw, "pool_stage": ["budget", "capacity", "reservation"]}, "test")


class Counting:
    """A transport that remembers every request's method and path (less the key)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.describe = inner.describe
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        self.sent.append((method, path.rsplit("/", 1)[0] if "/views/" in path else path))
        return self.inner.request(method, path, body)  # type: ignore[no-any-return]

    def count(self, method: str, path: str) -> int:
        return self.sent.count((method, path))

    def close(self) -> None:
        self.inner.close()


@pytest.mark.opa
def test_the_fleet_views_are_stored_once_and_change_no_answer(tmp_path: Path) -> None:
    """A connection that asks about a key set again has OPA work out the fleet's views once and
    store them; the queries after it read them (they carry their digest), and every answer is the
    one the shapes given inline get. Views found stored are not read by another connection, and
    views rewritten in place are not read at all. A server that lost its data (restarted) is given
    the shapes and the views again."""
    import hashlib

    from examlops_policy.opa.content import canonical_json

    connection = connect(tmp_path, policy_root=policy_dir())
    try:
        transport = Counting(connection.transport)
        policy = OpaPolicy(transport)  # type: ignore[arg-type]
        signature = policy.about().signature
        shapes = shapes_of([s.pool for s in fleet.generate_fleet(120, 7)], signature)
        keys = sorted(shapes)
        assert len(keys) >= VIEWS_MIN_KEYS
        views = f"{FLEET_PATH}/views"
        for workload in WORKLOADS:
            wsig = signature.workload_of(workload_input(workload))
            inline = query(transport, "verdicts", {"workload": wsig, "keys": keys, "shapes": shapes})
            assert policy.verdicts(wsig, keys, shapes) == decode_verdicts(inline, keys, "inline")
            assert query(transport, "verdicts", {"workload": wsig, "keys": keys}) == inline
        # Asked about once (nothing stored), then stored once, when asked about again.
        assert transport.count("POST", f"{PATH}/views") == 1 and transport.count("PUT", views) == 1
        stored = json.loads(transport.request("GET", views)[1])["result"]
        assert list(stored) == [views_key(keys)] and stored[views_key(keys)]["revision"] == policy.confirm().revision
        # What the verdict queries carry is what the stored views hash to (as OPA's json.marshal
        # writes them), so they are read.
        digest = policy._views[views_key(keys)][1]
        assert hashlib.sha256(canonical_json(stored[views_key(keys)])).hexdigest() == digest

        # Rewritten in place with the token (every check made to see the views of another):
        # no longer what they hash to, so not read; the answers stay the shapes' own.
        tampered = dict(stored[views_key(keys)])
        tampered["fixed"] = {}
        tampered["checks"] = {name: {**c, "views": list(reversed(c["views"]))} for name, c in tampered["checks"].items()}
        assert transport.request("PUT", f"{views}/{views_key(keys)}", json.dumps(tampered).encode())[0] in (200, 204)
        for workload in WORKLOADS:
            wsig = signature.workload_of(workload_input(workload))
            inline = query(transport, "verdicts", {"workload": wsig, "keys": keys, "shapes": shapes})
            assert policy.verdicts(wsig, keys, shapes) == decode_verdicts(inline, keys, "inline"), workload.name
        assert transport.count("POST", f"{PATH}/views") == 1  # the connection holds its digest: it did not ask again

        # Another connection does not read views it finds stored: it stores its own once it asks again.
        other = Counting(connect(tmp_path, policy_root=policy_dir()).transport)
        try:
            mine = OpaPolicy(other)  # type: ignore[arg-type]
            for workload in WORKLOADS[:3]:
                mine.verdicts(signature.workload_of(workload_input(workload)), keys, shapes)
            assert other.count("POST", f"{PATH}/views") == 1 and other.count("PUT", views) == 1
        finally:
            other.close()

        # A few key sets' views are kept per connection; the oldest is removed from OPA.
        for n in range(VIEWS_KEPT + 1):
            for _ in range(2):
                policy.verdicts(signature.workload_of(workload_input(WORKLOADS[0])), keys[n:], shapes)
        assert transport.count("DELETE", views) == 1
        assert len(json.loads(transport.request("GET", views)[1])["result"]) == VIEWS_KEPT

        transport.request("DELETE", FLEET_PATH)
        wsig = signature.workload_of(workload_input(WORKLOADS[1]))
        assert policy.verdicts(wsig, keys[2:], shapes) == decode_verdicts(
            query(transport, "verdicts", {"workload": wsig, "keys": keys[2:], "shapes": shapes}), keys[2:], "inline"
        )
        # Asked with the digest it held, told the shapes are gone, it uploads them and stores the views again.
        assert transport.count("POST", f"{PATH}/views") == 1 + VIEWS_KEPT + 1
        assert list(json.loads(transport.request("GET", views)[1])["result"]) != []
    finally:
        stop_server(tmp_path)


def test_the_benchmarks_put_on_the_import_path_shadow_no_standard_module() -> None:
    """This module puts benchmarks/ first on the import path of its test process, which processes
    it spawns inherit: a benchmark named like a standard module (queue.py) would replace it there."""
    shadowing = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem in sys.stdlib_module_names)
    assert shadowing == []

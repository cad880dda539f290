"""Decision records: the capacity vector version-2 records keep reads back in every form written so
far, and version-3 records are held to their columns."""

from __future__ import annotations

import base64
import zlib

import pytest

from examlops_policy._core.codec import MAX_VECTOR_BYTES, capacities_of, capacity_vector, packed_vector
from examlops_policy.errors import StateError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Capacity, Pool, Rejection, Workload

VECTOR = [Capacity(8), Capacity(2, {"1g.10gb": 14, "3g.40gb": 4}), Capacity(8), Capacity(0), Capacity(2, {"1g.10gb": 14, "3g.40gb": 4})]


def test_every_form_reads_back_the_same_capacities() -> None:
    plain = [8, [2, {"1g.10gb": 14, "3g.40gb": 4}], 8, 0, [2, {"1g.10gb": 14, "3g.40gb": 4}]]  # records before the packing
    indexed = capacity_vector(VECTOR)
    assert indexed == {"values": [8, [2, {"1g.10gb": 14, "3g.40gb": 4}], 0], "at": [0, 1, 0, 2, 1]}
    for form in (plain, indexed, packed_vector(VECTOR)):
        assert capacities_of(form) == VECTOR


def test_a_large_fleet_packs_small() -> None:
    fleet = [Capacity(i % 3, {"1g.10gb": 7 * (i % 5), "2g.20gb": 3 * (i % 4), "4g.40gb": i % 2}) for i in range(1000)]
    packed = packed_vector(fleet)
    assert isinstance(packed, dict) and len(str(packed["deflate"])) < 4000
    assert capacities_of(packed) == fleet


@pytest.mark.parametrize(
    "raw",
    [
        {"values": [8], "at": [0, 1]},  # an index past the values
        {"values": [8], "at": [True]},
        {"deflate": "not base64!"},
        {"deflate": base64.b64encode(b"not deflated").decode()},
        {"deflate": base64.b64encode(zlib.compress(b" " * (MAX_VECTOR_BYTES + 1))).decode()},  # inflates past any fleet
        "8,8",
    ],
)
def test_an_altered_vector_is_a_state_error(raw: object) -> None:
    with pytest.raises(StateError):
        capacities_of(raw)


def test_a_column_that_disagrees_with_its_record_is_named_by_the_audit(seeded: Hardware) -> None:
    """Records name the state version they were decided at and keep their start estimates (version
    4); their columns are still held to what they record, the chosen pool's estimate among them."""
    import json
    import sqlite3

    record = seeded.place(Workload("train", accelerator="amd", engine="vllm", target="hpc"))
    with sqlite3.connect(seeded.home / "state.db") as db:
        (doc,) = db.execute("SELECT document FROM decisions WHERE id = ?", (record.id,)).fetchone()
        stored = json.loads(doc)
        assert stored["v"] == 4 and stored["estimates"][stored["pool"]]["estimate_source"] == "now"
        db.execute("UPDATE decisions SET cost_per_hour = 0.01, estimate_source = 'slurm' WHERE id = ?", (record.id,))
    report = seeded.verify_audit()
    assert not report.ok
    assert [p.message for p in report.problems] == [
        f"decision {record.id[:12]}: its cost_per_hour, estimate_source column(s) differ from its audited record"
    ]


def test_a_fallback_for_budget_and_a_forbidden_one_read_back_as_they_were_decided(hardware: Hardware) -> None:
    """The verdict set a decision stores keeps a stand-in's note for a fallback for budget and the
    workload's refusal of one (budget_fallback_forbidden): each decision rebuilt from its record
    says what it said when it was made."""
    hardware.add_pool(Pool("nv", "hpc", "nvidia", 2, "eu", cost_per_hour=2.5))
    hardware.add_pool(Pool("mi", "hpc", "amd", 2, "eu", cost_per_hour=0.9))
    allowed = hardware.place(Workload("j", "nvidia", max_cost_per_hour=1.0))
    assert allowed.decision.note == "requested nvidia pools are over the budget (max_cost_per_hour $1.00/h) — fell back to amd"
    forbidden = hardware.place(Workload("k", "nvidia", max_cost_per_hour=1.0, allow_budget_fallback=False))
    assert isinstance(forbidden.decision, Rejection)
    assert {v.pool: [r.code for r in v.reasons] for v in forbidden.decision.verdicts} == {
        "nv": ["budget_exceeded"],
        "mi": ["budget_fallback_forbidden"],
    }
    for made in (allowed, forbidden):
        read = hardware.decision(made.id).decision
        assert (read.outcome, getattr(read, "note", None), getattr(read, "code", None)) == (
            made.decision.outcome, getattr(made.decision, "note", None), getattr(made.decision, "code", None),
        )  # fmt: skip
        assert [(v.pool, v.reasons, v.note) for v in read.verdicts] == [(v.pool, v.reasons, v.note) for v in made.decision.verdicts]

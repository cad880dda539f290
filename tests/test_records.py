"""Decision records: the capacity vector version-2 records keep reads back in every form written so
far, and version-3 records are held to their columns."""

from __future__ import annotations

import base64
import zlib

import pytest

from examlops_policy._core.codec import MAX_VECTOR_BYTES, capacities_of, capacity_vector, packed_vector
from examlops_policy.errors import StateError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Capacity, Workload

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
    """Records name the state version they were decided at (version 3); their columns are still
    held to what they record."""
    import json
    import sqlite3

    record = seeded.place(Workload("train", accelerator="amd", engine="vllm", target="hpc"))
    with sqlite3.connect(seeded.home / "state.db") as db:
        (doc,) = db.execute("SELECT document FROM decisions WHERE id = ?", (record.id,)).fetchone()
        assert json.loads(doc)["v"] == 3
        db.execute("UPDATE decisions SET cost_per_hour = 0.01 WHERE id = ?", (record.id,))
    report = seeded.verify_audit()
    assert not report.ok
    assert [p.message for p in report.problems] == [f"decision {record.id[:12]}: its cost_per_hour column(s) differ from its audited record"]

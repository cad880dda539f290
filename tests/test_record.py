"""The decision path's records (``_record.Record``): equal, hashed, shown and pickled from their
fields as the frozen dataclasses they replace were.

Each record class is held to the same (``records``: the subclasses of ``Record`` the decision path
imports): its ``FIELDS`` name its ``__init__``'s parameters in order. Run compiled as well
(``tests/test_compiled.py``).
"""

from __future__ import annotations

import pickle

import pytest

from examlops_policy._core.selection import NOT_ATTEMPTED, Outcome
from examlops_policy._nodes import NodeGrant
from examlops_policy._record import Capacity, DeviceShare, NodeAllocation, NodeRoom, Record
from examlops_policy._sim.layer import Placed
from examlops_policy._sim.simulate import WorkloadOutcome
from examlops_policy.model import BurstVerdict, Grant, Holding


GRANT = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)
BURST = BurstVerdict(True, "allowed", "cloud", "eu-west-1")
# One of each record, every field a value of its own.
SAMPLES: tuple[Record, ...] = (
    NodeGrant("n1", (0, 1), 250, 4000, 1024),
    Outcome(1, 2, BURST, 3, GRANT, ((1, GRANT),)),
    Placed("pool", GRANT, (), (NodeGrant("n1", (0,), 0, 0, 0),)),
    WorkloadOutcome("w1", 2.5, "pool", "no_capacity", "no pool has room"),
    NodeRoom(2, 8000, 4096, 500, (("1g.10gb", 3),), 4, 5, 6),
    Capacity(7, {"1g.10gb": 9}, (NodeRoom(1),)),
    DeviceShare(3, 250),
    NodeAllocation("n1", (Holding(0, "1g.10gb", 4, 1),), DeviceShare(2, 500), 4000, 1024),
)


def records() -> list[type[Record]]:
    """Every subclass of ``Record`` imported."""
    found: list[type[Record]] = []
    todo = list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__qualname__)


def test_each_record_has_a_sample_here() -> None:
    assert records() == sorted({type(r) for r in SAMPLES}, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__qualname__)
def test_fields_name_the_init_parameters_in_order(record: Record) -> None:
    cls, values = type(record), record.values()
    assert len(set(map(repr, values))) == len(values) == len(cls.FIELDS)
    assert cls(*values).values() == cls(**dict(zip(cls.FIELDS, values))).values() == values
    assert cls(*values) == record


def test_equal_fields_are_equal_records_and_hash_alike() -> None:
    a, b = NodeGrant("n1", (0, 1), 0, 4000, 1024), NodeGrant("n1", (0, 1), 0, 4000, 1024)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != NodeGrant("n1", (0, 1), 0, 4000, 2048)
    assert WorkloadOutcome("w", 1.0, "p") == WorkloadOutcome("w", 1.0, pool="p")
    assert WorkloadOutcome("w", 1.0, "p") != WorkloadOutcome("w", 1.0, code="p")
    assert NodeRoom(1, count=2) == NodeRoom(1, None, None, 0, (), None, None, 2) and hash(NodeRoom(1)) == hash(NodeRoom(1))
    assert Capacity(1) == Capacity(1, {}, None) and Capacity(1).slices == {} and Capacity(1).slices is not Capacity(1).slices
    assert NodeAllocation("n1") == NodeAllocation("n1", (), None, 0, 0) and NodeAllocation("n1", (Holding(0), Holding(1))).devices == 2


def test_records_of_two_classes_are_never_equal() -> None:
    outcome = Outcome(0, 0, NOT_ATTEMPTED, None, GRANT)
    placed = Placed("pool", GRANT, ())
    assert outcome != placed and placed != outcome
    assert NodeGrant("a", (), 0, 0, 0) != ("a", (), 0, 0, 0)


def test_repr_shows_the_fields() -> None:
    assert repr(NodeGrant("n1", (3,), 250, 0, 0)) == "NodeGrant(node='n1', devices=(3,), share_milli=250, cpu_milli=0, memory_mib=0)"
    assert repr(NodeAllocation("n1", (), DeviceShare(0, 250))) == "NodeAllocation(node='n1', holdings=(), share=DeviceShare(device=0, shares=250), cpu_milli=0, memory_mib=0)"
    assert repr(WorkloadOutcome("w1", 2.5)) == "WorkloadOutcome(name='w1', arrival=2.5, pool=None, code=None, message=None)"
    assert repr(Capacity(2, {}, (NodeRoom(2),))) == (
        "Capacity(whole=2, slices={}, nodes=(NodeRoom(whole=2, cpu=None, memory=None, shares=0, slices=(), block=None, switch=None, count=1),))"
    )


def test_records_pickle() -> None:
    for record in SAMPLES:
        back = pickle.loads(pickle.dumps(record))
        assert back == record and type(back) is type(record)

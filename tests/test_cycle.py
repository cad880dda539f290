"""The decision cycle (``app/cycle.py``): the one retry loop ``Hardware.place`` and queue admission share.

A round decides outside the lock; a fleet that changed before its write sends it back for a new
round, at most ``FLEET_ROUNDS`` times. Here the fleet changes between each round's decision and
its write (a pool registered meanwhile, through the façade, as another process would), for as many
rounds as a test says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from examlops_policy._core import commit
from examlops_policy._core.request import Request
from examlops_policy.app.cycle import FLEET_ROUNDS, SOURCE, Decided, FleetKeptChanging, Skip, Write
from examlops_policy.errors import StateError
from examlops_policy.hardware import Hardware
from examlops_policy._core.state import Snapshot
from examlops_policy.model import Placement, Pool, Workload

AMD = Workload("train", "amd", engine="vllm", target="hpc")
ONE = Pool("amd-one", "hpc", "amd", 1, "eu", cost_per_hour=1.0, carbon_factor=10)


class Changing:
    """``cycle.decide`` wrapped: after the first ``rounds`` decisions, the fleet changes before the
    write (a new pool registered); ``decided``: how many rounds decided."""

    def __init__(self, hw: Hardware, rounds: int) -> None:
        self.hw, self.rounds, self.decided = hw, rounds, 0
        self._decide = hw.cycle.decide

    def __call__(self, request: Request, snap: Snapshot | None = None, under: object = None) -> Decided:
        made = self._decide(request, snap, under)  # type: ignore[arg-type]
        self.decided += 1
        if self.decided <= self.rounds:
            self.hw.add_pool(Pool(f"meanwhile-{self.decided}", "cloud", "nvidia", 1, "us-east-1", cost_per_hour=9.0))
        return made


@pytest.fixture()
def changing(hardware: Hardware, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], Changing]]:
    def make(rounds: int) -> Changing:
        wrapper = Changing(hardware, rounds)
        monkeypatch.setattr(hardware.cycle, "decide", wrapper)
        return wrapper

    yield make


def test_a_placement_whose_fleet_changed_is_decided_again_and_placed(hardware: Hardware, changing: Callable[[int], Changing]) -> None:
    hardware.add_pool(ONE)
    rounds = changing(2)
    record = hardware.place(AMD)
    assert rounds.decided == 3  # two rounds sent back, the third written
    assert isinstance(record.decision, Placement) and record.decision.pool == "amd-one"
    assert [r.id for r in hardware.decisions()] == [record.id]


def test_a_placement_gives_up_after_fleet_rounds_and_writes_nothing(hardware: Hardware, changing: Callable[[int], Changing]) -> None:
    hardware.add_pool(ONE)
    rounds = changing(FLEET_ROUNDS)
    with pytest.raises(FleetKeptChanging, match=rf"pools kept changing while train was being placed \({FLEET_ROUNDS} rounds\); nothing was placed"):
        hardware.place(AMD)
    assert rounds.decided == FLEET_ROUNDS
    assert issubclass(FleetKeptChanging, StateError)  # what callers of place have always caught
    assert hardware.decisions() == [] and hardware.pool("amd-one").view.state.free == 1
    assert hardware.verify_audit().ok


def test_admission_whose_fleet_keeps_changing_leaves_the_workload_waiting(hardware: Hardware, changing: Callable[[int], Changing]) -> None:
    """Admission runs the same loop: a fleet changing under every round admits nothing (the
    workload still waits, nothing raised), and the next pass admits it."""
    hardware.add_pool(ONE)
    holder = hardware.place(AMD)
    waiting = hardware.place(Workload("next", "amd", engine="vllm", target="hpc"), queue=True)
    assert waiting.decision.outcome == "queued"
    commit.release(hardware.store, hardware.cycle.capacities, holder.id, source=SOURCE)  # freed without offering it to the queue
    rounds = changing(FLEET_ROUNDS)
    report = hardware.admit()
    assert report.admitted == () and report.waiting == 1 and rounds.decided == FLEET_ROUNDS
    rounds.rounds = 0  # the fleet stands still now
    report = hardware.admit()
    assert [a.queued_id for a in report.admitted] == [waiting.id] and report.waiting == 0


def test_a_round_that_skips_writes_nothing_and_says_why(hardware: Hardware) -> None:
    hardware.add_pool(ONE)
    seen: list[Decided] = []

    def plan(decided: Decided) -> Write | Skip[str]:
        seen.append(decided)
        return Skip(f"would place on {getattr(decided.decision, 'pool', None)}")

    assert hardware.cycle.run(Request(AMD), plan, name=AMD.name) == Skip("would place on amd-one")
    assert len(seen) == 1 and hardware.decisions() == []

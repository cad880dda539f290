"""The library's façade at its edges: the same checks as the command line, and an ExaError for
every misuse a caller can make (``Hardware`` after ``close()``, a page of no decisions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from examlops_policy import Hardware, Placement, Pool, SpecError, StateError, Workload, device_accounting
from examlops_policy.hardware import ManagedPolicy
from examlops_policy.store.sqlite import SQLiteStore


def test_a_hardware_used_after_close_raises_a_state_error_not_a_driver_error(tmp_path: Path, opa_home: Path) -> None:
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db"), policy=ManagedPolicy(opa_home))
    hw.add_pool(Pool("a", "hpc", "amd", 1, "eu"))
    hw.close()
    for use in (hw.pool_views, hw.decision_page, lambda: hw.place(Workload("w", "amd")), lambda: hw.pool("a")):
        with pytest.raises(StateError, match="was closed; make a new Hardware"):
            use()
    hw.close()  # closing twice is harmless


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_page_of_fewer_than_one_decision_is_refused_as_the_cli_refuses_it(hardware: Hardware, limit: object) -> None:
    with pytest.raises(SpecError, match="limit: must be a whole number of at least 1"):
        hardware.decision_page(limit=limit)  # type: ignore[arg-type]
    assert hardware.decision_page(limit=1).decisions == ()


def test_accounting_of_a_record_is_device_accounting_of_its_placement(hardware: Hardware) -> None:
    """``Hardware.accounting(id)`` and ``device_accounting(placement)`` are one function: the
    grounded figure is there for both exactly where the pool's power is known."""
    hardware.add_pool(Pool("plain", "hpc", "amd", 1, "eu"))
    hardware.add_pool(Pool("known", "hpc", "amd", 1, "fi-kajaani", model="mi250x"))
    for _ in range(2):
        record = hardware.place(Workload("w", "amd"))
        assert isinstance(record.decision, Placement)
        mine = hardware.accounting(record.id, 10)
        assert mine == device_accounting(record.decision, 10) == device_accounting(hardware.decision(record.id).decision, 10)
        assert ("carbon_g_grounded" in mine) == (record.decision.pool == "known")

"""Concurrent placers on a shared fleet lose nothing and oversubscribe nothing, on each backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.backends import Backend
from reliability.harness import run_load, violations


def _check(run_procs: int, per_proc: int, backend: Backend, opa_home: Path, tmp_path: Path) -> None:
    run = run_load(backend, opa_home, tmp_path, procs=run_procs, per_proc=per_proc)
    assert run.errors == {}, [s for r in run.reports for s in r.error_samples]
    assert run.calls == run_procs * per_proc
    assert violations(backend, run.reports) == []
    # The run exercised what it claims to: pools filled up, bursts were blocked, capacity freed.
    outcomes = {o for (o,) in _outcomes(backend)}
    assert outcomes == {"placed", "rejected", "blocked"}
    assert sum(len(r.released) for r in run.reports) > 0
    rate = run.calls / run.seconds
    print(f"\n{backend.name}: {run.calls} placements in {run.seconds:.1f}s = {rate:.0f}/s, "
          f"conflicts retried {run.conflicts_retried}, reconnects {run.reconnects}")


def _outcomes(backend: Backend) -> list[tuple[str]]:
    with backend.raw() as db:
        return [tuple(r) for r in db.execute("SELECT DISTINCT outcome FROM decisions").fetchall()]


def test_eight_placers_keep_every_invariant(backend: Backend, opa_home: Path, tmp_path: Path) -> None:
    """8 processes x 60 placements: no pool oversubscribed, one decision and one audit entry per
    placement, the chain verifies, no decision lost."""
    _check(8, 60, backend, opa_home, tmp_path)


@pytest.mark.slow
def test_eight_placers_by_five_hundred(backend: Backend, opa_home: Path, tmp_path: Path) -> None:
    """The full 8 x 500 load of the reliability figures (benchmarks/reliability.py prints them)."""
    _check(8, 500, backend, opa_home, tmp_path)

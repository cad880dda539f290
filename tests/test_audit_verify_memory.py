"""``exa audit verify`` holds what its checks keep, not the whole state: it streams the log and the
decisions table in one consistent read. What it allocates at its peak grows with the decisions by
a few KiB each (a decision entry's bytes, its id, what its input digest covers), not by every
entry and record parsed (about 19 KiB a decision when it read the whole state first: 453 MiB at
20,000 decisions, ~2.2 GB at 100,000; see benchmarks/README.md, audit_verify.py).

Measured with tracemalloc (allocations, not time: the figure does not depend on the machine's
load) on two states made through the façade, one four times the other, with rows read 100 at a
time (2,000 in the product: a bound, however large the state)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from examlops_policy.opa import stop_server
from examlops_policy.store import _sql as sql
from reliability.backends import Backend, backend  # noqa: F401  (backend: the fixture)
from reliability.harness import open_hardware

pytestmark = pytest.mark.opa

SMALL, LARGE = 250, 1000
# The most verify may allocate at its peak for each decision more (the whole state parsed took ~19 KiB).
PER_DECISION_LIMIT = 6 * 1024


def _made(home: Path, decisions: int) -> Hardware:
    """A state of ``decisions`` placements, each released again (a decision and a release entry,
    its record, allocation and holdings), some bursts among them."""
    hw = Hardware(home)
    hw.add_pool(Pool("hpc-amd", "hpc", "amd", 8, "eu"))
    hw.add_pool(Pool("hpc-a100", "hpc", "nvidia", 4, "eu", model="a100", supports_fractions=True))
    hw.add_pool(Pool("cloud-us", "cloud", "nvidia", 8, "us-east-1", cost_per_hour=3.0))
    for i in range(decisions):
        if i % 5 == 4:
            decision = hw.burst(Workload(f"burst-{i}", "nvidia", engine="vllm", allow_burst=True))
        elif i % 2:
            decision = hw.place(Workload(f"slice-{i}", "nvidia", engine="vllm", fraction=0.25))
        else:
            decision = hw.place(Workload(f"train-{i}", "amd", engine="vllm", count=2))
        if decision.decision.outcome == "placed":
            hw.release(decision.id)
    return hw


def _peak(hw: Hardware) -> int:
    tracemalloc.start()
    try:
        report = hw.verify_audit()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok, report.problems
    return peak


def test_verify_allocates_a_few_kib_per_decision_not_the_whole_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rows stream a batch at a time: a batch smaller than both states, so that what it holds is
    # the same in both, as it is for any state larger than a batch.
    monkeypatch.setattr(sql, "STREAM_BATCH", 100)
    small, large = _made(tmp_path / "small", SMALL), _made(tmp_path / "large", LARGE)
    try:
        _peak(small)  # imports and caches warmed outside the figures
        peaks = {SMALL: _peak(small), LARGE: _peak(large)}
    finally:
        small.close()
        large.close()
        stop_server(tmp_path / "small")
        stop_server(tmp_path / "large")
    per_decision = (peaks[LARGE] - peaks[SMALL]) / (LARGE - SMALL)
    assert per_decision <= PER_DECISION_LIMIT, f"verify's peak grows by {per_decision / 1024:.1f} KiB a decision ({peaks})"


def test_verify_reads_in_batches_and_still_finds_an_edit_in_the_last_one(backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On SQLite (a cursor read a batch at a time) and PostgreSQL (a cursor on the server): the
    log and the decisions stream by in many batches of 3 rows, the state verifies, and an edit to
    the row read last is named."""
    monkeypatch.setattr(sql, "STREAM_BATCH", 3)
    hw = open_hardware(backend, tmp_path / "opa")
    try:
        hw.add_pool(Pool("hpc-amd", "hpc", "amd", 8, "eu"))
        placed = [hw.place(Workload(f"train-{i}", "amd", engine="vllm")).id for i in range(8)]
        for ident in placed[::2]:
            hw.release(ident)
        assert hw.verify_audit().ok
        last = max(placed)  # the decisions stream in id order
        with backend.raw() as db:
            db.execute(f"UPDATE decisions SET workload = 'edited' WHERE id = '{last}'")
        problems = hw.verify_audit().problems
    finally:
        hw.close()
        stop_server(tmp_path / "opa")
    assert [p.message for p in problems if last[:12] in p.message and "decisions.workload" in p.message], problems

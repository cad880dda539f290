"""Reconcile with recorded scheduler answers (squeue, sacct, sinfo as Slurm 22.05 prints them), on
SQLite and PostgreSQL with the real OPA: jobs that ended release their grants with end state and
times, running jobs record their start once, nodes not taking work leave their pools' capacity and
come back, grants on a node that went down are flagged; each change one audited transaction; a run
with no change writes nothing; a scheduler that cannot be read changes nothing of its own. The real
Slurm and Kubernetes are in tests/test_slurm_queue.py and tests/test_kubernetes_queue.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from examlops_policy.app import reconcile
from examlops_policy.errors import ExecutorError
from examlops_policy.executors.command import CommandResult
from examlops_policy.executors.slurm import node_state, queue_states, slurm_time
from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, Pool, Workload
from reliability.backends import Backend
from reliability.harness import violations
from tests.backend_support import backend, hw  # noqa: F401 - fixtures

NODES = Pool(
    "gpu-h100", "hpc", "nvidia", 6, "eu", partition="gpu", gres_type="h100", cost_per_hour=1.0, carbon_factor=10,
    nodes=(Node("n1", 2), Node("n2", 2), Node("n3", 2)),
)  # fmt: skip


class Slurm:
    """squeue, sacct and sinfo as a real Slurm prints them, from what a test sets."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}  # id -> "STATE|start|end|nodes"
        self.accounting: dict[str, str] | None = None  # None: accounting not configured
        self.nodes = {"n1": "idle", "n2": "mixed", "n3": "allocated"}
        self.down = False
        self.calls: list[str] = []

    def __call__(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
        self.calls.append(argv[0])
        if self.down:
            return CommandResult(tuple(argv), 1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
        if argv[0] == "squeue":
            return CommandResult(tuple(argv), 0, "".join(f"{i}|{v}\n" for i, v in self.jobs.items()), "")
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), 0, "".join(f"{n}|{s}|none\n" for n, s in self.nodes.items()), "")
        if argv[0] == "sacct":
            if self.accounting is None:
                return CommandResult(tuple(argv), 1, "", "sacct: error: Slurm accounting storage is disabled")
            return CommandResult(tuple(argv), 0, "".join(f"{i}|{v}\n" for i, v in self.accounting.items()), "")
        raise AssertionError(argv)


pytestmark = pytest.mark.hw_pools(NODES)


def submitted(hw: Hardware, name: str, job_id: str, count: int = 2, nodes: int = 1) -> str:
    record = hw.place(Workload(name, "nvidia", count=count, nodes=nodes))
    hw.set_job(record.id, job_id, scheduler="slurm")
    return record.id


def free(hw: Hardware) -> float:
    return {s.pool.name: s.free for s in hw.pools()}["gpu-h100"]


def audit_kinds(hw: Hardware) -> list[str]:
    return [json.loads(r.canonical)["kind"] for r in hw.store.audit_rows()]


def test_slurm_times_are_local_and_read_as_utc() -> None:
    import os
    import time

    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Rome"
    time.tzset()
    try:
        assert slurm_time("2026-12-01T14:00:00") == "2026-12-01T13:00:00.000000Z"
        assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    finally:
        if saved is None:
            os.environ.pop("TZ")
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.parametrize(
    ("printed", "state"),
    [("idle", "up"), ("mixed", "up"), ("allocated", "up"), ("completing", "up"), ("drained", "drained"), ("draining", "drained"),
     ("drain", "drained"), ("down", "down"), ("down*", "down"), ("idle*", "down"), ("fail", "down"), ("inval", "down")],
)  # fmt: skip
def test_slurm_node_states_are_named_as_this_layer_names_them(printed: str, state: str) -> None:
    assert node_state(printed) == state


def test_squeue_lines_read_as_job_states() -> None:
    slurm = Slurm()
    slurm.jobs = {"41": "PENDING|2026-12-01T15:00:00|2026-12-01T16:00:00|", "42": "RUNNING|2026-12-01T14:00:00|2026-12-01T15:00:00|vm",
                  "43": "CANCELLED by 0|2026-12-01T14:00:00|2026-12-01T14:05:00|vm"}  # fmt: skip
    jobs = queue_states(slurm)
    assert jobs["41"].started_at is None and not jobs["41"].ended  # a pending job's start is only an estimate
    assert jobs["42"].running and jobs["42"].started_at is not None and jobs["42"].ended_at is None
    assert jobs["43"].state == "CANCELLED" and jobs["43"].ended and jobs["43"].ended_at is not None


def test_a_job_that_ended_releases_its_grant_with_its_end_state_and_times(hw: Hardware, backend: Backend) -> None:
    slurm = Slurm()
    done = submitted(hw, "done", "101")
    running = submitted(hw, "running", "102")
    slurm.jobs = {"101": "COMPLETED|2026-12-01T14:00:00|2026-12-01T14:10:00|n1", "102": "RUNNING|2026-12-01T14:05:00|2026-12-01T16:05:00|n2"}
    report = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    kinds = sorted(c.kind for c in report.changes)
    assert kinds == ["ended", "started"] and report.unreadable == ()
    record = hw.decision(done)
    assert record.released_at is not None and record.job_state == "COMPLETED"
    assert record.job_started_at is not None and record.job_ended_at is not None and record.job_started_at < record.job_ended_at
    other = hw.decision(running)
    assert other.released_at is None and other.job_started_at is not None and other.job_ended_at is None
    assert free(hw) == 4  # 6 - the 2 still running
    assert audit_kinds(hw).count("job_ended") == 1 and audit_kinds(hw).count("job_started") == 1
    assert violations(backend) == []
    report = hw.verify_audit()  # the tables held to the chain: the release, the job's state and times
    assert report.ok, report.problems


def test_the_start_reconcile_records_is_the_actual_start_start_estimates_are_measured_against(hw: Hardware) -> None:
    """A placement on a pool with free capacity is estimated to start now; Slurm says its job
    started 90 s after that estimate: the decision lists, and the estimate-error figures count, 90 s."""
    from datetime import datetime, timedelta

    hw.apply([Pool("free-now", "hpc", "amd", 2, "eu", cost_per_hour=1.0, carbon_factor=10)])
    record = hw.place(Workload("soon", "amd"))
    estimate = record.decision.estimate  # type: ignore[union-attr]
    assert estimate is not None and estimate.source == "now" and estimate.at is not None
    hw.set_job(record.id, "301", scheduler="slurm")
    started = (estimate.at + timedelta(seconds=90)).astimezone()  # squeue prints the controller's local time
    slurm = Slurm()
    slurm.jobs = {"301": f"RUNNING|{started.strftime('%Y-%m-%dT%H:%M:%S')}|Unknown|n1"}
    report = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert [c.kind for c in report.changes] == ["started"]
    row = next(r for r in hw.decision_page(limit=5).decisions if r.id == record.id)
    # Slurm prints whole seconds: the start read back is within the second after estimate + 90 s.
    assert row.actual_start is not None and row.estimate_error_s in (89, 90)
    assert datetime.fromisoformat(row.actual_start.replace("Z", "+00:00")) == started.replace(microsecond=0)
    (now_source,) = [e for e in hw.estimate_errors() if e.source == "now"]
    assert now_source.decisions == 1 and now_source.median_s == row.estimate_error_s


def test_a_second_run_with_no_change_writes_nothing(hw: Hardware) -> None:
    slurm = Slurm()
    submitted(hw, "done", "101")
    slurm.jobs = {"101": "FAILED|2026-12-01T14:00:00|2026-12-01T14:10:00|n1"}
    slurm.nodes["n2"] = "drained"
    first = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert {c.kind for c in first.changes} == {"ended", "node"}
    before = len(hw.store.audit_rows())
    version = hw.store.rows().version
    again = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert again.changes == () and len(hw.store.audit_rows()) == before and hw.store.rows().version == version


def test_a_job_slurm_forgot_is_read_from_accounting_else_it_is_missing(hw: Hardware) -> None:
    slurm = Slurm()
    old = submitted(hw, "old", "201")
    lost = submitted(hw, "lost", "202")
    slurm.accounting = {"201": "TIMEOUT|2026-12-01T10:00:00|2026-12-01T12:00:00|0:0"}
    reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert hw.decision(old).job_state == "TIMEOUT"
    assert hw.decision(lost).job_state == "missing" and hw.decision(lost).released_at is not None


def test_a_drained_node_takes_its_devices_out_and_they_come_back(hw: Hardware) -> None:
    slurm = Slurm()
    assert free(hw) == 6
    slurm.nodes["n2"] = "drained"
    report = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert [(c.kind, c.node) for c in report.changes] == [("node", "n2")]
    assert free(hw) == 4
    placed = [hw.place(Workload(f"w{i}", "nvidia", count=2)) for i in range(3)]
    assert [p.decision.outcome for p in placed] == ["placed", "placed", "rejected"]  # n2's devices are not there
    holdings = {h.device for p in placed[:2] for h in getattr(p.decision, "holdings", ())}
    assert holdings.isdisjoint({2, 3})  # n2 holds devices 2 and 3
    slurm.nodes["n2"] = "idle"
    back = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert [(c.kind, c.node) for c in back.changes] == [("node_up", "n2")]
    assert free(hw) == 2


def test_grants_on_a_node_that_went_down_are_flagged_not_released(hw: Hardware) -> None:
    slurm = Slurm()
    ident = submitted(hw, "on-n1", "301")  # devices 0, 1: node n1
    slurm.jobs = {"301": "RUNNING|2026-12-01T14:00:00|2026-12-01T15:00:00|n1"}
    slurm.nodes["n1"] = "down*"
    reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    record = hw.decision(ident)
    assert record.node_down_at is not None and record.released_at is None
    report = hw.verify_audit()
    assert report.ok, report.problems
    slurm.nodes["n1"] = "idle"
    reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert hw.decision(ident).node_down_at is None
    report = hw.verify_audit()
    assert report.ok, report.problems


def test_an_unreachable_slurm_changes_nothing(hw: Hardware) -> None:
    slurm = Slurm()
    submitted(hw, "done", "101")
    slurm.down = True
    before = len(hw.store.audit_rows())
    report = reconcile.reconcile(hw.cycle, slurm=True, runner=slurm)
    assert report.changes == () and report.unreadable and "Unable to contact" in report.unreadable[0][1]
    assert len(hw.store.audit_rows()) == before
    assert reconcile.executor_error(report) is not None


def test_a_reconciled_job_end_admits_the_queue(hw: Hardware) -> None:
    slurm = Slurm()
    ident = submitted(hw, "all", "401", count=2, nodes=3)  # two devices on each of the three nodes
    waiting = hw.place(Workload("next", "nvidia", count=2), queue=True)
    assert waiting.decision.outcome == "queued"
    slurm.jobs = {"401": "COMPLETED|2026-12-01T14:00:00|2026-12-01T14:10:00|n1"}
    from unittest import mock

    with mock.patch("examlops_policy.app.reconcile.run_command", slurm):
        report, admitted = hw.reconcile(slurm=True)
    assert [c.kind for c in report.changes] == ["ended"] and hw.decision(ident).released_at is not None
    assert admitted is not None and [a.queued_id for a in admitted.admitted] == [waiting.id]


def test_unreachable_is_raised_as_an_executor_error_by_the_cli_exit_code(tmp_path: Path) -> None:
    from examlops_policy.cli import exits

    assert exits.code_for(ExecutorError("x")) == exits.EXECUTOR

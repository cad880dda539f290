"""The queue against the real Slurm (scripts/slurm-up): fill a partition, queue a second job, let the
first end, and see ``serve`` admit and submit the second within one interval, its job run; drain a
node and see its pool's capacity drop at the next reconcile, and come back when it is resumed.
Skipped when no Slurm answers, unless ``EXA_REQUIRE_SERVICES`` is set."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from examlops_policy.executors.command import run_command
from examlops_policy.executors.slurm import job
from examlops_policy.hardware import Hardware
from tests.conftest import EXA, exa_json, shared_opa_env
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture

pytestmark = pytest.mark.slurm


def register(home: Path, names: set[str]) -> None:
    """The pools of ``names`` as Slurm discovery finds them (only those: the overlapping partitions
    would offer the same devices twice)."""
    hw = Hardware(home)
    try:
        found = hw.discover("slurm", region="eu", apply=False)
        pools = [c.pool for c in found.changes if c.pool.name in names]
        assert {p.name for p in pools} == names, [c.pool.name for c in found.changes]
        hw.apply(pools)
    finally:
        hw.close()


def test_a_job_ends_and_serve_admits_and_submits_the_queued_one_within_an_interval(
    slurm: dict[str, str], exa_home: Path, tmp_path: Path  # noqa: F811
) -> None:
    register(exa_home, {"gpu-mi300x"})
    first_script = tmp_path / "first.sh"
    first_script.write_text("#!/bin/sh\nsleep 6\n")
    second_script = tmp_path / "second.sh"
    second_script.write_text("#!/bin/sh\necho second ran\n")
    for s in (first_script, second_script):
        s.chmod(0o755)
    first = exa_json(exa_home, "hardware", "place", "fill", "--accelerator", "amd", "--count", "4", "--target", "hpc", env=slurm)
    assert first["outcome"] == "placed" and first["pool"] == "gpu-mi300x"
    job_id = exa_json(exa_home, "hardware", "submit", first["id"], "--script", str(first_script), env=slurm)["job_id"]
    waiting = exa_json(exa_home, "hardware", "place", "next", "--accelerator", "amd", "--count", "2", "--target", "hpc",
                       "--queue", "--submit", "slurm", "--script", str(second_script), env=slurm)  # fmt: skip
    assert waiting["outcome"] == "queued"
    interval = 2.0
    proc = subprocess.Popen([str(EXA), "hardware", "serve", "--interval", "2s", "--slurm"],
                            env={**os.environ, **slurm, **shared_opa_env(), "EXA_HOME": str(exa_home)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not job(job_id).finished:
            assert time.monotonic() < deadline, "the first job did not end"
            time.sleep(0.2)
        ended_at = time.monotonic()
        submitted = None
        while time.monotonic() < ended_at + 60:
            entry = next(e for e in exa_json(exa_home, "hardware", "queue", "--all", env=slurm)["entries"] if e["id"] == waiting["id"])
            if entry["state"] == "admitted":
                placed = exa_json(exa_home, "hardware", "explain", entry["admitted_by"], env=slurm)
                if placed["job_id"]:
                    submitted = time.monotonic()
                    break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert submitted is not None, out
    assert submitted - ended_at < interval + 8, out  # one interval, and a step's own time
    done = job(placed["job_id"])
    deadline = time.monotonic() + 60
    while not done.finished and time.monotonic() < deadline:
        time.sleep(0.3)
        done = job(placed["job_id"])
    assert done.state == "COMPLETED", done.fields
    assert done.fields["Comment"] == f"examlops-decision={placed['id']}" and done.fields["JOB_GRES"] == "gpu:mi300x:2"
    ended = exa_json(exa_home, "hardware", "explain", first["id"], env=slurm)
    assert ended["released_at"] is not None and ended["job_state"] == "COMPLETED"
    assert ended["job_started_at"] is not None and ended["job_ended_at"] is not None and ended["job_started_at"] <= ended["job_ended_at"]
    assert placed["queued_id"] == waiting["id"]
    assert f"slurm job {job_id} of decision {first['id'][:12]} ended (COMPLETED)" in out and "admitted next" in out
    assert exa_json(exa_home, "audit", "verify", env=slurm)["ok"] is True


def test_a_drained_node_leaves_its_pool_at_the_next_reconcile_and_comes_back(slurm: dict[str, str], exa_home: Path) -> None:  # noqa: F811
    register(exa_home, {"nodes-h100"})

    def free() -> float:
        return {p["name"]: p["free"] for p in exa_json(exa_home, "hardware", "pools", env=slurm)}["nodes-h100"]  # type: ignore[no-any-return]

    def scontrol(*args: str) -> None:
        done = run_command(["scontrol", "update", *args], timeout=30, env={**os.environ, **slurm})
        assert done.ok, done.reason()

    # exa-n3 is drained at every start, and discovery recorded it so: nothing to change.
    first = exa_json(exa_home, "hardware", "reconcile", "--slurm", env=slurm)["changes"]
    assert [c for c in first if c["node"] is not None] == []
    assert free() == 4
    scontrol("nodename=exa-n2", "state=drain", "reason=exa-queue-test")
    try:
        drained = exa_json(exa_home, "hardware", "reconcile", "--slurm", env=slurm)["changes"]
        assert [(c["kind"], c["node"]) for c in drained] == [("node", "exa-n2")]
        assert free() == 2
        assert exa_json(exa_home, "hardware", "reconcile", "--slurm", env=slurm)["changes"] == []  # no change: nothing written
    finally:
        scontrol("nodename=exa-n2", "state=resume")
    # Slurm may show the node in passing (not responding) before it is idle again: wait for it.
    deadline = time.monotonic() + 60
    while run_command(["sinfo", "--noheader", "--Node", "--nodes=exa-n2", "--format=%T"], timeout=30,
                      env={**os.environ, **slurm}).stdout.split()[:1] != ["idle"]:  # fmt: skip
        assert time.monotonic() < deadline, "exa-n2 did not come back"
        time.sleep(0.5)
    back = exa_json(exa_home, "hardware", "reconcile", "--slurm", env=slurm)["changes"]
    assert [(c["kind"], c["node"]) for c in back] == [("node_up", "exa-n2")]
    assert free() == 4

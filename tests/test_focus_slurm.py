"""The FOCUS export reconciled to the real Slurm (scripts/slurm-up): jobs this layer placed and
submitted for two projects run and end; after ``exa hardware reconcile`` the export's used
device-hours per project (its sub-account) equal the GPU time Slurm reports for those jobs within
0.5 %.

The local Slurm has no slurmdbd: plain ``sacct`` has no accounting storage to read, and Slurm
refuses to track the ``gres/gpu`` TRES without slurmdbd. It keeps job completions in a text file
(``JobCompType=jobcomp/filetxt``, scripts/slurm-up), which ``sacct --completion`` reads: each
job's start and end. The GPUs each job held are its ``TresPerNode`` GRES as ``scontrol show job``
gives it (slurmctld keeps ended jobs for ``MinJobAge``), times its node count. Their product is
the job's GPU TRES time, the figure ``sacct``'s ``AllocTRES`` x ``Elapsed`` gives where slurmdbd
runs. Skipped when no Slurm answers, unless ``EXA_REQUIRE_SERVICES`` is set."""

from __future__ import annotations

import csv
import os
import re
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from examlops_policy.executors.command import run_command
from examlops_policy.executors.slurm import job, slurm_time
from tests.conftest import exa_json
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture
from tests.test_slurm_queue import register

pytestmark = pytest.mark.slurm


def gpu_seconds(job_id: str, env: dict[str, str]) -> float:
    """Slurm's GPU time of an ended job: GPUs per node x nodes (scontrol) x end - start (sacct --completion)."""
    done = run_command(["sacct", "--completion", "--noheader", "--parsable2", f"--jobs={job_id}", "--format=JobID,State,Start,End"],
                       timeout=30, env={**os.environ, **env})  # fmt: skip
    assert done.ok, done.reason()
    (line,) = [ln for ln in done.stdout.splitlines() if ln.split("|")[0] == job_id]
    _, state, start, end = line.split("|")
    assert state == "COMPLETED", line
    started, ended = slurm_time(start), slurm_time(end)
    assert started and ended
    fields = job(job_id).fields
    per_node = re.fullmatch(r"gres:gpu(?::[\w-]+)?:(\d+)", fields["TresPerNode"])
    assert per_node, fields["TresPerNode"]
    seconds = (datetime.fromisoformat(ended.replace("Z", "+00:00")) - datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()
    return int(per_node.group(1)) * int(fields["NumNodes"]) * seconds


def test_the_exports_device_hours_per_project_equal_slurms_gpu_time(slurm: dict[str, str], exa_home: Path, tmp_path: Path) -> None:  # noqa: F811
    register(exa_home, {"gpu-mi300x"})
    began = datetime.now(timezone.utc)
    jobs: dict[str, str] = {}  # job id -> project
    for project, count, seconds in (("llm-pretraining", 2, 5), ("green-research", 1, 3), ("llm-pretraining", 1, 4)):
        script = tmp_path / f"job-{len(jobs)}.sh"
        script.write_text(f"#!/bin/sh\nsleep {seconds}\n")
        script.chmod(0o755)
        placed = exa_json(exa_home, "hardware", "place", f"w{len(jobs)}", "--accelerator", "amd", "--count", str(count),
                          "--target", "hpc", "--project", project, env=slurm)  # fmt: skip
        assert placed["outcome"] == "placed", placed
        time.sleep(1.1)  # Slurm's times are whole seconds: its start is never before the placement
        jobs[exa_json(exa_home, "hardware", "submit", placed["id"], "--script", str(script), env=slurm)["job_id"]] = project
    deadline = time.monotonic() + 120
    while not all(job(j).finished for j in jobs):
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(0.5)
    exa_json(exa_home, "hardware", "reconcile", env=slurm)
    start = began.replace(minute=0, second=0, microsecond=0)
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    out = tmp_path / "bill.csv"
    exa_json(exa_home, "finops", "export", "--format", "focus", "--from", start.isoformat(), "--to", end.isoformat(), "--out", str(out), env=slurm)
    with out.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["x_JobId"] in jobs]
    exported: dict[str, float] = defaultdict(float)
    for r in rows:
        assert r["SubAccountId"] == jobs[r["x_JobId"]]
        if r["x_UsageKind"] == "used":
            exported[r["SubAccountId"]] += float(r["ConsumedQuantity"])
    reported: dict[str, float] = defaultdict(float)
    for job_id, project in jobs.items():
        reported[project] += gpu_seconds(job_id, slurm) / 3600.0
    assert set(exported) == set(reported) == {"llm-pretraining", "green-research"}
    for project, hours in reported.items():
        assert hours > 0 and exported[project] == pytest.approx(hours, rel=0.005), (project, exported, reported)

"""The FOCUS export reconciled to the real Kubernetes control plane (scripts/k8s-up, kwok nodes):
Jobs this layer placed and submitted for two projects run and complete; after ``exa hardware
reconcile --kubernetes`` the export's used device-hours per project (its sub-account) equal, within
0.5 %, the sum over that project's Jobs of the GPUs each held (its pods' ``nvidia.com/gpu``
limits) x (``status.completionTime`` - ``status.startTime``), all read here from the API server
with a plain client.

Rounding: Kubernetes times have a resolution of one second (RFC 3339 without fractions), and kwok
runs a Job's pod for 3 s, so a Job lasts a few whole seconds by its times; one second is far more
than 0.5 % of that. The comparison is exact nevertheless because both sides read the same two
truncated times: reconcile records the Job's ``startTime`` and ``completionTime`` as the API
server gives them, and the export bills the part of the holding between them. The holding starts at
the placement (milliseconds), and a truncated ``startTime`` may read up to 1 s before it when the
Job started in the second of its placement; the export clips the run to the holding, which would
then bill up to 1 s less than the API's difference. So each Job is submitted (``exa hardware
submit``) once the clock has passed the whole second after its placement: its creation, hence its
start, is in a later second, and its truncated ``startTime`` is never before the placement. The
holding ends at the release reconcile writes, after ``completionTime``. The only difference left is
the export's decimal rounding (``ConsumedQuantity`` to 10 places of an hour) and float arithmetic:
under 1e-6 relative here, far inside 0.5 %.

The nodes and the EXA_HOME in which their pools are registered are tests/test_kubernetes_cli.py's
fixtures (region ``europe-north2``, which ``--optimize carbon`` prefers). Skipped when no cluster
answers, unless ``EXA_REQUIRE_SERVICES`` is set (tests/test_kubernetes_cluster.py's conventions)."""

from __future__ import annotations

import csv
import math
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.test_kubernetes_cli import H100, IMAGE, RUN, home, jobs, nodes, ok_json  # noqa: F401 - fixtures
from tests.kubernetes_support import admin, cluster  # noqa: F401 - fixtures

pytestmark = pytest.mark.kubernetes

# (project, GPUs) of each Job: two projects, different GPU counts, one project with two Jobs.
JOBS = (("llm-pretraining", 2), ("green-research", 1), ("llm-pretraining", 3))


def read_job(admin: Any, job_id: str) -> Any:  # noqa: F811 - fixture
    """The Job ``namespace/name`` as the API server holds it now."""
    from lightkube.resources.batch_v1 import Job

    namespace, _, name = job_id.partition("/")
    return admin.get(Job, name, namespace=namespace)


def completed(admin: Any, job_id: str) -> bool:  # noqa: F811 - fixture
    status = read_job(admin, job_id).status
    if status is not None and (status.failed or 0) > 0:
        pytest.fail(f"Job {job_id} failed: {status}")
    return status is not None and status.completionTime is not None


def gpu_seconds(admin: Any, job_id: str) -> tuple[int, float]:  # noqa: F811 - fixture
    """The GPUs a completed Job held (its pods' ``nvidia.com/gpu`` limits x parallelism) and
    their product with ``completionTime - startTime``, all as the API server reports them."""
    job = read_job(admin, job_id)
    status = job.status
    assert status.startTime is not None and status.completionTime is not None, (job_id, status)
    per_pod = sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in job.spec.template.spec.containers if c.resources)
    gpus = per_pod * (job.spec.parallelism or 1)
    return gpus, gpus * float((status.completionTime - status.startTime).total_seconds())


def test_the_exports_device_hours_per_project_equal_the_jobs_gpu_time(admin: Any, home: Path, jobs: list[str], tmp_path: Path) -> None:  # noqa: F811
    began = datetime.now(timezone.utc)
    submitted: dict[str, tuple[str, int]] = {}  # job id -> (project, GPUs)
    for n, (project, gpus) in enumerate(JOBS):
        placed = ok_json(home, "hardware", "place", f"bill-{RUN}-{n}", "--accelerator", "nvidia", "--count", str(gpus),
                         "--target", "cloud", "--optimize", "carbon", "--project", project)  # fmt: skip
        assert (placed["outcome"], placed["pool"]) == ("placed", H100), placed
        held_from = datetime.fromisoformat(placed["created_at"].replace("Z", "+00:00")).timestamp()
        deadline = time.monotonic() + 10
        while time.time() < math.floor(held_from) + 1:  # the next whole second (see the docstring)
            assert time.monotonic() < deadline, "the clock did not pass the placement's second"
            time.sleep(0.05)
        sub = ok_json(home, "hardware", "submit", placed["id"], "--kubernetes", "--image", IMAGE)
        jobs.append(sub["job_id"])
        submitted[sub["job_id"]] = (project, gpus)
    deadline = time.monotonic() + 120
    while not all(completed(admin, j) for j in submitted):
        assert time.monotonic() < deadline, "the Jobs did not complete"
        time.sleep(0.25)
    ended = [c for c in ok_json(home, "hardware", "reconcile", "--kubernetes")["changes"] if c["kind"] == "ended"]
    assert sorted((c["job_id"], c["state"]) for c in ended) == sorted((j, "complete") for j in submitted), ended

    start = began.replace(minute=0, second=0, microsecond=0)
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    out = tmp_path / "bill.csv"
    ok_json(home, "finops", "export", "--format", "focus", "--from", start.isoformat(), "--to", end.isoformat(), "--out", str(out))
    with out.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["x_JobId"] in submitted]
    assert {r["x_JobId"] for r in rows} == set(submitted)
    exported: dict[str, float] = defaultdict(float)
    for r in rows:
        assert (r["SubAccountId"], r["x_Scheduler"]) == (submitted[r["x_JobId"]][0], "kubernetes"), r
        if r["x_UsageKind"] == "used":
            exported[r["SubAccountId"]] += float(r["ConsumedQuantity"])
    reported: dict[str, float] = defaultdict(float)
    for job_id, (project, asked) in submitted.items():
        gpus, seconds = gpu_seconds(admin, job_id)
        assert gpus == asked, (job_id, gpus, asked)
        reported[project] += seconds / 3600.0
    assert set(exported) == set(reported) == {"llm-pretraining", "green-research"}
    for project, hours in reported.items():
        assert hours > 0 and exported[project] == pytest.approx(hours, rel=0.005), (project, exported, reported)

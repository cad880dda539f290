"""Against a real Slurm (scripts/slurm-up): discover the pools, place, submit, wait, check the GRES.

Skipped only when no Slurm answers AND ``EXA_REQUIRE_SERVICES`` is unset; with
``EXA_REQUIRE_SERVICES=1`` a missing Slurm fails. The Slurm of scripts/slurm-up has this host as a
node with ``gpu:h100:4,gpu:mi300x:4`` (fake device nodes), features ``fp8,hbm3``, partitions gpu and
debug (the tests here use those), and three more nodes in partitions nodes and short
(tests/test_slurm_nodes.py).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.errors import ExaError
from examlops_policy.executors.command import run_command
from examlops_policy.executors.slurm import SlurmJob, job
from tests.conftest import ROOT, run_exa

pytestmark = pytest.mark.slurm

ENV_FILE = ROOT / ".exa-services" / "slurm" / "env"
HOST = socket.gethostname().split(".")[0]  # scripts/slurm-up names this host's node `hostname -s`


def slurm_environment() -> dict[str, str]:
    """``SLURM_CONF`` from scripts/slurm-up's env file, when there is one."""
    env: dict[str, str] = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.removeprefix("export ").partition("=")
            if sep and key.strip():
                env[key.strip()] = value.strip()
    return env


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    env = slurm_environment()
    try:
        ping = run_command(["scontrol", "ping"], timeout=15, env={**os.environ, **env})
        first = (ping.stdout.strip().splitlines() or [ping.reason()])[0]  # "Slurmctld(primary) at vm is DOWN"
        reason = None if ping.ok and " is UP" in ping.stdout else first
    except ExaError as exc:
        reason = str(exc)
    if reason is not None:
        message = f"no Slurm answers ({reason}); start one with scripts/slurm-up"
        if os.environ.get("EXA_REQUIRE_SERVICES"):
            pytest.fail(message)
        pytest.skip(message)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # for the library calls in this module (job state)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def wait_for(job_id: str, timeout_s: float = 90.0) -> SlurmJob:
    deadline = time.monotonic() + timeout_s
    while True:
        found = job(job_id)
        if found.finished or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def job_script(tmp_path: Path) -> tuple[Path, Path]:
    report = tmp_path / "job-env.txt"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'{{ echo "SLURM_GPUS_ON_NODE=$SLURM_GPUS_ON_NODE"; echo "SLURM_JOB_GPUS=$SLURM_JOB_GPUS"; '
        f'echo "ROCR_VISIBLE_DEVICES=$ROCR_VISIBLE_DEVICES"; echo "SLURM_JOB_PARTITION=$SLURM_JOB_PARTITION"; }} > "{report}"\n'
    )
    script.chmod(0o755)
    return script, report


def test_discover_place_submit_and_the_job_gets_its_gres(slurm: dict[str, str], tmp_path: Path, exa_home: Path) -> None:
    found = json.loads(run_exa(exa_home, "hardware", "discover", "slurm", "--region", "eu", "--apply", "--json", env=slurm, check=True).stdout)
    pools = {p["name"]: p for p in found["pools"]}
    assert {"gpu-h100", "gpu-mi300x"} <= set(pools)
    assert (pools["gpu-mi300x"]["accelerator"], pools["gpu-mi300x"]["model"], pools["gpu-mi300x"]["count"]) == ("amd", "mi300x", 4)
    assert (pools["gpu-h100"]["accelerator"], pools["gpu-h100"]["gres_type"], pools["gpu-h100"]["partition"]) == ("nvidia", "h100", "gpu")
    assert set(pools["gpu-mi300x"]["capabilities"]) >= {"fp8", "hbm3"}
    again = json.loads(run_exa(exa_home, "hardware", "discover", "slurm", "--apply", "--json", env=slurm, check=True).stdout)
    assert {p["action"] for p in again["pools"]} == {"unchanged"}

    placed = json.loads(run_exa(exa_home, "hardware", "place", "it-train", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc",
                                "--count", "2", "--capabilities", "fp8,hbm3", "--json", env=slurm, check=True).stdout)  # fmt: skip
    assert placed["pool"] in pools and pools[placed["pool"]]["gres_type"] == "mi300x"
    partition = pools[placed["pool"]]["partition"]

    script, report = job_script(tmp_path)
    dry = run_exa(exa_home, "hardware", "submit", placed["id"], "--script", str(script), "--dry-run", env=slurm, check=True)
    # The discovered pool names its node: the grant names it too, and Slurm is asked for exactly it.
    assert [a["node"] for a in placed["allocations"]] == [HOST]
    assert dry.stdout == (
        f"sbatch --parsable --partition={partition} --job-name=it-train --nodes=1 --nodelist={HOST} --ntasks-per-node=1 "
        f"--gres=gpu:mi300x:2 '--constraint=fp8&hbm3' --comment=examlops-decision={placed['id']} {script}\n"
    )

    submitted = json.loads(run_exa(exa_home, "hardware", "submit", placed["id"], "--script", str(script), "--json", env=slurm, check=True).stdout)
    job_id = submitted["job_id"]
    done = wait_for(job_id)
    assert done.state == "COMPLETED", done.fields
    assert done.partition == partition and done.fields["NodeList"] == HOST
    assert done.fields["JOB_GRES"] == "gpu:mi300x:2"
    assert done.fields["TresPerNode"] == "gres:gpu:mi300x:2"
    assert done.fields["Features"] == "fp8&hbm3"
    assert done.fields["JobName"] == "it-train"
    assert done.fields["Comment"] == f"examlops-decision={placed['id']}"

    seen = dict(line.split("=", 1) for line in report.read_text().splitlines())
    assert seen["SLURM_GPUS_ON_NODE"] == "2"
    assert seen["SLURM_JOB_PARTITION"] == partition
    gpus = [g for g in seen["SLURM_JOB_GPUS"].split(",") if g]
    assert len(gpus) == 2 and len(set(gpus)) == 2

    decision = json.loads(run_exa(exa_home, "hardware", "explain", placed["id"], "--json", env=slurm, check=True).stdout)
    assert decision["job_id"] == job_id
    assert run_exa(exa_home, "audit", "verify", env=slurm).returncode == 0


def test_free_capacity_follows_slurm_allocations(slurm: dict[str, str], tmp_path: Path) -> None:
    sleeper = tmp_path / "sleep.sh"
    sleeper.write_text("#!/bin/sh\nsleep 30\n")
    result = run_command(["sbatch", "--parsable", "--partition=gpu", "--gres=gpu:h100:3", "--job-name=it-hold", str(sleeper)],
                         timeout=30, env={**os.environ, **slurm})  # fmt: skip
    assert result.ok, result.reason()
    job_id = result.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 30
        while job(job_id).state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.3)
        home = tmp_path / "home"
        found = json.loads(run_exa(home, "hardware", "discover", "slurm", "--region", "eu", "--json", env=slurm, check=True).stdout)
        free = {p["name"]: p["free"] for p in found["pools"]}
        assert free["gpu-h100"] == 1.0 and free["gpu-mi300x"] == 4.0
    finally:
        run_command(["scancel", job_id], timeout=30, env={**os.environ, **slurm})


def test_slurm_refusing_a_request_is_exit_9(slurm: dict[str, str], tmp_path: Path, exa_home: Path) -> None:
    # A pool that claims more devices than the node has: the placement layer allows it, Slurm does not.
    run_exa(exa_home, "hardware", "add-pool", "big-h100", "--target", "hpc", "--accelerator", "nvidia", "--count", "16",
            "--region", "eu", "--model", "h100", "--partition", "gpu", "--gres-type", "h100", env=slurm, check=True)  # fmt: skip
    placed = json.loads(run_exa(exa_home, "hardware", "place", "too-big", "--accelerator", "nvidia", "--count", "8",
                                "--target", "hpc", "--json", env=slurm, check=True).stdout)  # fmt: skip
    script, _ = job_script(tmp_path)
    result = run_exa(exa_home, "hardware", "submit", placed["id"], "--script", str(script), env=slurm)
    assert result.returncode == 9, result.stderr
    assert result.stderr.startswith("ExecutorError: sbatch refused the job: sbatch: error:")
    decision = json.loads(run_exa(exa_home, "hardware", "explain", placed["id"], "--json", env=slurm, check=True).stdout)
    assert decision["job_id"] is None

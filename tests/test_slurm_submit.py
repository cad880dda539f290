"""``exa hardware submit``: the exact sbatch command for a placed decision, and what it records.

Decisions are made by the real OPA. The CLI tests put a fake ``sbatch`` first on PATH that records
its argument vector and answers like ``sbatch --parsable``; the real Slurm is exercised by
tests/test_slurm_integration.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from examlops_policy.cli import exits
from examlops_policy.errors import ExecutorError, SpecError
from examlops_policy.executors.command import DEFAULT_TIMEOUT_S, CommandResult
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.executors.slurm import job, safe_name, slurm_request, submit
from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload
from examlops_policy.views import DecisionRecord

from tests.conftest import run_exa

GRES = load_gres_table()
FIXTURES = Path(__file__).parent / "fixtures" / "slurm"

MI300X = Pool("gpu-mi300x", "hpc", "amd", 4, "eu", capabilities=("fp8", "hbm3"), model="mi300x", partition="gpu", gres_type="mi300x")
H100_MIG = Pool("gpu-h100", "hpc", "nvidia", 4, "eu", supports_fractions=True, model="h100", partition="gpu", gres_type="h100")
CPUS = Pool("cpu-cpu", "hpc", "cpu", 64, "eu", partition="cpu")
CLOUD = Pool("cloud-h100", "cloud", "nvidia", 8, "us", model="h100")


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\necho hello\n")
    return path


def place(hw: Hardware, pools: Sequence[Pool], workload: Workload) -> tuple[DecisionRecord, Pool]:
    hw.apply(list(pools))
    record = hw.place(workload)
    pool = {p.name: p for p in pools}[getattr(record.decision, "pool", "")]
    return record, pool


def test_whole_devices_with_partition_gres_constraint_and_job_name(hardware: Hardware, script: Path) -> None:
    record, pool = place(hardware, [MI300X], Workload("train-llm", "amd", capabilities=("fp8", "hbm3"), engine="vllm", count=2, target="hpc"))
    assert slurm_request(record, pool, script, GRES).argv() == [
        "sbatch", "--parsable", "--partition=gpu", "--job-name=train-llm", "--gres=gpu:mi300x:2",
        "--constraint=fp8&hbm3", f"--comment=examlops-decision={record.id}", str(script.resolve()),
    ]  # fmt: skip


def test_capabilities_the_model_guarantees_are_not_slurm_constraints(hardware: Hardware, script: Path) -> None:
    # fp8 comes from models.yaml (h100), not from a node feature: a --constraint=fp8 would be refused.
    record, pool = place(hardware, [H100_MIG], Workload("infer", "nvidia", capabilities=("fp8",), target="hpc"))
    argv = slurm_request(record, pool, script, GRES).argv()
    assert "--gres=gpu:h100:1" in argv
    assert not any(a.startswith("--constraint") for a in argv)


def test_honored_mig_fraction_asks_for_the_slice_gres_type(hardware: Hardware, script: Path) -> None:
    record, pool = place(hardware, [H100_MIG], Workload("small", "nvidia", fraction=0.1, target="hpc"))
    assert record.decision.grant.profile == "1g.10gb"  # type: ignore[union-attr]
    assert "--gres=gpu:1g.10gb:1" in slurm_request(record, pool, script, GRES).argv()


def test_fraction_not_honored_asks_for_a_whole_device(hardware: Hardware, script: Path) -> None:
    record, pool = place(hardware, [MI300X], Workload("small", "amd", fraction=0.5, target="hpc"))
    assert record.decision.grant.honored is False  # type: ignore[union-attr]
    assert "--gres=gpu:mi300x:1" in slurm_request(record, pool, script, GRES).argv()


def test_cpu_pool_asks_for_cpus_not_gres(hardware: Hardware, script: Path) -> None:
    record, pool = place(hardware, [CPUS], Workload("prep", "cpu", count=4, target="hpc"))
    argv = slurm_request(record, pool, script, GRES).argv()
    assert "--ntasks=1" in argv and "--cpus-per-task=4" in argv
    assert not any(a.startswith("--gres") for a in argv)


def test_what_cannot_be_submitted(hardware: Hardware, script: Path, tmp_path: Path) -> None:
    record, pool = place(hardware, [MI300X], Workload("train", "amd", target="hpc"))
    with pytest.raises(SpecError, match="no such job script"):
        slurm_request(record, pool, tmp_path / "missing.sh", GRES)
    with pytest.raises(SpecError, match="partition may hold only letters, digits"):
        slurm_request(record, Pool(**{**pool.__dict__, "partition": "gpu;reboot"}), script, GRES)
    with pytest.raises(SpecError, match="GRES type may hold only letters, digits"):
        slurm_request(record, Pool(**{**pool.__dict__, "gres_type": "mi300x:8"}), script, GRES)
    with pytest.raises(SpecError, match="is not the pool of decision"):
        slurm_request(record, H100_MIG, script, GRES)

    hardware.set_job(record.id, "17", scheduler="slurm")
    with pytest.raises(SpecError, match="already submitted as job 17"):
        slurm_request(hardware.decision(record.id), pool, script, GRES)

    other, _ = place(hardware, [MI300X], Workload("train-2", "amd", target="hpc"))
    released = hardware.release(other.id).record
    with pytest.raises(SpecError, match="was released"):
        slurm_request(released, pool, script, GRES)

    rejected = hardware.place(Workload("nope", "amd", engine="sglang", target="hpc"))
    with pytest.raises(SpecError, match="placed nothing"):
        slurm_request(rejected, pool, script, GRES)

    cloud, cloud_pool = place(hardware, [CLOUD], Workload("burst", "nvidia", target="cloud", allow_burst=True))
    with pytest.raises(SpecError, match="not served by a Slurm partition"):
        slurm_request(cloud, cloud_pool, script, GRES)


@pytest.mark.parametrize("bad", ["", "abc\n", "a b", "a,b", "a:b", "a&b", "a|b", "-x", "$(reboot)", "a\nb", "a=b", "x" * 64, "é"])
def test_names_unsafe_for_slurm_are_rejected(bad: str) -> None:
    with pytest.raises(SpecError, match="not safe for Slurm"):
        safe_name(bad, "job name")


class SlurmAnswer:
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.argv: list[str] | None = None

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        assert isinstance(argv, list) and timeout > 0
        self.argv = argv
        return self.result


@pytest.mark.parametrize(("stdout", "job_id"), [("4242\n", "4242"), ("4242;exa-local\n", "4242")])
def test_submit_reads_the_parsable_job_id(hardware: Hardware, script: Path, stdout: str, job_id: str) -> None:
    record, pool = place(hardware, [MI300X], Workload("train", "amd", target="hpc"))
    request = slurm_request(record, pool, script, GRES)
    runner = SlurmAnswer(CommandResult(("sbatch",), 0, stdout, ""))
    assert submit(request, runner) == job_id
    assert runner.argv == request.argv()


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (CommandResult(("sbatch",), 1, "", "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification\n"),
         "sbatch refused the job: sbatch: error: Batch job submission failed: Invalid generic resource"),
        (CommandResult(("sbatch",), 0, "Submitted batch job 12\n", ""), "without a job id"),
    ],
    ids=["refused", "not-parsable"],
)  # fmt: skip
def test_submit_failures_are_executor_errors(hardware: Hardware, script: Path, result: CommandResult, message: str) -> None:
    record, pool = place(hardware, [MI300X], Workload("train", "amd", target="hpc"))
    with pytest.raises(ExecutorError, match=message):
        submit(slurm_request(record, pool, script, GRES), SlurmAnswer(result))


def test_job_reads_state_and_allocated_gres_of_a_recorded_job() -> None:
    answer = SlurmAnswer(CommandResult(("scontrol",), 0, (FIXTURES / "job-running-22.05.txt").read_text(), ""))
    found = job("5", answer)
    assert answer.argv == ["scontrol", "-o", "-d", "show", "job", "5"]
    assert (found.state, found.partition, found.gres, found.finished) == ("RUNNING", "gpu", ("gpu:h100:3(IDX:0-2)",), False)
    assert found.fields["JOB_GRES"] == "gpu:h100:3"
    with pytest.raises(SpecError):
        job("5; reboot", answer)


# -- the CLI ----------------------------------------------------------------------------------


def fake_sbatch(tmp_path: Path, *, fail: bool = False) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "sbatch-argv"
    body = (
        'echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2; exit 1'
        if fail
        else f'for a in "$@"; do printf "%s\\n" "$a"; done > "{record}"; echo 4242'
    )
    script = bin_dir / "sbatch"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, record


def cli_place(home: Path) -> str:
    run_exa(home, "hardware", "add-pool", "gpu-mi300x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu",
            "--model", "mi300x", "--partition", "gpu", "--gres-type", "mi300x", "--capabilities", "fp8,hbm3", check=True)  # fmt: skip
    placed = run_exa(home, "hardware", "place", "train-llm", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc",
                     "--count", "2", "--capabilities", "fp8", "--json", check=True)  # fmt: skip
    return str(json.loads(placed.stdout)["id"])


def test_cli_dry_run_prints_the_exact_command_and_submits_nothing(tmp_path: Path, exa_home: Path) -> None:
    job_script = tmp_path / "my job; touch pwned.sh"
    job_script.write_text("#!/bin/sh\n")
    ident = cli_place(exa_home)
    env, argv_file = fake_sbatch(tmp_path)
    result = run_exa(exa_home, "hardware", "submit", ident[:12], "--script", str(job_script), "--dry-run", env=env, check=True)
    assert result.stdout == (
        f"sbatch --parsable --partition=gpu --job-name=train-llm --gres=gpu:mi300x:2 --constraint=fp8 "
        f"--comment=examlops-decision={ident} '{job_script}'\n"
    )
    assert not argv_file.exists()
    assert json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)[0]["job_id"] is None


def test_cli_submit_records_the_job_id_on_the_decision_and_in_the_audit_log(tmp_path: Path, exa_home: Path) -> None:
    job_script = tmp_path / "my job; touch pwned.sh"
    job_script.write_text("#!/bin/sh\n")
    ident = cli_place(exa_home)
    env, argv_file = fake_sbatch(tmp_path)
    result = run_exa(exa_home, "hardware", "submit", ident, "--script", str(job_script), env=env, check=True)
    assert result.stdout.strip() == f"✓ decision {ident[:12]} submitted to Slurm as job 4242 · partition gpu · gpu:mi300x:2"
    # One argument per list item: the odd file name reached sbatch whole, and no shell ran it.
    assert argv_file.read_text().splitlines()[-1] == str(job_script)
    assert not (tmp_path / "pwned.sh").exists() and not Path("pwned.sh").exists()

    decision = json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)[0]
    assert decision["id"] == ident and decision["job_id"] == "4242"
    db = sqlite3.connect(exa_home / "state.db")
    try:
        entries = [json.loads(e) for (e,) in db.execute("SELECT entry FROM audit_log WHERE kind = 'submit'")]
    finally:
        db.close()
    assert [(e["decision_id"], e["scheduler"], e["job_id"], e["source"]) for e in entries] == [(ident, "slurm", "4242", "exa-hardware")]
    assert run_exa(exa_home, "audit", "verify").returncode == 0

    again = run_exa(exa_home, "hardware", "submit", ident, "--script", str(job_script), env=env)
    assert again.returncode == 2 and "already submitted as job 4242" in again.stderr


def test_cli_submit_refused_by_slurm_exits_9_and_records_nothing(tmp_path: Path, exa_home: Path, script: Path) -> None:
    ident = cli_place(exa_home)
    env, _ = fake_sbatch(tmp_path, fail=True)
    result = run_exa(exa_home, "hardware", "submit", ident, "--script", str(script), env=env)
    assert result.returncode == 9
    assert result.stderr.strip() == (
        "ExecutorError: sbatch refused the job: sbatch: error: Batch job submission failed: Requested node configuration is not available"
    )
    assert json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)[0]["job_id"] is None


def test_cli_submit_unknown_decision_is_not_found(exa_home: Path, script: Path) -> None:
    result = run_exa(exa_home, "hardware", "submit", "0123456789ab", "--script", str(script), "--dry-run")
    assert result.returncode == 8


def test_place_queue_submit_that_fits_at_once_is_submitted_now(tmp_path: Path, exa_home: Path) -> None:
    """``place --queue --submit slurm`` that fits at once is placed and submitted then, as admission
    would have (it was placed and left unsubmitted, without a word); the job is on its record."""
    run_exa(exa_home, "hardware", "add-pool", "gpu-mi300x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu",
            "--partition", "gpu", "--gres-type", "mi300x", check=True)  # fmt: skip
    job_script = tmp_path / "job.sh"
    job_script.write_text("#!/bin/sh\necho queued text\n")
    env, argv_file = fake_sbatch(tmp_path)
    placed = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--count", "2", "--queue", "--submit", "slurm",
                     "--script", str(job_script), env=env, check=True)  # fmt: skip
    assert "✓ train → pool gpu-mi300x" in placed.stdout
    assert "it fitted at once (nothing queued): submitted to Slurm as job 4242" in placed.stdout
    assert argv_file.read_text().splitlines()[0] == "--parsable"
    decision = json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)[0]
    assert decision["job_id"] == "4242" and decision["outcome"] == "placed"
    assert run_exa(exa_home, "audit", "verify").returncode == 0


def test_place_queue_submit_refused_at_once_says_so_and_keeps_the_placement(tmp_path: Path, exa_home: Path, script: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "gpu-mi300x", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu",
            "--partition", "gpu", "--gres-type", "mi300x", check=True)  # fmt: skip
    env, _ = fake_sbatch(tmp_path, fail=True)
    result = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--queue", "--submit", "slurm", "--script", str(script), env=env)
    assert result.returncode == exits.EXECUTOR, result.stderr
    decision = json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout)[0]
    assert decision["outcome"] == "placed" and decision["job_id"] is None and decision["released_at"] is None
    assert f"was placed on pool gpu-mi300x (decision {decision['id']}), but its submission to slurm failed: sbatch refused the job" in result.stderr
    assert f"'exa hardware submit {decision['id'][:12]} --script FILE'" in result.stderr

"""The job_submit plugin inside the real slurmctld of scripts/slurm-up: ``sbatch`` is routed to the
partition the policy chooses, refused with the policy's reason, and a stale or corrupt table is
handled as ``exa_job_submit.conf`` says, slurmctld running on.

The pools are those ``exa hardware discover slurm`` finds (H100 in partitions gpu, debug, nodes,
short; MI300X in gpu and debug), the MI300X ones then moved to region ``us``; the accounts file
maps ``physics`` to inference-eu with residency eu-only (data in the EU) and every other account to
the ``default`` project. Each test writes the plugin's settings and table, and puts back those
slurm-up wrote. Skipped only when no Slurm answers (or the plugin is not installed) and
``EXA_REQUIRE_SERVICES`` is unset."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy import job_submit
from examlops_policy.executors.command import run_command
from tests.conftest import ROOT, open_hardware, run_exa
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture

pytestmark = pytest.mark.job_submit

ETC = ROOT / ".exa-services" / "slurm" / "etc"
CONF = ETC / job_submit.CONF_NAME
TABLE = ETC / job_submit.TABLE_NAME
ACCOUNTS = """\
accounts:
  physics: {project: inference-eu, residency: eu-only, data_region: eu}
default: {project: default}
"""


@pytest.fixture(scope="module")
def plugin(slurm: dict[str, str]) -> Iterator[dict[str, str]]:  # noqa: F811 - the fixture
    """The Slurm of scripts/slurm-up with this checkout's plugin installed; its settings put back after."""
    installed = ETC / "job_submit.lua"
    conf_text = (ETC / "slurm.conf").read_text(encoding="utf-8") if (ETC / "slurm.conf").is_file() else ""
    problem = None
    if "JobSubmitPlugins=lua" not in conf_text:
        problem = "the Slurm of scripts/slurm-up runs without the job_submit plugin"
    elif not installed.is_file() or installed.read_bytes() != job_submit.HOOK.read_bytes():
        problem = f"{installed} is not this checkout's plugin"
    if problem is not None:
        message = f"{problem}: run scripts/slurm-up"
        if os.environ.get("EXA_REQUIRE_SERVICES"):
            pytest.fail(message)
        pytest.skip(message)
    saved = CONF.read_bytes() if CONF.exists() else None
    saved_table = TABLE.read_bytes() if TABLE.exists() else None
    try:
        yield slurm
    finally:
        if saved is None:
            CONF.unlink(missing_ok=True)
        else:
            job_submit.write_atomic(CONF, saved.decode("utf-8"))
        if saved_table is None:
            TABLE.unlink(missing_ok=True)
        else:
            job_submit.write_atomic(TABLE, saved_table.decode("utf-8"))


@pytest.fixture(scope="module")
def fleet(plugin: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A home with the discovered pools (MI300X in region us) and the accounts file."""
    home = tmp_path_factory.mktemp("job-submit") / "exa-home"
    # Discovery runs before any table of these tests: the plugin passes its test jobs (slurm-up's conf).
    settings({"on_stale": "open", "on_unknown": "open"})
    run_exa(home, "hardware", "discover", "slurm", "--region", "eu", "--apply", env=plugin, check=True, timeout=120)
    hw = open_hardware(home)
    try:
        hw.apply([dataclasses.replace(s.pool, region="us") for s in hw.pools() if s.pool.gres_type == "mi300x"])
    finally:
        hw.close()
    accounts = home.parent / "slurm-accounts.yaml"
    accounts.write_text(ACCOUNTS, encoding="utf-8")
    yield home, accounts


def settings(values: dict[str, object]) -> None:
    text = "".join(f"{k} = {v}\n" for k, v in {"table": job_submit.TABLE_NAME, "max_age_seconds": 300, **values}.items())
    job_submit.write_atomic(CONF, f"# Written by tests/test_job_submit_slurm.py\n{text}")


def write_table(fleet: tuple[Path, Path], env: dict[str, str]) -> dict[str, object]:
    home, accounts = fleet
    done = run_exa(home, "slurm", "table", "--out", str(TABLE), "--accounts", str(accounts), "--json", env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def sbatch(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A held job (it never runs: the tests read where it was put, then cancel it)."""
    return subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true", *args],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)  # fmt: skip


def shown(env: dict[str, str], job_id: str) -> dict[str, str]:
    out = run_command(["scontrol", "-o", "show", "job", job_id], timeout=30, env={**os.environ, **env}).stdout
    fields: dict[str, str] = {}
    for word in out.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    # AdminComment may hold spaces: everything up to the next field of scontrol's one-line form.
    if "AdminComment=" in out:
        fields["AdminComment"] = out.split("AdminComment=", 1)[1].split(" Comment=")[0].split(" TresPerNode=")[0].strip()
    return fields


def cancel(env: dict[str, str], job_id: str) -> None:
    run_command(["scancel", job_id], timeout=30, env={**os.environ, **env})


def slurmctld_pid() -> int:
    return int((ROOT / ".exa-services" / "slurm" / "slurmctld.pid").read_text().strip())


def submitted(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def test_a_gres_job_is_routed_to_the_partition_the_policy_chooses(plugin: dict[str, str], fleet: tuple[Path, Path], tmp_path: Path) -> None:
    settings({"on_stale": "closed", "on_unknown": "closed"})
    table = write_table(fleet, plugin)
    # What the policy chooses for this job, asked the way `place --dry-run` asks, over the H100 pools.
    home, _ = fleet
    hw = open_hardware(home)
    try:
        h100 = [p for p in job_submit.slurm_pools(hw.pools()) if p.gres_type == "h100"]
        from examlops_policy.model import Placement, Workload

        decided = hw.what_if(Workload(job_submit.ROW_WORKLOAD, "nvidia", project="inference-eu", residency="eu-only", data_region="eu"), h100)
        assert isinstance(decided, Placement)
        chosen = next(p.partition for p in h100 if p.name == decided.pool)
    finally:
        hw.close()
    assert chosen != "gpu"  # not Slurm's default partition: the route is the plugin's doing
    job_id = submitted(sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path))
    try:
        fields = shown(plugin, job_id)
        assert fields["Partition"] == chosen
        assert fields["AdminComment"].startswith(f"exa: inference-eu/eu-only/eu|h100|1|1|generic| -> partition {chosen} (policy ")
        assert f"table {str(table['revision'])[:12]})" in fields["AdminComment"]
    finally:
        cancel(plugin, job_id)
    # A partition the policy admits is kept; a job with no GPU is left alone.
    kept = submitted(sbatch(plugin, "-A", "physics", "-p", "gpu", "--gres=gpu:h100:1", cwd=tmp_path))
    plain = submitted(sbatch(plugin, "-A", "physics", cwd=tmp_path))
    try:
        assert shown(plugin, kept)["Partition"] == "gpu" and "kept partition gpu" in shown(plugin, kept)["AdminComment"]
        assert shown(plugin, plain)["Partition"] == "gpu" and shown(plugin, plain).get("AdminComment", "") == ""
    finally:
        cancel(plugin, kept)
        cancel(plugin, plain)


def test_a_job_the_residency_rule_forbids_is_refused_with_the_reason(plugin: dict[str, str], fleet: tuple[Path, Path], tmp_path: Path) -> None:
    settings({"on_stale": "closed", "on_unknown": "closed"})
    write_table(fleet, plugin)
    refused = sbatch(plugin, "-A", "physics", "--gres=gpu:mi300x:1", cwd=tmp_path)
    assert refused.returncode != 0 and not refused.stdout.strip()
    assert "exa: refused by the placement policy" in refused.stderr
    assert "data-residency eu-only forbids egress to region 'us'" in refused.stderr and "residency_forbids" in refused.stderr
    # The same job for an account with no residency rule is routed (to an MI300X partition).
    anyone = submitted(sbatch(plugin, "-A", "chemistry", "--gres=gpu:mi300x:1", cwd=tmp_path))
    try:
        assert shown(plugin, anyone)["Partition"] in ("gpu", "debug")
    finally:
        cancel(plugin, anyone)
    # Nor can a pending job be changed into it (scontrol update goes through slurm_job_modify).
    held = submitted(sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path))
    try:
        changed = subprocess.run(["scontrol", "update", f"jobid={held}", "gres=gpu:mi300x:1"], env={**os.environ, **plugin},
                                 capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert changed.returncode != 0
        assert shown(plugin, held)["TresPerNode"] == "gres:gpu:h100:1"
    finally:
        cancel(plugin, held)
    # Another policy refusal: inference-eu's budget ($6/h) does not pay for three H100s.
    over = sbatch(plugin, "-A", "physics", "--gres=gpu:h100:3", cwd=tmp_path)
    assert over.returncode != 0 and "max_cost_per_hour $6.00/h (project inference-eu)" in over.stderr


def stale_table(fleet: tuple[Path, Path]) -> None:
    """The table as the service wrote it an hour ago (and has not confirmed since)."""
    home, accounts = fleet
    hw = open_hardware(home)
    try:
        job_submit.write(hw, TABLE, job_submit.load_accounts(accounts), now=time.time() - 3600)
    finally:
        hw.close()


def test_a_stale_table_fails_closed_when_configured_so(plugin: dict[str, str], fleet: tuple[Path, Path], tmp_path: Path) -> None:
    stale_table(fleet)
    settings({"on_stale": "closed", "on_unknown": "closed", "max_age_seconds": 600})
    refused = sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path)
    assert refused.returncode != 0
    assert "GPU jobs are refused while the placement policy's decision table cannot be used" in refused.stderr
    assert "is stale: written 36" in refused.stderr and "max_age_seconds = 600" in refused.stderr


def test_a_stale_table_fails_open_when_configured_so(plugin: dict[str, str], fleet: tuple[Path, Path], tmp_path: Path) -> None:
    stale_table(fleet)
    settings({"on_stale": "open", "on_unknown": "closed", "max_age_seconds": 600})
    job_id = submitted(sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path))
    try:
        fields = shown(plugin, job_id)
        assert fields["Partition"] == "gpu"  # Slurm's default: not routed, passed unchanged
        assert fields["AdminComment"].startswith("exa: passed unchanged (on_stale=open): the decision table at ")
        assert "is stale" in fields["AdminComment"]
    finally:
        cancel(plugin, job_id)
    # Written again now: fresh, routed again.
    write_table(fleet, plugin)
    again = submitted(sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path))
    try:
        assert shown(plugin, again)["AdminComment"].startswith("exa: inference-eu/eu-only/eu|h100|1|1|generic| -> partition ")
    finally:
        cancel(plugin, again)


@pytest.mark.parametrize("text", ["\x00\xff not a table", "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn {rows = os.exit(1)"])
def test_slurmctld_keeps_running_when_the_table_is_corrupt(plugin: dict[str, str], fleet: tuple[Path, Path], tmp_path: Path, text: str) -> None:
    settings({"on_stale": "closed", "on_unknown": "closed"})
    before = slurmctld_pid()
    job_submit.write_atomic(TABLE, text)
    refused = sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path)
    assert refused.returncode != 0 and "decision table cannot be used" in refused.stderr
    assert "does not load" in refused.stderr or "does not start with its header line" in refused.stderr
    # slurmctld is the same process, and answers; a job without GPUs is still taken.
    ping = run_command(["scontrol", "ping"], timeout=30, env={**os.environ, **plugin})
    assert ping.ok and " is UP" in ping.stdout and slurmctld_pid() == before
    plain = submitted(sbatch(plugin, "-A", "physics", cwd=tmp_path))
    cancel(plugin, plain)
    # A good table again: routed again.
    write_table(fleet, plugin)
    routed = submitted(sbatch(plugin, "-A", "physics", "--gres=gpu:h100:1", cwd=tmp_path))
    try:
        assert "-> partition " in shown(plugin, routed)["AdminComment"]
    finally:
        cancel(plugin, routed)

"""The decision table the Slurm job_submit plugin reads (``examlops_policy.job_submit``), decided
by the real OPA: every row is the policy's decision for its job shape, the file is written whole or
not at all and carries its revision, ``Keeper`` (``exa hardware serve --slurm-table``) decides again
only when the policy, the pools or the accounts file change, and bad input is refused with the file
and field named (``exa slurm table``: exit 2, nothing written)."""

from __future__ import annotations

import errno
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from examlops_policy import _private, job_submit
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.job_submit import Accounts, Keeper, Profile, load_accounts
from examlops_policy.model import Pool, Workload
from tests.conftest import run_exa

# Two H100 partitions (one in the EU at $3, one in the US at $1) and an MI300X one in the EU.
POOLS = (
    Pool("eu-h100", "hpc", "nvidia", 2, "eu", cost_per_hour=3.0, capabilities=("ib",), model="h100", partition="gpu-eu", gres_type="h100"),
    Pool("us-h100", "hpc", "nvidia", 2, "us", cost_per_hour=1.0, model="h100", partition="cheap", gres_type="h100"),
    Pool("eu-mi300x", "hpc", "amd", 1, "eu", cost_per_hour=1.5, model="mi300x", partition="amd-eu", gres_type="mi300x"),
    Pool("cloud-a100", "cloud", "nvidia", 8, "us"),  # no partition: no Slurm job is routed there
)
ACCOUNTS = """\
accounts:
  physics: {project: inference-eu, residency: eu-only, data_region: eu}
default: {project: default}
licenses:
  sglang: sglang
"""
EU = "inference-eu/eu-only/eu"
OPEN = "default/open/-"


@pytest.fixture()
def accounts_file(tmp_path: Path) -> Path:
    path = tmp_path / "accounts.yaml"
    path.write_text(ACCOUNTS, encoding="utf-8")
    return path


@pytest.fixture()
def fleet(hardware: Hardware) -> Hardware:
    for pool in POOLS:
        hardware.add_pool(pool)
    return hardware


def rows(table: job_submit.Table) -> dict[str, job_submit.Row]:
    return {r.key: r for r in table.rows}


def test_each_row_is_the_policys_decision_for_its_job_shape(fleet: Hardware, accounts_file: Path) -> None:
    table = job_submit.compute(fleet, load_accounts(accounts_file))
    found = rows(table)
    # Profiles x (h100: features {} and {ib}, 1-2 GPUs, 1 node; mi300x: {}, 1 GPU) x engines (generic, sglang).
    assert len(found) == 2 * (2 * 2 + 1) * 2
    # Residency keeps the EU account on the EU partition, and says why the cheaper one is not admitted.
    eu = found[f"{EU}|h100|1|1|generic|"]
    assert (eu.partition, eu.admits, eu.refuse) == ("gpu-eu", ("gpu-eu",), None)
    assert "region" in eu.no["cheap"] and "eu-only" in eu.no["cheap"]
    # Any other account: the cheapest partition; both admitted.
    anyone = found[f"{OPEN}|h100|1|1|generic|"]
    assert (anyone.partition, anyone.admits) == ("cheap", ("cheap", "gpu-eu"))
    # A feature only one pool has: only its partition.
    assert found[f"{OPEN}|h100|1|1|generic|ib"].admits == ("gpu-eu",)
    # Portability: sglang has no ROCm backend, so no MI300X row of it routes.
    sglang = found[f"{OPEN}|mi300x|1|1|sglang|"]
    assert sglang.partition is None and sglang.code is not None and "sglang" in str(sglang.refuse)
    # A refusal starts with the headline the dry-run decision gives for the same workload.
    decided = fleet.what_if(Workload(job_submit.ROW_WORKLOAD, "amd", engine="sglang"), [POOLS[2]])
    assert sglang.refuse is not None and sglang.refuse.startswith(f"{getattr(decided, 'reason')} [{getattr(decided, 'code')}]")
    assert table.policy_revision.startswith("sha256:") and re.fullmatch(r"[0-9a-f]{64}", table.revision)
    assert table.accounts == {"physics": EU} and table.default_profile == OPEN and table.licenses == {"sglang": "sglang"}


def test_a_refusal_names_each_partitions_reasons(fleet: Hardware, tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("accounts:\n  tight: {project: inference-eu, residency: eu-only, data_region: eu}\n", encoding="utf-8")
    found = rows(job_submit.compute(fleet, load_accounts(path)))
    assert set(found) == {f"{EU}|{t}" for t in ("h100|1|1|generic|", "h100|2|1|generic|", "h100|1|1|generic|ib", "h100|2|1|generic|ib", "mi300x|1|1|generic|")}
    # $6/h allows two EU H100s at $3: admitted. (The US pool is out by residency either way.)
    assert found[f"{EU}|h100|2|1|generic|"].partition == "gpu-eu"


def test_the_revision_follows_what_the_table_says(fleet: Hardware, accounts_file: Path) -> None:
    accounts = load_accounts(accounts_file)
    first, again = job_submit.compute(fleet, accounts), job_submit.compute(fleet, accounts)
    assert first.revision == again.revision and first.rows == again.rows
    # The US pool dearer than the EU one: another choice, another revision.
    fleet.apply([Pool("us-h100", "hpc", "nvidia", 2, "us", cost_per_hour=9.0, model="h100", partition="cheap", gres_type="h100")])
    moved = job_submit.compute(fleet, accounts)
    assert rows(moved)[f"{OPEN}|h100|1|1|generic|"].partition == "gpu-eu"
    assert moved.revision != first.revision and moved.inputs != first.inputs


def test_the_file_is_the_table_with_its_header(fleet: Hardware, accounts_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "table.lua"
    table = job_submit.write(fleet, out, load_accounts(accounts_file), now=1_700_000_000)
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"-- exa-job-submit-table format=1 revision={table.revision} written_at=1700000000"
    assert f'policy_revision = "{table.policy_revision}",' in text and 'written = "2023-11-14T22:13:20Z",' in text
    assert f'["{OPEN}|h100|1|1|generic|"] = {{["partition"] = "cheap", ["admitted"] = "cheap, gpu-eu"' in text
    assert oct(out.stat().st_mode & 0o777) == "0o644"  # slurmctld reads it as its own user


def test_a_failed_write_leaves_the_old_table_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "table.lua"
    out.write_text("the old table\n", encoding="utf-8")

    def full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_private.os, "replace", full)  # the one atomic write (_private.write_atomically)
    with pytest.raises(SpecError, match="No space left on device") as caught:
        job_submit.write_atomic(out, "the new table\n")
    assert caught.value.source == str(out)
    assert out.read_text(encoding="utf-8") == "the old table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.lua"]


class Counting:
    """The façade, its policy decisions counted."""

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw
        self.decisions = 0

    def pools(self) -> Any:
        return self.hw.pools()

    def what_if(self, *args: Any, **kwargs: Any) -> Any:
        self.decisions += 1
        return self.hw.what_if(*args, **kwargs)


def test_the_keeper_decides_again_only_when_the_policy_the_pools_or_the_accounts_change(
    fleet: Hardware, accounts_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "table.lua"
    keeper, counted = Keeper(out, accounts_file), Counting(fleet)
    first = keeper.step(counted, "rev-1")
    assert counted.decisions == 20 and len(first) == 1 and "decided 20 rows" in first[0]
    header = out.read_text(encoding="utf-8").splitlines()[0]
    inode = out.stat().st_ino
    # Nothing changed: no decision, the file written again (renamed over: a new file) with the same rows.
    assert keeper.step(counted, "rev-1") == [] and counted.decisions == 20
    assert out.stat().st_ino != inode and out.read_text(encoding="utf-8").splitlines()[0].split(" written_at=")[0] == header.split(" written_at=")[0]
    # Another policy revision, another pool, another accounts file: decided again, each time.
    keeper.step(counted, "rev-2")
    assert counted.decisions == 40
    fleet.apply([Pool("us-h100", "hpc", "nvidia", 2, "us", cost_per_hour=9.0, model="h100", partition="cheap", gres_type="h100")])
    keeper.step(counted, "rev-2")
    assert counted.decisions == 60 and 'cheap, gpu-eu"' in out.read_text(encoding="utf-8")
    accounts_file.write_text(ACCOUNTS.replace("  sglang: sglang\n", ""), encoding="utf-8")
    keeper.step(counted, "rev-2")
    assert counted.decisions == 70  # one engine less
    # An accounts file gone bad: raised (serve logs it), the last table left as it was.
    before = out.read_text(encoding="utf-8")
    accounts_file.write_text("accounts: [1, 2]\n", encoding="utf-8")
    with pytest.raises(SpecError, match="accounts"):
        keeper.step(counted, "rev-2")
    assert out.read_text(encoding="utf-8") == before


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("- a\n", None, "expected a mapping with accounts"),
        ("accounts: {x: {project: p}}\nplus: 1\n", None, "unknown key(s) plus"),
        ("accounts: {'bad name': {project: default}}\n", "accounts.bad name", "a Slurm account name"),
        ("accounts: {a: {project: default, residency: moon}}\n", "accounts.a.residency", "expected one of open, eu-only"),
        ("accounts: {a: {project: default, region: eu}}\n", "accounts.a", "unknown key(s) region"),
        ("accounts: {a: {}}\n", "accounts.a.project", "expected a project"),
        ("accounts: {a: {project: default}}\nlicenses: {x: cobol}\n", "licenses.x", "expected an engine"),
        ("accounts: {}\n", "accounts", "names no account and no default"),
    ],
)
def test_a_bad_accounts_file_is_refused_naming_the_field(tmp_path: Path, text: str, field: str | None, words: str) -> None:
    path = tmp_path / "accounts.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_accounts(path)
    assert caught.value.source == str(path) and caught.value.field == field and words in caught.value.detail


def test_no_accounts_file_judges_every_job_as_the_unassigned_projects() -> None:
    none = Accounts.none()
    assert none.profiles == [Profile()] and none.accounts == {} and Profile().key == "-/open/-"


def add_pools(home: Path) -> None:
    for pool in POOLS[:3]:
        run_exa(home, "hardware", "add-pool", pool.name, "--target", "hpc", "--accelerator", pool.accelerator, "--count", str(pool.count),
                "--region", pool.region, "--cost-per-hour", str(pool.cost_per_hour), "--model", str(pool.model), "--partition",
                str(pool.partition), "--gres-type", str(pool.gres_type), "--capabilities", ",".join(pool.capabilities), check=True)  # fmt: skip


def test_exa_slurm_table_writes_the_table_and_refuses_bad_input_writing_nothing(exa_home: Path, accounts_file: Path, tmp_path: Path) -> None:
    add_pools(exa_home)
    out = tmp_path / "t" / "exa_job_submit_table.lua"
    missing = run_exa(exa_home, "slurm", "table", "--out", str(out), "--accounts", str(accounts_file))
    assert missing.returncode == 2 and f"no folder {out.parent}" in missing.stderr and not out.exists()
    out.parent.mkdir()
    done = run_exa(exa_home, "slurm", "table", "--out", str(out), "--accounts", str(accounts_file), "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert (said["rows"], said["out"], said["accounts"]) == (20, str(out), {"physics": EU})
    assert out.read_text(encoding="utf-8").startswith(f"-- exa-job-submit-table format=1 revision={said['revision']} ")
    # An unknown project: bad input naming the accounts file and the accounts; the table stays as it was.
    before = out.read_text(encoding="utf-8")
    accounts_file.write_text("accounts:\n  physics: {project: nobody}\n  chem: {project: nobody}\n", encoding="utf-8")
    bad = run_exa(exa_home, "slurm", "table", "--out", str(out), "--accounts", str(accounts_file))
    assert bad.returncode == 2 and str(accounts_file) in bad.stderr and "unknown project 'nobody'" in bad.stderr and "accounts chem, physics" in bad.stderr
    assert out.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_exa_slurm_plugin_says_where_the_shipped_plugin_is(exa_home: Path) -> None:
    done = run_exa(exa_home, "slurm", "plugin", check=True)
    assert Path(done.stdout.strip()) == job_submit.HOOK and job_submit.HOOK.is_file()


def test_serve_refuses_slurm_options_it_cannot_use(exa_home: Path, accounts_file: Path, tmp_path: Path) -> None:
    alone = run_exa(exa_home, "hardware", "serve", "--once", "--slurm-accounts", str(accounts_file))
    assert alone.returncode == 2 and "add --slurm-table PATH" in alone.stderr
    nowhere = run_exa(exa_home, "hardware", "serve", "--once", "--slurm-table", str(tmp_path / "no" / "t.lua"))
    assert nowhere.returncode == 2 and "no folder" in nowhere.stderr
    accounts_file.write_text("accounts: 3\n", encoding="utf-8")
    bad = run_exa(exa_home, "hardware", "serve", "--once", "--slurm-table", str(tmp_path / "t.lua"), "--slurm-accounts", str(accounts_file))
    assert bad.returncode == 2 and "accounts" in bad.stderr and not (tmp_path / "t.lua").exists()


def test_serve_keeps_the_table_written(exa_home: Path, accounts_file: Path, tmp_path: Path) -> None:
    add_pools(exa_home)
    out = tmp_path / "table.lua"
    started = int(time.time())
    done = run_exa(exa_home, "hardware", "serve", "--once", "--slurm-table", str(out), "--slurm-accounts", str(accounts_file), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "slurm table: decided 20 rows" in done.stdout
    written_at = int(out.read_text(encoding="utf-8").splitlines()[0].rsplit("written_at=", 1)[1])
    assert written_at >= started
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_the_service_keeps_the_table_written_too(exa_home: Path, accounts_file: Path, tmp_path: Path) -> None:
    """``serve --listen`` keeps the table as ``serve`` does: one process answers HTTP and keeps the
    plugin's table current (it refused --slurm-table before)."""
    from tests import service_support

    add_pools(exa_home)
    out = tmp_path / "table.lua"
    started = int(time.time())
    service = service_support.start(exa_home, "--slurm-table", str(out), "--slurm-accounts", str(accounts_file))
    try:
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert service.call("GET", "/healthz").status == 200
    finally:
        code, log = service.stop()
    assert code == 0 and "slurm table: decided 20 rows" in log, log
    assert int(out.read_text(encoding="utf-8").splitlines()[0].rsplit("written_at=", 1)[1]) >= started
    once = run_exa(exa_home, "hardware", "serve", "--listen", "127.0.0.1:0", "--once")
    assert once.returncode == 2 and "--once runs one step and exits" in once.stderr

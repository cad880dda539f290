"""State written by the release before per-device capacity and compact decisions opens with this one.

The old release (git commit ``OLD``: one float of free devices per pool, full decision documents)
runs for real from this repository's history, in its own tree, with its own OPA: it registers the
specification's pools, places (a whole device, a MIG fraction, a fallback), rejects, blocks a burst
and releases one placement. Then this release opens that state: the migrations run, live grants
get their devices, the old documents stay readable, and the state works on.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy import Hardware, Placement, Rejection, Workload
from examlops_policy.hardware import ManagedPolicy
from examlops_policy.store._sql import migrations
from examlops_policy.store.sqlite import SQLiteStore
from tests.conftest import ROOT

OLD = "94886a3ef398bade9708bb1679c4b433faa1d028"  # the release before per-device capacity


def _old_tree(tmp_path: Path) -> Path:
    """The old release's package and policies, from git (skips in a shallow clone without it)."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD}^{{commit}}"], capture_output=True).returncode != 0:
        pytest.skip(f"commit {OLD[:12]} is not in this clone's history (a shallow clone?)")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD, "examlops_policy", "policies", "schemas"], capture_output=True, check=True)
    tree = tmp_path / "old"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _old_exa(tree: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from examlops_policy.cli.main import main; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_DB_URL", "EXA_POLICY_DIR"))}
    env.update(PYTHONPATH=str(tree), EXA_HOME=str(home), COLUMNS="200")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=tree, timeout=120)


@pytest.fixture(scope="module")
def old_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A state folder the old release wrote, and its decision ids by workload name."""
    base = tmp_path_factory.mktemp("migration")
    tree = _old_tree(base)
    home = base / "home"
    try:
        for args in (
            ("hardware", "add-pool", "hpc-nvidia", "--target", "hpc", "--accelerator", "nvidia", "--count", "8", "--region", "eu",
             "--cost-per-hour", "2.5", "--carbon-factor", "300", "--supports-fractions"),
            ("hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu"),
            ("hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia", "--count", "100", "--region", "us"),
            ("hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc"),
            ("hardware", "place", "infer", "--accelerator", "nvidia", "--engine", "vllm", "--fraction", "0.5"),
            ("hardware", "place", "tpu-job", "--accelerator", "tpu", "--engine", "generic", "--target", "hpc"),
            ("hardware", "place", "bad", "--accelerator", "amd", "--engine", "sglang"),
            ("hardware", "burst", "eu-data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst"),
            ("hardware", "place", "done", "--accelerator", "amd", "--engine", "vllm", "--target", "hpc"),
        ):  # fmt: skip
            result = _old_exa(tree, home, *args)
            assert result.returncode in (0, 3, 4), (args, result.stdout, result.stderr)
        import json

        listed = json.loads(_old_exa(tree, home, "hardware", "decisions", "--json", "--limit", "50").stdout)
        ids = {d["workload"]["name"]: d["id"] for d in listed}
        assert _old_exa(tree, home, "hardware", "release", ids["done"]).returncode == 0
        yield home, ids
    finally:
        _old_exa(tree, home, "opa", "stop")


@pytest.fixture()
def migrated(old_state: tuple[Path, dict[str, str]], tmp_path: Path, opa_home: Path) -> Iterator[tuple[Hardware, dict[str, str]]]:
    """This release on a copy of the old state (each test migrates afresh)."""
    import shutil

    home, ids = old_state
    copy = tmp_path / "home"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("opa"))
    hw = Hardware(copy, store=SQLiteStore(copy / "state.db"), policy=ManagedPolicy(opa_home))
    try:
        yield hw, ids
    finally:
        hw.close()


def test_the_old_state_migrates_to_every_version(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, _ = migrated
    hw.store.snapshot()  # opened: migrated
    import sqlite3

    with sqlite3.connect(hw.home / "state.db") as db:
        versions = [v for (v,) in db.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _ in migrations("sqlite")]


def test_old_decisions_stay_readable_as_they_were_made(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, ids = migrated
    train = hw.decision(ids["train"]).decision
    assert isinstance(train, Placement) and (train.pool, train.accelerator, train.fallback) == ("hpc-mi300", "amd", False)
    tpu = hw.decision(ids["tpu-job"]).decision
    assert isinstance(tpu, Placement) and tpu.fallback and tpu.note == "requested tpu unavailable — fell back to amd"
    bad = hw.decision(ids["bad"]).decision
    assert isinstance(bad, Rejection) and bad.code == "backend_unsupported"
    blocked = hw.decision(ids["eu-data"]).decision
    assert isinstance(blocked, Rejection) and blocked.burst_blocked
    assert hw.decision(ids["done"]).released_at is not None
    page = hw.decision_page(limit=50)
    assert {d.workload for d in page.decisions} == set(ids)
    assert [e.verdict for e in hw.burst_events()] == ["blocked"]


def test_live_grants_keep_their_devices_and_the_state_works_on(migrated: tuple[Hardware, dict[str, str]]) -> None:
    hw, ids = migrated
    views = {v.pool.name: v for v in hw.pool_views()}
    # Two live amd placements (train, tpu-job), one released: 2 of 4 MI300 devices held.
    assert views["hpc-mi300"].state.free == 2 and views["hpc-mi300"].state.capacity.whole == 2
    # The old 0.5 MIG placement holds a 4g slice on a device of its own.
    nvidia = hw.pool("hpc-nvidia")
    assert [(h.profile, h.units) for h in nvidia.holdings] == [("4g", 4)]
    assert views["hpc-nvidia"].state.capacity.whole == 7
    # New placements, releases, accounting and the audit chain work on the old state.
    record = hw.place(Workload("after", accelerator="amd", engine="vllm", target="hpc"))
    assert isinstance(record.decision, Placement) and record.decision.pool == "hpc-mi300"
    assert not hw.release(ids["train"]).already
    assert hw.accounting(ids["tpu-job"], 10) == {"device": "amd", "region": "eu", "hours": 10, "cost": 18.0, "carbon_g": 2500.0}
    assert hw.finops(10).decisions == 5
    report = hw.verify_audit()
    assert report.ok, report.problems

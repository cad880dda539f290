"""A decision is made under one snapshot of the reviewed policy: the tables it is priced and
checked with are those of the revision it records, and a long-lived process notices when the files
change (and when they are changed back), through the library and the real OPA."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from examlops_policy._reviewed import CHECK_EVERY_S, Reviewed
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Workload
from examlops_policy.opa.content import tables_digest
from examlops_policy.opa.server import ServerPaths, read_record
from examlops_policy.tables import policy_dir, revision

CLOUD = Pool("cloud-a100", "cloud", "nvidia", 4, "us")  # no price of its own: accounting.yaml's nvidia default
BURST = Workload("w", "nvidia", target="cloud")


@pytest.fixture()
def policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the reviewed policy, served from EXA_POLICY_DIR."""
    folder = tmp_path / "policies"
    shutil.copytree(policy_dir(), folder, ignore=shutil.ignore_patterns("*_test.rego"))
    monkeypatch.setenv("EXA_POLICY_DIR", str(folder))
    return folder


def set_nvidia_price(policies: Path, price: str) -> None:
    accounting = policies / "examlops" / "tables" / "accounting.yaml"
    text = accounting.read_text(encoding="utf-8")
    lines = [f"    nvidia: {price}" if line.startswith("    nvidia: ") else line for line in text.splitlines()]
    accounting.write_text("\n".join(lines) + "\n", encoding="utf-8")


def content(rev: str) -> str:
    return rev.split("@", 1)[0]


@pytest.mark.opa  # its own OPA, on a copy of the policy
def test_a_decision_is_priced_from_the_tables_of_the_revision_it_records(policies: Path, exa_home: Path) -> None:
    hw = Hardware(exa_home)
    try:
        hw.add_pool(CLOUD)  # the tables are read here
        set_nvidia_price(policies, "99.0")
        record = hw.place(BURST)
        assert isinstance(record.decision, Placement)
        assert content(record.decision.provenance.policy_revision) == revision(policies)
        assert record.decision.cost_per_hour == 99.0
    finally:
        hw.close()


@pytest.mark.opa  # its own OPA, on a copy of the policy
def test_a_long_lived_process_follows_the_files_and_their_revert(policies: Path, exa_home: Path) -> None:
    hw = Hardware(exa_home)
    try:
        hw.add_pool(CLOUD)
        first = hw.place(BURST).decision
        reviewed = revision(policies)
        assert isinstance(first, Placement) and first.cost_per_hour == 2.75
        assert content(first.provenance.policy_revision) == reviewed

        # Edited, and another process restarts the local OPA on the edited files.
        set_nvidia_price(policies, "99.0")
        other = Hardware(exa_home)
        other.opa_restart()
        other.close()
        edited = hw.place(BURST).decision
        assert isinstance(edited, Placement) and edited.cost_per_hour == 99.0
        assert content(edited.provenance.policy_revision) == revision(policies) != reviewed

        # Changed back: once it looks at the files again (at most CHECK_EVERY_S later; until then it
        # decides, consistently, under the edited revision its OPA still serves), the process decides
        # under the reviewed files again, its OPA restarted on them.
        restarted = read_record(ServerPaths(exa_home))[0]
        set_nvidia_price(policies, "2.75")
        time.sleep(CHECK_EVERY_S + 0.05)
        again = hw.place(BURST).decision
        assert isinstance(again, Placement) and again.cost_per_hour == 2.75
        assert content(again.provenance.policy_revision) == reviewed
        # Restarted by this process on the reverted files: again on a bundle signed with a key made
        # for that start (OPA verifies it at load), not the one before.
        record = read_record(ServerPaths(exa_home))[0]
        assert record is not None and record.opa is not None and restarted is not None and restarted.opa is not None
        assert record.opa.pid != restarted.opa.pid
        keys = [[a for a in r.opa.argv if a.startswith("--verification-key=")] for r in (restarted, record)]  # type: ignore[union-attr]
        assert all(len(k) == 1 for k in keys) and keys[0] != keys[1]
    finally:
        hw.close()


def test_the_files_are_stat_checked_and_read_again_only_when_changed(policies: Path) -> None:
    reviewed = Reviewed(policies, check_every_s=0.0)
    first = reviewed.current()
    assert reviewed.current() is first  # unchanged: the same snapshot, nothing read again
    set_nvidia_price(policies, "3.5")
    edited = reviewed.current()
    assert edited is not first and edited.revision == revision(policies) != first.revision
    assert edited.tables.default_cost("nvidia") == 3.5
    (policies / "examlops" / "tables" / "extra.yaml").write_text("extra: {}\n", encoding="utf-8")
    added = reviewed.current()
    assert added is not edited and added.revision == revision(policies)
    os.remove(policies / "examlops" / "tables" / "extra.yaml")
    assert reviewed.current().revision == edited.revision


def test_between_checks_the_snapshot_holds_unless_asked(policies: Path) -> None:
    reviewed = Reviewed(policies, check_every_s=60.0)
    first = reviewed.current()
    set_nvidia_price(policies, "4.5")
    assert reviewed.current() is first  # within the check interval: one snapshot, consistent
    forced = reviewed.current(force=True)
    assert forced.tables.default_cost("nvidia") == 4.5 and forced.revision == revision(policies)


def test_the_tables_digest_is_of_the_files_the_snapshot_read(policies: Path) -> None:
    """What an external OPA must report of its tables is the digest of the snapshot's own files,
    even when asked for after they changed (a decision holds its OPA to its own snapshot)."""
    reviewed = Reviewed(policies, check_every_s=60.0)
    first = reviewed.current()
    before = tables_digest(policies)
    set_nvidia_price(policies, "4.5")
    assert first.tables_digest == before != tables_digest(policies)
    assert reviewed.current(force=True).tables_digest == tables_digest(policies)

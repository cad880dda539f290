"""``exa policy build|status|test|lint``: the policy's bundle, its revisions, its gates, through
the real OPA and Regal binaries (on small policies of the tests' own where a gate must fail)."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from examlops_policy.app import impact
from examlops_policy.hardware import Hardware
from examlops_policy.opa.bundle import content_digest, reviewed_revision
from examlops_policy.opa.scratch import scratch_opa
from examlops_policy._policy_tools import REGAL_VERSION, regal_binary
from tests.conftest import run_exa

pytestmark = pytest.mark.opa  # exa policy runs opa and regal

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"

DEMO = '''# METADATA
# title: Demo
# description: A small policy for the command's tests.
package examlops.demo

# METADATA
# title: allow
# description: Whether the request is allowed.
# entrypoint: true
default allow := false

allow if input.user == "admin"

# Only a test below reaches this.
audited if input.audit == true
'''

DEMO_TESTS = '''package examlops.demo_test

import data.examlops.demo

test_admin_is_allowed if demo.allow with input as {"user": "admin"}

test_others_are_not if not demo.allow with input as {"user": "guest"}
'''


def demo_policy(root: Path, *, tests: str = DEMO_TESTS, policy: str = DEMO) -> Path:
    """A policy folder of one small package and its tests (beside the reviewed tables, which
    every ``exa`` command reads)."""
    shutil.copytree(POLICIES / "examlops" / "tables", root / "examlops" / "tables")
    folder = root / "examlops" / "demo"
    folder.mkdir(parents=True)
    (folder / "demo.rego").write_text(policy, encoding="utf-8")
    (folder / "demo_test.rego").write_text(tests, encoding="utf-8")
    return root


# -- build --------------------------------------------------------------------------------------


def test_build_writes_a_bundle_with_the_reviewed_revision(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = tmp_path / "out"
    done = run_exa(home, "policy", "build", "--out", str(out), "--json", shared_opa=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["revision"] == reviewed_revision(POLICIES)
    assert doc["path"] == str(out / "bundle.tar.gz") and doc["signed"] is False
    with tarfile.open(out / "bundle.tar.gz") as tar:
        manifest = json.loads(tar.extractfile("/.manifest").read())  # type: ignore[union-attr]
    assert manifest["revision"] == doc["revision"]
    # The older spelling builds the same bundle.
    alias = run_exa(home, "opa", "bundle", "--out", str(tmp_path / "alias"), "--json", shared_opa=False)
    assert json.loads(alias.stdout)["revision"] == doc["revision"]


# -- status -------------------------------------------------------------------------------------


def test_status_without_any_opa(tmp_path: Path) -> None:
    done = run_exa(tmp_path / "home", "policy", "status", "--json", shared_opa=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["reviewed_revision"] == reviewed_revision(POLICIES)
    local, external = doc["paths"]
    assert (local["path"], local["running"], local["matches"]) == ("local OPA", False, None)
    assert (external["path"], external["note"]) == ("EXA_OPA_URL", "not set")


def test_status_of_a_local_and_an_external_opa(tmp_path: Path) -> None:
    home = tmp_path / "home"
    try:
        run_exa(home, "opa", "restart", shared_opa=False, check=True)
        # EXA_OPA_URL: an OPA serving another policy (one region moved).
        other = tmp_path / "other"
        shutil.copytree(POLICIES, other)
        regions = other / "examlops" / "tables" / "regions.yaml"
        regions.write_text(regions.read_text(encoding="utf-8").replace("eu-central-1: {country: DE,", "eu-central-1: {country: CH,"), encoding="utf-8")
        with scratch_opa(other, tmp_path / "ext") as ext:
            done = run_exa(home, "policy", "status", "--json", env={"EXA_OPA_URL": f"unix://{ext.socket}"}, shared_opa=False)
            text = run_exa(home, "policy", "status", env={"EXA_OPA_URL": f"unix://{ext.socket}"}, shared_opa=False)
        assert done.returncode == 5, done.stdout + done.stderr
        local, external = json.loads(done.stdout)["paths"]
        assert local["running"] and local["matches"] is True
        assert content_digest(local["revision"]) == content_digest(reviewed_revision(POLICIES))
        assert external["matches"] is False and external["revision"] == ext.revision
        assert "does NOT match" in text.stdout and text.returncode == 5
    finally:
        run_exa(home, "opa", "stop", shared_opa=False)


# -- test, lint ---------------------------------------------------------------------------------


def test_policy_test_passes_and_reports_coverage(tmp_path: Path) -> None:
    root = demo_policy(tmp_path / "policies")
    env = {"EXA_POLICY_DIR": str(root)}
    done = run_exa(tmp_path / "home", "policy", "test", "--threshold", "50", env=env, shared_opa=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"✓ 2 policy tests pass · coverage \d+\.\d\d% \(gate 50%\)", done.stdout)
    # The uncovered rule keeps coverage below 100: the gate says so.
    strict = run_exa(tmp_path / "home", "policy", "test", "--threshold", "100", "--json", env=env, shared_opa=False)
    assert strict.returncode == 3
    doc = json.loads(strict.stdout)
    assert doc["passed"] is False and doc["failed"] == [] and 50 < doc["coverage"] < 100


def test_policy_test_names_the_failing_tests(tmp_path: Path) -> None:
    failing = DEMO_TESTS + '\ntest_guests_are_allowed if demo.allow with input as {"user": "guest"}\n'
    root = demo_policy(tmp_path / "policies", tests=failing)
    done = run_exa(tmp_path / "home", "policy", "test", env={"EXA_POLICY_DIR": str(root)}, shared_opa=False)
    assert done.returncode == 3
    assert "1 policy test(s) failed: data.examlops.demo_test.test_guests_are_allowed" in done.stdout


def test_policy_lint_passes_and_fails(tmp_path: Path) -> None:
    root = demo_policy(tmp_path / "policies")
    clean = run_exa(tmp_path / "home", "policy", "lint", env={"EXA_POLICY_DIR": str(root)}, shared_opa=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "no violations" in clean.stdout
    messy = DEMO.replace('allow if input.user == "admin"', 'allow := true if {\n\tinput.user == "admin"\n} else := false')
    bad = demo_policy(tmp_path / "bad", policy=messy)
    done = run_exa(tmp_path / "home", "policy", "lint", "--json", env={"EXA_POLICY_DIR": str(bad)}, shared_opa=False)
    assert done.returncode == 3
    assert any(": default-over-else: " in v for v in json.loads(done.stdout)["violations"])


def test_the_project_policy_lints_clean() -> None:
    from examlops_policy._policy_tools import lint

    report = lint(POLICIES)
    assert report.violations == ()
    assert report.config == ROOT / ".regal" / "config.yaml"


def test_regal_is_the_pinned_version() -> None:
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    assert f"REGAL_VERSION={REGAL_VERSION}\n" in setup
    import subprocess

    out = subprocess.run([str(regal_binary()), "version"], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"^Version: +v{re.escape(REGAL_VERSION)}$", out, re.MULTILINE), out


# -- the placement input is what the policy's input schema says -----------------------------------


def test_reference_input_matches_the_placement_input_schema(hardware: Hardware) -> None:
    schemas = ROOT / "schemas"
    placement_schema = json.loads((schemas / "placement-input.schema.json").read_text(encoding="utf-8"))
    workload_schema = json.loads((schemas / "workload.schema.json").read_text(encoding="utf-8"))
    about = hardware.policy.about()
    cases = impact.suite_cases(ROOT / "examples" / "workloads", ROOT / "examples" / "fleet.yaml", hardware.tables)
    for case in cases:
        doc = case.policy_input(about)
        Draft202012Validator(placement_schema).validate(doc)
        Draft202012Validator(workload_schema).validate({k: v for k, v in doc["workload"].items() if v is not None})  # type: ignore[union-attr]
    bad = {**cases[0].policy_input(about), "pool": "x"}
    with pytest.raises(Exception, match="Additional properties"):
        Draft202012Validator(placement_schema).validate(bad)

"""The reviewed policy as a bundle: its revision, its contents, its roots, its signature."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from examlops_policy import PolicyError
from examlops_policy.opa import build_bundle, content_digest, reviewed_revision
from examlops_policy.opa.transport import Endpoint, OpaTransport
from examlops_policy.tables import policy_dir, revision
from tests.conftest import OPA_BIN
from tests.opa_support import opa_process

pytestmark = pytest.mark.opa  # bundles built and served by a real OPA


def git(folder: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "PATH": "/usr/bin:/bin", "HOME": str(folder)}  # fmt: skip
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True, env=env).stdout.strip()


@pytest.fixture()
def policies(tmp_path: Path) -> Path:
    """A copy of the reviewed policy folder, outside any git checkout."""
    copy = tmp_path / "policies"
    shutil.copytree(policy_dir(), copy)
    return copy


def members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name.lstrip("/"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_revision_is_the_content_digest_outside_git(policies: Path) -> None:
    assert reviewed_revision(policies) == revision(policies)
    assert revision(policies).startswith("sha256:") and len(revision(policies)) == 7 + 64


def test_revision_names_the_commit_only_while_the_policy_folder_is_clean(tmp_path: Path, policies: Path) -> None:
    repo = tmp_path
    git(repo, "init", "-q")
    git(repo, "add", "policies")
    git(repo, "commit", "-qm", "reviewed policy")
    first = git(repo, "log", "-1", "--format=%H")
    assert reviewed_revision(policies) == f"{revision(policies)}@git:{first}"

    table = policies / "examlops" / "tables" / "accounting.yaml"
    table.write_text(table.read_text() + "\n# an unreviewed edit\n")
    assert reviewed_revision(policies) == revision(policies)  # dirty: content only

    git(repo, "commit", "-qam", "reviewed edit")
    second = git(repo, "log", "-1", "--format=%H")
    assert reviewed_revision(policies) == f"{revision(policies)}@git:{second}" and second != first

    (repo / "unrelated.txt").write_text("x")
    git(repo, "add", "unrelated.txt")
    git(repo, "commit", "-qm", "outside the policy folder")
    assert reviewed_revision(policies).endswith(f"@git:{second}")  # the policy's own last commit

    (policies / "examlops" / "hardware" / "new.rego").write_text("package examlops.hardware.new\n")
    assert "@git:" not in reviewed_revision(policies)  # an untracked policy file is not reviewed


def test_content_digest_drops_the_git_part() -> None:
    digest = "sha256:" + "ab" * 32
    assert content_digest(f"{digest}@git:{'1' * 40}") == digest
    assert content_digest(digest) == digest


def test_bundle_carries_the_revision_the_scoped_roots_and_no_tests(tmp_path: Path, policies: Path) -> None:
    bundle = build_bundle(policies, tmp_path)
    assert bundle.path == tmp_path / "bundle.tar.gz" and bundle.revision == reviewed_revision(policies)
    assert bundle.path.stat().st_mode & 0o777 == 0o600
    files = members(bundle.path)
    manifest = json.loads(files[".manifest"])
    assert manifest["revision"] == bundle.revision
    assert manifest["roots"] == ["examlops", "system/authz"]
    rego = sorted(name for name in files if name.endswith(".rego"))
    assert "system/authz.rego" in rego and "examlops/hardware/placement.rego" in rego
    assert not [name for name in rego if name.endswith("_test.rego")]
    assert sorted(p.relative_to(policies).as_posix() for p in policies.rglob("*.rego") if not p.name.endswith("_test.rego")) == rego


def test_bundle_tables_are_what_opa_reads_from_the_yaml_files(tmp_path: Path, policies: Path) -> None:
    bundle = build_bundle(policies, tmp_path)
    data = json.loads(members(bundle.path)["data.json"])
    direct = subprocess.run(
        [str(OPA_BIN), "eval", "--format", "json", "-d", str(policies / "examlops" / "tables"), "data"], capture_output=True, text=True, check=True
    )
    assert data["examlops"]["tables"] == json.loads(direct.stdout)["result"][0]["expressions"][0]["value"]
    assert data["examlops"]["tables"]["regions"]["norwayeast"]["country"] == "NO"  # a string, as OPA reads YAML


def test_policies_read_the_loaded_revision_at_data_system_bundles(tmp_path: Path, policies: Path) -> None:
    (policies / "examlops" / "probe.rego").write_text(
        "package examlops.probe\n\nrevisions contains r if {\n\tsome b in data.system.bundles\n\tr := b.manifest.revision\n}\n"
    )
    bundle = build_bundle(policies, tmp_path)
    sock = tmp_path / "opa.sock"
    with opa_process(f"--addr=unix://{sock}", str(bundle.path), endpoint=Endpoint("unix", path=str(sock))):
        answer = OpaTransport(Endpoint("unix", path=str(sock))).json("POST", "/v1/data/examlops/probe/revisions", {"input": {}})
    assert answer == {"result": [bundle.revision]}


def test_a_data_file_the_bundle_would_leave_out_is_refused(tmp_path: Path, policies: Path) -> None:
    (policies / "examlops" / "hardware" / "overrides.json").write_text("{}")
    with pytest.raises(PolicyError, match="only .rego files and examlops/tables/\\*.yaml belong"):
        build_bundle(policies, tmp_path)
    assert not (tmp_path / "bundle.tar.gz").exists()


def test_signed_bundle_verifies_with_the_public_key_and_a_tampered_one_does_not(tmp_path: Path, policies: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = tmp_path / "signing.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public = tmp_path / "verify.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    out = tmp_path / "out"
    out.mkdir()
    bundle = build_bundle(policies, out, signing_key=private)
    assert ".signatures.json" in members(bundle.path)

    def verifies(path: Path) -> bool:
        check = [str(OPA_BIN), "build", "-b", str(path), "--verification-key", str(public), "-o", str(tmp_path / "checked.tar.gz")]
        return subprocess.run(check, capture_output=True, check=False).returncode == 0

    assert verifies(bundle.path)
    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(bundle.path) as src, tarfile.open(tampered, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith("residency.rego"):
                data = data.replace(b'residency == "eu-only"', b'residency == "never"')
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    assert not verifies(tampered)


def test_exa_opa_bundle_writes_the_reviewed_bundle(tmp_path: Path) -> None:
    from tests.conftest import run_exa

    out = tmp_path / "out"
    result = run_exa(tmp_path / "home", "opa", "bundle", "--out", str(out), "--json", check=True)
    doc = json.loads(result.stdout)
    assert doc == {
        "path": str(out / "bundle.tar.gz"), "revision": reviewed_revision(policy_dir()), "roots": ["examlops", "system/authz"], "signed": False,
    }  # fmt: skip
    assert json.loads(members(out / "bundle.tar.gz")[".manifest"])["revision"] == doc["revision"]

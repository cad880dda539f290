"""A served policy is proven by its content, not by the revision its manifest names.

- An OPA at ``EXA_OPA_URL`` serving a bundle built from edited tables but labelled with the
  reviewed revision is refused: the policy reports the digest of the tables it evaluates, and it is
  not the reviewed tables' (exit 5, nothing placed; ``exa policy status`` and ``exa opa status``
  say so).
- The local OPA loads only a bundle signed with a key made for that start: a forged bundle renamed
  over ``<home>/opa/bundle.tar.gz`` while ``exa opa restart`` runs is refused, never served.
- The digest is reproducible without OPA: exa reads YAML and writes JSON as OPA does (checked here
  against the real OPA on the values where readers disagree).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.errors import PolicyError
from examlops_policy.opa import bundle as bundle_module
from examlops_policy.opa import build_bundle, ensure_server, reviewed_revision, stop_server
from examlops_policy.opa.content import canonical_json, first_difference, read_tables, tables_digest
from examlops_policy.opa.transport import Endpoint, OpaTransport
from examlops_policy.tables import policy_dir
from tests.conftest import OPA_BIN, run_exa
from tests.opa_support import opa_pids_for, opa_process, runtime_data

TOKEN = "t0ken-for-an-external-opa"
EU_ONLY_BURST = ("hardware", "burst", "data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst")


def forged_bundle(tmp_path: Path, name: str, edit: dict[str, tuple[str, str]], extra: dict[str, str] | None = None) -> Path:
    """A bundle of the reviewed policy with ``edit`` applied (file -> (old, new)) and ``extra``
    files added, whose manifest names the REVIEWED revision: what a forger builds."""
    edited = tmp_path / f"{name}-policies"
    shutil.copytree(policy_dir(), edited)
    for rel, (old, new) in edit.items():
        path = edited / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{rel} no longer holds {old!r}"
        path.write_text(text.replace(old, new), encoding="utf-8")
    for rel, text in (extra or {}).items():
        (edited / rel).write_text(text, encoding="utf-8")
    out = tmp_path / f"{name}-bundle"
    out.mkdir()
    label = reviewed_revision(policy_dir())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bundle_module, "_revision", lambda root, files: label)
        built = build_bundle(edited, out)
    assert built.revision == label
    return built.path


US_IN_THE_EU = {"examlops/tables/regions.yaml": ("eu_member_states: [AT,", "eu_member_states: [US, AT,")}


@pytest.fixture()
def external_opa(tmp_path: Path) -> Iterator[object]:
    """Start an OPA on a Unix socket serving a given bundle, with the bundle's token check."""
    with contextlib.ExitStack() as servers:

        def start(bundle: Path, name: str) -> dict[str, str]:
            folder = tmp_path / f"opa-{name}"
            folder.mkdir()
            sock = folder / "opa.sock"
            servers.enter_context(opa_process(
                f"--addr=unix://{sock}", "--authentication=token", "--authorization=basic", str(bundle),
                str(runtime_data(folder, TOKEN)), endpoint=Endpoint("unix", path=str(sock)), token=TOKEN,
            ))  # fmt: skip
            return {"EXA_OPA_URL": f"unix://{sock}", "EXA_OPA_TOKEN": TOKEN}

        yield start


def us_cloud(home: Path) -> None:
    run_exa(home, "hardware", "add-pool", "cloud-us", "--target", "cloud", "--accelerator", "nvidia", "--count", "8",
            "--region", "us-east-1", "--cost-per-hour", "1", check=True)  # fmt: skip


def test_an_external_opa_with_edited_tables_under_the_reviewed_label_is_refused(exa_home: Path, tmp_path: Path, external_opa) -> None:  # type: ignore[no-untyped-def]
    us_cloud(exa_home)
    forged = external_opa(forged_bundle(tmp_path, "forged", US_IN_THE_EU), "forged")

    burst = run_exa(exa_home, *EU_ONLY_BURST, env=forged)
    assert burst.returncode == 5, (burst.stdout, burst.stderr)
    assert "the tables it evaluates have digest" in burst.stderr and "its bundle was built from other tables than its revision says" in burst.stderr
    assert "nothing was placed" in burst.stderr and "Traceback" not in burst.stderr
    assert json.loads(run_exa(exa_home, "hardware", "decisions", "--json").stdout) == []  # nothing recorded

    status = run_exa(exa_home, "policy", "status", env=forged)
    assert status.returncode == 5 and "does NOT match" in status.stdout and "other tables than its revision says" in status.stdout
    assert run_exa(exa_home, "opa", "status", env=forged).returncode == 5
    doc = json.loads(run_exa(exa_home, "opa", "status", "--json", env=forged).stdout)
    assert doc["revision_matches"] is False and "other tables" in doc["content_problem"]

    (tmp_path / "reviewed-bundle").mkdir()
    reviewed = external_opa(build_bundle(policy_dir(), tmp_path / "reviewed-bundle").path, "reviewed")
    blocked = run_exa(exa_home, *EU_ONLY_BURST, env=reviewed)
    assert blocked.returncode == 4, (blocked.stdout, blocked.stderr)  # the reviewed tables: US is not in the EU
    assert run_exa(exa_home, "policy", "status", env=reviewed).returncode == 0


def test_the_local_opa_refuses_a_bundle_swapped_in_while_it_restarts(exa_home: Path, tmp_path: Path) -> None:
    """A loop renaming a forged bundle (edited rules, the reviewed label) over the local OPA's
    bundle during ``exa opa restart``: every start it wins is refused, none serves the forgery."""
    forged = forged_bundle(
        tmp_path, "swap", {}, {"examlops/forged.rego": "package examlops.forged\n\nmarker := true\n"},
    )  # fmt: skip
    us_cloud(exa_home)
    assert run_exa(exa_home, "hardware", "pools", shared_opa=False).returncode == 0
    target = exa_home / "opa" / "bundle.tar.gz"
    stop = threading.Event()

    def racer() -> None:
        copy = exa_home / "opa" / "forged-copy"
        while not stop.is_set():
            with contextlib.suppress(OSError):
                shutil.copyfile(forged, copy)
                os.replace(copy, target)

    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    refused, served = [], []
    try:
        for _ in range(3):
            result = run_exa(exa_home, "opa", "restart", shared_opa=False)
            if result.returncode == 0:
                served.append(served_marker(exa_home))
            else:
                refused.append(result)
    finally:
        stop.set()
        thread.join()
    assert served.count(None) == len(served), "a forged bundle was served"
    assert refused, "the racer never replaced the bundle in time: the test proves nothing"
    for r in refused:
        assert r.returncode == 5 and "its signature does not verify with the key made for this start" in r.stderr, r.stderr
    assert opa_pids_for(exa_home) <= {ensure_server(exa_home).pid}

    assert run_exa(exa_home, "opa", "restart", shared_opa=False).returncode == 0  # the racer gone: it starts
    assert served_marker(exa_home) is None
    assert run_exa(exa_home, *EU_ONLY_BURST, shared_opa=False).returncode == 4


def served_marker(home: Path) -> object:
    server = ensure_server(home)
    token = (home / "opa" / "token").read_text().strip()
    answer = OpaTransport(Endpoint("unix", path=str(server.socket)), token=token).json("GET", "/v1/data/examlops/forged/marker")
    return answer.get("result") if isinstance(answer, dict) else None


def test_the_local_opa_proves_its_tables_and_says_its_bundle_is_signed(exa_home: Path) -> None:
    ensure_server(exa_home)
    try:
        doc = json.loads(run_exa(exa_home, "opa", "status", "--json", shared_opa=False).stdout)
        assert doc["revision_matches"] is True and doc["content_problem"] is None and doc["protection"]["signed_bundle"] is True
        argv = json.loads((exa_home / "opa" / "server.json").read_text())["opa"]["argv"]
        assert "--bundle" in argv and any(a.startswith("--verification-key=-----BEGIN PUBLIC KEY-----") for a in argv)
        assert not any("PRIVATE KEY" in a for a in argv)
        assert not [p for p in (exa_home / "opa").iterdir() if b"PRIVATE KEY" in (p.read_bytes() if p.is_file() else b"")]
    finally:
        stop_server(exa_home)


# -- the digest, reproducible without OPA --------------------------------------------------------

TRICKY_YAML = """\
words: [NO, no, No, yes, on, off, y, n, true, True, TRUE, false, False, FALSE]
numbers: [~, null, 1e3, 1.0e3, .5, 5., +5, -5, 0x10, 0o10, 1.5, 2.50, 3.0, 100, 1.0e+3, 0.1e-5, 12345678901234567890]
strings: ["x<&>y", 2001-12-14, "12:30", "\\u2028", 'quoted']
nested: {b: 1, a: [], "é": {}, B: null}
"""


def opa_reads(folder: Path, name: str, text: str) -> object:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    done = subprocess.run([str(OPA_BIN), "eval", "--format", "json", "-d", str(path), "data"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["result"][0]["expressions"][0]["value"]


def test_exa_reads_yaml_as_opa_does(tmp_path: Path) -> None:
    root = tmp_path / "policy"
    (root / "examlops" / "tables").mkdir(parents=True)
    (root / "examlops" / "tables" / "t.yaml").write_text(TRICKY_YAML, encoding="utf-8")
    ours = read_tables(root)
    assert first_difference(ours, opa_reads(tmp_path, "t.yaml", TRICKY_YAML)) is None
    assert ours["words"][0] == "NO" and ours["strings"][1] == "2001-12-14"  # type: ignore[index]


@pytest.mark.opa  # runs opa eval
def test_canonical_json_is_what_opa_json_marshal_writes(tmp_path: Path) -> None:
    value = read_tables(policy_dir()) | {"odd": ["x<&>y", "\u2028\u2029", "tab\tnl\nbs\bff\fctl\x01", "é€😀", 1e-05, 2.0, -0.0, 10**20]}
    data = tmp_path / "data.json"
    data.write_bytes(canonical_json({"t": value}))
    done = subprocess.run([str(OPA_BIN), "eval", "--format", "raw", "-d", str(data), "json.marshal(data.t)"], capture_output=True, check=True)
    assert done.stdout.rstrip(b"\n") == canonical_json(value)


@pytest.mark.opa  # runs opa eval
def test_the_policy_computes_the_digest_exa_computes(tmp_path: Path) -> None:
    built = build_bundle(policy_dir(), tmp_path)
    query = 'concat("", ["sha256:", crypto.sha256(json.marshal(data.examlops.tables))])'
    done = subprocess.run([str(OPA_BIN), "eval", "--format", "raw", "-b", str(built.path), query], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == tables_digest(policy_dir())


@pytest.mark.opa  # runs opa build
def test_a_table_opa_and_exa_would_read_differently_does_not_build(tmp_path: Path) -> None:
    root = tmp_path / "policy"
    shutil.copytree(policy_dir(), root)
    table = root / "examlops" / "tables" / "accounting.yaml"
    table.write_text(table.read_text() + "\nlegacy_octal: 010\n")  # OPA reads 8 (YAML 1.1), YAML 1.2 reads 10
    with pytest.raises(PolicyError, match="OPA reads the tables differently at legacy_octal"):
        build_bundle(root, tmp_path)

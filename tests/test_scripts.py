"""The scripts a newcomer runs first: ``scripts/setup`` builds only what a command needs and says
what it builds, why and for how long; ``scripts/demo`` leaves no temporary state behind unless
asked to, and says where it is."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

OPA = ROOT / ".tools" / "bin" / "opa"


def run(*args: str, env: dict[str, str], cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)


def demo_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXA_HOME", "EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_DB_URL"))}
    # The demo never lints: a Regal that is not there must not even be looked at.
    return {**env, "EXA_OPA_BIN": str(OPA), "EXA_REGAL_BIN": str(tmp_path / "no-regal"), "TMPDIR": str(tmp_path)}


def state_folder(output: str) -> Path:
    found = re.search(r"EXA_HOME=(\S+)", output)
    assert found, output[:500]
    return Path(found.group(1))


@pytest.mark.opa  # the demo's exa starts its own OPA
def test_the_demo_removes_its_temporary_state_and_says_where_it_was(tmp_path: Path) -> None:
    done = run(str(ROOT / "scripts" / "demo"), env=demo_env(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    home = state_folder(done.stdout)
    assert home.parent == tmp_path and home.name.startswith("exa-demo.")
    assert done.stdout.splitlines()[0] == f"state in a temporary EXA_HOME={home} (removed at the end; scripts/demo --keep keeps it)"
    assert done.stdout.splitlines()[-1] == f"state removed: {home} (scripts/demo --keep keeps it)"
    assert "✓ audit log verifies" in done.stdout
    assert not home.exists() and list(tmp_path.glob("exa-demo.*")) == []
    assert "Regal" not in done.stderr and "regal" not in done.stderr  # built or checked only for linting


@pytest.mark.opa  # the demo's exa starts its own OPA
def test_the_demo_keeps_its_state_when_asked(tmp_path: Path) -> None:
    done = run(str(ROOT / "scripts" / "demo"), "--keep", env=demo_env(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    home = state_folder(done.stdout)
    try:
        assert done.stdout.splitlines()[-1] == f"state kept in EXA_HOME={home}"
        assert (home / "state.db").is_file()
    finally:
        shutil.rmtree(home)


FAKE_GO = """#!/usr/bin/env bash
# A stand-in for `go install github.com/open-policy-agent/opa@vX`: a slow build of an "opa" that
# reports that version.
[ "$1" = install ] || exit 3
sleep 2.5
version=${2##*@v}
printf '#!/bin/sh\\necho "Version: %s"\\n' "$version" > "$GOBIN/opa"
chmod +x "$GOBIN/opa"
"""


def test_setup_says_what_it_builds_why_and_how_long_and_builds_only_what_is_asked(tmp_path: Path) -> None:
    """In a copy of the scripts (a checkout without .tools), with a Go whose build is slow."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup", checkout / "scripts" / "setup")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(FAKE_GO, encoding="utf-8")
    (bin_dir / "go").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXA_OPA_BIN", "EXA_REGAL_BIN"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", EXA_SETUP_TICK="1")
    done = run(str(checkout / "scripts" / "setup"), "--only", "opa", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "setup: building OPA 1.22.3 into .tools/bin: every placement decision is evaluated by it (once; about two minutes)"
    assert any(re.fullmatch(r"setup:   still building OPA 1\.22\.3 into \.tools/bin \([12]s so far\)", line) for line in lines), lines
    assert re.fullmatch(r"setup: built OPA 1\.22\.3 into \.tools/bin in [23]s", lines[-1]), lines
    assert (checkout / ".tools" / "bin" / "opa").is_file()
    assert not (checkout / ".tools" / "bin" / "regal").exists() and not (checkout / ".venv").exists()  # only what was asked
    again = run(str(checkout / "scripts" / "setup"), "--only", "opa", env=env, cwd=tmp_path, timeout=60)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")  # in place: nothing built, nothing said

"""A state that cannot be written can still be read: on a read-only mount (a forensic copy) and on
a full disk, ``audit verify``, ``decisions``, ``pools`` and the FinOps figures work; a write says
why it cannot write (exit 6 read-only, exit 11 full) and writes nothing. (Needs root: mounts.)"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.opa import stop_server
from tests.conftest import run_exa
from tests.disk_support import fill, read_only, small_tmpfs
from tests.test_cli import seed

pytestmark = pytest.mark.opa  # the state is made by exa processes on their own local OPA

PLACE = ("hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm")
READS = (
    ("audit", "verify"),
    ("hardware", "decisions", "--json"),
    ("hardware", "pools"),
    ("hardware", "burst-events"),
    ("finops", "cost", "--hours", "2"),
    ("models", "cost", "--hours", "2"),
)


@pytest.fixture()
def made(tmp_path: Path) -> Iterator[tuple[Path, dict[tuple[str, ...], str]]]:
    """A state with pools, placements and a release, and what each read command printed on it."""
    home = tmp_path / "made"
    seed(home)
    first = json.loads(run_exa(home, *PLACE, "--json", check=True).stdout)["decision_id"]
    run_exa(home, "hardware", "burst", "b", "--accelerator", "nvidia", "--allow-burst", check=True)
    run_exa(home, "hardware", "release", first, check=True)
    stop_server(home)
    yield home, {args: run_exa(home, *args, check=True).stdout for args in READS}


def copy_state(source: Path, target: Path, layout: str) -> None:
    """The state files as a copy taken in one of three moments: ``closed`` (one file, no log),
    ``open`` (file, log and index, as while exa runs), ``log only`` (file and log, no index)."""
    target.mkdir(mode=0o700)
    db = sqlite3.connect(source / "state.db", isolation_level=None)
    try:
        db.execute("PRAGMA wal_autocheckpoint=0")
        if layout == "closed":
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            # The last write lands only in the log: a reader that ignored it would see less.
            db.execute("UPDATE pools SET updated_at = updated_at")
        for suffix in ("", "-wal", "-shm"):
            wanted = suffix == "" or layout == "open" or (layout == "log only" and suffix == "-wal")
            if wanted and (source / f"state.db{suffix}").exists():
                shutil.copy2(source / f"state.db{suffix}", target / f"state.db{suffix}")
        if (source / "state.db.head").exists():
            shutil.copy2(source / "state.db.head", target / "state.db.head")
    finally:
        db.close()


@pytest.mark.parametrize("layout", ["closed", "open", "log only"])
def test_a_read_only_copy_reads_and_verifies_and_refuses_writes(
    made: tuple[Path, dict[tuple[str, ...], str]], tmp_path: Path, layout: str
) -> None:
    source, expected = made
    with small_tmpfs(tmp_path) as mount:
        copy_state(source, mount / "home", layout)
        files = sorted(p.name for p in (mount / "home").iterdir())
        with read_only(mount):
            for args in READS:
                result = run_exa(mount / "home", *args)
                assert result.returncode == 0, (args, result.stdout, result.stderr)
                assert result.stdout == expected[args], args
            ident = json.loads(expected[("hardware", "decisions", "--json")])[0]["id"]
            write = run_exa(mount / "home", "hardware", "release", ident)
            assert write.returncode == 6, (write.stdout, write.stderr)
            assert "is open read-only" in write.stderr and "Read-only file system" in write.stderr
            assert "nothing was written" in write.stderr and "Traceback" not in write.stderr
        assert sorted(p.name for p in (mount / "home").iterdir()) == files  # nothing was made there


def test_a_full_disk_reads_and_verifies_and_refuses_writes_with_exit_11(made: tuple[Path, dict[tuple[str, ...], str]], tmp_path: Path) -> None:
    source, expected = made
    with small_tmpfs(tmp_path) as mount:
        copy_state(source, mount / "home", "closed")
        filler = fill(mount)
        for args in READS:
            result = run_exa(mount / "home", *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
            assert result.stdout == expected[args], args
        ident = json.loads(expected[("hardware", "decisions", "--json")])[0]["id"]
        write = run_exa(mount / "home", "hardware", "release", ident)
        assert write.returncode == 11 and "StateFull" in write.stderr and "nothing was written" in write.stderr, write.stderr
        filler.unlink()
        assert run_exa(mount / "home", "audit", "verify").stdout == expected[("audit", "verify")]

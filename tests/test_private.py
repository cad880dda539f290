"""State files are private to their owner whatever the umask; a shared state folder is refused."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from examlops_policy.errors import StateError
from examlops_policy._private import ensure_private_dir, private_database, write_private_file
from examlops_policy.store.sqlite import SQLiteStore
from tests.conftest import run_exa


def exa_with_umask(home: Path, umask: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``exa`` run with ``umask`` (its own OPA, so that every file under the home is written by it)."""
    return run_exa(home, *args, shared_opa=False, umask=umask, timeout=120)


def modes(home: Path) -> dict[str, int]:
    """Permission bits of everything under ``home`` (and ``home`` itself as ".")."""
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for path in home.rglob("*"):
        found[path.relative_to(home).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


@pytest.mark.opa
def test_umask_000_still_yields_0600_files_in_0700_folders(exa_home: Path) -> None:
    steps = [
        ("hardware", "add-pool", "one", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu"),
        ("hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm"),
        ("audit", "keygen", "ops", "--out-dir", str(exa_home / "keys")),
    ]
    for args in steps:
        result = exa_with_umask(exa_home, 0o000, *args)
        assert result.returncode == 0, result.stderr
    old = os.umask(0)
    store = SQLiteStore(exa_home / "state.db")  # the journal files exist while a connection is open
    try:
        store.rows()
        found = modes(exa_home)
    finally:
        store.close()
        os.umask(old)
    expected = {"state.db", "state.db-wal", "state.db-shm", "opa/token", "opa/server.json", "opa/bundle.tar.gz",
                "opa/opa.log", "opa/supervisor.log", "opa/lock", "opa/activity", "opa/opa.sock", "keys/ops.skey", "keys/ops.vkey"}  # fmt: skip
    assert expected <= found.keys(), sorted(found)
    folders = {name for name in found if (exa_home / name).is_dir()}
    assert folders == {".", "opa", "keys"}
    # keys/ is made by `audit keygen --out-dir` (any folder a user names); the state folders are 0700.
    assert {name: found[name] for name in folders - {"keys"}} == {".": 0o700, "opa": 0o700}
    assert {name: mode for name, mode in found.items() if name not in folders and mode != 0o600} == {}


def test_a_state_folder_others_can_write_to_is_refused(exa_home: Path) -> None:
    exa_home.mkdir()
    exa_home.chmod(0o777)
    pools = exa_with_umask(exa_home, 0o022, "hardware", "pools")
    assert pools.returncode == 13  # the state folder is unusable as it is, not a busy store
    assert f"StateUnusable: {exa_home} can be written by other users (mode 0777); make it private with: chmod 700 {exa_home}" in pools.stderr
    opa = exa_with_umask(exa_home, 0o022, "opa", "restart")
    assert opa.returncode == 5 and "PolicyUnavailable" in opa.stderr and "can be written by other users" in opa.stderr
    assert not (exa_home / "state.db").exists() and not (exa_home / "opa").exists()


def test_existing_files_with_wide_modes_are_tightened(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    for path in (db, tmp_path / "state.db-wal"):
        path.write_bytes(b"")
        path.chmod(0o666)
    private_database(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state.db-wal").stat().st_mode) == 0o600


def test_missing_parents_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        made = ensure_private_dir(tmp_path / "a" / "b" / "c")
        write_private_file(made / "f", b"x")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((made / "f").stat().st_mode) == 0o600
    assert [p.name for p in made.iterdir()] == ["f"]  # no temporary file left


def test_a_folder_of_another_owner_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    with pytest.raises(StateError, match="belongs to uid 65534, not to this user"):
        ensure_private_dir(foreign)

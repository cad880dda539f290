"""A home that has written remembers how far its audit log reached (``state.db.head``): a state
that was emptied, deleted, rolled back to an older copy or replaced by another one is refused
(exit 10), naming what is missing, and nothing is read from it or written to it."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXA, run_exa, shared_opa_env
from tests.test_cli import seed

PLACE = ("hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm")


def settle(home: Path) -> None:
    """Fold the WAL into the file (no exa holds it open now), so one file is the whole state."""
    db = sqlite3.connect(home / "state.db")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def entries(home: Path) -> int:
    return int(json.loads(run_exa(home, "audit", "verify", "--json").stdout)["size"])


def state_corrupt(home: Path, *args: str) -> str:
    """``exa ARGS``, which must be refused as a corrupt state (exit 10): its message, on one line."""
    result = run_exa(home, *args)
    assert result.returncode == 10, (args, result.stdout, result.stderr)
    assert result.stderr.startswith("StateCorrupt: ") and "Traceback" not in result.stderr
    return result.stderr.replace("\n", " ")


def test_every_write_records_how_far_the_log_reached(exa_home: Path) -> None:
    seed(exa_home)
    run_exa(exa_home, *PLACE, check=True)
    head = json.loads((exa_home / "state.db.head").read_text())
    verified = json.loads(run_exa(exa_home, "audit", "verify", "--json").stdout)
    assert head == {"format": 1, "audit_size": verified["size"], "audit_head": verified["head"]}
    assert (exa_home / "state.db.head").stat().st_mode & 0o777 == 0o600


def test_an_emptied_state_is_refused_and_left_as_it_is(exa_home: Path) -> None:
    seed(exa_home)
    run_exa(exa_home, *PLACE, check=True)
    size = entries(exa_home)
    settle(exa_home)
    (exa_home / "state.db").write_bytes(b"")  # : > state.db
    for args in (("audit", "verify"), ("hardware", "decisions"), ("hardware", "pools"), PLACE):
        err = state_corrupt(exa_home, *args)
        assert f"{exa_home / 'state.db'} holds no audit log, but state.db.head records that this home's audit log reached {size} entries" in err
        assert f"entries 1..{size} are missing" in err and "emptied, truncated or replaced by an older copy" in err
    assert (exa_home / "state.db").stat().st_size == 0  # nothing was written to it


def test_a_deleted_state_is_refused_and_not_made_anew(exa_home: Path) -> None:
    seed(exa_home)
    settle(exa_home)
    for suffix in ("", "-wal", "-shm"):
        (exa_home / f"state.db{suffix}").unlink(missing_ok=True)
    err = state_corrupt(exa_home, "hardware", "decisions")
    assert f"{exa_home / 'state.db'} is missing, but state.db.head records" in err
    assert not (exa_home / "state.db").exists()


def test_an_older_copy_of_the_state_is_refused_naming_the_missing_entries(exa_home: Path, tmp_path: Path) -> None:
    seed(exa_home)
    settle(exa_home)
    backup = tmp_path / "state.db.bak"
    shutil.copy2(exa_home / "state.db", backup)
    kept = entries(exa_home)
    run_exa(exa_home, *PLACE, check=True)
    run_exa(exa_home, "hardware", "place", "w2", "--accelerator", "amd", "--engine", "vllm", check=True)
    size = entries(exa_home)
    settle(exa_home)
    shutil.copy2(backup, exa_home / "state.db")  # roll back: the two placements disappear
    err = state_corrupt(exa_home, "audit", "verify")
    assert f"holds {kept} audit entries" in err and f"entries {kept + 1}..{size} are missing" in err


def test_another_state_with_as_many_entries_is_refused(exa_home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-home"
    for home in (exa_home, other):
        seed(home)
        run_exa(home, *PLACE, check=True)
        settle(home)
    shutil.copy2(other / "state.db", exa_home / "state.db")
    err = state_corrupt(exa_home, "hardware", "decisions")
    assert "is not the one this home recorded" in err and "the state was replaced by another one" in err


def test_moving_the_record_aside_starts_a_new_state_on_purpose(exa_home: Path) -> None:
    seed(exa_home)
    settle(exa_home)
    (exa_home / "state.db").write_bytes(b"")
    state_corrupt(exa_home, "hardware", "pools")
    (exa_home / "state.db.head").rename(exa_home / "state.db.head.old")
    result = run_exa(exa_home, "audit", "verify")
    assert result.returncode == 0 and "0 entries" in result.stdout


def test_a_signed_checkpoint_beyond_the_head_is_truncation(exa_home: Path, tmp_path: Path) -> None:
    """With the home's record gone too, a checkpoint kept elsewhere still catches the rollback."""
    seed(exa_home)
    settle(exa_home)
    backup = tmp_path / "state.db.bak"
    shutil.copy2(exa_home / "state.db", backup)
    run_exa(exa_home, *PLACE, check=True)
    run_exa(exa_home, "audit", "keygen", "ops", "--out-dir", str(tmp_path), check=True)
    run_exa(exa_home, "audit", "checkpoint", "--key", str(tmp_path / "ops.skey"), "--out", str(tmp_path / "cp.txt"), check=True)
    settle(exa_home)
    shutil.copy2(backup, exa_home / "state.db")
    (exa_home / "state.db.head").unlink()
    result = run_exa(exa_home, "audit", "verify", "--checkpoint", str(tmp_path / "cp.txt"), "--key", str(tmp_path / "ops.vkey"))
    assert result.returncode == 7 and "truncated" in result.stdout, result.stdout


def _run_bounded(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``exa`` with its address space capped (1 GiB over what it starts with is plenty) and a
    timeout: a reader that never stops fails here, not on the machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {**os.environ, "EXA_HOME": str(home), "COLUMNS": "200", **shared_opa_env()}
    return subprocess.run([str(EXA), *args], capture_output=True, text=True, env=env, timeout=30, preexec_fn=cap, check=False)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "large", "link-to-a-good-record"])
def test_a_record_that_is_no_small_file_is_refused_at_once(exa_home: Path, tmp_path: Path, kind: str) -> None:
    """``state.db.head`` replaced by a link to /dev/zero (read until memory ran out), a FIFO
    (waited on for ever), a file of 100 MB, or a link (even to a good record) is refused (exit
    10), naming the file, before anything is read from it beyond its limit."""
    seed(exa_home)
    record = exa_home / "state.db.head"
    good = tmp_path / "good.head"
    shutil.copy2(record, good)
    record.unlink()
    if kind == "dev-zero":
        record.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(record)
    elif kind == "large":
        record.write_bytes(b" " * (100 << 20))
    else:
        record.symlink_to(good)
    result = _run_bounded(exa_home, "hardware", "pools")
    assert result.returncode == 10, (result.stdout, result.stderr[-2000:])
    assert result.stderr.startswith(f"StateCorrupt: {record} cannot be read"), result.stderr
    expected = {"dev-zero": "a symbolic link", "fifo": "a FIFO", "large": "larger than 4096 bytes", "link-to-a-good-record": "a symbolic link"}
    assert expected[kind] in result.stderr

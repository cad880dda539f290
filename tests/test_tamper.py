"""Tampering with a real SQLite audit log is detected by ``exa audit verify`` (exit 7), at the right seq.

The log is written by real placements (pools applied, placed, fallen back, rejected, a blocked and
an allowed burst, a release) through the product and the real OPA. Each case copies that state,
drops the append-only triggers (someone with write access to the database), tampers with plain SQL,
and runs the real CLI as a subprocess. Every single entry is edited (its bytes, its stored hash, its
link, and re-hashed as a forger would), deleted, swapped with its neighbour, and the tail is cut at
every length against a checkpoint; signed checkpoints come from ``exa audit keygen`` and
``exa audit checkpoint --key`` and are verified with ``--key``.

Expected hashes are computed here with hashlib from the design (reference/audit-log.md), not with
examlops_policy.audit.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from examlops_policy.model import Pool, Workload
from examlops_policy.opa import stop_server
from tests.conftest import open_hardware, run_exa

EXIT_OK, EXIT_BAD_INPUT, EXIT_AUDIT = 0, 2, 7
DOMAIN_TAG = b"examlops-audit-v1\x00"


def exa(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_exa(home, *args)


@dataclass(frozen=True)
class Verdict:
    code: int
    problems: list[tuple[int, str]]
    output: str


def verify(home: Path, *extra: str) -> Verdict:
    """``exa audit verify --json``: the exit code and the (seq, kind) of every problem reported."""
    result = exa(home, "audit", "verify", "--json", *extra)
    output = result.stdout + result.stderr
    if result.returncode not in {EXIT_OK, EXIT_AUDIT}:
        return Verdict(result.returncode, [], output)
    report = json.loads(result.stdout)
    assert report["ok"] == (result.returncode == EXIT_OK), output
    return Verdict(result.returncode, [(p["seq"], p["kind"]) for p in report["problems"]], output)


# --- the real log --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Log:
    home: Path  # the untouched state (never tampered with)
    size: int
    checkpoint: Path  # `exa audit checkpoint` of the untouched log


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory, opa_home: Path) -> Iterator[Log]:
    """The real log of a few placements, decided by the session's OPA (``opa_home``)."""
    home = tmp_path_factory.mktemp("audit-log")
    hw = open_hardware(home)
    try:
        hw.apply(
            [
                Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5, supports_fractions=True),
                Pool("hpc-mi300", "hpc", "amd", 4, "eu"),
                Pool("cloud-a100", "cloud", "nvidia", 100, "us"),
            ]
        )
        placed = hw.place(Workload("train", "amd", engine="vllm", target="hpc"))
        assert placed.decision.ok
        assert hw.place(Workload("train", "tpu", engine="generic", target="hpc")).decision.ok  # fallback
        assert not hw.place(Workload("train", "amd", engine="sglang")).decision.ok  # not portable
        assert not hw.burst(Workload("train", "nvidia", residency="eu-only", allow_burst=True)).decision.ok
        assert hw.burst(Workload("serve", "nvidia", allow_burst=True)).decision.ok
        hw.release(placed.id)
        size = len(hw.store.audit_rows())
    finally:
        hw.close()
        stop_server(home)
    con = sqlite3.connect(home / "state.db")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    checkpoint = home.parent / "checkpoint.txt"
    result = exa(home, "audit", "checkpoint", "--out", str(checkpoint))
    assert result.returncode == EXIT_OK, result.stderr
    assert size >= 8, "the placements above write at least 8 audit entries"
    clean = verify(home)
    assert (clean.code, clean.problems) == (EXIT_OK, []), clean.output
    yield Log(home, size, checkpoint)
    stop_server(home)


_copies = 0


def tamper(log: Log, tmp: Path, *statements: tuple[str, tuple[object, ...]]) -> Path:
    """A copy of the real state with the triggers dropped and ``statements`` run on it."""
    global _copies
    _copies += 1
    home = tmp / f"copy-{_copies}"
    home.mkdir()
    shutil.copy2(log.home / "state.db", home / "state.db")
    con = sqlite3.connect(home / "state.db", isolation_level=None)
    try:
        con.execute("BEGIN")
        for (trigger,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit_log'").fetchall():
            con.execute(f'DROP TRIGGER "{trigger}"')
        for sql, params in statements:
            con.execute(sql, params)
        con.execute("COMMIT")
    finally:
        con.close()
    return home


def row(log: Log, seq: int) -> tuple[bytes, bytes, bytes]:
    """(prev_hash, entry_hash, entry) of one row of the untouched log."""
    con = sqlite3.connect(log.home / "state.db")
    try:
        found = con.execute("SELECT prev_hash, entry_hash, entry FROM audit_log WHERE seq = ?", (seq,)).fetchone()
    finally:
        con.close()
    assert found is not None, seq
    return bytes(found[0]), bytes(found[1]), bytes(found[2])


def backdated(entry: bytes) -> bytes:
    """The same entry with its timestamp changed, in the same canonical form."""
    data = json.loads(entry)
    data["ts"] = "2000-01-01T00:00:00.000000Z"
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def reworded(entry: bytes) -> bytes:
    """The same entry said by another writer (its time kept), in the same canonical form."""
    data = json.loads(entry)
    data["source"] = "forger"
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def chain_hash(prev: bytes, seq: int, canonical: bytes) -> bytes:
    leaf = hashlib.sha256(b"\x00" + canonical).digest()
    return hashlib.sha256(DOMAIN_TAG + prev + seq.to_bytes(8, "big") + leaf).digest()


def every_seq(log: Log, case: Callable[[int], tuple[Verdict, list[tuple[int, str]]]], seqs: range | None = None) -> None:
    """Run ``case`` for each seq; fail once, listing every seq whose verdict was wrong."""
    wrong = []
    for seq in seqs or range(1, log.size + 1):
        got, want = case(seq)
        if got.code != EXIT_AUDIT or got.problems != want:
            wrong.append(f"seq {seq}: exit {got.code}, problems {got.problems}, want {want}\n{got.output[-500:]}")
    assert not wrong, "\n".join(wrong)


def test_the_untouched_log_verifies_with_and_without_its_checkpoint(log: Log) -> None:
    assert (verify(log.home).code, verify(log.home, "--checkpoint", str(log.checkpoint)).code) == (EXIT_OK, EXIT_OK)
    prev, head, entry = row(log, 1)
    assert prev == bytes(32) and chain_hash(prev, 1, entry) == head, "entry 1 links to the genesis hash"


def test_the_append_only_guard_stops_an_accidental_edit(log: Log, tmp_path: Path) -> None:
    """The triggers the cases above drop: a guard against accidents (not a security boundary)."""
    home = tmp_path / "guarded"
    home.mkdir()
    shutil.copy2(log.home / "state.db", home / "state.db")
    con = sqlite3.connect(home / "state.db")
    try:
        for sql in ("UPDATE audit_log SET entry = entry || ' ' WHERE seq = 1", "DELETE FROM audit_log WHERE seq = 1"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                con.execute(sql)
    finally:
        con.close()
    assert verify(home).code == EXIT_OK


# --- edits -----------------------------------------------------------------------------------------


def test_every_edited_entry_is_detected_at_its_seq(log: Log, tmp_path: Path) -> None:
    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        home = tamper(log, tmp_path, ("UPDATE audit_log SET entry = ? WHERE seq = ?", (backdated(row(log, seq)[2]), seq)))
        return verify(home), [(seq, "edited")]

    every_seq(log, case)


def test_every_edited_entry_hash_is_detected_at_its_seq(log: Log, tmp_path: Path) -> None:
    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        forged = hashlib.sha256(b"forged entry hash %d" % seq).digest()
        home = tamper(log, tmp_path, ("UPDATE audit_log SET entry_hash = ? WHERE seq = ?", (forged, seq)))
        return verify(home), [(seq, "edited")]

    every_seq(log, case)


def test_every_edited_link_is_detected_at_its_seq(log: Log, tmp_path: Path) -> None:
    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        forged = hashlib.sha256(b"forged prev hash %d" % seq).digest()
        home = tamper(log, tmp_path, ("UPDATE audit_log SET prev_hash = ? WHERE seq = ?", (forged, seq)))
        return verify(home), [(seq, "edited")]

    every_seq(log, case)


def test_every_rehashed_edit_is_detected_against_a_checkpoint(log: Log, tmp_path: Path) -> None:
    """A forger who edits an entry and recomputes its hash breaks the next entry's link (the
    report blames the forged entry, which its honest successor does not link to); the last entry
    re-hashed is only caught by the checkpoint's head."""

    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        prev, _, entry = row(log, seq)
        edited = reworded(entry)
        home = tamper(
            log, tmp_path, ("UPDATE audit_log SET entry = ?, entry_hash = ? WHERE seq = ?", (edited, chain_hash(prev, seq, edited), seq))
        )
        want = [(seq, "inserted")] if seq < log.size else [(seq, "mismatch")]
        return verify(home, "--checkpoint", str(log.checkpoint)), want

    every_seq(log, case)


def test_a_rehashed_tail_passes_the_chain_alone(log: Log, tmp_path: Path) -> None:
    """Why checkpoints exist: the chain alone cannot see a re-hashed last entry that keeps its time."""
    prev, _, entry = row(log, log.size)
    edited = reworded(entry)
    home = tamper(log, tmp_path, ("UPDATE audit_log SET entry = ?, entry_hash = ? WHERE seq = ?", (edited, chain_hash(prev, log.size, edited), log.size)))
    assert verify(home).code == EXIT_OK
    assert verify(home, "--checkpoint", str(log.checkpoint)).problems == [(log.size, "mismatch")]


def test_a_rehashed_tail_dated_before_the_entry_it_follows_is_caught_by_its_time(log: Log, tmp_path: Path) -> None:
    """Entries are written in time order: one dated before the entry it follows was not."""
    prev, _, entry = row(log, log.size)
    edited = backdated(entry)
    home = tamper(log, tmp_path, ("UPDATE audit_log SET entry = ?, entry_hash = ? WHERE seq = ?", (edited, chain_hash(prev, log.size, edited), log.size)))
    got = verify(home)
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size, "time")]), got.output
    assert f"entry {log.size} is dated 2000-01-01T00:00:00.000000Z, before entry {log.size - 1}" in exa(home, "audit", "verify").stdout


# --- deletions, reorders, truncation ---------------------------------------------------------------


def test_every_deleted_entry_is_detected_at_its_seq(log: Log, tmp_path: Path) -> None:
    """The chain alone finds a deletion inside the log; the checkpoint finds the last one's."""

    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        home = tamper(log, tmp_path, ("DELETE FROM audit_log WHERE seq = ?", (seq,)))
        if seq == log.size:
            return verify(home, "--checkpoint", str(log.checkpoint)), [(seq, "truncated")]
        alone = verify(home)
        anchored = verify(home, "--checkpoint", str(log.checkpoint))
        # Both must report it; the anchored verdict is returned when it differs from the chain's.
        same = (anchored.code, anchored.problems) == (alone.code, alone.problems)
        return (alone if same else anchored), [(seq, "deleted")]

    every_seq(log, case)


def test_every_swap_of_neighbours_is_detected_at_the_lower_seq(log: Log, tmp_path: Path) -> None:
    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        home = tamper(
            log,
            tmp_path,
            ("UPDATE audit_log SET seq = -1 WHERE seq = ?", (seq,)),
            ("UPDATE audit_log SET seq = ? WHERE seq = ?", (seq, seq + 1)),
            ("UPDATE audit_log SET seq = ? WHERE seq = -1", (seq + 1,)),
        )
        return verify(home), [(seq, "reordered")]

    every_seq(log, case, range(1, log.size))


def test_a_swap_of_distant_entries_is_reported_at_both_seqs(log: Log, tmp_path: Path) -> None:
    first, last = 2, log.size - 1
    home = tamper(
        log,
        tmp_path,
        ("UPDATE audit_log SET seq = -1 WHERE seq = ?", (first,)),
        ("UPDATE audit_log SET seq = ? WHERE seq = ?", (first, last)),
        ("UPDATE audit_log SET seq = ? WHERE seq = -1", (last,)),
    )
    got = verify(home, "--checkpoint", str(log.checkpoint))
    assert got.code == EXIT_AUDIT
    assert {seq for seq, _ in got.problems} == {first, last}, got.problems


def test_every_tail_truncation_is_detected_against_the_checkpoint(log: Log, tmp_path: Path) -> None:
    """Cut the log to seq-1 entries: the checkpoint names the first missing seq."""

    def case(seq: int) -> tuple[Verdict, list[tuple[int, str]]]:
        home = tamper(log, tmp_path, ("DELETE FROM audit_log WHERE seq >= ?", (seq,)))
        return verify(home, "--checkpoint", str(log.checkpoint)), [(seq, "truncated")]

    every_seq(log, case)


def test_a_truncated_tail_passes_the_chain_alone(log: Log, tmp_path: Path) -> None:
    """Why checkpoints exist: without one, a shorter log is indistinguishable from an older one,
    unless rows the lost entries described are still there to give it away (decisions that lost
    their audit entries, a release the log no longer records); a truncation that also rolls every
    table back to what the shorter log describes passes."""
    home = tamper(log, tmp_path, ("DELETE FROM audit_log WHERE seq > ?", (log.size // 2,)))
    report = verify(home)
    assert report.code == EXIT_AUDIT and {kind for _, kind in report.problems} == {"record", "state"}
    assert all(seq == 0 for seq, kind in report.problems if kind == "record")
    orphans = "(SELECT json_extract(entry, '$.decision_id') FROM audit_log WHERE kind = 'decision')"
    released = "(SELECT json_extract(entry, '$.decision_id') FROM audit_log WHERE kind IN ('release', 'expired'))"
    cut = tamper(
        log, tmp_path,
        ("DELETE FROM audit_log WHERE seq > ?", (log.size // 2,)),
        (f"DELETE FROM burst_events WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM holdings WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM allocations WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM decisions WHERE id NOT IN {orphans}", ()),
    )  # fmt: skip
    report = verify(cut)
    assert report.code == EXIT_AUDIT and {kind for _, kind in report.problems} == {"state"}  # the release gives it away
    rolled_back = tamper(
        log, tmp_path,
        ("DELETE FROM audit_log WHERE seq > ?", (log.size // 2,)),
        (f"DELETE FROM burst_events WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM holdings WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM allocations WHERE decision_id NOT IN {orphans}", ()),
        (f"DELETE FROM decisions WHERE id NOT IN {orphans}", ()),
        (f"UPDATE decisions SET released_at = NULL, released_ts = NULL WHERE id NOT IN {released}", ()),
        (f"UPDATE allocations SET released_at = NULL WHERE decision_id NOT IN {released}", ()),
    )  # fmt: skip
    report = verify(rolled_back)
    messages = [p["message"] for p in json.loads(exa(rolled_back, "audit", "verify", "--json").stdout)["problems"]]
    # Every row agrees with the shorter log but the pools' summaries, which still count the release.
    assert report.code == EXIT_AUDIT and messages and all("pools.free" in m or "pools.capacity" in m for m in messages), messages


def test_the_text_report_names_the_seq(log: Log, tmp_path: Path) -> None:
    seq = log.size // 2
    home = tamper(log, tmp_path, ("UPDATE audit_log SET entry = ? WHERE seq = ?", (backdated(row(log, seq)[2]), seq)))
    result = exa(home, "audit", "verify")
    assert result.returncode == EXIT_AUDIT
    assert f"seq {seq}: edited" in result.stdout and "does NOT verify" in result.stdout


def test_a_checkpoint_of_a_tampered_log_is_refused(log: Log, tmp_path: Path) -> None:
    home = tamper(log, tmp_path, ("DELETE FROM audit_log WHERE seq = ?", (2,)))
    result = exa(home, "audit", "checkpoint", "--out", str(tmp_path / "cp.txt"))
    assert result.returncode == EXIT_AUDIT, result.stdout + result.stderr
    assert "seq 2 deleted" in result.stderr
    assert not (tmp_path / "cp.txt").exists()


# --- signed checkpoints ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Signed:
    home: Path
    checkpoint: Path
    vkey: Path
    other_vkey: Path


@pytest.fixture(scope="module")
def signed(log: Log, tmp_path_factory: pytest.TempPathFactory) -> Signed:
    keys = tmp_path_factory.mktemp("keys")
    for name in ("auditor", "mallory"):
        result = exa(log.home, "audit", "keygen", name, "--out-dir", str(keys))
        assert result.returncode == EXIT_OK, result.stderr
    skey = keys / "auditor.skey"
    assert stat.S_IMODE(skey.stat().st_mode) == 0o600, "the signer key is private"
    assert skey.read_text().startswith("PRIVATE+KEY+auditor+")
    checkpoint = keys / "signed-checkpoint.txt"
    result = exa(log.home, "audit", "checkpoint", "--key", str(skey), "--out", str(checkpoint))
    assert result.returncode == EXIT_OK, result.stderr
    lines = checkpoint.read_text(encoding="utf-8").split("\n")
    assert lines[1] == str(log.size) and lines[3] == "" and lines[4].startswith("\u2014 auditor "), lines
    return Signed(log.home, checkpoint, keys / "auditor.vkey", keys / "mallory.vkey")


def test_a_signed_checkpoint_verifies_with_its_key(signed: Signed) -> None:
    got = verify(signed.home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_OK, []), got.output


def test_a_signed_checkpoint_does_not_verify_with_another_key(log: Log, signed: Signed) -> None:
    got = verify(signed.home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.other_vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size, "signature")]), got.output


def test_an_edited_signed_checkpoint_is_detected(log: Log, signed: Signed, tmp_path: Path) -> None:
    """Moving the anchor back (to hide a truncation) breaks the signature."""
    text = signed.checkpoint.read_text(encoding="utf-8").split("\n")
    text[1] = str(log.size - 1)
    text[2] = base64.b64encode(row(log, log.size - 1)[1]).decode()
    moved = tmp_path / "moved.txt"
    moved.write_text("\n".join(text), encoding="utf-8")
    got = verify(signed.home, "--checkpoint", str(moved), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size - 1, "signature")]), got.output


def test_an_unsigned_checkpoint_does_not_pass_for_a_signed_one(log: Log, signed: Signed) -> None:
    got = verify(signed.home, "--checkpoint", str(log.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size, "signature")]), got.output


@pytest.mark.parametrize("kind", ["edit", "delete", "swap", "truncate"])
def test_tampering_is_detected_against_a_signed_checkpoint(log: Log, signed: Signed, tmp_path: Path, kind: str) -> None:
    seq = log.size // 2
    cases: dict[str, list[tuple[str, tuple[object, ...]]]] = {
        "edit": [("UPDATE audit_log SET entry = ? WHERE seq = ?", (backdated(row(log, seq)[2]), seq))],
        "delete": [("DELETE FROM audit_log WHERE seq = ?", (seq,))],
        "swap": [
            ("UPDATE audit_log SET seq = -1 WHERE seq = ?", (seq,)),
            ("UPDATE audit_log SET seq = ? WHERE seq = ?", (seq, seq + 1)),
            ("UPDATE audit_log SET seq = ? WHERE seq = -1", (seq + 1,)),
        ],
        "truncate": [("DELETE FROM audit_log WHERE seq >= ?", (seq,))],
    }
    home = tamper(log, tmp_path, *cases[kind])
    want = {"edit": "edited", "delete": "deleted", "swap": "reordered", "truncate": "truncated"}[kind]
    got = verify(home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(seq, want)]), got.output


def test_a_whole_rewritten_log_fails_the_signed_checkpoint(log: Log, signed: Signed, tmp_path: Path) -> None:
    """A forger re-hashes every entry from seq 2 on: the chain verifies, the signed anchor does not,
    and a checkpoint the forger signs with their own key does not pass for the auditor's."""
    statements: list[tuple[str, tuple[object, ...]]] = []
    prev = row(log, 1)[1]
    for seq in range(2, log.size + 1):
        _, _, entry = row(log, seq)
        edited = reworded(entry)
        head = chain_hash(prev, seq, edited)
        statements.append(("UPDATE audit_log SET prev_hash = ?, entry_hash = ?, entry = ? WHERE seq = ?", (prev, head, edited, seq)))
        prev = head
    # prev_hash/entry_hash are UNIQUE: rewrite from the end so no intermediate state collides.
    home = tamper(log, tmp_path, *reversed(statements))
    assert verify(home).code == EXIT_OK, "a consistent rewrite is invisible to the chain alone"
    got = verify(home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size, "mismatch")]), got.output
    forged = tmp_path / "forged.txt"
    mallory = signed.other_vkey.with_suffix(".skey")
    assert exa(home, "audit", "checkpoint", "--key", str(mallory), "--out", str(forged)).returncode == EXIT_OK
    got = verify(home, "--checkpoint", str(forged), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(log.size, "signature")]), got.output


def test_entries_the_writer_signed_after_a_signed_checkpoint_verify(log: Log, signed: Signed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No false alarm: the checkpoint anchors a prefix; the log may grow past it with entries the
    writer of record signed (``EXA_SIGNING_KEY``), and verify says how many lie after it."""
    home = tamper(log, tmp_path)
    monkeypatch.setenv("EXA_SIGNING_KEY", str(signed.vkey.with_suffix(".skey")))
    hw = open_hardware(home)
    try:
        assert hw.place(Workload("later", "nvidia", target="hpc")).decision.ok
        after = len(hw.store.audit_rows()) - log.size
        assert after > 0
    finally:
        hw.close()
        stop_server(home)
    got = verify(home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_OK, []), got.output
    text = exa(home, "audit", "verify", "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey)).stdout
    assert f"matches checkpoint at size {log.size}; {after} entr" in text and "after it, each signed by auditor" in text, text


@pytest.mark.parametrize("writer", ["nobody", "mallory"])
def test_an_entry_after_a_signed_checkpoint_the_writer_did_not_sign_is_refused(
    log: Log, signed: Signed, tmp_path: Path, writer: str
) -> None:
    """A lease renewed far ahead by someone who can write the state but does not hold the writer's
    key (unsigned, or signed with their own) verifies against the chain and the checkpoint taken
    before it, which covers only the entries up to its size; with the writer's key it does not."""
    home = tamper(log, tmp_path)
    writer_key = {"EXA_SIGNING_KEY": str(signed.vkey.with_suffix(".skey"))}
    placed = run_exa(home, "hardware", "place", "leased", "--accelerator", "nvidia", "--target", "hpc", "--lease", "1h", "--json", env=writer_key)
    assert placed.returncode == EXIT_OK, placed.stderr
    ident = json.loads(placed.stdout)["decision_id"]
    forger = {"EXA_SIGNING_KEY": str(signed.other_vkey.with_suffix(".skey"))} if writer == "mallory" else {"EXA_SIGNING_KEY": ""}
    renewed = run_exa(home, "hardware", "renew", ident, "--lease", "366d", env=forger)
    assert renewed.returncode == EXIT_OK, renewed.stderr
    assert verify(home).code == EXIT_OK, "the renewal verifies against the chain alone"
    assert verify(home, "--checkpoint", str(signed.checkpoint)).code == EXIT_OK, "and against the checkpoint without the key"
    size = json.loads(exa(home, "audit", "verify", "--json").stdout)["size"]
    got = verify(home, "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(size, "signature")]), got.output
    said = "is not signed by key auditor" if writer == "nobody" else "carries a signature that is not key auditor's"
    assert said in exa(home, "audit", "verify", "--checkpoint", str(signed.checkpoint), "--key", str(signed.vkey)).stdout


def test_a_decision_entry_whose_project_is_not_its_records_is_refused(log: Log, tmp_path: Path) -> None:
    """The last entry re-hashed to name another project (and the decisions row with it): the chain
    and the tables agree with it, the record it vouches for does not."""
    home = tamper(log, tmp_path)
    made = run_exa(home, "hardware", "place", "billed", "--accelerator", "nvidia", "--target", "hpc", "--project", "inference-eu", "--json")
    assert made.returncode in (EXIT_OK, 3), made.stderr
    ident = json.loads(made.stdout)["decision_id"]
    con = sqlite3.connect(home / "state.db")
    try:
        seq, prev, entry = con.execute("SELECT seq, prev_hash, entry FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
    finally:
        con.close()
    data = json.loads(entry)
    assert (data["kind"], data["decision_id"], data["project"]) == ("decision", ident, "inference-eu")
    data["project"] = "research"
    forged = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    home = tamper(
        Log(home, log.size, log.checkpoint), tmp_path,
        ("UPDATE audit_log SET entry = ?, entry_hash = ? WHERE seq = ?", (forged, chain_hash(bytes(prev), seq, forged), seq)),
        ("UPDATE decisions SET project = 'research' WHERE id = ?", (ident,)),
    )  # fmt: skip
    got = verify(home)
    assert (got.code, got.problems) == (EXIT_AUDIT, [(seq, "record")]), got.output
    assert f'audit entry {seq} says project "research" for decision {ident[:12]}, the record it vouches for says "inference-eu"' in exa(home, "audit", "verify").stdout


def test_a_key_without_a_checkpoint_holds_every_entry_to_it(log: Log, signed: Signed, tmp_path: Path) -> None:
    """With no checkpoint to vouch for a prefix, every entry must be the writer's: a log written
    without its key is one run of unsigned entries; one written with it from the start verifies."""
    got = verify(signed.home, "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_AUDIT, [(1, "signature")]), got.output
    assert f"entries 1..{log.size} are not signed by key auditor" in exa(signed.home, "audit", "verify", "--key", str(signed.vkey)).stdout
    home = tmp_path / "signed-from-the-start"
    writer = {"EXA_SIGNING_KEY": str(signed.vkey.with_suffix(".skey"))}
    run_exa(home, "hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd", "--count", "4", "--region", "eu", env=writer, check=True)
    run_exa(home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "vllm", env=writer, check=True)
    got = verify(home, "--key", str(signed.vkey))
    assert (got.code, got.problems) == (EXIT_OK, []), got.output
    assert "✓ audit log verifies: " in (text := exa(home, "audit", "verify", "--key", str(signed.vkey)).stdout) and "each signed by auditor" in text
    got = verify(home, "--key", str(signed.other_vkey))
    assert got.code == EXIT_AUDIT and {kind for _, kind in got.problems} == {"signature"}, got.output

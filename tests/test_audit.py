"""The audit hash chain, checkpoints and note keys (examlops_policy.audit).

Known values are computed here with hashlib, not with the module under test; the signed-note
vectors come from c2sp.org/signed-note and golang.org/x/mod/sumdb/note (note_test.go).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Callable
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from examlops_policy.audit import (
    DOMAIN_TAG,
    GENESIS,
    ORIGIN,
    AuditRow,
    Checkpoint,
    SigningKey,
    VerifierKey,
    VerifyReport,
    canonical_bytes,
    entry_hash,
    format_checkpoint,
    generate_key,
    leaf_hash,
    make_checkpoint,
    next_row,
    parse_checkpoint,
    sign_checkpoint,
    sign_note,
    verify_chain,
    verify_checkpoint_signature,
    verify_note,
)
from examlops_policy.errors import AuditIntegrityError, SpecError

SIZE = 20
DASH = "\u2014"


def build_chain(size: int = SIZE, start: list[AuditRow] | None = None, tag: str = "") -> list[AuditRow]:
    """A valid chain of `size` rows, continuing `start` when given."""
    rows = list(start or [])
    while len(rows) < size:
        seq = len(rows) + 1
        entry = {"kind": "decision", "n": seq, "pool": "gpu-a100-eu", "note": f"réservé ✓{tag}"}
        rows.append(next_row(rows[-1] if rows else None, entry))
    return rows


CHAIN = build_chain()


def kinds(report: VerifyReport) -> list[tuple[int, str]]:
    return [(p.seq, p.kind) for p in report.problems]


def checkpoint_at(size: int, rows: list[AuditRow] = CHAIN) -> Checkpoint:
    return make_checkpoint(size, rows[size - 1].entry_hash if size else GENESIS)


# --- canonical bytes and hashes ---


def test_canonical_bytes_do_not_depend_on_key_order() -> None:
    a = canonical_bytes({"b": 1, "a": {"y": [1, 2], "x": None}})
    b = canonical_bytes({"a": {"x": None, "y": [1, 2]}, "b": 1})
    assert a == b == b'{"a":{"x":null,"y":[1,2]},"b":1}'


def test_canonical_bytes_keep_unicode_as_utf8() -> None:
    want = '{"pool":"Zürich ✓","ключ":"値"}'.encode()
    assert canonical_bytes({"ключ": "値", "pool": "Zürich ✓"}) == want


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"x": float("nan")}, id="nan"),
        pytest.param({"x": float("inf")}, id="infinity"),
        pytest.param({"x": [float("-inf")]}, id="nested-minus-infinity"),
        pytest.param({"x": {1: "a"}}, id="integer-key"),
        pytest.param({"x": b"raw"}, id="bytes-value"),
        pytest.param({"x": "\ud800"}, id="lone-surrogate"),
    ],
)
def test_canonical_bytes_reject_what_json_cannot_carry_exactly(entry: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        canonical_bytes(entry)


def test_leaf_hash_is_rfc6962_leaf_hash() -> None:
    # RFC 6962 hash of the empty leaf (transparency-dev/merkle testonly constants, root of size 1).
    assert leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert leaf_hash(b'{"a":1}') == hashlib.sha256(b'\x00{"a":1}').digest()


@pytest.mark.parametrize("seq", [1, 258, 2**64 - 1])
def test_entry_hash_covers_tag_prev_big_endian_seq_and_leaf(seq: int) -> None:
    prev, leaf = bytes(range(32)), hashlib.sha256(b"leaf").digest()
    want = hashlib.sha256(b"examlops-audit-v1\x00" + prev + struct.pack(">Q", seq) + leaf).digest()
    assert entry_hash(prev, seq, leaf) == want
    assert DOMAIN_TAG == b"examlops-audit-v1\x00" and GENESIS == b"\x00" * 32


@pytest.mark.parametrize(
    ("prev", "seq", "leaf"),
    [(bytes(32), -1, bytes(32)), (bytes(32), 2**64, bytes(32)), (bytes(31), 1, bytes(32)), (bytes(32), 1, b"")],
    ids=["negative-seq", "seq-over-u64", "short-prev", "short-leaf"],
)
def test_entry_hash_rejects_out_of_range_inputs(prev: bytes, seq: int, leaf: bytes) -> None:
    with pytest.raises(SpecError):
        entry_hash(prev, seq, leaf)


def test_next_row_starts_at_genesis_and_links_each_row_to_the_previous() -> None:
    first = next_row(None, {"a": 1})
    assert (first.seq, first.prev_hash, first.canonical) == (1, GENESIS, b'{"a":1}')
    assert first.entry_hash == entry_hash(GENESIS, 1, leaf_hash(b'{"a":1}'))
    second = next_row(first, {"a": 2})
    assert (second.seq, second.prev_hash) == (2, first.entry_hash)


# --- verify_chain: what the chain alone detects ---


def test_intact_chain_verifies() -> None:
    report = verify_chain(CHAIN)
    assert report == VerifyReport(ok=True, size=SIZE, head=CHAIN[-1].entry_hash, problems=())
    report.raise_for_problems()


def test_empty_log_verifies_at_genesis() -> None:
    assert verify_chain([]) == VerifyReport(ok=True, size=0, head=GENESIS, problems=())


def _flip(value: bytes) -> bytes:
    return bytes([value[0] ^ 1]) + value[1:]


def _edit(row: AuditRow, field: str) -> AuditRow:
    if field == "prev_hash":
        return replace(row, prev_hash=_flip(row.prev_hash))
    if field == "entry_hash":
        return replace(row, entry_hash=_flip(row.entry_hash))
    return replace(row, canonical=row.canonical.replace(b"gpu-a100-eu", b"gpu-h100-eu"))


@pytest.mark.parametrize("field", ["canonical", "prev_hash", "entry_hash"])
@pytest.mark.parametrize("seq", range(1, SIZE + 1))
def test_every_single_entry_edit_is_reported_at_that_entry(seq: int, field: str) -> None:
    rows = list(CHAIN)
    rows[seq - 1] = _edit(rows[seq - 1], field)
    report = verify_chain(rows)
    assert not report.ok
    assert kinds(report) == [(seq, "edited")]


@pytest.mark.parametrize("seq", range(1, SIZE))
def test_every_single_deletion_is_reported_at_the_missing_seq(seq: int) -> None:
    rows = CHAIN[: seq - 1] + CHAIN[seq:]
    report = verify_chain(rows)
    assert not report.ok
    assert kinds(report) == [(seq, "deleted")]


def test_a_run_of_deletions_is_one_problem_naming_the_range() -> None:
    report = verify_chain(CHAIN[:4] + CHAIN[7:])
    assert kinds(report) == [(5, "deleted")]
    assert "5..7" in report.problems[0].message


def test_deleting_the_last_entry_is_invisible_to_the_chain_alone() -> None:
    # Documented limitation: only a checkpoint shows a shortened tail (see truncation tests).
    assert verify_chain(CHAIN[:-1]).ok


def _swap_order(rows: list[AuditRow], i: int) -> list[AuditRow]:
    """Rows handed over out of order: each keeps its own seq."""
    out = list(rows)
    out[i], out[i + 1] = out[i + 1], out[i]
    return out


def _swap_seq(rows: list[AuditRow], i: int) -> list[AuditRow]:
    """Seq values exchanged in the store: rows still come in seq order."""
    out = list(rows)
    out[i], out[i + 1] = replace(rows[i + 1], seq=rows[i].seq), replace(rows[i], seq=rows[i + 1].seq)
    return out


@pytest.mark.parametrize("swap", [_swap_order, _swap_seq], ids=["row-order", "seq-values"])
@pytest.mark.parametrize("seq", range(1, SIZE))
def test_every_adjacent_swap_is_reported_as_reordered_at_the_lower_seq(
    seq: int, swap: Callable[[list[AuditRow], int], list[AuditRow]]
) -> None:
    report = verify_chain(swap(CHAIN, seq - 1))
    assert not report.ok
    assert kinds(report) == [(seq, "reordered")]


def test_an_entry_far_out_of_order_is_reported_as_reordered() -> None:
    rows = CHAIN[:3] + CHAIN[4:10] + [CHAIN[3]] + CHAIN[10:]
    assert (4, "reordered") in kinds(verify_chain(rows))


def test_a_second_entry_claiming_a_seq_is_reported_as_inserted() -> None:
    forged = next_row(CHAIN[5], {"kind": "decision", "pool": "forged"})
    rows = CHAIN[:7] + [replace(forged, seq=7)] + CHAIN[7:]
    assert kinds(verify_chain(rows)) == [(7, "inserted")]


def _replace_with_forgery(seq: int) -> list[AuditRow]:
    """Entry `seq` swapped for a new, correctly hashed entry linking to entry seq - 1."""
    rows = list(CHAIN)
    rows[seq - 1] = next_row(CHAIN[seq - 2] if seq > 1 else None, {"kind": "decision", "pool": "forged"})
    return rows


@pytest.mark.parametrize("seq", range(1, SIZE - 1))
def test_a_rehashed_forgery_in_place_of_an_entry_is_reported_at_that_entry(seq: int) -> None:
    report = verify_chain(_replace_with_forgery(seq))
    assert not report.ok
    assert kinds(report) == [(seq, "inserted")]


def test_a_forgery_just_before_the_head_is_pinned_down_by_the_checkpoint() -> None:
    # Without a successor or an anchor vouching for the head, either of the last two may be forged.
    alone = verify_chain(_replace_with_forgery(SIZE - 1))
    assert kinds(alone) == [(SIZE, "inserted")]
    assert f"entry {SIZE} does not link to entry {SIZE - 1}" in alone.problems[0].message
    anchored = verify_chain(_replace_with_forgery(SIZE - 1), checkpoint_at(SIZE))
    assert kinds(anchored) == [(SIZE - 1, "inserted")]


def test_an_appended_entry_that_does_not_link_to_the_head_is_reported_as_inserted() -> None:
    canonical, prev = canonical_bytes({"kind": "decision", "pool": "forged"}), CHAIN[10].entry_hash
    stray = AuditRow(SIZE + 1, prev, entry_hash(prev, SIZE + 1, leaf_hash(canonical)), canonical)
    assert kinds(verify_chain(CHAIN + [stray])) == [(SIZE + 1, "inserted")]


def test_a_first_entry_that_does_not_start_from_genesis_is_reported_as_inserted() -> None:
    prev = hashlib.sha256(b"elsewhere").digest()
    canonical = canonical_bytes({"a": 1})
    row = AuditRow(1, prev, entry_hash(prev, 1, leaf_hash(canonical)), canonical)
    assert kinds(verify_chain([row])) == [(1, "inserted")]


def test_several_problems_are_all_reported_in_log_order() -> None:
    rows = list(CHAIN)
    rows[2] = _edit(rows[2], "canonical")
    rows[11] = _edit(rows[11], "canonical")
    del rows[15]
    report = verify_chain(rows)
    assert kinds(report) == [(3, "edited"), (12, "edited"), (16, "deleted")]
    with pytest.raises(AuditIntegrityError, match="seq 12 edited"):
        report.raise_for_problems()


# --- verify_chain with a checkpoint ---


@pytest.mark.parametrize("kept", range(0, SIZE))
def test_a_tail_truncated_below_the_checkpoint_is_reported_at_the_first_missing_seq(kept: int) -> None:
    report = verify_chain(CHAIN[:kept], checkpoint_at(SIZE))
    assert not report.ok
    assert kinds(report) == [(kept + 1, "truncated")]


@pytest.mark.parametrize("size", [0, 1, 10, SIZE])
def test_a_log_that_reaches_and_holds_the_checkpoint_verifies(size: int) -> None:
    assert verify_chain(CHAIN, checkpoint_at(size)).ok


@pytest.mark.parametrize("from_seq", [1, 12, SIZE])
def test_a_forged_rehashed_tail_passes_the_chain_but_not_the_checkpoint(from_seq: int) -> None:
    forged = build_chain(SIZE + 5, start=CHAIN[: from_seq - 1], tag=" (forged)")
    assert verify_chain(forged).ok
    report = verify_chain(forged, checkpoint_at(SIZE))
    assert kinds(report) == [(SIZE, "mismatch")]


def test_an_empty_checkpoint_must_hold_the_genesis_head() -> None:
    assert verify_chain([], make_checkpoint(0, GENESIS)).ok
    assert kinds(verify_chain([], make_checkpoint(0, bytes([1]) * 32))) == [(0, "mismatch")]


# --- checkpoint text ---


def test_format_checkpoint_writes_origin_size_and_base64_head() -> None:
    head = bytes(range(32))
    text = format_checkpoint(make_checkpoint(3, head))
    assert text == f"examlops.example/audit\n3\n{base64.b64encode(head).decode()}\n"
    assert ORIGIN == "examlops.example/audit"


def test_checkpoint_round_trips_through_text_signed_and_unsigned() -> None:
    skey, _ = generate_key("audit.example/log")
    cp = make_checkpoint(SIZE, CHAIN[-1].entry_hash, origin="audit.example/log")
    signed = sign_checkpoint(cp, SigningKey.parse(skey))
    assert parse_checkpoint(format_checkpoint(cp)) == cp
    assert parse_checkpoint(format_checkpoint(signed)) == signed
    lines = format_checkpoint(signed).split("\n")
    assert lines[3] == "" and lines[4].startswith(f"{DASH} audit.example/log ")


GOOD_HEAD = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param("", "newline", id="empty"),
        pytest.param(f"o\n1\n{GOOD_HEAD}", "newline", id="no-final-newline"),
        pytest.param(f"o\n{GOOD_HEAD}\n", "3 lines", id="two-lines"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\nextension\n", "3 lines", id="extension-line"),
        pytest.param(f"\n1\n{GOOD_HEAD}\n", "origin", id="empty-origin"),
        pytest.param(f"o\n007\n{GOOD_HEAD}\n", "leading zeros", id="leading-zeros"),
        pytest.param(f"o\n-1\n{GOOD_HEAD}\n", "decimal", id="negative-size"),
        pytest.param(f"o\n\u0663\n{GOOD_HEAD}\n", "decimal", id="non-ascii-digit"),
        pytest.param("o\n1\nnot base64!\n", "base64", id="head-not-base64"),
        pytest.param(f"o\n1\n{base64.b64encode(bytes(16)).decode()}\n", "32 bytes", id="head-too-short"),
        pytest.param(f"o\t\n1\n{GOOD_HEAD}\n", "control", id="control-character"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\n\n", "signature lines", id="blank-line-without-signatures"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\n\n- k AAAAAAA=\n", "malformed signature line", id="ascii-dash"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\n\n{DASH} a+b AAAAAAA=\n", "malformed signature line", id="plus-in-key-name"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\n\n{DASH} k !!!\n", "base64", id="signature-not-base64"),
        pytest.param(f"o\n1\n{GOOD_HEAD}\n\n{DASH} k AAAA\n", "shorter", id="signature-shorter-than-key-id"),
    ],
)
def test_parse_checkpoint_rejects_malformed_text_saying_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(SpecError, match=complaint):
        parse_checkpoint(text)


# --- keys and signatures ---


def test_generated_keys_parse_back_and_match() -> None:
    skey, vkey = generate_key("examlops.example/audit")
    signer, verifier = SigningKey.parse(skey), VerifierKey.parse(vkey)
    assert signer.encode() == skey and verifier.encode() == vkey
    assert signer.verifier_key() == verifier
    assert skey.startswith("PRIVATE+KEY+examlops.example/audit+")
    assert vkey.startswith(f"examlops.example/audit+{verifier.key_id.hex()}+")


def test_signing_key_repr_does_not_reveal_the_seed() -> None:
    skey, _ = generate_key("k")
    signer = SigningKey.parse(skey)
    # PRIVATE+KEY+<name>+<key id>+<base64 of the seed>: the base64 may itself end in "+" (rsplit would give "").
    encoded = skey.split("+", 4)[4]
    assert encoded and signer.seed.hex() not in repr(signer) and encoded not in repr(signer)


def test_key_id_is_truncated_sha256_of_name_newline_type_and_key() -> None:
    vkey = VerifierKey.parse("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")
    want = hashlib.sha256(b"example.com/foo\n\x01" + vkey.public_key).digest()[:4]
    assert vkey.key_id == want == bytes.fromhex("530d903a")


def test_checkpoint_signature_verifies_with_its_key_and_not_another() -> None:
    skey, vkey = generate_key("examlops.example/audit")
    _, other = generate_key("examlops.example/audit")
    signed = sign_checkpoint(checkpoint_at(SIZE), SigningKey.parse(skey))
    assert verify_checkpoint_signature(signed, VerifierKey.parse(vkey))
    assert not verify_checkpoint_signature(signed, VerifierKey.parse(other))
    assert not verify_checkpoint_signature(replace(signed, size=SIZE - 1), VerifierKey.parse(vkey))
    assert not verify_checkpoint_signature(checkpoint_at(SIZE), VerifierKey.parse(vkey))


def test_signing_again_with_the_same_key_replaces_its_signature() -> None:
    a, b = SigningKey.parse(generate_key("a")[0]), SigningKey.parse(generate_key("b")[0])
    signed = sign_checkpoint(sign_checkpoint(sign_checkpoint(checkpoint_at(SIZE), a), b), a)
    assert [name for name, _ in signed.signatures] == ["b", "a"]
    assert verify_checkpoint_signature(signed, a.verifier_key())
    assert verify_checkpoint_signature(signed, b.verifier_key())


def test_verify_chain_checks_the_checkpoint_signature_when_given_a_key() -> None:
    skey, vkey = generate_key("examlops.example/audit")
    signed = sign_checkpoint(checkpoint_at(SIZE), SigningKey.parse(skey))
    verifier = VerifierKey.parse(vkey)
    bare = Ed25519PrivateKey.from_private_bytes(SigningKey.parse(skey).seed).public_key()
    stranger = Ed25519PrivateKey.generate().public_key()
    assert verify_chain(CHAIN, signed, public_key=verifier).ok
    assert verify_chain(CHAIN, signed, public_key=bare).ok
    assert kinds(verify_chain(CHAIN, signed, public_key=stranger)) == [(SIZE, "signature")]
    assert kinds(verify_chain(CHAIN, checkpoint_at(SIZE), public_key=verifier)) == [(SIZE, "signature")]
    forged_size = replace(signed, size=SIZE - 1, head=CHAIN[SIZE - 2].entry_hash)
    assert kinds(verify_chain(CHAIN, forged_size, public_key=verifier)) == [(SIZE - 1, "signature")]


def test_verify_chain_refuses_a_key_without_a_checkpoint() -> None:
    with pytest.raises(SpecError, match="checkpoint"):
        verify_chain(CHAIN, public_key=VerifierKey.parse(generate_key("k")[1]))


SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param("example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "does not match", id="wrong-key-id"),
        pytest.param("other.example+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "does not match", id="wrong-name"),
        pytest.param("example.com/foo+530d903+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "8 hex", id="short-key-id"),
        pytest.param("example.com/foo+530d903a+AukyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "Ed25519", id="unknown-type"),
        pytest.param("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv", "32 bytes", id="short-key"),
        pytest.param("example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2", "base64", id="bad-base64"),
        pytest.param("+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", "name", id="empty-name"),
        pytest.param("example.com/foo", "8 hex", id="name-only"),
    ],
)
def test_verifier_key_parse_rejects_malformed_keys(text: str, complaint: str) -> None:
    with pytest.raises(SpecError, match=complaint):
        VerifierKey.parse(text)


GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"


@pytest.mark.parametrize("key", [SPEC_VKEY, GO_VKEY, GO_SKEY], ids=["spec-verifier", "go-verifier", "go-signer"])
def test_every_substring_and_single_character_change_of_a_key_is_rejected(key: str) -> None:
    # The mangling table of golang.org/x/mod/sumdb/note TestNewVerifier / TestNewSigner.
    parse = SigningKey.parse if key.startswith("PRIVATE+KEY+") else VerifierKey.parse
    parse(key)
    mangled = {key[i:j] for i in range(len(key) + 1) for j in range(i + 1, len(key) + 1)} - {key}
    mangled |= {key[:i] + chr(ord(key[i]) + 1) + key[i + 1 :] for i in range(len(key))}
    accepted = []
    for text in sorted(mangled):
        try:
            parse(text)
            accepted.append(text)
        except SpecError:
            pass
    assert accepted == []


def test_signer_key_parse_rejects_a_verifier_key_without_echoing_secrets() -> None:
    with pytest.raises(SpecError, match="PRIVATE\\+KEY"):
        SigningKey.parse(GO_VKEY)
    bad = GO_SKEY.replace("c74f20a3", "c74f20a4")
    with pytest.raises(SpecError) as caught:
        SigningKey.parse(bad)
    assert "AYEKFALV" not in str(caught.value)


# --- golden signed-note vectors ---

SPEC_NOTE = (
    "This is an example message.\n\n"
    f"{DASH} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_PETER_SIG = f"{DASH} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
GO_ENOCH_SIG = f"{DASH} EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
GO_ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"


def test_spec_example_note_verifies_with_spec_example_key() -> None:
    key = VerifierKey.parse(SPEC_VKEY)
    assert verify_note(SPEC_NOTE, key)
    assert not verify_note(SPEC_NOTE.replace("example message", "example massage"), key)
    assert not verify_note(SPEC_NOTE, VerifierKey.parse(GO_VKEY))


def test_signing_reproduces_the_go_reference_note_byte_for_byte() -> None:
    # Ed25519 is deterministic, so the same key and text must give Go's exact signature.
    assert sign_note(GO_TEXT, SigningKey.parse(GO_SKEY)) == f"{GO_TEXT}\n{GO_PETER_SIG}"
    assert SigningKey.parse(GO_SKEY).verifier_key().encode() == GO_VKEY


def test_a_note_signed_by_two_keys_verifies_under_each_and_ignores_the_other() -> None:
    note = f"{GO_TEXT}\n{GO_PETER_SIG}{GO_ENOCH_SIG}"
    assert verify_note(note, VerifierKey.parse(GO_VKEY))
    assert verify_note(note, VerifierKey.parse(GO_ENOCH_VKEY))
    corrupted = GO_PETER_SIG[:60] + "ABCD" + GO_PETER_SIG[60:]
    assert not verify_note(f"{GO_TEXT}\n{corrupted}{GO_ENOCH_SIG}", VerifierKey.parse(GO_VKEY))


def test_a_failing_signature_from_a_known_key_rejects_the_note_even_beside_a_good_one() -> None:
    # c2sp.org/signed-note: if a signature from a known key fails to verify, reject the whole note.
    corrupted = GO_PETER_SIG[:60] + "ABCD" + GO_PETER_SIG[60:]
    assert not verify_note(f"{GO_TEXT}\n{GO_PETER_SIG}{corrupted}", VerifierKey.parse(GO_VKEY))


@pytest.mark.parametrize(
    "note",
    [GO_TEXT, GO_TEXT + "\n", GO_TEXT + "\n" + GO_PETER_SIG[:-1], "\x01" + GO_TEXT + "\n" + GO_PETER_SIG,
     GO_TEXT + "\n" + GO_PETER_SIG + "Unexpected line.\n"],
    ids=["no-signatures", "blank-line-only", "no-final-newline", "control-character", "trailing-text"],
)
def test_verify_note_rejects_malformed_notes(note: str) -> None:
    # The malformed-message table of golang.org/x/mod/sumdb/note TestOpen.
    with pytest.raises(SpecError):
        verify_note(note, VerifierKey.parse(GO_VKEY))


# --- signed entries (issue 32 item 5) ---------------------------------------------------------------


def _signed_chain(key: SigningKey | None, size: int = 5) -> list[AuditRow]:
    rows: list[AuditRow] = []
    for i in range(size):
        rows.append(next_row(rows[-1] if rows else None, {"kind": "test", "i": i, "ts": f"2026-01-01T00:00:0{i}.000000Z"}, key))
    return rows


def _entries(rows: list[AuditRow]) -> list[tuple[int, dict[str, object]]]:
    import json

    return [(r.seq, json.loads(r.canonical)) for r in rows]


def _entries_report(rows: list[AuditRow], key: VerifierKey | None, checkpoint: Checkpoint | None = None) -> list[tuple[int, str]]:
    from examlops_policy.audit import EntryChecks

    checks = EntryChecks(key=key, checkpoint=checkpoint)
    for row, (seq, entry) in zip(rows, _entries(rows)):
        checks.add(seq, row.prev_hash, entry)
    return kinds(checks.report(verify_chain(rows)))


def test_entries_signed_by_the_writer_verify_with_its_key_only() -> None:
    writer = SigningKey.parse(generate_key("writer")[0])
    other = SigningKey.parse(generate_key("other")[0])
    rows = _signed_chain(writer)
    assert verify_chain(rows).ok and _entries_report(rows, writer.verifier_key()) == []
    assert _entries_report(rows, other.verifier_key()) == [(s, "signature") for s in range(1, 6)]
    assert _entries_report(_signed_chain(None), writer.verifier_key()) == [(1, "signature")]  # one unsigned run
    # Entries up to a checkpoint are vouched for by it; those after it must be signed.
    unsigned = _signed_chain(None)
    assert _entries_report(unsigned, writer.verifier_key(), checkpoint_at(5, unsigned)) == []
    assert _entries_report(unsigned, writer.verifier_key(), checkpoint_at(3, unsigned)) == [(4, "signature")]


def test_an_entry_signature_covers_its_place_not_only_its_bytes() -> None:
    """The same signed bytes at another seq (or linking to another entry) do not verify."""
    import json

    from examlops_policy.audit import entry_signature

    writer = SigningKey.parse(generate_key("writer")[0])
    rows = _signed_chain(writer)
    entry = json.loads(rows[2].canonical)
    assert entry_signature(3, rows[2].prev_hash, entry, writer.verifier_key()) is True
    assert entry_signature(4, rows[2].prev_hash, entry, writer.verifier_key()) is False
    assert entry_signature(3, rows[0].entry_hash, entry, writer.verifier_key()) is False
    assert entry_signature(3, rows[2].prev_hash, {**entry, "i": 9}, writer.verifier_key()) is False
    assert entry_signature(3, rows[2].prev_hash, {k: v for k, v in entry.items() if k != "sig"}, writer.verifier_key()) is None


def test_an_entry_dated_before_the_one_it_follows_is_reported() -> None:
    rows = _signed_chain(None)
    late = next_row(rows[-1], {"kind": "test", "ts": "2025-01-01T00:00:00.000000Z"})
    assert _entries_report([*rows, late], None) == [(6, "time")]
    assert _entries_report(rows, None) == []

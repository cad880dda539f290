"""Tamper-evident audit log: a hash chain over canonical entries, anchored by signed checkpoints.

Pure functions and values, no storage: the store persists `AuditRow`s built by `next_row` and hands
them back to `verify_chain`. Design: /work/shared/reference/audit-log.md.

- Leaf: ``SHA-256(0x00 || canonical)``, the RFC 6962 leaf hash, so a Merkle tree can be added over
  the same leaves later without migrating data.
- Entry: ``SHA-256(DOMAIN_TAG || prev_hash || seq as u64 big-endian || leaf)``; entry 1 links to
  `GENESIS`.
- A chain alone shows edited, deleted, reordered and inserted entries, never a truncated tail or a
  whole re-hashed rewrite: for those keep a `Checkpoint` (c2sp.org/tlog-checkpoint, a signed note per
  c2sp.org/signed-note with Ed25519 keys in the golang.org/x/mod/sumdb/note encodings) somewhere the
  database admin cannot rewrite. Its hash line holds the chain head, not a Merkle root.

`Problem.kind`, and where `Problem.seq` points:
    edited      the entry's bytes no longer hash to its entry_hash             that entry
    deleted     a seq gap: entries missing between two present ones          the first missing seq
    reordered   two adjacent entries in each other's place, or one out of order  the lower seq
    inserted    an entry that hashes correctly but is not in the chain: a      the forged entry; the
                second claimant of a seq, or a re-hashed forgery its neighbour  later of the two when
                does not link to                                              nothing vouches for it
    truncated   the log ends before the checkpoint's size                     the first missing seq
    mismatch    the entry at the checkpoint's size is not the checkpoint head  checkpoint size
    signature   no checkpoint signature by the given key verifies; or, with   checkpoint size; the
                that key, an entry after the checkpoint that it did not sign    entry (the first of
                (unsigned, or signed by another key, or not over this place)    an unsigned run)
    time        an entry dated before the entry it follows (a writer dates    that entry
                each entry no earlier than the head it links to)
    damaged     a stored entry is not what an entry can be (a hash or the      that entry
                entry stored as text, a seq that is not a number)
    record      a decision whose stored record no longer hashes to the digest  the decision's audit
                its audit entry holds, whose columns or audit entry's fields   entry (0 when it has
                differ from its record;
                a decision with no audit entry; a stored fleet or verdict set  none)
                whose bytes no longer hash to its key
    state       a table differs from the state the chain describes: a column,  the entry that says
                a row no entry accounts for, a row an entry needs that is gone  otherwise (0: none)
                (``_chain_state``: decisions, allocations, holdings, burst
                events, pools, releases, leases, jobs)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar


if TYPE_CHECKING:  # cryptography loads only where a key is used, not on every command
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from examlops_policy.quantities import shown
from examlops_policy._canonical import canonical
from examlops_policy.errors import AuditIntegrityError, SpecError

__all__ = [
    "DOMAIN_TAG", "GENESIS", "ORIGIN", "AuditRow", "Checkpoint", "Problem", "ProblemKind",
    "SigningKey", "VerifierKey", "VerifyReport", "canonical_bytes", "entry_hash",
    "configured_signing_key", "entry_signature", "format_checkpoint", "generate_key", "leaf_hash",
    "make_checkpoint", "next_row", "parse_checkpoint", "read_signing_key", "sign_checkpoint",
    "sign_note", "verify_chain", "verify_checkpoint_signature", "verify_entries", "verify_note",
]

GENESIS: Final[bytes] = bytes(32)
DOMAIN_TAG: Final[bytes] = b"examlops-audit-v1\x00"
ORIGIN: Final = "examlops.example/audit"
# What an entry's signature covers: this tag, its seq (u64 big-endian), the entry hash it links to
# and its canonical bytes without the signature, so a signed entry cannot be moved or re-linked.
ENTRY_SIGNATURE_TAG: Final[bytes] = b"examlops-audit-entry-v1\x00"
SIGNER_FIELD: Final = "signer"  # the signing key's name, signed with the entry
SIGNATURE_FIELD: Final = "sig"  # base64(key id || Ed25519 signature), not itself signed
SIGNING_KEY_ENV: Final = "EXA_SIGNING_KEY"  # the signer key file of the state's writer of record

ProblemKind = Literal[
    "edited", "deleted", "reordered", "inserted", "truncated", "mismatch", "signature", "time", "damaged", "record", "state"
]

_ED25519: Final = 0x01  # signed-note signature type byte for Ed25519
_MAX_SIGNATURES: Final = 100  # the limit golang.org/x/mod/sumdb/note applies
_EM_DASH: Final = "\u2014 "
_SIZE_LINE: Final = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_HEX_ID: Final = re.compile(r"[0-9a-fA-F]{8}", re.ASCII)
_Key = TypeVar("_Key", "VerifierKey", "SigningKey")


def canonical_bytes(entry: Mapping[str, object]) -> bytes:
    """The bytes an entry is hashed and stored as: sorted-key compact JSON in UTF-8.

    Raises SpecError for what JSON cannot carry exactly: NaN or Infinity, non-string keys (JSON
    would turn ``1`` into ``"1"`` and two entries could share bytes), values JSON does not know.
    """
    _require_string_keys(entry, "entry")
    try:
        return canonical(entry)
    except (ValueError, TypeError) as exc:  # UnicodeEncodeError (lone surrogate) is a ValueError
        raise SpecError(f"audit entry is not canonical JSON: {exc}") from exc


def _require_string_keys(value: object, path: str) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(f"key {shown(key)} is not a string", field=path)
            _require_string_keys(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _require_string_keys(item, f"{path}[{index}]")


def leaf_hash(canonical: bytes) -> bytes:
    """SHA-256(0x00 || canonical): the RFC 6962 leaf hash of one entry's canonical bytes."""
    return hashlib.sha256(b"\x00" + canonical).digest()


def entry_hash(prev_hash: bytes, seq: int, leaf: bytes) -> bytes:
    """SHA-256(DOMAIN_TAG || prev_hash || seq as big-endian u64 || leaf).

    Raises SpecError unless both hashes are 32 bytes and 0 <= seq < 2**64.
    """
    if len(prev_hash) != 32 or len(leaf) != 32:
        raise SpecError("prev_hash and leaf must be 32-byte SHA-256 digests")
    if not 0 <= seq < 2**64:
        raise SpecError(f"seq {seq} does not fit an unsigned 64-bit integer")
    return hashlib.sha256(DOMAIN_TAG + prev_hash + seq.to_bytes(8, "big") + leaf).digest()


@dataclass(frozen=True)
class AuditRow:
    """One stored audit row, as the store returns it; `canonical` holds the exact hashed bytes."""

    seq: int
    prev_hash: bytes
    entry_hash: bytes
    canonical: bytes
    damage: str | None = None


def row_from_storage(seq: object, prev_hash: object, entry_hash_: object, canonical: object) -> AuditRow:
    """An AuditRow from whatever the database returned: a value of the wrong type (an entry or a
    hash stored as text, a seq that is not a whole number) is kept as damage to report, never a
    crash."""
    problems = []

    def blob(value: object, name: str) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        problems.append(f"{name} is stored as {type(value).__name__}, not bytes")
        return b""

    number = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    if number is None:
        try:
            number = int(str(seq))
        except ValueError:
            number = -1
        problems.append(f"seq is stored as {shown(seq)}")
    row = AuditRow(number, blob(prev_hash, "prev_hash"), blob(entry_hash_, "entry_hash"), blob(canonical, "entry"))
    return replace(row, damage="; ".join(problems)) if problems else row


def next_row(head: AuditRow | None, entry: Mapping[str, object], signer: SigningKey | None = None) -> AuditRow:
    """The row that follows `head` (the current last row; None for an empty log), signed by
    ``signer`` when given (the state's writer of record: ``entry_signature``).

    Raises SpecError when `entry` has no canonical form (see `canonical_bytes`).
    """
    seq, prev = (1, GENESIS) if head is None else (head.seq + 1, head.entry_hash)
    if signer is not None:
        body = {**{k: v for k, v in entry.items() if k != SIGNATURE_FIELD}, SIGNER_FIELD: signer.name}
        blob = signer.key_id + signer.sign(_entry_message(seq, prev, body))
        entry = {**body, SIGNATURE_FIELD: base64.b64encode(blob).decode()}
    canonical = canonical_bytes(entry)
    return AuditRow(seq, prev, entry_hash(prev, seq, leaf_hash(canonical)), canonical)


def _entry_message(seq: int, prev_hash: bytes, body: Mapping[str, object]) -> bytes:
    return ENTRY_SIGNATURE_TAG + seq.to_bytes(8, "big") + prev_hash + canonical_bytes(body)


def entry_signature(seq: int, prev_hash: bytes, entry: Mapping[str, object], key: VerifierKey) -> bool | None:
    """Whether ``entry`` (entry ``seq``, linking to ``prev_hash``) carries ``key``'s signature over
    its place and content: None when it carries none, False when it carries another key's or one
    that does not verify."""
    blob = entry.get(SIGNATURE_FIELD)
    if not isinstance(blob, str):
        return None
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return False
    if raw[:4] != key.key_id or entry.get(SIGNER_FIELD) != key.name:
        return False
    try:
        message = _entry_message(seq, prev_hash, {k: v for k, v in entry.items() if k != SIGNATURE_FIELD})
    except SpecError:
        return False
    return key.verify(message, raw[4:])


def read_signing_key(path: str | Path) -> SigningKey:
    """The signer key in the file ``path`` (``exa audit keygen``'s ``.skey``): what signs checkpoints
    (``exa audit checkpoint --key``) and the entries of a writer of record (``EXA_SIGNING_KEY``).
    SpecError naming the file when it cannot be read or is not a signer key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read signer key: {exc}", source=str(path)) from exc
    try:
        return SigningKey.parse(text.strip())
    except SpecError as exc:
        raise SpecError(f"{path} is not a signer key: {exc}", source=str(path)) from exc


def configured_signing_key() -> SigningKey | None:
    """The key this process signs audit entries with: the signer key file ``EXA_SIGNING_KEY``
    names (None when it is unset or empty). SpecError when that file is not a signer key."""
    import os

    path = os.environ.get(SIGNING_KEY_ENV, "")
    return read_signing_key(path) if path else None


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the log: which entry (`seq`), what kind, and a sentence for people."""

    seq: int
    kind: ProblemKind
    message: str


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify_chain`: `ok` is True exactly when there are no problems.

    `size` is the highest seq reached and `head` the entry_hash stored there (GENESIS when empty):
    what a new checkpoint records, once the report is ok.
    """

    ok: bool
    size: int
    head: bytes
    problems: tuple[Problem, ...]

    def raise_for_problems(self) -> None:
        """Raise AuditIntegrityError listing every problem; return quietly when ok."""
        if not self.ok:
            listed = "; ".join(f"seq {p.seq} {p.kind}: {p.message}" for p in self.problems)
            raise AuditIntegrityError(f"audit log does not verify: {listed}")


def verify_chain(
    rows: Iterable[AuditRow],
    checkpoint: Checkpoint | None = None,
    *,
    public_key: Ed25519PublicKey | VerifierKey | None = None,
) -> VerifyReport:
    """Walk `rows` in the order given (the store's seq order) and report every problem found.

    Reads the rows as they come (one ahead), holding none of them. With `checkpoint`, the log must reach its size and hold its
    head there; with `public_key` too, a signature on it by that key must verify (a VerifierKey
    also pins the key name; a bare Ed25519 key is matched by key id under any name). A public key
    without a checkpoint is a SpecError: there would be nothing to check it against.
    """
    if public_key is not None and checkpoint is None:
        raise SpecError("a public key was given without a checkpoint to check", field="public_key")
    found: dict[tuple[int, str], Problem] = {}  # keyed so one fault seen from two rows counts once

    def report(seq: int, kind: ProblemKind, message: str) -> None:
        found.setdefault((seq, kind), Problem(seq, kind, message))

    expected, links, head = 1, {GENESIS}, GENESIS
    anchor = checkpoint.size if checkpoint is not None else None
    heads: dict[int, bytes] = {}  # the head at the checkpoint's size (the only one it is held to)

    def at(seq: int, entry_hash: bytes, *, first: bool = False) -> None:
        if seq == anchor and not (first and seq in heads):
            heads[seq] = entry_hash

    walk = iter(rows)
    coming = next(walk, None)
    while coming is not None:
        row, after = coming, next(walk, None)
        if after is not None and _swapped(row, after, expected):
            report(expected, "reordered", f"entries {expected} and {expected + 1} are swapped")
            at(expected, after.entry_hash)
            at(expected + 1, row.entry_hash)
            expected, links, head = expected + 2, {row.entry_hash}, row.entry_hash
            coming = next(walk, None)
            continue
        coming = after
        if row.damage is not None:
            report(row.seq if row.seq > 0 else expected, "damaged", f"entry {row.seq if row.seq > 0 else expected} is damaged: {row.damage}")
        if row.seq < expected:
            if row.seq == expected - 1:
                report(row.seq, "inserted", f"a second entry claims seq {row.seq}")
                links.add(row.entry_hash)  # whichever claimant is genuine, its successor may link to it
            else:
                report(row.seq, "reordered", f"entry {row.seq} comes after entry {expected - 1}")
            continue
        if row.seq > expected:
            gap = f"entries {expected}..{row.seq - 1} are" if row.seq > expected + 1 else f"entry {expected} is"
            report(expected, "deleted", f"{gap} missing: entry {row.seq} follows {expected - 1}")
        recomputed = _recompute(row, row.seq)
        if recomputed != row.entry_hash:
            report(row.seq, "edited", f"entry {row.seq} no longer hashes to its stored entry_hash")
        elif row.seq == expected and row.prev_hash not in links:
            # Both sides hash correctly, so one is a re-hashed forgery; trust this side when the
            # next entry or the checkpoint vouches for it. The head with no checkpoint: ambiguous.
            vouched = expected > 1 and (
                (after is not None and after.prev_hash == row.entry_hash)
                or (checkpoint is not None and checkpoint.size == row.seq and checkpoint.head == row.entry_hash)
            )
            before = f"entry {expected - 1}" if expected > 1 else "the genesis hash"
            report(expected - 1 if vouched else row.seq, "inserted",
                   f"entry {row.seq} does not link to {before}: one of them was forged and re-hashed")
        # An edit to the bytes or to the stored hash must not also blame the honest next entry.
        links = {row.entry_hash} | ({recomputed} if recomputed is not None else set())
        at(row.seq, row.entry_hash, first=True)
        expected, head = row.seq + 1, row.entry_hash

    size = expected - 1
    if checkpoint is not None:
        anchored = heads.get(checkpoint.size, GENESIS if checkpoint.size == 0 else None)
        if checkpoint.size > size:
            report(size + 1, "truncated", f"the log ends at {size}, its checkpoint is at {checkpoint.size}")
        elif anchored != checkpoint.head:
            report(checkpoint.size, "mismatch", f"entry {checkpoint.size} differs from the checkpoint head")
        if public_key is not None and not _signed_by(checkpoint, public_key):
            report(checkpoint.size, "signature", "no checkpoint signature by the given key verifies")
    problems = tuple(found.values())
    return VerifyReport(not problems, size, head, problems)


CHAIN_BROKEN: Final = frozenset({"edited", "deleted", "reordered", "inserted", "truncated", "damaged"})
# Problems by which entries are missing from the chain: a row without an entry is theirs to explain.
CHAIN_LOST: Final = frozenset({"deleted", "truncated", "damaged", "inserted", "reordered"})


class EntryChecks:
    """What the entries of a chain say of themselves, checked as they come (``add``, in the log's
    order): each is dated no earlier than the one before it (kind ``time``), and with ``key``
    every entry after ``checkpoint`` (every entry, without one) carries that key's signature over
    its place and content (kind ``signature``; a run of unsigned entries is one problem). The
    entries up to a checkpoint are vouched for by its signature, which ``verify_chain`` checks (one
    that does not verify vouches for nothing: its problem is reported, and the entries are not
    weighed against it). A chain that does not verify on its own is left to its own problems
    (``report``)."""

    def __init__(self, *, key: VerifierKey | None = None, checkpoint: Checkpoint | None = None) -> None:
        self._key = key
        self._after = checkpoint.size if checkpoint is not None else 0
        self._last: tuple[int, str, float | None] | None = None
        self._unsigned: list[int] = []
        self._found: list[Problem] = []

    def add(self, seq: int, prev_hash: bytes, entry: Mapping[str, object]) -> None:
        """An entry (its seq, and the hash its row links to)."""
        ts = entry.get("ts")
        if isinstance(ts, str):
            when = _epoch(ts)
            last = self._last
            if last is not None and when is not None and last[2] is not None and when < last[2]:
                self._found.append(Problem(seq, "time", f"entry {seq} is dated {ts}, before entry {last[0]} ({last[1]}) that it follows"))
            self._last = (seq, ts, when)
        key = self._key
        if key is None or seq <= self._after:
            return
        signed = entry_signature(seq, prev_hash, entry, key)
        if signed is None:
            self._unsigned.append(seq)
            return
        self._flush()
        if not signed:
            self._found.append(Problem(seq, "signature", f"entry {seq} carries a signature that is not key {key.name}'s over this entry at this place"))

    def _flush(self) -> None:
        unsigned = self._unsigned
        if unsigned:
            what = f"entries {unsigned[0]}..{unsigned[-1]} are" if len(unsigned) > 1 else f"entry {unsigned[0]} is"
            assert self._key is not None
            self._found.append(Problem(unsigned[0], "signature", f"{what} not signed by key {self._key.name}"))
            unsigned.clear()

    def report(self, report: VerifyReport) -> VerifyReport:
        """``report`` (the chain's) with what the entries said added."""
        if any(p.kind in CHAIN_BROKEN for p in report.problems):
            return report
        self._flush()
        found = self._found
        if any(p.kind == "signature" for p in report.problems):
            found = [p for p in found if p.kind != "signature"]  # no checkpoint signature: no key to hold them to
        problems = (*report.problems, *found)
        return VerifyReport(not problems, report.size, report.head, problems)


def _epoch(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class RecordChecks:
    """What the chain cannot see alone, decision by decision (``check``): each decision's stored
    record must hash to the digest its audit entry holds, its columns must say what its record
    says, and its entry's fields what its record says; every stored fleet and verdict set must
    hash to its key (``documents``). ``chain_lost``: entries are missing from the chain, so a
    decision without one is the chain's problem, not reported again."""

    def __init__(self, *, chain_lost: bool) -> None:
        self.chain_lost = chain_lost
        self.found: list[Problem] = []

    def check(
        self, ident: str, document: object, stored_digest: object, columns: tuple[object, ...], said: tuple[int, Mapping[str, object]] | None
    ) -> dict[str, object] | None:
        """A decision's row (its id, record, record digest and (outcome, pool, cost_per_hour,
        carbon_factor, estimated_start, estimate_source)) against ``said``, its first decision
        entry (seq, entry): its record, parsed, when it hashes to the digest the entry holds."""
        if said is None:
            if not self.chain_lost:
                self.found.append(Problem(0, "record", f"decision {ident[:12]} has no audit entry: it was inserted, or the log cut short"))
            return None
        seq, entry = said
        audited = entry.get("record_digest")
        if audited is None:
            return None  # a decision recorded before its audit entry carried a digest
        actual = "sha256:" + hashlib.sha256(str(document).encode("utf-8")).hexdigest()
        if actual != audited or stored_digest != audited:
            self.found.append(Problem(seq, "record", f"decision {ident[:12]}: its stored record was edited (it no longer hashes to its audit entry)"))
            return None
        record = json.loads(str(document))
        differs = _columns_differ(record, columns)
        if differs:
            self.found.append(Problem(seq, "record", f"decision {ident[:12]}: its {', '.join(differs)} column(s) differ from its audited record"))
        for name, entry_value, record_value in _entry_differs(entry, record):
            self.found.append(Problem(seq, "record", f"audit entry {seq} says {name} {json.dumps(entry_value)} for decision {ident[:12]}, "
                                                     f"the record it vouches for says {json.dumps(record_value)}"))  # fmt: skip
        return record if isinstance(record, dict) else None

    def documents(self, documents: Iterable[tuple[str, str]]) -> None:
        for key, document in documents:
            prefix, _, hexdigest = key.partition(":")
            if hashlib.sha256(str(document).encode("utf-8")).hexdigest() != hexdigest:
                self.found.append(Problem(0, "record", f"stored {prefix} {key[:24]}... was edited: its bytes no longer hash to its key"))

    def report(self, report: VerifyReport) -> VerifyReport:
        """``report`` with the records' problems added."""
        problems = (*report.problems, *self.found)
        return VerifyReport(not problems, report.size, report.head, problems)


def _entry_differs(entry: Mapping[str, object], record: object) -> list[tuple[str, object, object]]:
    """(field, the entry's value, the record's) of each field a decision entry states that its
    compact record (version 2 to 4) states otherwise: the workload's name and project, the outcome
    and pool, and the provenance."""
    if not isinstance(record, dict) or record.get("v") not in (2, 3, 4):
        return []
    workload = record.get("workload") if isinstance(record.get("workload"), dict) else {}
    provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    assert isinstance(workload, dict) and isinstance(provenance, dict)
    stated = (
        ("workload", workload.get("name")), ("project", workload.get("project")), ("outcome", record.get("outcome")),
        ("pool", record.get("pool")), ("input_digest", provenance.get("input_digest")),
        ("policy_revision", provenance.get("policy_revision")), ("opa_version", provenance.get("opa_version")),
        ("verdicts", provenance.get("verdicts")),
    )  # fmt: skip
    return [(name, entry[name], value) for name, value in stated if name in entry and entry[name] != value]


def _columns_differ(record: object, columns: tuple[object, ...]) -> list[str]:
    """The columns (outcome, pool, cost_per_hour, carbon_factor; for a record with start estimates
    estimated_start and estimate_source, the chosen pool's) that disagree with the record."""
    if not isinstance(record, dict) or record.get("v") not in (2, 3, 4):
        return []
    outcome, pool, cost, carbon = columns[:4]
    differs = []
    if outcome != record.get("outcome"):
        differs.append("outcome")
    if pool != record.get("pool"):
        differs.append("pool")
    for name, value in (("cost_per_hour", cost), ("carbon_factor", carbon)):
        if value != record.get(name):
            differs.append(name)
    if record.get("v") == 4 and len(columns) >= 6:
        estimates = record.get("estimates")
        chosen = estimates.get(str(pool)) if isinstance(estimates, dict) and outcome == "placed" else None
        recorded = chosen if isinstance(chosen, dict) else {}
        for name, value in (("estimated_start", columns[4]), ("estimate_source", columns[5])):
            if value != recorded.get(name):
                differs.append(name)
    return differs


def _recompute(row: AuditRow, seq: int) -> bytes | None:
    try:
        return entry_hash(row.prev_hash, seq, leaf_hash(row.canonical))
    except SpecError:  # a tampered prev_hash or seq of impossible size
        return None


def _swapped(first: AuditRow, second: AuditRow, expected: int) -> bool:
    """True when `second` is really entry `expected` and `first` entry `expected + 1`.

    Catches both ways a swap shows: rows handed over out of order, or seq values exchanged in
    the store (rows in seq order, each sealed under the other's seq).
    """
    return (
        {first.seq, second.seq} == {expected, expected + 1}
        and first.prev_hash == second.entry_hash
        and _recompute(second, expected) == second.entry_hash
        and _recompute(first, expected + 1) == first.entry_hash
    )


# --- signed notes and keys (c2sp.org/signed-note, golang.org/x/mod/sumdb/note encodings) ---


def _key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([_ED25519]) + public_key).digest()[:4]


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def _b64decode(text: str, what: str, source: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(f"{what} is not valid base64", source=source) from exc


def _key_parts(text: str, source: str) -> tuple[str, bytes, bytes]:
    """Split ``name+hexkeyid+base64(0x01 || key32)``; the base64 may itself hold '+'."""
    name, _, rest = text.partition("+")
    hex_id, _, encoded = rest.partition("+")
    if not _valid_name(name):
        raise SpecError("key name must be non-empty, without spaces or '+'", source=source)
    if not _HEX_ID.fullmatch(hex_id):
        raise SpecError("key id must be 8 hex digits", source=source)
    raw = _b64decode(encoded, "key", source)
    if len(raw) != 33 or raw[0] != _ED25519:
        raise SpecError("key must be type 0x01 (Ed25519) followed by 32 bytes", source=source)
    return name, bytes.fromhex(hex_id), raw[1:]


@dataclass(frozen=True)
class VerifierKey:
    """A named Ed25519 public key: ``name+hexkeyid+base64(0x01 || pubkey32)`` as text."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        if not _valid_name(self.name) or len(self.public_key) != 32:
            raise SpecError("needs a name without spaces or '+', and 32 bytes", source="verifier key")

    @cached_property
    def key_id(self) -> bytes:
        """SHA-256(name || 0x0A || 0x01 || public_key)[:4], per c2sp.org/signed-note."""
        return _key_id(self.name, self.public_key)

    @cached_property
    def _public(self) -> Ed25519PublicKey:
        """The key as cryptography holds it, made once (not per signature checked)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(self.public_key)

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Read a verifier key; SpecError says what is malformed (including a wrong key id), and
        which key is wanted when it is given the signer key (never echoing it)."""
        if text.startswith("PRIVATE+KEY+"):
            raise SpecError(
                "this is a signer key (PRIVATE+KEY+..., the secret NAME.skey of 'exa audit keygen'): a signature is checked "
                "with the verifier key, its public half (NAME.vkey, written beside it: NAME+KEYID+BASE64)",
                source="verifier key",
            )
        name, key_id, public_key = _key_parts(text, "verifier key")
        return _checked_id(cls(name, public_key), key_id, "verifier key")

    def encode(self) -> str:
        """The verifier key text."""
        raw = base64.b64encode(bytes([_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{raw}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when `signature` (64 bytes, no key id) is this key's Ed25519 signature of `message`."""
        from cryptography.exceptions import InvalidSignature

        try:
            self._public.verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """A named Ed25519 private key: ``PRIVATE+KEY+name+hexkeyid+base64(0x01 || seed32)`` as text."""

    name: str
    seed: bytes = field(repr=False)  # kept out of repr so it never lands in a log or traceback

    def __post_init__(self) -> None:
        if not _valid_name(self.name) or len(self.seed) != 32:
            raise SpecError("needs a name without spaces or '+', and 32 bytes", source="signer key")

    @cached_property
    def key_id(self) -> bytes:
        """The key id of the matching verifier key."""
        return self.verifier_key().key_id

    @cached_property
    def _private(self) -> Ed25519PrivateKey:
        """The key as cryptography holds it, made once (not per entry signed)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        """Read a signer key; SpecError says what is malformed, never echoing the key."""
        if not text.startswith("PRIVATE+KEY+"):
            looks_public = text.count("+") >= 2 and bool(_HEX_ID.fullmatch(text.split("+")[1]))
            raise SpecError(
                "this is a verifier key (NAME+KEYID+BASE64, the public NAME.vkey of 'exa audit keygen'): a checkpoint is signed "
                "with the signer key, its secret half (NAME.skey, starting with 'PRIVATE+KEY+')"
                if looks_public
                else "must start with 'PRIVATE+KEY+' (the signer key, NAME.skey of 'exa audit keygen')",
                source="signer key",
            )
        name, key_id, seed = _key_parts(text.removeprefix("PRIVATE+KEY+"), "signer key")
        return _checked_id(cls(name, seed), key_id, "signer key")

    def encode(self) -> str:
        """The signer key text: a secret."""
        raw = base64.b64encode(bytes([_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_id.hex()}+{raw}"

    def verifier_key(self) -> VerifierKey:
        """The public half, under the same name."""
        return VerifierKey(self.name, self._private.public_key().public_bytes_raw())

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message` (deterministic, RFC 8032)."""
        return self._private.sign(message)


def _checked_id(key: _Key, key_id: bytes, source: str) -> _Key:
    if key.key_id != key_id:
        raise SpecError(f"key id {key_id.hex()} does not match the name and key", source=source)
    return key


def generate_key(name: str) -> tuple[str, str]:
    """A fresh key pair for `name` as (signer key text, verifier key text)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = SigningKey(name, Ed25519PrivateKey.generate().private_bytes_raw())
    return key.encode(), key.verifier_key().encode()


def write_key_pair(name: str, out_dir: Path) -> tuple[Path, Path]:
    """Create a key pair for ``name`` in ``out_dir`` as ``<name>.skey`` and ``<name>.vkey``, both
    0600 whatever the umask: the signer key is secret, and a verifier key others could rewrite
    would let them vouch for a forged checkpoint. SpecError if either file exists (nothing is
    overwritten; a half-written pair is removed)."""
    import os

    skey, vkey = generate_key(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = name.replace("/", "_")
    secret, public = out_dir / f"{stem}.skey", out_dir / f"{stem}.vkey"
    written: list[Path] = []
    try:
        for path, text in ((secret, skey), (public, vkey)):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                raise SpecError(f"{path} already exists; choose another name or folder", source="key pair") from None
            written.append(path)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(text + "\n")
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return secret, public


def _check_note_text(text: str, source: str) -> None:
    if not text.endswith("\n"):
        raise SpecError("note text must end with a newline", source=source)
    if any(c < " " and c != "\n" for c in text):
        raise SpecError("note must not contain control characters other than newline", source=source)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SpecError("note must be valid UTF-8", source=source) from exc


def _split_note(note: str, source: str, *, signed: bool) -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """Split a note into (text, signatures); the text ends at the last blank line.

    With ``signed=False`` a note without a blank line is all text (an unsigned checkpoint).
    """
    _check_note_text(note, source)
    cut = note.rfind("\n\n")
    if cut < 0:
        if signed:
            raise SpecError("no blank line before signature lines", source=source)
        return note, ()
    text, lines = note[: cut + 1], note[cut + 2 :].split("\n")[:-1]
    if not lines:
        raise SpecError("a blank line must be followed by signature lines", source=source)
    if len(lines) > _MAX_SIGNATURES:
        raise SpecError(f"more than {_MAX_SIGNATURES} signatures", source=source)
    signatures = []
    for line in lines:
        name, _, encoded = line.removeprefix(_EM_DASH).partition(" ")
        if not line.startswith(_EM_DASH) or not _valid_name(name):
            raise SpecError(f"malformed signature line {line!r}: want '— <name> <base64>'", source=source)
        blob = _b64decode(encoded, f"signature of {name!r}", source)
        if len(blob) < 5:
            raise SpecError(f"signature of {name!r} is shorter than key id + signature", source=source)
        signatures.append((name, blob))
    return text, tuple(signatures)


def _verify_signatures(text: str, signatures: Iterable[tuple[str, bytes]], key: VerifierKey) -> bool:
    # Signatures from other keys are ignored; every one from this key (name and id) must verify.
    mine = [blob[4:] for name, blob in signatures if name == key.name and blob[:4] == key.key_id]
    return bool(mine) and all(key.verify(text.encode(), sig) for sig in mine)


def sign_note(text: str, key: SigningKey) -> str:
    """`text` (ending in a newline) followed by a blank line and this key's signature line."""
    _check_note_text(text, "note")
    blob = key.key_id + key.sign(text.encode())
    return f"{text}\n{_EM_DASH}{key.name} {base64.b64encode(blob).decode()}\n"


def verify_note(text: str, key: VerifierKey) -> bool:
    """True when the signed note `text` carries a signature by `key` and all of key's verify.

    Raises SpecError when `text` is not a well-formed signed note.
    """
    body, signatures = _split_note(text, "note", signed=True)
    return _verify_signatures(body, signatures, key)


# --- checkpoints (c2sp.org/tlog-checkpoint) ---


@dataclass(frozen=True)
class Checkpoint:
    """An anchor: the log `origin` had `size` entries, the last with entry hash `head`.

    `signatures` holds (key name, key id || Ed25519 signature) pairs over the note text.
    """

    origin: str
    size: int
    head: bytes
    signatures: tuple[tuple[str, bytes], ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or any(c < " " for c in self.origin):
            raise SpecError("must be non-empty, on one line", source="checkpoint", field="origin")
        if self.size < 0:
            raise SpecError(f"must not be negative, got {self.size}", source="checkpoint", field="size")
        if len(self.head) != 32:
            raise SpecError(f"must be 32 bytes, got {len(self.head)}", source="checkpoint", field="head")
        if any(not _valid_name(name) or len(blob) < 5 for name, blob in self.signatures):
            raise SpecError("need key names and key id + signature", source="checkpoint", field="signatures")

    def text(self) -> str:
        """The signed note text: origin, size, base64 head, one line each."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.head).decode()}\n"


def make_checkpoint(size: int, head: bytes, origin: str = ORIGIN) -> Checkpoint:
    """An unsigned checkpoint; take `size` and `head` from a `VerifyReport` that is ok."""
    return Checkpoint(origin, size, head)


def format_checkpoint(cp: Checkpoint) -> str:
    """The checkpoint as a note: its text, then (if signed) a blank line and signature lines."""
    lines = [f"{_EM_DASH}{name} {base64.b64encode(blob).decode()}\n" for name, blob in cp.signatures]
    return cp.text() + ("\n" + "".join(lines) if lines else "")


def parse_checkpoint(text: str) -> Checkpoint:
    """Read a checkpoint note, signed or not; SpecError names what is malformed.

    Extension lines are refused: this log never writes them.
    """
    body, signatures = _split_note(text, "checkpoint", signed=False)
    lines = body.split("\n")[:-1]
    if len(lines) != 3:
        raise SpecError(f"expected 3 lines (origin, size, head), got {len(lines)}", source="checkpoint")
    origin, size, head = lines
    if not _SIZE_LINE.fullmatch(size):
        raise SpecError(f"{size!r} is not decimal without leading zeros", source="checkpoint", field="size")
    return Checkpoint(origin, int(size), _b64decode(head, "head", "checkpoint"), signatures)


def sign_checkpoint(cp: Checkpoint, key: SigningKey) -> Checkpoint:
    """`cp` with `key`'s signature added, replacing an earlier one by the same key."""
    blob = key.key_id + key.sign(cp.text().encode())
    others = tuple(s for s in cp.signatures if (s[0], s[1][:4]) != (key.name, key.key_id))
    return replace(cp, signatures=(*others, (key.name, blob)))


def verify_checkpoint_signature(cp: Checkpoint, key: VerifierKey) -> bool:
    """True when `cp` carries a signature by `key` (name and key id) and all of key's verify."""
    return _verify_signatures(cp.text(), cp.signatures, key)


def _signed_by(cp: Checkpoint, key: Ed25519PublicKey | VerifierKey) -> bool:
    if isinstance(key, VerifierKey):
        return verify_checkpoint_signature(cp, key)
    # A bare public key has no name: try it under each name that signed; the key id decides.
    names = dict.fromkeys(name for name, _ in cp.signatures)
    return any(verify_checkpoint_signature(cp, VerifierKey(n, key.public_bytes_raw())) for n in names)

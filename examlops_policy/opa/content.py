"""What an OPA serves, proven by content rather than by the revision its manifest names.

A bundle's ``.manifest`` revision is a label: whoever builds a bundle writes it. Two proofs do not
trust it:

- **Tables.** The policy computes the SHA-256 of the tables it evaluates itself
  (``data.examlops.provenance.content``: ``json.marshal(data.examlops.tables)``, compact with
  sorted keys). ``tables_digest(root)`` computes the same digest from the reviewed table files
  here, so a bundle whose manifest names the reviewed revision but whose tables were edited is
  refused: on an external OPA by every decision, which holds the digest its connection got to the
  digest of its own policy snapshot's tables (``_core.engine.Engine.confirm``); on the local one
  when it starts (``prove_content``); in ``exa policy status`` and ``exa opa status``.
- **Everything, on the local OPA.** The local OPA loads only a bundle signed by a key made for
  that one start (``bundle.Signer.ephemeral``); the signature covers every file of the bundle, the
  rules and the manifest included (see ``server``).

The digest is reproducible without OPA: ``read_tables`` reads the YAML files as OPA does (YAML
1.2's booleans and nulls: ``NO`` is a string; no dates), and ``canonical_json`` writes JSON as
OPA's ``json.marshal`` does (keys sorted by their UTF-8 bytes; ``<``, ``>``, ``&``, U+2028 and
U+2029 escaped; numbers as their literal text). Every bundle build checks that OPA reads the
tables as ``read_tables`` does (``bundle._stage``) and writes the bundle's ``data.json`` with
``canonical_json``, so OPA echoes the very bytes hashed here. The digest of a set of table files is
kept in the compiled cache beside the tables (``tables.compiled``), so that a process that finds
it there reads no YAML.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Final

from examlops_policy.errors import PolicyError
from examlops_policy.model import JSONObject
from examlops_policy.opa.transport import OpaTransport
from examlops_policy.tables import table_files, yaml_loader

__all__ = [
    "CONTENT_PATH", "ServedContent", "canonical_json", "content_problem", "digest_of", "digest_of_files", "first_difference",
    "prove_content", "read_tables", "read_tables_from", "served_content", "table_files", "tables_digest",
]  # fmt: skip

TABLES: Final = "examlops/tables"
CONTENT_PATH: Final = "/v1/data/examlops/provenance/content"
_ESCAPES: Final = {
    '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
    "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029",
}  # fmt: skip
_NEEDS_ESCAPE: Final = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029]')


def read_tables(root: Path) -> JSONObject:
    """Every table file under ``root/examlops/tables``, merged as OPA merges data files (a key
    defined by two files is a PolicyError), read as OPA reads YAML."""
    return read_tables_from(tuple((p, p.read_bytes()) for p in table_files(root)))


def read_tables_from(files: tuple[tuple[Path, bytes], ...]) -> JSONObject:
    """``read_tables`` of table files already read: (path, bytes), in name order."""
    import yaml

    loader = yaml_loader()
    merged: JSONObject = {}
    for path, data in files:
        try:
            doc = yaml.load(data.decode("utf-8"), Loader=loader)  # noqa: S506 - a safe loader
        except (UnicodeDecodeError, yaml.YAMLError) as exc:
            raise PolicyError(f"{path}: cannot read policy table: {exc}") from exc
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise PolicyError(f"{path}: a policy table must be a mapping")
        for key, value in doc.items():
            if key in merged:
                raise PolicyError(f"{path}: table {key!r} is defined by another file too")
            merged[str(key)] = value
    return merged


def canonical_json(value: object) -> bytes:
    """``value`` as OPA's ``json.marshal`` writes it (see the module docstring). PolicyError for
    what JSON cannot carry (NaN, infinities, other types)."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode("utf-8")


def _string(text: str) -> str:
    def escape(m: re.Match[str]) -> str:
        c = m.group(0)
        return _ESCAPES.get(c) or f"\\u{ord(c):04x}"

    return '"' + _NEEDS_ESCAPE.sub(escape, text) + '"'


def _encode(value: object, out: list[str]) -> None:
    if value is None or isinstance(value, bool):
        out.append(json.dumps(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PolicyError(f"a policy table holds {value!r}, which JSON cannot carry")
        out.append(repr(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, key in enumerate(sorted((str(k) for k in value), key=lambda k: k.encode("utf-8"))):
            out.append(("," if i else "") + _string(key) + ":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise PolicyError(f"a policy table holds a {type(value).__name__}, which JSON cannot carry")


def digest_of(tables: object) -> str:
    """``sha256:<hex>`` of the tables' canonical JSON: what the policy computes of what it serves."""
    return "sha256:" + hashlib.sha256(canonical_json(tables)).hexdigest()


def tables_digest(root: Path) -> str:
    """The digest the policy must report when it serves the tables in ``root``."""
    return digest_of_files(tuple((p, p.read_bytes()) for p in table_files(root)))


@lru_cache(maxsize=8)
def digest_of_files(files: tuple[tuple[Path, bytes], ...]) -> str:
    """``tables_digest`` of table files already read, (path, bytes) in name order. Kept in the
    compiled cache beside the tables (``tables.compiled``, named by the files' names and bytes),
    so that a process that finds it there reads no YAML."""
    from examlops_policy.tables import compiled

    found = compiled("opa-tables-digest", [(p.name, raw) for p, raw in files], lambda: {"digest": digest_of(read_tables_from(files))})
    digest = found.get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        return digest_of(read_tables_from(files))  # a cache entry not of this kind: worked out again
    return digest


def first_difference(ours: object, theirs: object, path: str = "") -> str | None:
    """The first path where two JSON values differ (a number equals a number of the same value,
    ``2`` is ``2.0``; ``true`` is not ``1``), or None when they are the same."""
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return None if type(ours) is type(theirs) and ours == theirs else path or "(top)"
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        return None if ours == theirs else path or "(top)"
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(set(ours) | set(theirs)):
            if key not in ours or key not in theirs:
                return f"{path}.{key}".lstrip(".")
            found = first_difference(ours[key], theirs[key], f"{path}.{key}")
            if found:
                return found.lstrip(".")
        return None
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return f"{path} (length {len(ours)} here, {len(theirs)} in OPA)".lstrip(".")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found.lstrip(".")
        return None
    return None if type(ours) is type(theirs) and ours == theirs else path.lstrip(".") or "(top)"


@dataclass(frozen=True)
class ServedContent:
    """What the policy on an OPA says of itself: its bundle revision and its tables' digest."""

    revision: str | None
    tables_digest: str | None


def served_content(transport: OpaTransport) -> ServedContent:
    """Ask the policy for its content (``examlops.provenance.content``); a policy without that
    rule answers nothing (both None). Raises what the transport raises."""
    answer = transport.json("POST", CONTENT_PATH, {"input": {}})
    result = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(result, dict):
        return ServedContent(None, None)
    revision, digest = result.get("revision"), result.get("tables_digest")
    return ServedContent(revision if isinstance(revision, str) else None, digest if isinstance(digest, str) else None)


def content_problem(served: ServedContent, root: Path) -> str | None:
    """Why ``served`` is not the content of the reviewed tables in ``root`` (None when it is)."""
    expected = tables_digest(root)
    if served.tables_digest is None:
        return "its policy reports no digest of the tables it serves (examlops.provenance is missing: not a bundle of this policy)"
    if served.tables_digest != expected:
        return (
            f"the tables it evaluates have digest {served.tables_digest[:19]}..., the reviewed tables in {root / TABLES} "
            f"have {expected[:19]}...: its bundle was built from other tables than its revision says"
        )
    return None


def prove_content(transport: OpaTransport, root: Path) -> ServedContent:
    """What the policy ``transport`` reaches says it serves; PolicyError unless its tables are the
    reviewed tables of ``root``."""
    served = served_content(transport)
    problem = content_problem(served, root)
    if problem is not None:
        raise PolicyError(f"OPA at {transport.describe}: {problem}; nothing was placed")
    return served

"""The reason-code table of the docs (docs/reason-codes.md), generated from the policy's own metadata.

Every reason code the policy can give is declared once, in the ``# METADATA`` of the package that
gives it: each check's ``custom.codes`` (``policies/examlops/hardware/checks/<name>/``), and those
of the workload's validation, the tiers, the composer, the reference decision, and the queue's
admission order and preemption plan. The composer
package gathers them (``check_list``, ``check_about``, ``codes_of``); this module asks OPA for them
(``opa eval`` over the policy folder, the tests left out) and writes them as Markdown between two
markers in docs/reason-codes.md::

    <!-- reason-codes:begin -->
    ... generated ...
    <!-- reason-codes:end -->

``exa policy docs`` rewrites the section; ``tests/test_policy_docs.py`` fails when it is stale.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from examlops_policy.quantities import shown
from examlops_policy.errors import PolicyError, PolicyUnavailable, SpecError
from examlops_policy.model import JSONObject
from examlops_policy.opa.bundle import opa_binary
from examlops_policy.tables import policy_dir

BEGIN: Final = "<!-- reason-codes:begin -->"
END: Final = "<!-- reason-codes:end -->"
_TIMEOUT_S: Final = 120.0
_COMPOSER: Final = "data.examlops.hardware.composer"
# One query: the checks in order, their annotations, and the codes of the other packages.
_QUERY: Final = (
    "{"
    f'"checks": {_COMPOSER}.check_list, '
    f'"about": {_COMPOSER}.check_about, '
    f'"workload": {_COMPOSER}.codes_of(data.examlops.hardware.workload.about), '
    f'"tiers": {_COMPOSER}.codes_of(data.examlops.hardware.tiers.about), '
    f'"composer": {_COMPOSER}.codes_of({_COMPOSER}.own_about), '
    f'"decision": {_COMPOSER}.codes_of(data.examlops.hardware.reference.own_about), '
    f'"order": {_COMPOSER}.codes_of(data.examlops.queue.order.about), '
    f'"preemption": {_COMPOSER}.codes_of(data.examlops.queue.preemption.about)'
    "}"
)
# Where the codes that are not a check's come from, as the table names them.
_OTHER: Final = (
    ("workload", "the workload (invalid input)"),
    ("tiers", "tier (why an admissible pool was passed over)"),
    ("composer", "the composer (the checks from their metadata)"),
    ("decision", "the reference decision"),
    ("order", "the queue's admission order"),
    ("preemption", "the queue's preemption plan"),
)


@dataclass(frozen=True)
class CodeRow:
    """One reason code: who gives it, the code, its kind (never, not_now, preference), its meaning."""

    source: str
    code: str
    kind: str
    meaning: str


@dataclass(frozen=True)
class CheckRow:
    """One check as its metadata declares it."""

    order: int
    name: str
    title: str
    stage: str
    shape_fields: tuple[str, ...]
    workload_fields: tuple[str, ...]
    blocks_burst: bool


@dataclass(frozen=True)
class PolicyCodes:
    """The checks, in order, and every reason code the policy declares."""

    checks: tuple[CheckRow, ...]
    codes: tuple[CodeRow, ...]


def policy_metadata(policy_root: Path | None = None, *, opa: Path | None = None) -> JSONObject:
    """The checks and codes as the composer package gathers them, from ``opa eval``.

    Raises PolicyUnavailable when OPA cannot run, PolicyError when the policy does not compile or
    gives no answer.
    """
    root = policy_root or policy_dir()
    binary = opa or opa_binary()
    args = [str(binary), "eval", "--format", "json", "--ignore", "*_test.rego", "-d", str(root), _QUERY]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyUnavailable(f"cannot run {binary} to read the policy's metadata: {exc}") from exc
    if done.returncode != 0:
        raise PolicyError(f"reading the policy's metadata in {root} failed (does the policy compile?):\n{(done.stderr or done.stdout).strip()[-2000:]}")
    try:
        value = json.loads(done.stdout)["result"][0]["expressions"][0]["value"]
    except (ValueError, LookupError, TypeError) as exc:
        raise PolicyError(f"the policy in {root} gave no metadata (is the composer package there?): {exc}") from exc
    if not isinstance(value, dict):
        raise PolicyError(f"the policy in {root} gave malformed metadata: {str(value)[:200]}")
    return cast(JSONObject, value)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise PolicyError(f"policy metadata: {what} is not a string: {shown(value)}")
    return value


def _codes(rows: object, source: str) -> list[CodeRow]:
    if not isinstance(rows, list):
        raise PolicyError(f"policy metadata: the codes of {source} are not a list")
    out = []
    for row in rows:
        if not isinstance(row, dict):
            raise PolicyError(f"policy metadata: a code of {source} is not an object: {shown(row)}")
        out.append(CodeRow(source, _text(row.get("code"), f"a code of {source}"), _text(row.get("kind"), f"the kind of a code of {source}"),
                           _text(row.get("meaning"), f"the meaning of a code of {source}")))  # fmt: skip
    return out


def _fields(about: Mapping[str, object], kind: str) -> tuple[str, ...]:
    custom = about.get("custom")
    reads = custom.get("reads") if isinstance(custom, dict) else None
    fields = reads.get(kind, []) if isinstance(reads, dict) else []
    return tuple(_text(f, f"a field a check reads ({kind})") for f in (fields or []))


def decode(meta: Mapping[str, object]) -> PolicyCodes:
    """The checks and codes of ``policy_metadata``'s answer; PolicyError when malformed."""
    checks_raw, about_raw = meta.get("checks"), meta.get("about")
    if not isinstance(checks_raw, list) or not isinstance(about_raw, dict):
        raise PolicyError("policy metadata: no checks (is the composer package there?)")
    checks, codes = [], []
    for c in checks_raw:
        if not isinstance(c, dict):
            raise PolicyError(f"policy metadata: a check is not an object: {shown(c)}")
        name = _text(c.get("name"), "a check's name")
        about = about_raw.get(name)
        if not isinstance(about, dict):
            raise PolicyError(f"policy metadata: check {name} has no annotations")
        custom = about.get("custom")
        order = c.get("order")
        if not isinstance(order, int):
            raise PolicyError(f"policy metadata: check {name} has no whole-number order: {shown(order)}")
        checks.append(
            CheckRow(
                order=order,
                name=name,
                title=_text(c.get("title"), f"the title of check {name}"),
                stage=_text(c.get("stage"), f"the stage of check {name}"),
                shape_fields=_fields(about, "shape"),
                workload_fields=_fields(about, "workload"),
                blocks_burst=isinstance(custom, dict) and custom.get("blocks_burst") is True,
            )
        )
        codes.extend(_codes(c.get("codes"), name))
    for key, _ in _OTHER:
        codes.extend(_codes(meta.get(key), key))
    return PolicyCodes(tuple(checks), tuple(codes))


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, no line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def _fields_cell(fields: Sequence[str]) -> str:
    return ", ".join(f"`{f}`" for f in fields) if fields else "—"


def render(codes: PolicyCodes) -> str:
    """The Markdown that goes between the markers (without them)."""
    sources = {key: label for key, label in _OTHER}
    stage_text = {"shape": "per shape", "pool": "per pool"}
    lines = [
        "<!-- Generated from the policies' METADATA by `exa policy docs`; edit the metadata, not this table. -->",
        "",
        "| from | code | kind | meaning |",
        "|---|---|---|---|",
    ]
    for row in codes.codes:
        source = sources.get(row.source, f"check `{row.source}`")
        lines.append(f"| {source} | `{row.code}` | {row.kind} | {_cell(row.meaning)} |")
    lines += [
        "",
        "The checks, in the order they run (each a folder under `policies/examlops/hardware/checks/`):",
        "",
        "| order | check | runs | reads of the pool | reads of the workload | blocks a burst |",
        "|---|---|---|---|---|---|",
    ]
    for c in codes.checks:
        lines.append(
            f"| {c.order} | `{c.name}` ({_cell(c.title)}) | {stage_text.get(c.stage, c.stage)} | {_fields_cell(c.shape_fields)} | "
            f"{_fields_cell(c.workload_fields)} | {'yes' if c.blocks_burst else 'no'} |"
        )
    return "\n".join(lines)


def reason_code_table(policy_root: Path | None = None, *, opa: Path | None = None) -> str:
    """The reason-code page's generated section (without the markers), from the policy in ``policy_root``."""
    return render(decode(policy_metadata(policy_root, opa=opa)))


def replace_section(text: str, body: str, where: str = "README.md") -> str:
    """``text`` with what lies between the markers replaced by ``body``.

    Raises SpecError naming ``where`` when the markers are missing, repeated or out of order.
    """
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SpecError(f"expected exactly one {BEGIN} and one {END} line (found {text.count(BEGIN)} and {text.count(END)})", source=where)
    start, end = text.index(BEGIN), text.index(END)
    if end < start:
        raise SpecError(f"{END} comes before {BEGIN}", source=where)
    return f"{text[: start + len(BEGIN)]}\n{body}\n{text[end:]}"


@dataclass(frozen=True)
class DocsCheck:
    """What ``exa policy docs`` found: the README, whether its table was stale, whether it was
    rewritten."""

    readme: Path
    stale: bool
    written: bool


def update_readme(readme: Path, policy_root: Path | None = None, *, write: bool = True, opa: Path | None = None) -> bool:
    """Regenerate the section of ``readme``; True when it was stale (and, with ``write``, rewritten).

    Raises SpecError when the file cannot be read or has no section, and what ``policy_metadata``
    raises.
    """
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read it: {exc}", source=str(readme)) from exc
    new = replace_section(text, reason_code_table(policy_root, opa=opa), str(readme))
    if new == text:
        return False
    if write:
        try:
            readme.write_text(new, encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot write it: {exc}", source=str(readme)) from exc
    return True

"""OPA's answers, decoded once into typed values at the boundary.

The policy publishes which fields its verdicts depend on (``Signature``: the shape fields of a pool
and the workload fields) and answers verdict queries compactly (see
``policies/examlops/hardware/placement.rego``, rule ``verdicts``). This module turns those answers
into ``ShapeVerdict``s and a ``WorkloadVerdict``, and refuses anything malformed with a
``PolicyError`` naming what was wrong: never a ``KeyError``, never a partial answer.

A verdict is keyed by (policy revision, workload signature, shape key): the shape key is a digest of
the shape's signature fields, the workload key a digest of the workload's. Nothing else can change a
verdict (the policy sees nothing else), so a verdict is reused for as long as OPA confirms the same
revision.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import CheckInfo, Grant, JSONObject, JSONValue, Pool, Reason, Workload

KEY_HEX: Final = 32  # 128 bits of SHA-256: content keys, not security


def canonical(value: object) -> bytes:
    """Compact, sorted-key JSON: the bytes every digest here is taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def content_key(value: object) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()[:KEY_HEX]


@dataclass(frozen=True)
class Signature:
    """The fields a pool's verdict may depend on: the shape's and the workload's."""

    shape: tuple[str, ...]
    workload: tuple[str, ...]

    def shape_of(self, pool: Pool) -> JSONObject:
        out: JSONObject = {}
        for name in self.shape:
            value = getattr(pool, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def workload_of(self, workload: Workload) -> JSONObject:
        full = workload_input(workload)
        return {name: full[name] for name in self.workload}


@dataclass(frozen=True)
class About:
    """What the policy says about itself, once per revision."""

    revision: str
    opa_version: str
    signature: Signature
    checks: tuple[CheckInfo, ...]
    other_codes: tuple[tuple[str, str, str], ...]

    @property
    def explained(self) -> tuple[CheckInfo, ...]:
        """The checks in order, then the tier (why an admissible pool was passed over)."""
        tier = tuple(c for c in self.other_codes if c[1] == "preference")
        return (*self.checks, CheckInfo("tier", "Tier", "preference", tier))


@dataclass(frozen=True)
class Limits:
    """What a pool may cost and emit per device-hour for a grant (None: no cap), and the reasons a
    pool over them gets."""

    cost_per_hour: float | None = None
    carbon_per_hour: float | None = None
    cost_reason: Reason | None = None
    carbon_reason: Reason | None = None

    def over(self, price: float, carbon: float) -> tuple[Reason, ...]:
        """The budget reasons of a pool with this price and carbon per device-hour (the policy's
        budget check, checks/budget)."""
        out = []
        if self.cost_per_hour is not None and price > self.cost_per_hour + 1e-9 and self.cost_reason is not None:
            out.append(self.cost_reason)
        if self.carbon_per_hour is not None and carbon > self.carbon_per_hour + 1e-9 and self.carbon_reason is not None:
            out.append(self.carbon_reason)
        return tuple(out)


@dataclass(frozen=True)
class ShapeVerdict:
    """The verdict for every pool of one shape: its tier, what denies it, what it would grant.

    ``note_full`` replaces ``note`` when the requested accelerator's pools pass every check but are
    full, ``note_budget`` when they pass every check but the budget; ``limits`` are the budget's per
    device-hour for this grant."""

    tier: int
    note: str | None
    denials: tuple[Reason, ...]
    grant: Grant
    shortfall: Reason
    blocks_burst: bool
    note_full: str | None = None
    limits: Limits = Limits()
    note_budget: str | None = None

    @property
    def fallback(self) -> bool:
        return self.tier % 2 == 1

    @property
    def burst(self) -> bool:
        return self.tier >= 2


@dataclass(frozen=True)
class WorkloadVerdict:
    """What the policy says of the workload itself: rejected outright, how cloud comes in, why
    an admissible pool of one tier is passed over when a better tier wins, and the reason a
    stand-in gets when the workload does not fall back for budget (``budget_fallback``)."""

    rejection: Reason | None
    burst_mode: str | None  # "cloud" | "spill" | None
    preferences: Mapping[tuple[int, int], Reason]
    request_rejected: Reason | None
    budget_fallback: Reason | None = None


def workload_input(workload: Workload) -> JSONObject:
    """The workload as the policy reads it (every field; the target ``any`` when none)."""
    return {
        "name": workload.name,
        "accelerator": workload.accelerator,
        "engine": workload.engine,
        "capabilities": list(workload.capabilities),
        "target": workload.effective_target,
        "fraction": workload.fraction,
        "count": workload.count,
        "residency": workload.residency,
        "allow_burst": workload.allow_burst,
        "data_region": workload.data_region,
        "allow_cpu_fallback": workload.allow_cpu_fallback,
        "optimize": workload.optimize,
        "carbon_weight": workload.carbon_weight,
        "max_cost_per_hour": workload.max_cost_per_hour,
        "max_carbon_per_hour": workload.max_carbon_per_hour,
        "project": workload.project,
        "spot": workload.spot,
        "allow_budget_fallback": workload.allow_budget_fallback,
    }


# -- decoding ----------------------------------------------------------------------------------


class _Decoder:
    """Typed reads from an untrusted JSON value; every failure is one PolicyError."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, expected: str, value: object) -> PolicyError:
        shown = json.dumps(value)[:120] if _jsonable(value) else type(value).__name__
        return PolicyError(f"{self.where}: malformed answer at {path}: expected {expected}, got {shown}")

    def obj(self, value: object, path: str) -> Mapping[str, object]:
        if not isinstance(value, dict):
            raise self.fail(path, "an object", value)
        return cast(Mapping[str, object], value)

    def arr(self, value: object, path: str) -> Sequence[object]:
        if not isinstance(value, list):
            raise self.fail(path, "an array", value)
        return cast(Sequence[object], value)

    def field(self, value: Mapping[str, object], name: str, path: str) -> object:
        if name not in value:
            raise PolicyError(f"{self.where}: malformed answer at {path}: missing {name!r}")
        return value[name]

    def text(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, "a string", value)
        return value

    def opt_text(self, value: object, path: str) -> str | None:
        return None if value is None else self.text(value, path)

    def integer(self, value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise self.fail(path, "a whole number", value)
        return int(value)

    def number(self, value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, "a number", value)
        return float(value)

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, "true or false", value)
        return value

    def reason(self, value: object, path: str) -> Reason:
        raw = self.obj(value, path)
        details = raw.get("details") or {}
        return Reason(
            code=self.text(self.field(raw, "code", path), f"{path}.code"),
            kind=self.text(self.field(raw, "kind", path), f"{path}.kind"),
            message=self.text(self.field(raw, "message", path), f"{path}.message"),
            details=cast(JSONObject, self.obj(details, f"{path}.details")),
        )

    def opt_reason(self, value: object, path: str) -> Reason | None:
        return None if value is None else self.reason(value, path)

    def opt_number(self, value: object, path: str) -> float | None:
        return None if value is None else self.number(value, path)

    def limits(self, value: object, path: str) -> Limits:
        raw = self.obj(value, path)
        reasons = self.obj(self.field(raw, "reasons", path), f"{path}.reasons")
        return Limits(
            cost_per_hour=self.opt_number(self.field(raw, "cost_per_hour", path), f"{path}.cost_per_hour"),
            carbon_per_hour=self.opt_number(self.field(raw, "carbon_per_hour", path), f"{path}.carbon_per_hour"),
            cost_reason=self.opt_reason(reasons.get("cost_per_hour"), f"{path}.reasons.cost_per_hour"),
            carbon_reason=self.opt_reason(reasons.get("carbon_per_hour"), f"{path}.reasons.carbon_per_hour"),
        )

    def grant(self, value: object, path: str) -> Grant:
        raw = self.obj(value, path)

        def get(name: str) -> object:
            return self.field(raw, name, path)

        return Grant(
            requested=self.number(get("requested"), f"{path}.requested"),
            honored=self.boolean(get("honored"), f"{path}.honored"),
            share=self.number(get("share"), f"{path}.share"),
            units=self.integer(get("units"), f"{path}.units"),
            devices=self.number(get("devices"), f"{path}.devices"),
            scheme=self.opt_text(get("scheme"), f"{path}.scheme"),
            geometry=self.opt_text(get("geometry"), f"{path}.geometry"),
            profile=self.opt_text(get("profile"), f"{path}.profile"),
            why=self.opt_text(get("why"), f"{path}.why"),
            note=self.opt_text(get("note"), f"{path}.note"),
        )


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def decode_about(raw: object, where: str) -> About:
    """The policy's ``about`` answer. A policy not loaded from a bundle has no revision: refused."""
    d = _Decoder(where)
    top = d.obj(raw, "about")
    revision = top.get("revision")
    if not isinstance(revision, str) or not revision:
        raise PolicyError(
            f"{where} does not report a policy bundle revision; it must serve the reviewed policy as a bundle "
            "(exa policy build), so that what it evaluates is what was reviewed"
        )
    sig = d.obj(d.field(top, "signature", "about"), "about.signature")
    signature = Signature(
        shape=tuple(d.text(f, "about.signature.shape[]") for f in d.arr(d.field(sig, "shape", "about.signature"), "about.signature.shape")),
        workload=tuple(
            d.text(f, "about.signature.workload[]") for f in d.arr(d.field(sig, "workload", "about.signature"), "about.signature.workload")
        ),
    )
    unsupported = [d.text(n, "about.unsupported_checks[]") for n in d.arr(top.get("unsupported_checks", []), "about.unsupported_checks")]
    if unsupported:
        raise PolicyError(
            f"{where}: the policy declares check(s) {', '.join(unsupported)} at a stage this engine cannot run "
            "(pool-stage checks are capacity and budget); nothing is placed until the check is a shape-stage check"
        )
    for name in signature.shape:
        if name not in Pool.__dataclass_fields__:
            raise PolicyError(f"{where}: the policy reads a pool field this library does not know: {name!r}")
    for name in signature.workload:
        if name not in _WORKLOAD_FIELDS:
            raise PolicyError(f"{where}: the policy reads a workload field this library does not know: {name!r}")

    def codes(value: object, path: str) -> tuple[tuple[str, str, str], ...]:
        out = []
        for i, c in enumerate(d.arr(value, path)):
            row = d.obj(c, f"{path}[{i}]")
            out.append(
                (
                    d.text(d.field(row, "code", path), f"{path}[{i}].code"),
                    d.text(d.field(row, "kind", path), f"{path}[{i}].kind"),
                    d.text(d.field(row, "meaning", path), f"{path}[{i}].meaning"),
                )
            )
        return tuple(out)

    checks = []
    for i, c in enumerate(d.arr(d.field(top, "checks", "about"), "about.checks")):
        row = d.obj(c, f"about.checks[{i}]")
        checks.append(
            CheckInfo(
                name=d.text(d.field(row, "name", "about.checks"), f"about.checks[{i}].name"),
                title=d.text(d.field(row, "title", "about.checks"), f"about.checks[{i}].title"),
                stage=d.text(d.field(row, "stage", "about.checks"), f"about.checks[{i}].stage"),
                codes=codes(d.field(row, "codes", "about.checks"), f"about.checks[{i}].codes"),
            )
        )
    return About(
        revision=revision,
        opa_version=d.text(d.field(top, "opa_version", "about"), "about.opa_version"),
        signature=signature,
        checks=tuple(checks),
        other_codes=codes(top.get("other_codes", []), "about.other_codes"),
    )


_WORKLOAD_FIELDS: Final = frozenset(workload_input(Workload("x", "cpu")))


@dataclass(frozen=True)
class Answer:
    """A decoded verdict answer: the workload's verdict, the shapes judged, the keys OPA lacked."""

    confirm_revision: str | None
    workload: WorkloadVerdict
    shapes: Mapping[str, ShapeVerdict]
    missing: tuple[str, ...]
    judged: bool = True


def decode_verdicts(raw: object, keys: Sequence[str], where: str) -> Answer:
    """The policy's ``verdicts`` answer for ``keys``; every key must be judged or listed missing."""
    d = _Decoder(where)
    top = d.obj(raw, "verdicts")
    confirm = d.obj(d.field(top, "confirm", "verdicts"), "verdicts.confirm")
    revision = confirm.get("revision")
    rejection = d.opt_reason(d.field(top, "rejection", "verdicts"), "verdicts.rejection")
    mode = d.field(top, "burst_mode", "verdicts")
    if mode not in ("cloud", "spill", None):
        raise d.fail("verdicts.burst_mode", '"cloud", "spill" or null', mode)
    missing = tuple(d.text(k, "verdicts.missing[]") for k in d.arr(d.field(top, "missing", "verdicts"), "verdicts.missing"))
    preferences: dict[tuple[int, int], Reason] = {}
    for i, row in enumerate(d.arr(d.field(top, "preferences", "verdicts"), "verdicts.preferences")):
        cells = d.arr(row, f"verdicts.preferences[{i}]")
        if len(cells) != 3:
            raise d.fail(f"verdicts.preferences[{i}]", "[tier, selected tier, reason]", row)
        t = d.integer(cells[0], f"verdicts.preferences[{i}][0]")
        sel = d.integer(cells[1], f"verdicts.preferences[{i}][1]")
        preferences[(t, sel)] = d.reason(cells[2], f"verdicts.preferences[{i}][2]")
    workload = WorkloadVerdict(
        rejection=rejection,
        burst_mode=mode,
        preferences=preferences,
        request_rejected=d.opt_reason(d.field(top, "request_rejected", "verdicts"), "verdicts.request_rejected"),
        budget_fallback=d.opt_reason(d.field(top, "budget_fallback", "verdicts"), "verdicts.budget_fallback"),
    )
    if not d.boolean(d.field(top, "judged", "verdicts"), "verdicts.judged"):
        # An invalid workload is judged against no pool at all.
        if rejection is None:
            raise d.fail("verdicts.rejection", "the reason a workload is not judged", None)
        return Answer(cast("str | None", revision), workload, {}, missing, judged=False)
    checks = {
        name: [tuple(d.reason(r, f"verdicts.checks.{name}[{i}][]") for r in d.arr(rows, f"verdicts.checks.{name}[{i}]")) for i, rows in enumerate(d.arr(v, f"verdicts.checks.{name}"))]
        for name, v in d.obj(d.field(top, "checks", "verdicts"), "verdicts.checks").items()
    }
    grants = []
    for i, row in enumerate(d.arr(d.field(top, "grants", "verdicts"), "verdicts.grants")):
        cells = d.arr(row, f"verdicts.grants[{i}]")
        if len(cells) != 3:
            raise d.fail(f"verdicts.grants[{i}]", "[grant, shortfall, limits]", row)
        grants.append(
            (
                d.grant(cells[0], f"verdicts.grants[{i}][0]"),
                d.reason(cells[1], f"verdicts.grants[{i}][1]"),
                d.limits(cells[2], f"verdicts.grants[{i}][2]"),
            )
        )
    notes = [d.text(n, "verdicts.notes[]") for n in d.arr(d.field(top, "notes", "verdicts"), "verdicts.notes")]
    rows = d.obj(d.field(top, "shapes", "verdicts"), "verdicts.shapes")
    shapes: dict[str, ShapeVerdict] = {}
    wanted = set(keys) - set(missing)
    for key in wanted:
        path = f"verdicts.shapes[{key}]"
        cells = d.arr(rows.get(key), path)
        if len(cells) != 7:
            raise d.fail(path, "[tier, note, note when full, denials, grant, blocks_burst, note when over the budget]", cells)
        tier = d.integer(cells[0], f"{path}[0]")
        if not 0 <= tier <= 3:
            raise d.fail(f"{path}[0]", "a tier from 0 to 3", tier)
        note_index, full_index = d.integer(cells[1], f"{path}[1]"), d.integer(cells[2], f"{path}[2]")
        budget_index = d.integer(cells[6], f"{path}[6]")
        denials: list[Reason] = []
        for j, ref in enumerate(d.arr(cells[3], f"{path}[3]")):
            pair = d.arr(ref, f"{path}[3][{j}]")
            if len(pair) != 2 or not isinstance(pair[0], str) or pair[0] not in checks:
                raise d.fail(f"{path}[3][{j}]", "[check name, projection index]", ref)
            index = d.integer(pair[1], f"{path}[3][{j}][1]")
            if not 0 <= index < len(checks[pair[0]]):
                raise d.fail(f"{path}[3][{j}][1]", f"an index below {len(checks[pair[0]])}", index)
            denials.extend(checks[pair[0]][index])
        grant_index = d.integer(cells[4], f"{path}[4]")
        if not 0 <= grant_index < len(grants) or not all(-1 <= i < len(notes) for i in (note_index, full_index, budget_index)):
            raise d.fail(path, "grant and note indexes within the answer", cells)
        grant, shortfall, limits = grants[grant_index]
        shapes[key] = ShapeVerdict(
            tier=tier,
            note=notes[note_index] if note_index >= 0 else None,
            denials=tuple(denials),
            grant=grant,
            shortfall=shortfall,
            blocks_burst=d.boolean(cells[5], f"{path}[5]"),
            note_full=notes[full_index] if full_index >= 0 else None,
            limits=limits,
            note_budget=notes[budget_index] if budget_index >= 0 else None,
        )
    return Answer(cast("str | None", revision), workload, shapes, missing)


# -- the stored form of verdicts (decision records) ---------------------------------------------


def reason_json(r: Reason) -> JSONObject:
    return {"code": r.code, "kind": r.kind, "message": r.message, "details": r.details}


def grant_json(g: Grant) -> JSONObject:
    return {
        "requested": g.requested, "honored": g.honored, "share": g.share, "units": g.units, "devices": g.devices,
        "scheme": g.scheme, "geometry": g.geometry, "profile": g.profile, "why": g.why, "note": g.note,
    }  # fmt: skip


def _opt_reason_json(r: Reason | None) -> JSONValue:
    return None if r is None else reason_json(r)


def shape_verdict_json(v: ShapeVerdict) -> JSONObject:
    return {
        "tier": v.tier,
        "note": v.note,
        "note_full": v.note_full,
        **({"note_budget": v.note_budget} if v.note_budget is not None else {}),
        "denials": [reason_json(r) for r in v.denials],
        "grant": grant_json(v.grant),
        "shortfall": reason_json(v.shortfall),
        "limits": {
            "cost_per_hour": v.limits.cost_per_hour,
            "carbon_per_hour": v.limits.carbon_per_hour,
            "reasons": {"cost_per_hour": _opt_reason_json(v.limits.cost_reason), "carbon_per_hour": _opt_reason_json(v.limits.carbon_reason)},
        },
        "blocks_burst": v.blocks_burst,
    }


def checks_json(checks: Sequence[CheckInfo]) -> list[JSONValue]:
    return [{"name": c.name, "title": c.title, "stage": c.stage, "codes": [list(code) for code in c.codes]} for c in checks]


def checks_from_json(raw: object) -> tuple[CheckInfo, ...]:
    out = []
    for c in cast(list[Mapping[str, object]], raw or []):
        codes = tuple((str(x[0]), str(x[1]), str(x[2])) for x in cast(list[list[object]], c["codes"]))
        out.append(CheckInfo(str(c["name"]), str(c["title"]), str(c["stage"]), codes))
    return tuple(out)


def workload_verdict_json(v: WorkloadVerdict) -> JSONObject:
    return {
        "rejection": None if v.rejection is None else reason_json(v.rejection),
        "burst_mode": v.burst_mode,
        "preferences": [[t, sel, reason_json(r)] for (t, sel), r in sorted(v.preferences.items())],
        "request_rejected": None if v.request_rejected is None else reason_json(v.request_rejected),
        **({"budget_fallback": reason_json(v.budget_fallback)} if v.budget_fallback is not None else {}),
    }


def shape_verdict_from_json(raw: object, where: str) -> ShapeVerdict:
    d = _Decoder(where)
    top = d.obj(raw, "verdict")
    return ShapeVerdict(
        tier=d.integer(d.field(top, "tier", "verdict"), "verdict.tier"),
        note=d.opt_text(d.field(top, "note", "verdict"), "verdict.note"),
        denials=tuple(d.reason(r, "verdict.denials[]") for r in d.arr(d.field(top, "denials", "verdict"), "verdict.denials")),
        grant=d.grant(d.field(top, "grant", "verdict"), "verdict.grant"),
        shortfall=d.reason(d.field(top, "shortfall", "verdict"), "verdict.shortfall"),
        blocks_burst=d.boolean(d.field(top, "blocks_burst", "verdict"), "verdict.blocks_burst"),
        note_full=d.opt_text(top.get("note_full"), "verdict.note_full"),
        limits=d.limits(top["limits"], "verdict.limits") if "limits" in top else Limits(),
        note_budget=d.opt_text(top.get("note_budget"), "verdict.note_budget"),
    )


def workload_verdict_from_json(raw: object, where: str) -> WorkloadVerdict:
    d = _Decoder(where)
    top = d.obj(raw, "workload verdict")
    prefs: dict[tuple[int, int], Reason] = {}
    for row in d.arr(d.field(top, "preferences", "workload verdict"), "preferences"):
        cells = d.arr(row, "preferences[]")
        prefs[(d.integer(cells[0], "preferences[][0]"), d.integer(cells[1], "preferences[][1]"))] = d.reason(cells[2], "preferences[][2]")
    mode = top.get("burst_mode")
    return WorkloadVerdict(
        rejection=d.opt_reason(top.get("rejection"), "rejection"),
        burst_mode=cast("str | None", mode),
        preferences=prefs,
        request_rejected=d.opt_reason(top.get("request_rejected"), "request_rejected"),
        budget_fallback=d.opt_reason(top.get("budget_fallback"), "budget_fallback"),
    )


JSONList = list[JSONValue]

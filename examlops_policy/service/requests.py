"""What a request to the placement service says, read strictly: a JSON body of at most
``MAX_BODY_BYTES`` (else 413), well formed (else 400: no NaN, no Infinity, no number too large to
read), with only the fields it may have and of the types they take (else 422), before anything is
decided or written."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, cast

from examlops_policy import quantities, specs
from examlops_policy.errors import SpecError
from examlops_policy.model import OBJECTIVES, Workload
from examlops_policy.service.problems import HttpProblem
from examlops_policy.service.routes import POOL_OPTIONS, POOL_REQUIRED

MAX_BODY_BYTES: Final = 64 * 1024
# The fields of POST /v1/decisions besides the workload (as the workload file has it).
PLACE_FIELDS: Final = ("workload", "queue", "request_id", "dry_run", "lease", "optimize", "explain")
_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "workload": (dict,), "queue": (bool,), "request_id": (str,), "dry_run": (bool,), "lease": (str, int), "optimize": (str,),
    "explain": (bool,),
}  # fmt: skip


def too_large(size: int) -> HttpProblem:
    return HttpProblem(413, "body-too-large", f"a request body is at most {MAX_BODY_BYTES} bytes (got {size} or more); nothing was written",
                       title="request body too large")  # fmt: skip


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> object:
    """The JSON of a body; HttpProblem 400 for anything that is not strict JSON (NaN, Infinity,
    numbers that overflow, text that is not UTF-8)."""
    if len(raw) > MAX_BODY_BYTES:
        raise too_large(len(raw))
    try:
        return json.loads(raw.decode("utf-8"), parse_float=_finite, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:
        raise HttpProblem(400, "malformed-json", f"the request body is not JSON: {str(exc)[:200]}; nothing was written", title="malformed JSON") from None


@dataclass(frozen=True)
class PlaceRequest:
    workload: Workload
    queue: bool = False
    request_id: str | None = None
    dry_run: bool = False
    lease: timedelta | None = None
    explain: bool = False


def _projects(projects: tuple[str, ...]) -> str:
    return f"project {projects[0]!r}" if len(projects) == 1 else f"projects {', '.join(repr(p) for p in projects)}"


def place_request(doc: object, projects: tuple[str, ...]) -> PlaceRequest:
    """A placement request for one of ``projects`` (the token's: the one the workload names, which
    it must when there are several). SpecError (422) naming the field for an unknown field, a wrong
    type, a value the workload specification refuses or a project left unnamed among several;
    HttpProblem 403 when the workload names a project not among them."""
    if not isinstance(doc, dict):
        raise SpecError("expected a JSON object with a workload (and queue, request_id, dry_run, lease, optimize)", source="request body")
    unknown = sorted(k for k in doc if k not in PLACE_FIELDS)
    if unknown:
        raise SpecError(f"unknown field(s) {', '.join(unknown)}: expected {', '.join(PLACE_FIELDS)}", source="request body", field=unknown[0])
    if "workload" not in doc:
        raise SpecError("the workload is missing (an object as the workload file's workload: has it)", source="request body", field="workload")
    for key, value in doc.items():
        if value is not None and not isinstance(value, _TYPES[key]) or (isinstance(value, bool) and bool not in _TYPES[key]):
            raise SpecError(f"expected {' or '.join(t.__name__ for t in _TYPES[key])} (got {type(value).__name__})", source="request body", field=key)
    workload = dict(cast(dict[str, object], doc["workload"]))
    named = workload.get("project")
    if named is None and len(projects) > 1:
        raise SpecError(f"this token places for {_projects(projects)}: name one of them as the workload's project; nothing was placed",
                        source="request body", field="workload.project")  # fmt: skip
    if named is not None and named not in projects:
        from examlops_policy.service.problems import forbidden

        raise forbidden(f"the workload names project {named!r}, and this token places for {_projects(projects)}; nothing was placed")
    workload["project"] = named if named is not None else projects[0]
    if doc.get("optimize") is not None:
        if doc["optimize"] not in OBJECTIVES:
            raise SpecError(f"expected one of {', '.join(OBJECTIVES)} (got {doc['optimize']!r})", source="request body", field="optimize")
        workload["optimize"] = doc["optimize"]
    specs.validate({"workload": workload}, "workload-file.schema.json", source="request body")
    specs.check_carbon_weight(workload, source="request body", weight="workload.carbon_weight", optimize="optimize")
    built = specs.workload_from_mapping(workload, source="request body")
    request_id = doc.get("request_id")
    if request_id is not None:
        specs.check_request_id(cast(str, request_id))
    lease = None
    if doc.get("lease") is not None:
        try:
            lease = timedelta(seconds=quantities.duration_s(doc["lease"], least=1))
        except ValueError as exc:
            raise SpecError(str(exc), source="request body", field="lease") from None
    return PlaceRequest(built, bool(doc.get("queue")), cast("str | None", request_id), bool(doc.get("dry_run")), lease, bool(doc.get("explain")))


def lease_of(doc: object) -> timedelta:
    """The lease of a renew request: ``{"lease": "2h"}``."""
    if not isinstance(doc, dict) or set(doc) != {"lease"}:
        raise SpecError('expected {"lease": DURATION}, e.g. {"lease": "2h"}', source="request body", field="lease")
    try:
        return timedelta(seconds=quantities.duration_s(doc["lease"], least=1))
    except ValueError as exc:
        raise SpecError(str(exc), source="request body", field="lease") from None


_JSON_TYPES: Final = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,)}


def pool_options(doc: object) -> dict[str, object]:
    """``POST /v1/pools/{name}``'s body: ``exa hardware add-pool``'s options (``routes.POOL_OPTIONS``),
    each of its JSON type, the required ones given; the others as the command's defaults."""
    if not isinstance(doc, dict):
        raise SpecError("expected a JSON object of exa hardware add-pool's options", source="request body")
    for key, value in doc.items():
        kind = POOL_OPTIONS.get(key)
        if kind is None:
            raise SpecError(f"unknown option (expected some of {', '.join(POOL_OPTIONS)})", source="request body", field=str(key)[:64])
        wrong = (isinstance(value, bool) and kind != "boolean") or not isinstance(value, _JSON_TYPES[kind])
        if wrong or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise SpecError(f"expected {'a list of strings' if kind == 'array' else f'a {kind}'}", source="request body", field=key)
    for key in POOL_REQUIRED:
        if key not in doc:
            raise SpecError("required", source="request body", field=key)
    defaults = {k: False if t == "boolean" else "" if k == "capabilities" else None for k, t in POOL_OPTIONS.items()}
    return {**defaults, **doc}


def dry_run_of(doc: object) -> bool:
    """A pool change's body: none, ``{}`` or ``{"dry_run": true|false}``."""
    if doc is None:
        return False
    if not isinstance(doc, dict) or set(doc) - {"dry_run"} or not isinstance(doc.get("dry_run", False), bool):
        raise SpecError('expected no body, or {"dry_run": true} (or false)', source="request body")
    return bool(doc.get("dry_run", False))


def empty_or_object(doc: object) -> dict[str, object]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or doc:
        raise SpecError("expected no body, or an empty JSON object", source="request body")
    return {}

"""The placement service's OpenAPI 3.1 document, made from the route table (``service.routes.ROUTES``)
and the workload specification's JSON Schema; checked in as ``schemas/openapi.json`` (a test holds
the two equal: ``python -m examlops_policy.service.openapi > schemas/openapi.json`` writes it)."""

from __future__ import annotations

import json
import re
from typing import Final

from examlops_policy.service.problems import CONTENT_TYPE
from examlops_policy.service.requests import MAX_BODY_BYTES, PLACE_FIELDS
from examlops_policy.service.routes import ROUTES

VERSION: Final = "1"


def _workload_schema() -> dict[str, object]:
    from examlops_policy.tables import schema_dir

    doc = json.loads((schema_dir() / "workload.schema.json").read_text(encoding="utf-8"))
    return {k: v for k, v in doc.items() if k not in ("$schema", "$id")}


def document() -> dict[str, object]:
    paths: dict[str, dict[str, object]] = {}
    for spec in ROUTES:
        shared = sum(1 for other in ROUTES if other.name == spec.name) > 1
        op: dict[str, object] = {"operationId": f"{spec.name}_{spec.method.lower()}" if shared else spec.name, "summary": spec.summary}
        params: list[object] = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                                for name in re.findall(r"{(\w+)}", spec.path)]  # fmt: skip
        params += [{"name": n, "in": "query", "required": False, "schema": {"type": t}, "description": d} for n, t, d in spec.query]
        if params:
            op["parameters"] = params
        if spec.scope is not None:
            op["security"] = [{"bearer": []}]
            op["x-exa-scope"] = spec.scope
        if spec.body is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": spec.body}}}
        ok: dict[str, object] = {"description": "the answer, as the command line's --json prints it"}
        if spec.answer is not None:
            ok["content"] = {"application/json": {"schema": spec.answer}}
        problem = {"content": {CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
        responses: dict[str, object] = {"200": ok}
        codes = {"400": "malformed JSON", "413": f"a body over {MAX_BODY_BYTES} bytes", "422": "bad input (the field is named)"}
        if spec.method == "GET":
            codes = {}
        if spec.scope is not None:
            codes |= {"401": "no valid bearer token (missing, wrong, revoked or expired)", "403": "another project's, or a scope the token lacks"}
        if "{" in spec.path:
            codes["404"] = "not found"
        codes["503"] = "policy or state unavailable"
        for code, text in codes.items():
            responses[code] = {"description": text, **problem}
        op["responses"] = responses
        paths.setdefault(spec.path, {})[spec.method.lower()] = op
    place_props: dict[str, object] = {
        "workload": {"$ref": "#/components/schemas/Workload"},
        "queue": {"type": "boolean", "description": "wait in the queue when every pool that could take it is only full"},
        "request_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$", "description": "idempotency key: a retry places nothing more"},
        "dry_run": {"type": "boolean", "description": "decide without reserving or recording"},
        "lease": {"type": ["string", "integer"], "description": "release unless renewed within this time (e.g. 30m, 2h; seconds)"},
        "optimize": {"type": "string", "description": "what to minimise among admissible pools (the workload's optimize)"},
        "explain": {"type": "boolean", "description": "with format=text: every pool's verdict explained"},
    }
    assert tuple(place_props) == PLACE_FIELDS
    return {
        "openapi": "3.1.0",
        "info": {"title": "ExaMLOps placement service", "version": VERSION,
                 "description": "exa hardware serve --listen: placements by policy over HTTP (docs/service.md)."},  # fmt: skip
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "a token of exa tokens create, or with serve --oidc a JWT of the configured OIDC issuer (docs/service.md)"}},
            "schemas": {
                "Workload": _workload_schema(),
                "PlaceRequest": {"type": "object", "additionalProperties": False, "required": ["workload"], "properties": place_props},
                "Decision": {"type": "object", "required": ["outcome"], "description": "a decision as exa hardware place --json prints it",
                             "properties": {"outcome": {"type": "string"}, "id": {"type": "string"}, "pool": {"type": ["string", "null"]}}},
                "Problem": {"type": "object", "description": "RFC 9457 problem details, with the command line's exit code",
                            "required": ["type", "title", "status", "detail", "exit_code"],
                            "properties": {"type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                                           "detail": {"type": "string"}, "instance": {"type": "string"}, "exit_code": {"type": "integer"},
                                           "error": {"type": "string"}, "field": {"type": "string"}}},
            },  # fmt: skip
        },
    }


def text() -> str:
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(text())

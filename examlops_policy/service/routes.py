"""The placement service's routes: one table, the source of the routing (``service.app``) and of
the OpenAPI document (``service.openapi``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Spec:
    """One route: method, path, handler name, scope (None: no token), summary, request body
    schema, the answer's schema, query parameters ((name, JSON type, description))."""

    method: str
    path: str
    name: str
    scope: str | None
    summary: str
    body: dict[str, object] | None = None
    answer: dict[str, object] | None = None
    query: tuple[tuple[str, str, str], ...] = ()


_DECISION: Final[dict[str, object]] = {"$ref": "#/components/schemas/Decision"}
# exa hardware add-pool's options, as POST /v1/pools/{name} takes them, and their JSON types (held to the
# command's parser and to the client's table by tests/test_service.py).
POOL_OPTIONS: Final[dict[str, str]] = {
    "target": "string", "accelerator": "string", "count": "integer", "region": "string", "cost_per_hour": "number", "carbon_factor": "number",
    "supports_fractions": "boolean", "capabilities": "string", "model": "string", "power_w": "number", "pue": "number", "partition": "string",
    "gres_type": "string", "fixed_profile": "string", "spot": "boolean", "nodes": "integer", "node": "array", "cpu_per_node": "string",
    "memory_per_node": "string", "sharing": "string", "shares_per_device": "integer", "cluster": "string",
}  # fmt: skip
POOL_REQUIRED: Final = ("target", "accelerator", "region")
_ADD_POOL: Final[dict[str, object]] = {
    "type": "object", "additionalProperties": False, "required": list(POOL_REQUIRED),
    "properties": {k: {"type": "array", "items": {"type": "string"}} if t == "array" else {"type": t} for k, t in POOL_OPTIONS.items()},
}  # fmt: skip
_DRY_RUN: Final[dict[str, object]] = {"type": "object", "additionalProperties": False, "properties": {"dry_run": {"type": "boolean"}}}
ROUTES: Final = (
    Spec("GET", "/healthz", "healthz", None, "alive: the process answers"),
    Spec("GET", "/readyz", "readyz", None, "ready: OPA answers with the reviewed policy and the state is reachable"),
    Spec("GET", "/metrics", "metrics_text", None, "figures in the Prometheus text format"),
    Spec("GET", "/openapi.json", "openapi", None, "this document"),
    Spec("POST", "/v1/decisions", "place", "place", "decide and record a placement (dry_run: decide only), as exa hardware place --json",
         body={"$ref": "#/components/schemas/PlaceRequest"}, answer=_DECISION,
         query=(("format", "string", "text: the text exa hardware place prints"),
                ("verdicts", "boolean", "false: without every pool's verdict (a much smaller answer over a large fleet)"))),
    Spec("GET", "/v1/decisions", "decisions", "read", "a page of this project's decisions, newest first, as exa hardware decisions --json",
         query=(("limit", "integer", "at most this many (1 to 1000, default 20)"), ("since", "string", "made at or after (ISO 8601)"),
                ("until", "string", "made before (ISO 8601)"), ("cursor", "string", "the previous page's cursor"),
                ("format", "string", "text: the text exa hardware decisions prints"))),
    Spec("GET", "/v1/decisions/{id}", "decision", "read", "one decision (every pool's verdict with it), as exa hardware explain --json",
         answer=_DECISION, query=(("explain", "boolean", "every pool's verdict explained (always given)"),
                                  ("replay", "boolean", "the policy asked again: same answer?"),
                                  ("format", "string", "text: the text exa hardware explain prints"))),
    Spec("POST", "/v1/decisions/{id}/release", "release", "place", "free what a placement holds, as exa hardware release --json"),
    Spec("POST", "/v1/decisions/{id}/renew", "renew", "place", "move a placement's lease end, as exa hardware renew --json",
         body={"type": "object", "additionalProperties": False, "required": ["lease"], "properties": {"lease": {"type": ["string", "integer"]}}}),
    Spec("GET", "/v1/estimates", "estimates", "read", "when each pool would start a workload (decided as a dry run; nothing recorded)",
         query=(("accelerator", "string", "the accelerator (required)"), ("name", "string", "the workload's name (default estimate)"),
                ("count", "integer", "devices on each node"), ("nodes", "integer", "nodes"), ("fraction", "number", "share of a device"),
                ("walltime", "string", "its time limit, e.g. 2h"), ("max_wait", "string", "the longest it may wait, e.g. 30m"))),
    Spec("POST", "/v1/estimates", "estimates", "read", "as GET /v1/estimates, the workload given as POST /v1/decisions takes it",
         body={"$ref": "#/components/schemas/PlaceRequest"}),
    Spec("GET", "/v1/pools", "pools", "read", "every pool with what it can place, as exa hardware pools --json"),
    Spec("POST", "/v1/pools", "apply", "admin", "register or update pools (as exa hardware apply -f pools.yaml)",
         body={"type": "object", "additionalProperties": False, "required": ["pools"],
               "properties": {"pools": {"type": "array"}, "nodes": {"type": "array"}, "dry_run": {"type": "boolean"},
                              "prune": {"type": "boolean"}, "source": {"type": "string", "maxLength": 256}}},
         query=(("format", "string", "text: the text exa hardware apply prints"),)),
    Spec("GET", "/v1/pools/{name}", "pool", "read", "one pool device by device, as exa hardware pool --json"),
    Spec("POST", "/v1/pools/{name}", "add_pool", "admin", "register a pool (its options as exa hardware add-pool takes them), as exa hardware add-pool --json",
         body=_ADD_POOL, query=(("format", "string", "text: the text exa hardware add-pool prints"),)),
    *(Spec("POST", f"/v1/pools/{{name}}/{verb}", verb.replace("-", "_"), "admin", summary, body=_DRY_RUN,
           query=(("format", "string", f"text: the text exa hardware {command} prints"),))
      for verb, command, summary in (
          ("drain", "drain", "stop new grants on a pool (its grants are kept), as exa hardware drain --json"),
          ("undrain", "undrain", "let a drained pool take new grants again, as exa hardware undrain --json"),
          ("remove", "remove-pool", "remove a pool (a drained one with live grants: when the last ends), as exa hardware remove-pool --json"))),
    Spec("GET", "/v1/queue", "queue", "read", "the waiting workloads in the policy's order, as exa hardware queue --json",
         query=(("all", "boolean", "also the admitted, cancelled and failed ones"),)),
    Spec("POST", "/v1/queue/{id}/cancel", "cancel", "place", "take a waiting workload of this project out of the queue"),
    Spec("GET", "/v1/quotas", "quotas", "read", "use against quota per project and accelerator class, as exa hardware quotas --json",
         query=(("format", "string", "text: the text exa hardware quotas prints"),)),
    Spec("GET", "/v1/portable", "portable", "read", "can an engine run on an accelerator? as exa hardware portable --json (exit code 3: no)",
         query=(("engine", "string", "the engine (required)"), ("accelerator", "string", "the accelerator (required)"),
                ("format", "string", "text: the text exa hardware portable prints"))),
    Spec("GET", "/v1/decisions/{id}/accounting", "accounting", "read", "cost and carbon of a placement held for some hours, as exa hardware accounting --json",
         query=(("hours", "number", "how long it is held (required; 0 to 1,000,000)"), ("format", "string", "text: the text exa hardware accounting prints"))),
    Spec("GET", "/v1/burst-events", "burst_events", "read", "the burst attempts of this token's projects, newest first, as exa hardware burst-events --json",
         query=(("limit", "integer", "the newest this many attempts, before they are filtered by project (default 50)"),
                ("format", "string", "text: the text exa hardware burst-events prints"))),
    *(Spec("GET", f"/v1/finops/{kind}", f"finops_{kind}", "read", f"{kind} by device type and region with the total, as exa finops {kind} --json",
           query=(("hours", "number", "hours per decision (default: the time held until release or now)"),
                  ("format", "string", f"text: the text exa finops {kind} prints")))
      for kind in ("cost", "carbon")),
    Spec("GET", "/v1/audit/verify", "audit_verify", "admin", "verify the audit log's hash chain, as exa audit verify --json (exit code 7: it does not)",
         query=(("format", "string", "text: the text exa audit verify prints"),)),
)  # fmt: skip

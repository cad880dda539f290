"""Every wire and stored form of the decision path, and the canonical bytes digests are taken of.

* canonical bytes: compact, sorted-key JSON (``canonical``); content keys and digests of them;
* the workload as the policy reads it (``workload_input``) and back (``workload_from_json``);
* OPA's answers (``decode_about``, ``decode_verdicts``), refused whole when malformed with a
  ``PolicyError`` naming what was wrong: never a ``KeyError``, never a partial answer;
* the stored forms: pools, capacity summaries, holdings, fleet and verdict-set documents, and the
  decision record (``encode_record``; records written by earlier releases read back too).

Nothing here decides anything: selection, packing and the rebuild of a decision from its record are
the core's other modules.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Final, Generic, TypeVar, cast

from examlops_policy._canonical import canonical as canonical  # offered to the core from here
from examlops_policy.errors import PolicyError, StateCorrupt, StateError
from examlops_policy.model import (
    BurstVerdict,
    Capacity,
    CheckInfo,
    Decision,
    Grant,
    DeviceShare,
    Holding,
    JSONObject,
    NodeAllocation,
    NodeRoom,
    JSONValue,
    Placement,
    Pool,
    PoolVerdict,
    Provenance,
    Reason,
    Rejection,
    StartEstimate,
    Workload,
    pool_spec,
)
from examlops_policy._core.verdicts import SHAPE_FIELDS, About, Alternative, Answer, Confirmation, Limits, ShapeVerdict, Signature, TooSmall, WorkloadVerdict
from examlops_policy._core.quota import QuotaLimits
from examlops_policy._core.waiting import Starts, WaitLimits

KEY_HEX: Final = 32  # 128 bits of SHA-256: content keys, not security
# The pool-stage checks this engine runs (selection compares each pool's capacity, price, quota and
# start estimate with its shape's verdict, what the projects hold and the workload's limits, as the
# policy's reference decision does); the policy publishes its own set in ``about``, and a policy
# naming one this engine does not run places nothing.
POOL_STAGE: Final = ("budget", "capacity", "quota", "wait")
# The message texts the policy gives (``about.texts``), which selection fills in with counts.
TEXTS: Final = ("no_pools", "no_eligible_pool", "no_capacity", "reason_on_one", "reason_on_many", "separator")
# The headlines of a no_capacity summary by what stops the pools that could take the workload
# (composer.headline_causes); a policy from before them words every such summary as no_capacity.
HEADLINE_TEXTS: Final = ("no_capacity_wait", "no_capacity_quota", "no_capacity_other")
# 4: also the decision's time and its candidates' start estimates ("decided_at", "estimates");
# 3: the state version decided at ("at"); 2: the capacity vector itself.
RECORD_VERSION: Final = 4
COMPACT_VERSIONS: Final = (2, 3, 4)
# A packed capacity vector (records of version 2) never unpacks to more than this (an altered record
# cannot exhaust memory).
MAX_VECTOR_BYTES: Final = 64 * 1024 * 1024


# -- canonical bytes ---------------------------------------------------------------------------


# canonical(value): compact, sorted-key JSON, the bytes every digest here is taken of (written once,
# in examlops_policy._canonical, which the audit log and the tables cache use too).


def content_key(value: object) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()[:KEY_HEX]


def digest(document: bytes) -> str:
    return "sha256:" + hashlib.sha256(document).hexdigest()


# -- the workload --------------------------------------------------------------------------------


def workload_input(workload: Workload) -> JSONObject:
    """The workload as the policy reads it, and as its record keeps it (every field; the target
    ``any`` when none; what it asks of nodes and its priority class only where it gives them)."""
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
        # When it must start (the wait check reads them) and its time limit (what a scheduler is
        # asked for: the policy does not read it, the record keeps it for submit).
        "max_wait": workload.max_wait,
        "deadline": workload.deadline,
        "walltime": workload.walltime,
        **node_asks(workload),
        # Its priority class, where it names one: the placement policy does not read it, the record
        # keeps it (a preempted workload is queued again in its class; the input digest covers it).
        **({"priority": workload.priority} if workload.priority is not None else {}),
        **work_asks(workload),
    }


def work_asks(workload: Workload) -> JSONObject:
    """The workload's work (its class and amount), in its policy input only when it says it (a
    workload that says none has the input, and the input digest, it had before work existed)."""
    if workload.work_class is None:
        return {}
    return {"work_class": workload.work_class, "work": workload.work}


# What a workload asks of nodes, in its policy input only when it asks it (a workload that asks
# nothing of nodes has the input, and the input digest, it had before nodes existed).
NODE_ASKS: Final = ("cpu", "memory", "nodes", "topology", "topology_mode", "models", "isolation")
_NODE_DEFAULTS: Final[dict[str, object]] = {"cpu": None, "memory": None, "nodes": 1, "topology": None, "topology_mode": None, "models": (), "isolation": "any"}


def node_asks(workload: Workload) -> JSONObject:
    out: JSONObject = {}
    for name in NODE_ASKS:
        value = getattr(workload, name)
        if value != _NODE_DEFAULTS[name]:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def workload_from_json(raw: Mapping[str, object]) -> Workload:
    values = dict(raw)
    target = values.get("target")
    values["target"] = None if target == "any" else target
    values["capabilities"] = tuple(cast(list[str], values.get("capabilities", [])))
    if "models" in values:
        values["models"] = tuple(cast(list[str], values["models"]))
    return Workload(**values)  # type: ignore[arg-type]


_WORKLOAD_FIELDS: Final = frozenset(workload_input(Workload("x", "cpu"))) | frozenset(NODE_ASKS) | frozenset({"work_class", "work"})


# -- pools, capacity, holdings -------------------------------------------------------------------


def pool_text(pool: Pool) -> str:
    """A pool's spec as stored (and compared: an unchanged spec is the same text)."""
    return json.dumps(pool_spec(pool), sort_keys=True, separators=(",", ":"))


_T = TypeVar("_T")


class TextCache(Generic[_T]):
    """The values of a function of stored text, the most recently used kept within a budget of
    ``chars`` characters of text (what the decoded value's size follows) and ``entries`` entries.
    An entry-count cache alone kept every version of a large pool: a pool of 20,000 nodes is ~1 MB
    of spec and ~6 MiB decoded, and each change of one node's state is a new text, so a process
    that changes node states grew by that much a change. A text over the whole budget is not kept."""

    def __init__(self, fn: Callable[[str], _T], *, chars: int, entries: int) -> None:
        self._fn, self._chars, self._entries = fn, chars, entries
        self._kept: OrderedDict[str, _T] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, text: str) -> _T:
        with self._lock:
            found = self._kept.get(text, _MISSING)
            if found is not _MISSING:
                self._kept.move_to_end(text)
                return cast(_T, found)
        value = self._fn(text)
        if len(text) > self._chars:
            return value
        with self._lock:
            if text not in self._kept:
                self._kept[text] = value
                self._size += len(text)
                while self._size > self._chars or len(self._kept) > self._entries:
                    dropped, _ = self._kept.popitem(last=False)
                    self._size -= len(dropped)
        return value

    def cache_clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._size = 0

    def cache_size(self) -> tuple[int, int]:
        """(entries, characters of text) kept now."""
        with self._lock:
            return len(self._kept), self._size


_MISSING: Final = object()
# The pools and capacity summaries of a few versions of a fleet (a pool of 20,000 nodes is ~1 MB).
CACHE_CHARS: Final = 8 << 20


def _pool_from_text(text: str) -> Pool:
    return pool_from_doc(json.loads(text))


pool_from_text: Final = TextCache(_pool_from_text, chars=CACHE_CHARS, entries=65536)
"""The Pool a stored spec describes (cached: every snapshot reads pools; Pool is frozen)."""


def pool_from_doc(doc: Mapping[str, object]) -> Pool:
    values = dict(doc)
    values["capabilities"] = tuple(values.get("capabilities", ()))  # type: ignore[arg-type]
    return Pool(**values)  # type: ignore[arg-type]


def capacity_json(capacity: Capacity) -> JSONValue:
    """``whole`` alone, or ``[whole, {profile: n}]``: the compact form stored; a node-tracked
    pool's ``[whole, {profile: n}, [node row, ...]]`` (``node_room_json``)."""
    if capacity.nodes is not None:
        return [capacity.whole, dict(sorted(capacity.slices.items())), [node_room_json(r) for r in capacity.nodes]]
    if not capacity.slices:
        return capacity.whole
    return [capacity.whole, dict(sorted(capacity.slices.items()))]


def node_room_json(room: NodeRoom) -> JSONValue:
    """``[whole, cpu, memory, shares, {profile: n}, block, switch, count]``."""
    return [room.whole, room.cpu, room.memory, room.shares, dict(room.slices), room.block, room.switch, room.count]


def _opt_int(raw: object) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    raise ValueError(raw)


def node_room_from_json(raw: object) -> NodeRoom:
    if not isinstance(raw, list) or len(raw) != 8 or not isinstance(raw[4], dict):
        raise ValueError(raw)
    whole, shares, count = (_opt_int(raw[i]) for i in (0, 3, 7))
    if whole is None or shares is None or count is None:
        raise ValueError(raw)
    slices = tuple(sorted((str(k), int(v)) for k, v in raw[4].items()))
    return NodeRoom(whole, _opt_int(raw[1]), _opt_int(raw[2]), shares, slices, _opt_int(raw[5]), _opt_int(raw[6]), count)


def capacity_text(capacity: Capacity) -> str:
    return canonical(capacity_json(capacity)).decode("utf-8")


def capacity_from_json(raw: object) -> Capacity:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return Capacity(raw)
    if isinstance(raw, list) and len(raw) == 2 and isinstance(raw[0], int) and isinstance(raw[1], dict):
        return Capacity(raw[0], {str(k): int(v) for k, v in raw[1].items()})
    if isinstance(raw, list) and len(raw) == 3 and isinstance(raw[0], int) and isinstance(raw[1], dict) and isinstance(raw[2], list):
        try:
            rooms = tuple(node_room_from_json(r) for r in raw[2])
        except (ValueError, TypeError):
            raise StateCorrupt(f"malformed capacity in the state: {str(raw)[:80]}") from None
        return Capacity(raw[0], {str(k): int(v) for k, v in raw[1].items()}, rooms)
    raise StateCorrupt(f"malformed capacity in the state: {str(raw)[:80]}")


def _capacity_from_text(text: str) -> Capacity:
    try:
        return capacity_from_json(json.loads(text))
    except ValueError as exc:
        raise StateCorrupt(f"malformed capacity in the state: {text[:80]}") from exc


capacity_from_text: Final = TextCache(_capacity_from_text, chars=CACHE_CHARS, entries=4096)


def capacity_digest(capacities: Sequence[Capacity]) -> str:
    """SHA-256 of what every pool could still place, in fleet order (part of a decision's input
    digest)."""
    return hashlib.sha256(b"[" + b",".join(canonical(capacity_json(c)) for c in capacities) + b"]").hexdigest()


def recorded_input_digest(capacity: str, record: Mapping[str, object]) -> str:
    """The input digest of a record's decision, worked out again from the record (its fleet,
    workload and the quota use it names) and ``capacity``, the digest of the capacities it was
    decided at (``capacity_digest``): what its provenance must say when neither was altered.
    The same bytes as ``Request.input_digest``: the quota is left out when nothing counted."""
    return input_digest_with(capacity, input_digest_rest(record))


def input_digest_rest(record: Mapping[str, object]) -> bytes:
    """What a record's input digest covers besides the capacities (its fleet, workload and quota
    use), as the canonical bytes that follow them: a verifier keeps these, not the record, until it
    knows the capacities (``input_digest_with``)."""
    body: dict[str, object] = {"fleet": record.get("fleet"), "workload": record.get("workload")}
    provenance = record.get("provenance")
    quota = provenance.get("quota_use") if isinstance(provenance, Mapping) else None
    if quota:
        body["quota"] = quota
    return canonical(body)[1:]  # '"fleet":...}': "capacity" sorts before every key of it


def input_digest_with(capacity: str, rest: bytes) -> str:
    """The input digest of a decision from ``capacity`` and ``input_digest_rest`` of its record."""
    return digest(b'{"capacity":' + canonical(capacity) + b"," + rest)


def holdings_json(holdings: Sequence[Holding]) -> list[JSONValue]:
    return [[h.device, h.profile, h.start, h.units] for h in holdings]


def holdings_from_json(raw: object) -> tuple[Holding, ...]:
    """Holdings as stored (``[[device, profile, start, units], ...]``)."""
    items = cast(list[list[object]], raw or [])
    return tuple(
        Holding(int(cast(int, h[0])), cast("str | None", h[1]), cast("int | None", h[2]), cast("int | None", h[3])) for h in items
    )


def allocations_json(allocations: Sequence[NodeAllocation]) -> list[JSONValue]:
    """A grant node by node, as records and audit entries keep it: ``[node, holdings, share or
    null ([device, shares]), cpu_milli, memory_mib]``."""
    return [
        [a.node, holdings_json(a.holdings), None if a.share is None else [a.share.device, a.share.shares], a.cpu_milli, a.memory_mib]
        for a in allocations
    ]


def allocations_from_json(raw: object) -> tuple[NodeAllocation, ...]:
    """``allocations_json``'s form read back; StateError for anything else (an altered record)."""
    out = []
    try:
        for item in cast(list[list[object]], raw or []):
            node, held, share, cpu, memory = item
            shared = None if share is None else DeviceShare(int(cast(list[int], share)[0]), int(cast(list[int], share)[1]))
            out.append(NodeAllocation(str(node), holdings_from_json(held), shared, int(cast(int, cpu)), int(cast(int, memory))))
    except (TypeError, ValueError, IndexError) as exc:
        raise StateCorrupt(f"malformed node allocations in a stored decision: {str(raw)[:80]}") from exc
    return tuple(out)


def capacity_vector(capacities: Sequence[Capacity]) -> JSONValue:
    """What every pool could still place, in fleet order, as records of version 2 stored it: the
    distinct values once and an index per pool."""
    values: list[JSONValue] = []
    seen: dict[tuple[int, tuple[tuple[str, int], ...], tuple[NodeRoom, ...] | None], int] = {}
    at: list[JSONValue] = []
    for capacity in capacities:
        key = (capacity.whole, tuple(sorted(capacity.slices.items())), capacity.nodes)
        index = seen.get(key)
        if index is None:
            index = seen[key] = len(values)
            values.append(capacity_json(capacity))
        at.append(index)
    return {"values": values, "at": at}


def packed_vector(capacities: Sequence[Capacity]) -> JSONValue:
    """``capacity_vector``, deflated and base64-encoded (records of version 2)."""
    raw = canonical(capacity_vector(capacities))
    return {"deflate": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def capacities_of(raw: object) -> list[Capacity]:
    """The capacity vector of a version-2 record: ``packed_vector``'s or ``capacity_vector``'s form,
    or the plain list of records written before them. StateError for anything else (an altered
    record)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("deflate"), str):
        try:
            inflater = zlib.decompressobj()
            data = inflater.decompress(base64.b64decode(str(raw["deflate"]), validate=True), MAX_VECTOR_BYTES)
            if inflater.unconsumed_tail:
                raise StateCorrupt("a stored decision's capacity vector is larger than any fleet's; the record was altered")
            raw = json.loads(data)
        except (ValueError, zlib.error) as exc:
            raise StateCorrupt(f"malformed capacity vector in a stored decision: {exc}") from exc
    try:
        if isinstance(raw, list):
            return [capacity_from_json(c) for c in raw]
        if isinstance(raw, Mapping):
            values, at = raw.get("values"), raw.get("at")
            if isinstance(values, list) and isinstance(at, list):
                if all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(values) for i in at):
                    decoded = [capacity_from_json(v) for v in values]
                    return [decoded[i] for i in at]
    except StateError:
        pass
    raise StateCorrupt(f"malformed capacity vector in a stored decision: {str(raw)[:80]}")


# -- the fleet and verdict-set documents ------------------------------------------------------


def fleet_document(priced: Sequence[tuple[Pool, float, float]]) -> JSONObject:
    """The fleet as decisions see it (every pool, in name order, with its effective price and
    carbon per device-hour), stored once per revision for rebuilding and replaying decisions."""
    return {"pools": [{"pool": pool_spec(p), "price": price, "carbon": carbon} for p, price, carbon in sorted(priced, key=lambda r: r[0].name)]}


def fleet_revision(document: JSONObject) -> str:
    """``fleet:`` + SHA-256 of the fleet document's canonical bytes."""
    return "fleet:" + hashlib.sha256(canonical(document)).hexdigest()


def verdict_set_document(
    revision: str,
    signature: Signature,
    workload_signature: JSONObject,
    judged: bool,
    workload: WorkloadVerdict,
    checks: Sequence[CheckInfo],
    shapes: Mapping[str, ShapeVerdict],
    texts: Mapping[str, str],
) -> JSONObject:
    """Every verdict a decision used, and the policy's words for its summary, as stored once for
    all decisions that share it."""
    return {
        "revision": revision,
        "signature": {"shape": list(signature.shape), "workload": list(signature.workload)},
        "workload": workload_signature,
        "judged": judged,
        "workload_verdict": workload_verdict_json(workload),
        "checks": checks_json(checks),
        "shapes": {k: shape_verdict_json(v) for k, v in sorted(shapes.items())},
        "texts": dict(texts),
    }


# -- OPA's queries and answers ---------------------------------------------------------------------


def query_body(policy_input: JSONObject) -> bytes:
    """A query's body (OPA's REST API: ``{"input": ...}``)."""
    return json.dumps({"input": policy_input}, separators=(",", ":"), allow_nan=False).encode("utf-8")


def result_of(raw: bytes, rule: str, where: str) -> object:
    """A query answer's ``result``; PolicyError when it is unreadable or undefined."""
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise PolicyError(f"{where} gave an unreadable answer: {exc}") from exc
    if not isinstance(answer, dict) or "result" not in answer:
        raise PolicyError(f"{where}: the policy returned no {rule} (undefined); is the placement policy loaded?")
    return answer["result"]


def decode_confirmation(raw: object, where: str) -> Confirmation:
    """The policy's ``confirm`` answer: the revision it serves (None: not from a bundle) and OPA's
    version."""
    if not isinstance(raw, dict) or not isinstance(raw.get("opa_version"), str):
        raise PolicyError(f"{where}: malformed confirmation: {str(raw)[:120]}")
    revision = raw.get("revision")
    return Confirmation(revision if isinstance(revision, str) and revision else None, raw["opa_version"])


def shapes_patch(shapes: Mapping[str, JSONObject]) -> bytes:
    """A JSON Patch adding ``shapes`` to the fleet's shapes OPA holds as data."""
    return json.dumps([{"op": "add", "path": f"/{key}", "value": shape} for key, shape in sorted(shapes.items())], separators=(",", ":")).encode("utf-8")


def json_bytes(value: object) -> bytes:
    """``value`` as compact JSON (a document this layer stores in OPA)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")


def views_key(keys: Iterable[str]) -> str:
    """The key the fleet's views for exactly ``keys`` are stored under in OPA: the SHA-256 of the
    keys, sorted, one per line (as the policy derives it, verdicts.key_of)."""
    return hashlib.sha256("\n".join(sorted(keys)).encode("utf-8")).hexdigest()


def stored_views(raw: object, where: str) -> tuple[JSONObject, str, str]:
    """The policy's ``views`` answer: the views to store, the key they are for (the shapes they
    cover) and their digest (what a verdict query carries for the stored views to be read)."""
    d = _Decoder(where)
    top = d.obj(raw, "views")
    views = d.obj(top.get("views"), "views.views")
    key, digest = views.get("key"), top.get("digest")
    if not isinstance(key, str) or not key.isalnum():
        raise d.fail("views.views.key", "a hex digest", key)
    if not isinstance(digest, str) or not digest.isalnum():
        raise d.fail("views.digest", "a hex digest", digest)
    return cast(JSONObject, views), key, digest


def shapes_document(shapes: Mapping[str, JSONObject]) -> bytes:
    """The fleet's shapes as a document of their own (a server that holds none yet)."""
    return json.dumps({"shapes": dict(shapes)}, separators=(",", ":")).encode("utf-8")



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

    def quota(self, value: object, path: str) -> QuotaLimits:
        raw = self.obj(value, path)

        def get(name: str) -> object:
            return self.field(raw, name, path)

        reasons = self.obj(get("reasons"), f"{path}.reasons")
        return QuotaLimits(
            project=self.text(get("project"), f"{path}.project"),
            accelerator=self.text(get("accelerator"), f"{path}.accelerator"),
            devices=self.number(get("devices"), f"{path}.devices"),
            nominal=self.opt_number(get("nominal"), f"{path}.nominal"),
            ceiling=self.opt_number(get("ceiling"), f"{path}.ceiling"),
            cohort=self.opt_text(get("cohort"), f"{path}.cohort"),
            members=tuple(self.text(m, f"{path}.members[]") for m in self.arr(get("members"), f"{path}.members")),
            cohort_nominal=self.opt_number(get("cohort_nominal"), f"{path}.cohort_nominal"),
            device_hours=self.opt_number(get("device_hours"), f"{path}.device_hours"),
            period_days=self.opt_number(get("period_days"), f"{path}.period_days"),
            always=tuple(self.reason(r, f"{path}.always[]") for r in self.arr(get("always"), f"{path}.always")),
            devices_reason=self.opt_reason(reasons.get("devices"), f"{path}.reasons.devices"),
            hours_reason=self.opt_reason(reasons.get("device_hours"), f"{path}.reasons.device_hours"),
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
            # Only a larger share says so (a grant stored before larger shares existed is not one).
            larger=self.boolean(raw.get("larger", False), f"{path}.larger"),
            # What a grant asks of nodes (absent from grants judged before nodes existed).
            nodes=self.integer(raw.get("nodes", 1), f"{path}.nodes"),
            cpu_milli=self.integer(raw.get("cpu_milli", 0), f"{path}.cpu_milli"),
            memory_mib=self.integer(raw.get("memory_mib", 0), f"{path}.memory_mib"),
            shares=None if raw.get("shares") is None else self.integer(raw.get("shares"), f"{path}.shares"),
            topology=self.opt_text(raw.get("topology"), f"{path}.topology"),
        )

    def too_small(self, value: object, path: str) -> TooSmall | None:
        """What a pool counted as one node must have in all for a grant (None: absent or null, as
        from a policy before it)."""
        if value is None:
            return None
        raw = self.obj(value, path)
        devices = self.integer(self.field(raw, "devices", path), f"{path}.devices")
        if devices < 1:
            raise self.fail(f"{path}.devices", "a whole number from 1", devices)
        return TooSmall(devices, self.reason(self.field(raw, "reason", path), f"{path}.reason"))

    def alternatives(self, value: object, path: str) -> tuple[Alternative, ...]:
        out = []
        for i, item in enumerate(self.arr(value, path)):
            cell = self.obj(item, f"{path}[{i}]")
            out.append(
                Alternative(
                    self.grant(self.field(cell, "grant", f"{path}[{i}]"), f"{path}[{i}].grant"),
                    self.limits(self.field(cell, "limits", f"{path}[{i}]"), f"{path}[{i}].limits"),
                    self.quota(cell["quota"], f"{path}[{i}].quota") if "quota" in cell else None,
                )
            )
        return tuple(out)


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
    # A policy from before the pool stage was published ran exactly this engine's (impact compares
    # against such policies); one that publishes another set is refused.
    pool_stage = tuple(d.text(n, "about.pool_stage[]") for n in d.arr(top.get("pool_stage", list(POOL_STAGE)), "about.pool_stage"))
    # (A policy from before a pool-stage check was added runs fewer: this engine runs those too;
    # its verdicts carry no figures of the checks it lacks, e.g. no quota.)
    beyond = [n for n in pool_stage if n not in POOL_STAGE]
    if unsupported or beyond:
        raise PolicyError(
            f"{where}: the policy declares check(s) {', '.join(unsupported or beyond)} at a stage this engine cannot run "
            f"(its pool stage is {', '.join(POOL_STAGE)}); nothing is placed until the check is a shape-stage check"
        )
    # A policy from before it published its texts words its summaries itself (its reference rule).
    raw_texts = d.obj(top.get("texts", {}), "about.texts")
    texts = {name: d.text(d.field(raw_texts, name, "about.texts"), f"about.texts.{name}") for name in TEXTS} if raw_texts else {}
    if texts:
        texts |= {name: d.text(raw_texts[name], f"about.texts.{name}") for name in HEADLINE_TEXTS if name in raw_texts}
    for name in signature.shape:
        if name not in SHAPE_FIELDS:
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
        texts=texts,
    )




def decode_verdicts(raw: object, keys: Sequence[str], where: str) -> Answer:
    """The policy's ``verdicts`` answer for ``keys`` (schemas/verdicts-answer.schema.json); every key
    must be judged or listed missing."""
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
        path = f"verdicts.preferences[{i}]"
        pref = d.obj(row, path)
        t = d.integer(d.field(pref, "tier", path), f"{path}.tier")
        preferences[(t, d.integer(d.field(pref, "selected", path), f"{path}.selected"))] = d.reason(d.field(pref, "reason", path), f"{path}.reason")
    workload = WorkloadVerdict(
        rejection=rejection,
        burst_mode=mode,
        preferences=preferences,
        request_rejected=d.opt_reason(d.field(top, "request_rejected", "verdicts"), "verdicts.request_rejected"),
        budget_fallback=d.opt_reason(d.field(top, "budget_fallback", "verdicts"), "verdicts.budget_fallback"),
        wait=WaitLimits.from_json(d.field(top, "wait", "verdicts"), f"{where} (verdicts.wait)"),
    )
    if not d.boolean(d.field(top, "judged", "verdicts"), "verdicts.judged"):
        # An invalid workload is judged against no pool at all.
        if rejection is None:
            raise d.fail("verdicts.rejection", "the reason a workload is not judged", None)
        return Answer(cast("str | None", revision), workload, {}, missing, judged=False)
    reasons = [d.reason(r, f"verdicts.reasons[{i}]") for i, r in enumerate(d.arr(d.field(top, "reasons", "verdicts"), "verdicts.reasons"))]
    grants = []
    for i, row in enumerate(d.arr(d.field(top, "grants", "verdicts"), "verdicts.grants")):
        path = f"verdicts.grants[{i}]"
        cell = d.obj(row, path)
        grants.append(
            (
                d.grant(d.field(cell, "grant", path), f"{path}.grant"),
                d.reason(d.field(cell, "shortfall", path), f"{path}.shortfall"),
                d.limits(d.field(cell, "limits", path), f"{path}.limits"),
                d.quota(cell["quota"], f"{path}.quota") if "quota" in cell else None,
                d.alternatives(d.field(cell, "alternatives", path), f"{path}.alternatives"),
                d.too_small(cell.get("too_small"), f"{path}.too_small"),
            )
        )
    notes = [d.text(n, "verdicts.notes[]") for n in d.arr(d.field(top, "notes", "verdicts"), "verdicts.notes")]
    rows = d.obj(d.field(top, "shapes", "verdicts"), "verdicts.shapes")

    def index(value: object, below: int, path: str) -> int:
        i = d.integer(value, path)
        if not 0 <= i < below:
            raise d.fail(path, f"an index below {below}", value)
        return i

    def note(value: object, path: str) -> str | None:
        return None if value is None else notes[index(value, len(notes), path)]

    # Rows that say the same thing are one verdict: each distinct row is read once (the path that
    # words an error is taken only for a row the quick checks below do not accept).
    made: dict[_Row, ShapeVerdict] = {}
    shapes: dict[str, ShapeVerdict] = {}
    for key in set(keys) - set(missing):
        row = rows.get(key)
        same = _row_key(row, len(notes), len(reasons), len(grants))
        if same is not None:
            found = made.get(same)
            if found is None:
                tier, n, n_full, n_budget, denied, g, blocks = same
                grant, shortfall, limits, quota, alternatives, too_small = grants[g]
                found = made[same] = ShapeVerdict(
                    tier=tier,
                    note=None if n is None else notes[n],
                    denials=tuple(reasons[j] for j in denied),
                    grant=grant,
                    shortfall=shortfall,
                    blocks_burst=blocks,
                    note_full=None if n_full is None else notes[n_full],
                    limits=limits,
                    note_budget=None if n_budget is None else notes[n_budget],
                    quota=quota,
                    alternatives=alternatives,
                    too_small=too_small,
                )
            shapes[key] = found
            continue
        path = f"verdicts.shapes[{key}]"
        row = d.obj(rows.get(key), path)
        tier = d.integer(d.field(row, "tier", path), f"{path}.tier")
        if not 0 <= tier <= 3:
            raise d.fail(f"{path}.tier", "a tier from 0 to 3", tier)
        denials = d.arr(d.field(row, "denials", path), f"{path}.denials")
        grant, shortfall, limits, quota, alternatives, too_small = grants[index(d.field(row, "grant", path), len(grants), f"{path}.grant")]
        shapes[key] = ShapeVerdict(
            tier=tier,
            note=note(d.field(row, "note", path), f"{path}.note"),
            denials=tuple(reasons[index(j, len(reasons), f"{path}.denials[]")] for j in denials),
            grant=grant,
            shortfall=shortfall,
            blocks_burst=d.boolean(d.field(row, "blocks_burst", path), f"{path}.blocks_burst"),
            note_full=note(d.field(row, "note_full", path), f"{path}.note_full"),
            limits=limits,
            note_budget=note(d.field(row, "note_budget", path), f"{path}.note_budget"),
            quota=quota,
            alternatives=alternatives,
            too_small=too_small,
        )
    return Answer(cast("str | None", revision), workload, shapes, missing)


_Row = tuple[int, "int | None", "int | None", "int | None", tuple[int, ...], int, bool]


def _row_key(row: object, notes: int, reasons: int, grants: int) -> _Row | None:
    """A shape row as a hashable value when it is plainly well formed (whole numbers in range,
    true or false), else None: the caller then reads it field by field and says what is wrong."""
    if type(row) is not dict:
        return None
    try:
        tier, denials, grant, blocks = row["tier"], row["denials"], row["grant"], row["blocks_burst"]
        note, full, budget = row["note"], row["note_full"], row["note_budget"]
    except KeyError:
        return None
    if type(tier) is not int or not 0 <= tier <= 3 or type(grant) is not int or not 0 <= grant < grants or type(blocks) is not bool:
        return None
    for n in (note, full, budget):
        if n is not None and (type(n) is not int or not 0 <= n < notes):
            return None
    if type(denials) is not list or any(type(j) is not int or not 0 <= j < reasons for j in denials):
        return None
    return (tier, note, full, budget, tuple(denials), grant, blocks)


# -- the stored form of verdicts (verdict sets) --------------------------------------------------


def reason_json(r: Reason) -> JSONObject:
    return {"code": r.code, "kind": r.kind, "message": r.message, "details": r.details}


def grant_json(g: Grant) -> JSONObject:
    """A grant as stored: what it asks of nodes only when it asks it."""
    out: JSONObject = {
        "requested": g.requested, "honored": g.honored, "share": g.share, "units": g.units, "devices": g.devices,
        "scheme": g.scheme, "geometry": g.geometry, "profile": g.profile, "why": g.why, "note": g.note,
        **({"larger": True} if g.larger else {}),
    }  # fmt: skip
    if g.nodes != 1:
        out["nodes"] = g.nodes
    if g.cpu_milli:
        out["cpu_milli"] = g.cpu_milli
    if g.memory_mib:
        out["memory_mib"] = g.memory_mib
    if g.shares is not None:
        out["shares"] = g.shares
    if g.topology is not None:
        out["topology"] = g.topology
    return out


def _limits_json(limits: Limits) -> JSONObject:
    return {
        "cost_per_hour": limits.cost_per_hour,
        "carbon_per_hour": limits.carbon_per_hour,
        "reasons": {"cost_per_hour": _opt_reason_json(limits.cost_reason), "carbon_per_hour": _opt_reason_json(limits.carbon_reason)},
    }


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
        "limits": _limits_json(v.limits),
        "blocks_burst": v.blocks_burst,
        **({"quota": quota_json(v.quota)} if v.quota is not None else {}),
        # Stored only where there are any: a verdict set without them keeps its bytes (and key).
        **({"alternatives": [alternative_json(a) for a in v.alternatives]} if v.alternatives else {}),
        **({"too_small": too_small_json(v.too_small)} if v.too_small is not None else {}),
    }


def too_small_json(t: TooSmall) -> JSONObject:
    """What a pool counted as one node must have in all for a grant, as the policy answers it."""
    return {"devices": t.devices, "reason": reason_json(t.reason)}


def alternative_json(a: Alternative) -> JSONObject:
    """A larger share as the policy answers it: the grant, the budget's limits and (a policy with
    the quota check) the quota's figures for it."""
    return {
        "grant": grant_json(a.grant), "limits": _limits_json(a.limits),
        **({"quota": quota_json(a.quota)} if a.quota is not None else {}),
    }  # fmt: skip


def quota_json(q: QuotaLimits) -> JSONObject:
    """A grant's quota figures as the policy answers them (and as a verdict set stores them)."""
    return {
        "project": q.project, "accelerator": q.accelerator, "devices": q.devices, "nominal": q.nominal, "ceiling": q.ceiling,
        "cohort": q.cohort, "members": list(q.members), "cohort_nominal": q.cohort_nominal, "device_hours": q.device_hours,
        "period_days": q.period_days, "always": [reason_json(r) for r in q.always],
        "reasons": {"devices": _opt_reason_json(q.devices_reason), "device_hours": _opt_reason_json(q.hours_reason)},
    }  # fmt: skip


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
        # Kept only where the workload has a limit (verdict sets from before the wait check had none).
        **({"wait": v.wait.as_json()} if v.wait.any else {}),
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
        quota=d.quota(top["quota"], "verdict.quota") if "quota" in top else None,
        alternatives=d.alternatives(top.get("alternatives", []), "verdict.alternatives"),
        too_small=d.too_small(top.get("too_small"), "verdict.too_small"),
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
        wait=WaitLimits.from_json(top["wait"], f"{where} (wait limits)") if "wait" in top else WaitLimits(),
    )


# -- the decision record ---------------------------------------------------------------------------


def _burst_json(burst: BurstVerdict) -> JSONObject:
    return {
        "attempted": burst.attempted,
        "verdict": burst.verdict,
        "pool": burst.pool,
        "region": burst.region,
        "reason": None if burst.reason is None else reason_json(burst.reason),
    }


def encode_record(
    decision: Decision,
    *,
    workload: JSONObject,
    verdict_set: str,
    at: int | None = None,
    capacities: Sequence[Capacity] = (),
    holdings: Sequence[Holding] = (),
    starts: Starts | None = None,
    allocations: Sequence[NodeAllocation] = (),
) -> bytes:
    """The record's bytes (compact, sorted-key JSON): the workload (its policy input), the fleet
    revision and verdict set it was judged on, the state version whose capacity it was decided at
    (``at``; without it, version 2: the capacity vector itself), the decision's time and the start
    estimates of the pools asked (``starts``; without them, version 3), the outcome, its devices
    and its provenance."""
    prov = decision.provenance
    version = 2 if at is None else RECORD_VERSION if starts is not None else 3
    doc: JSONObject = {
        "v": version,
        "outcome": decision.outcome,
        "workload": workload,
        "fleet": prov.fleet_revision,
        "verdicts": verdict_set,
        "burst": _burst_json(decision.burst),
        **({"at": at} if at is not None else {"capacity": packed_vector(capacities)}),
        "provenance": {
            "input_digest": prov.input_digest,
            "policy_revision": prov.policy_revision,
            "opa_version": prov.opa_version,
            "verdicts": prov.verdicts,
            **({"quota_use": prov.quota_use} if prov.quota_use else {}),
        },
    }
    if starts is not None and at is not None:
        doc.update(starts_json(starts))
    if isinstance(decision, Placement):
        doc.update(
            pool=decision.pool,
            holdings=holdings_json(holdings),
            **({"allocations": allocations_json(allocations)} if allocations else {}),
            cost_per_hour=decision.cost_per_hour,
            carbon_factor=decision.carbon_factor,
            grounded_carbon_per_hour=decision.grounded_carbon_per_hour,
        )
    else:
        doc.update(code=decision.code, reason=decision.reason)
    return canonical(doc)


def instant_json(moment: datetime) -> str:
    """An aware instant as stored: RFC 3339 UTC with microseconds and ``Z``."""
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def starts_json(starts: Starts) -> JSONObject:
    """A decision's time and the start estimates of the pools it asked (their ``as_json`` without
    the pool's name, by pool), as a record keeps them."""
    return {
        "decided_at": instant_json(starts.now),
        "estimates": {name: {k: v for k, v in e.as_json().items() if k != "pool"} for name, e in sorted(starts.estimates.items())},
    }


def starts_of(document: Mapping[str, object]) -> Starts | None:
    """The decision's time and estimates a version-4 record keeps (None: an earlier record, decided
    without them); StateError for an altered one."""
    if document.get("v") != RECORD_VERSION:
        return None
    raw, when = document.get("estimates"), document.get("decided_at")
    try:
        if not isinstance(raw, dict) or not isinstance(when, str):
            raise ValueError("no decision time or estimates")
        now = datetime.fromisoformat(when.replace("Z", "+00:00"))
        if now.tzinfo is None:
            raise ValueError(f"a decision time without its offset: {when!r}")
        estimates = {str(name): StartEstimate.from_json(cast(Mapping[str, object], e), str(name)) for name, e in raw.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise StateCorrupt(f"malformed start estimates in a stored decision: {exc}") from exc
    return Starts(now, estimates)


def is_compact(document: Mapping[str, object]) -> bool:
    """A record that refers to its fleet and verdict set (version 2, 3 or 4), not a full document."""
    return document.get("v") in COMPACT_VERSIONS


def record_at(document: Mapping[str, object]) -> int | None:
    """The state version a version-3 or -4 record was decided at (None: the record keeps its
    capacity)."""
    at = document.get("at")
    if document.get("v") in (3, RECORD_VERSION):
        if isinstance(at, int) and not isinstance(at, bool) and at >= 0:
            return at
        raise StateCorrupt(f"malformed state version in a stored decision: {str(at)[:40]}")
    return None


def document_of(raw: str | bytes) -> JSONObject:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise StateCorrupt(f"a stored decision is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateCorrupt("a stored decision is not a JSON object")
    return cast(JSONObject, doc)


def reason_from_json(raw: Mapping[str, object]) -> Reason:
    return Reason(str(raw["code"]), str(raw["kind"]), str(raw["message"]), cast(JSONObject, raw.get("details") or {}))


# -- documents written before compact records ----------------------------------------------------


def _reason(data: JSONObject) -> Reason:
    return Reason(**data)  # type: ignore[arg-type]


def _grant(data: JSONObject) -> Grant:
    """A grant as old documents wrote it (``granted`` was the share of one device)."""
    values: dict[str, object] = dict(data)
    if "granted" in values:
        values["share"] = values.pop("granted")
        devices = float(cast(float, values["devices"]))
        values["units"] = 1 if values.get("profile") else max(1, round(devices))
    return Grant(**values)  # type: ignore[arg-type]


def _verdict(data: JSONObject) -> PoolVerdict:
    values: dict[str, object] = dict(data)
    values["reasons"] = tuple(_reason(r) for r in cast(list[JSONObject], data["reasons"]))
    values["grant"] = _grant(cast(JSONObject, data["grant"]))
    return PoolVerdict(**values)  # type: ignore[arg-type]


def _burst(data: JSONObject) -> BurstVerdict:
    values: dict[str, object] = dict(data)
    if values.get("reason"):
        values["reason"] = _reason(cast(JSONObject, values["reason"]))
    return BurstVerdict(**values)  # type: ignore[arg-type]


def decision_from_document(data: JSONObject) -> Decision:
    """A Placement or Rejection from a full document (what releases before compact records stored:
    the whole decision, ``outcome`` first)."""
    values: dict[str, object] = {k: v for k, v in data.items() if k != "outcome"}
    workload: dict[str, object] = dict(cast(JSONObject, values["workload"]))
    workload["capabilities"] = tuple(cast(list[str], workload["capabilities"]))
    values["workload"] = Workload(**workload)  # type: ignore[arg-type]
    values["verdicts"] = tuple(_verdict(v) for v in cast(list[JSONObject], values["verdicts"]))
    values["burst"] = _burst(cast(JSONObject, values["burst"]))
    values["provenance"] = Provenance(**cast(JSONObject, values["provenance"]))  # type: ignore[arg-type]
    values.pop("holdings", None)
    values.pop("checks", None)
    if data["outcome"] == "placed":
        values["grant"] = _grant(cast(JSONObject, values["grant"]))
        return Placement(**values)  # type: ignore[arg-type]
    return Rejection(**values)  # type: ignore[arg-type]

"""Decisions to JSON, for ``--json`` output, and the full documents of decisions recorded before
compact records (``examlops_policy._core.records``) back into decisions."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import cast

from examlops_policy.model import (
    BurstVerdict,
    Decision,
    Grant,
    JSONObject,
    JSONValue,
    Placement,
    PoolVerdict,
    Provenance,
    Reason,
    Rejection,
    Workload,
)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "ok")


def _plain(value: object) -> JSONValue:
    """Like ``dataclasses.asdict`` without its deep copies (a large fleet's explanation holds
    thousands of verdicts sharing reason and grant objects)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, (tuple, list)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return cast(JSONValue, value)


def to_json(decision: Decision) -> JSONObject:
    """A JSON-ready dict of the whole decision, with ``outcome`` first."""
    body = cast(JSONObject, _plain(decision))
    if isinstance(decision, Placement):
        outcome = "placed"
    else:
        outcome = "blocked" if decision.burst_blocked else "rejected"
    return {"outcome": outcome, **body}


# -- documents written before compact records --------------------------------------------------


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


def from_json(data: JSONObject) -> Decision:
    """Rebuild a Placement or Rejection from a full document (``to_json``'s output)."""
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

"""Loading pools and workloads from YAML files or Python mappings, validated by JSON Schema.

Every error names the source (file or argument), the field path and what was expected, and is
raised before anything is placed or written. YAML is read defensively: aliases (billion laughs),
duplicate keys, non-UTF-8 bytes, huge or deeply nested documents are refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Final, cast

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource

from examlops_policy.errors import SpecError
from examlops_policy.model import JSONObject, Pool, Workload
from examlops_policy.tables import Tables, load_tables, schema_dir

MAX_FILE_BYTES: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 32


MAX_NODES: Final = 2_000_000

# libyaml's C parser and composer when present (ten times faster on a large fleet file); the
# checks below run on the composed node graph, before any Python object is built.
_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_graph(root: yaml.Node) -> None:
    """Refuse aliases, non-scalar or duplicate keys, deep nesting and huge documents."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        line = node.start_mark.line + 1
        if id(node) in seen:
            # The composer hands back the anchored node itself for an alias (billion laughs).
            raise SpecError(f"line {line}: YAML aliases are not allowed")
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise SpecError(f"more than {MAX_NODES} YAML nodes")
        if depth > MAX_DEPTH:
            raise SpecError(f"line {line}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, yaml.MappingNode):
            keys: set[tuple[str, str]] = set()
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    # A list or mapping as a key cannot be hashed (and no spec field is one).
                    raise SpecError(f"line {key.start_mark.line + 1}: a mapping key must be a plain value, not a list or mapping")
                if key.tag == "tag:yaml.org,2002:merge":
                    raise SpecError(f"line {key.start_mark.line + 1}: YAML merge keys (<<) are not allowed")
                if (key.tag, key.value) in keys:
                    raise SpecError(f"line {key.start_mark.line + 1}: duplicate key {key.value!r}")
                keys.add((key.tag, key.value))
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)


def _parse(text: str) -> object:
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_text(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``; SpecError for a file over ``max_bytes``, unreadable or not UTF-8."""
    source = str(path)
    try:
        # Never more than the limit into memory: the path may be a huge file or a device that never ends.
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(f"cannot read file: {exc.strerror}", source=source) from exc
    if len(raw) > max_bytes:
        raise SpecError(f"file is larger than {max_bytes} bytes; at most {max_bytes} are accepted", source=source)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 (byte {exc.start})", source=source) from exc


def read_yaml(path: Path) -> object:
    """Parse one YAML document from ``path`` with the limits above."""
    source = str(path)
    text = read_text(path)
    try:
        data = _parse(text)
    except SpecError as exc:
        raise SpecError(str(exc), source=source) from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"malformed YAML: {exc}", source=source) from exc
    except RecursionError as exc:  # the pure-Python composer recurses before the graph is checked
        raise SpecError(f"nested deeper than {MAX_DEPTH} levels", source=source) from exc
    except Exception as exc:  # noqa: BLE001 - untrusted text: any scalar a constructor chokes on is bad input
        # PyYAML's constructors raise plain ValueError/AttributeError/... for scalars they cannot
        # build: 2024-13-01 as a date, "!!timestamp x", an integer beyond Python's digit limit.
        raise SpecError(f"malformed YAML: {type(exc).__name__}: {exc}", source=source) from exc
    return data


@lru_cache(maxsize=8)
def _validator(name: str) -> Draft202012Validator:
    base = schema_dir()
    resources = []
    for path in sorted(base.glob("*.schema.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    registry: Registry = Registry().with_resources(resources)
    schema = json.loads((base / name).read_text(encoding="utf-8"))
    return Draft202012Validator(schema, registry=registry)


def _field_path(error: ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(top level)"


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut short: an error must not echo megabytes of hostile input."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _explain(error: ValidationError) -> str:
    validator = error.validator
    if validator == "additionalProperties":
        return f"unknown field(s): {error.message.split('(')[-1].rstrip(')')}"
    if validator == "enum":
        allowed = ", ".join("null" if v is None else str(v) for v in cast(list[object], error.validator_value))
        return f"expected one of {allowed} (got {_shown(error.instance)})"
    if validator == "const" and list(error.absolute_path)[-1:] == ["count"]:
        return f"count must be {error.validator_value!r} when a fraction below 1 is requested (got {_shown(error.instance)})"
    if validator == "pattern":
        return (
            f"got {_shown(error.instance)}: use letters, digits, '.', '_' and '-' only, starting with a letter or "
            "digit (no spaces, quotes, shell or control characters)"
        )
    return error.message


def _first_bad(value: object, bad: Callable[[object], bool], path: str = "") -> str | None:
    """The field path of the first leaf value for which ``bad`` is true, in document order."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _first_bad(item, bad, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_bad(item, bad, f"{path}[{index}]")
            if found:
                return found
        return None
    return (path or "(top level)") if bad(value) else None


def _has_control_character(value: object) -> bool:
    # JSON Schema's ``$`` matches before a trailing newline, so patterns alone do not keep them out.
    return isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value)


def _non_finite(value: object) -> bool:
    # JSON cannot carry NaN or infinity, and NaN passes every JSON Schema minimum and maximum.
    return isinstance(value, float) and not math.isfinite(value)


def validate(instance: object, schema: str, *, source: str) -> None:
    """Raise SpecError listing every schema violation of ``instance``."""
    bad = _first_bad(instance, _has_control_character)
    if bad:
        raise SpecError("control characters (newline, tab, escape, ...) are not allowed", source=source, field=bad)
    bad = _first_bad(instance, _non_finite)
    if bad:
        raise SpecError("must be a finite number (not NaN or infinity)", source=source, field=bad)
    errors = sorted(
        _validator(schema).iter_errors(instance),
        key=lambda e: ([str(p) for p in e.absolute_path], e.validator != "required"),
    )
    if errors:
        first = errors[0]
        more = "" if len(errors) == 1 else f" (and {len(errors) - 1} more problem(s))"
        explained = _explain(first)
        if len(explained) > 1000:  # e.g. jsonschema's own messages quote the whole value
            explained = f"{explained[:1000]}... ({len(explained)} characters)"
        raise SpecError(explained + more, source=source, field=_field_path(first))


def _check_pool_facts(pool: Pool, tables: Tables, *, source: str, field: str) -> None:
    if not tables.region_known(pool.region):
        raise SpecError(
            f"region {pool.region!r} is not in the reviewed regions table "
            "(policies/examlops/tables/regions.yaml); its jurisdiction would be unknown",
            source=source,
            field=f"{field}.region" if field else "region",
        )
    if pool.model is not None:
        entry = tables.models.get(pool.model)
        if not isinstance(entry, dict):
            known = ", ".join(sorted(tables.models))
            raise SpecError(
                f"unknown model {pool.model!r} (known: {known}; add it to policies/examlops/tables/models.yaml)",
                source=source,
                field=f"{field}.model" if field else "model",
            )
        if entry.get("accelerator") != pool.accelerator:
            raise SpecError(
                f"model {pool.model!r} is a {entry.get('accelerator')} device, not {pool.accelerator}",
                source=source,
                field=f"{field}.model" if field else "model",
            )


def pool_from_mapping(data: Mapping[str, object], *, source: str = "pool", field: str = "", tables: Tables | None = None) -> Pool:
    """Validate one pool mapping and build the Pool."""
    validate(dict(data), "pool.schema.json", source=source)
    values = dict(data)
    values["capabilities"] = tuple(cast(Sequence[str], values.get("capabilities", ())))
    pool = Pool(**values)  # type: ignore[arg-type]
    _check_pool_facts(pool, tables or load_tables(), source=source, field=field)
    return pool


def pools_from_file(path: Path, tables: Tables | None = None) -> list[Pool]:
    """Read a pools file (``pools: [...]``); names must be unique."""
    data = read_yaml(path)
    validate(data, "pools-file.schema.json", source=str(path))
    items = cast(JSONObject, data)["pools"]
    pools: list[Pool] = []
    seen: set[str] = set()
    for index, item in enumerate(cast(list[JSONObject], items)):
        where = f"pools[{index}]"
        name = cast(str, item["name"])
        if name in seen:
            raise SpecError(f"duplicate pool name {name!r}", source=str(path), field=f"{where}.name")
        seen.add(name)
        values: dict[str, object] = dict(item)
        values["capabilities"] = tuple(cast(list[str], values.get("capabilities", [])))
        pool = Pool(**values)  # type: ignore[arg-type]
        _check_pool_facts(pool, tables or load_tables(), source=str(path), field=where)
        pools.append(pool)
    return pools


def workload_from_mapping(data: Mapping[str, object], *, source: str = "workload") -> Workload:
    """Validate one workload mapping and build the Workload."""
    values = {k: v for k, v in data.items() if v is not None}
    validate(values, "workload.schema.json", source=source)
    if values.get("target") == "any":
        values.pop("target")
    values["capabilities"] = tuple(cast(Sequence[str], values.get("capabilities", ())))
    if "fraction" in values:
        values["fraction"] = float(cast(float, values["fraction"]))
    return Workload(**values)  # type: ignore[arg-type]


def workload_from_file(path: Path) -> Workload:
    """Read a workload file (``workload: {...}``)."""
    data = read_yaml(path)
    validate(data, "workload-file.schema.json", source=str(path))
    return workload_from_mapping(cast(Mapping[str, object], cast(JSONObject, data)["workload"]), source=str(path))


def check_workload(workload: Workload) -> Workload:
    """Validate a Workload built in Python (the same rules as a file)."""
    data: dict[str, object] = {
        "name": workload.name,
        "accelerator": workload.accelerator,
        "capabilities": list(workload.capabilities),
        "engine": workload.engine,
        "fraction": workload.fraction,
        "count": workload.count,
        "residency": workload.residency,
        "allow_burst": workload.allow_burst,
    }
    if workload.target is not None:
        data["target"] = workload.target
    validate(data, "workload.schema.json", source=f"workload {workload.name!r}")
    return workload


def check_pool(pool: Pool, tables: Tables | None = None) -> Pool:
    """Validate a Pool built in Python (the same rules as a file)."""
    data = {k: v for k, v in pool.__dict__.items() if v is not None}
    data["capabilities"] = list(pool.capabilities)
    if not pool.supports_fractions:
        data.pop("supports_fractions")
    validate(data, "pool.schema.json", source=f"pool {pool.name!r}")
    _check_pool_facts(pool, tables or load_tables(), source=f"pool {pool.name!r}", field="")
    return pool

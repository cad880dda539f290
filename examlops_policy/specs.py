"""Loading pools and workloads from YAML files or Python mappings, validated by JSON Schema.

Every error names the source (file or argument), the field path and what was expected, and is
raised before anything is placed or written. YAML is read defensively: aliases (billion laughs),
duplicate keys, non-UTF-8 bytes, huge or deeply nested documents are refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from examlops_policy import quantities
from examlops_policy.errors import SpecError
from examlops_policy.model import JSONObject, Pool, Workload, article
from examlops_policy.tables import Tables, load_tables, schema_dir

if TYPE_CHECKING:  # PyYAML and jsonschema load only when a spec file is read
    import yaml
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

MAX_FILE_BYTES: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 32


MAX_NODES: Final = 2_000_000

def _check_graph(root: yaml.Node) -> None:
    """Refuse aliases, non-scalar or duplicate keys, deep nesting and huge documents."""
    import yaml

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
    import yaml

    # libyaml's C parser and composer when present (ten times faster on a large fleet file); the
    # checks below run on the composed node graph, before any Python object is built.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
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
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 (byte {exc.start})", source=source) from exc
    # A byte-order mark belongs at the start; inside, YAML readers disagree on what it means.
    inner = text.find("\ufeff", 1)
    if inner != -1:
        raise SpecError(f"a byte-order mark (U+FEFF) inside the file, at character {inner}", source=source)
    return text


def read_yaml(path: Path) -> object:
    """Parse one YAML document from ``path`` with the limits above."""
    import yaml

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
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

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
    """``value`` as YAML and JSON write it (``quantities.shown``), cut short: an error must not
    echo megabytes of hostile input."""
    return quantities.shown(value, limit)


_QUANTITIES: Final[dict[str, Callable[[object], object]]] = {
    "cpu": quantities.cpu_milli,
    "cpu_per_node": quantities.cpu_milli,
    "memory": quantities.memory_mib,
    "memory_per_node": quantities.memory_mib,
    "max_wait": quantities.duration_s,
    "walltime": quantities.duration_s,
    "deadline": quantities.instant_text,
}
# JSON Schema's type names, as a person writing YAML reads them.
_TYPE_WORDS: Final = {
    "object": "a mapping", "array": "a list", "string": "a string", "number": "a number",
    "integer": "a whole number", "boolean": "true or false", "null": "nothing (null)",
}  # fmt: skip


def _explain(error: ValidationError) -> str:
    validator = error.validator
    if validator == "additionalProperties":
        return f"unknown field(s): {error.message.split('(')[-1].rstrip(')')}"
    if validator == "enum":
        allowed = ", ".join("null" if v is None else str(v) for v in cast(list[object], error.validator_value))
        return f"expected one of {allowed} (got {_shown(error.instance)})"
    last = list(error.absolute_path)[-1:]
    if validator == "const" and last in (["count"], ["nodes"]):
        return f"{last[0]} must be {error.validator_value!r} when a fraction below 1 is requested (got {_shown(error.instance)})"
    if validator == "pattern" and last and last[0] in _QUANTITIES:
        # The one reader of sizes, durations and times says what is wrong with this one (e.g. 64G:
        # ambiguous; 2 hours: not a duration).
        try:
            _QUANTITIES[str(last[0])](error.instance)
        except ValueError as exc:
            return str(exc)
    if validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        words = " or ".join(_TYPE_WORDS.get(str(t), str(t)) for t in cast(list[object], wanted))
        if error.instance is None and not list(error.absolute_path):
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            title = str(schema.get("title") or "file").lower()
            return f"the file is empty (a {title} is {words})"
        return f"expected {words} (got {_shown(error.instance)})"
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


def check_pool_facts(pool: Pool, tables: Tables, *, source: str | None = None, field: str = "") -> Pool:
    """What the reviewed tables say of a pool: a known region, a known model of its accelerator, a
    fixed slice profile its device has."""
    source = source or f"pool {pool.name!r}"

    def where(name: str) -> str:
        return f"{field}.{name}" if field else name

    if not tables.region_known(pool.region):
        raise SpecError(
            f"region {pool.region!r} is not in the reviewed regions table "
            "(policies/examlops/tables/regions.yaml); its jurisdiction would be unknown",
            source=source,
            field=where("region"),
        )
    if pool.model is not None:
        entry = tables.models.get(pool.model)
        if not isinstance(entry, dict):
            known = ", ".join(sorted(tables.models))
            raise SpecError(
                f"unknown model {pool.model!r} (known: {known}; add it to policies/examlops/tables/models.yaml)",
                source=source,
                field=where("model"),
            )
        if entry.get("accelerator") != pool.accelerator:
            raise SpecError(
                f"model {pool.model!r} is {article(str(entry.get('accelerator')))} device, not {pool.accelerator}",
                source=source,
                field=where("model"),
            )
    if pool.fixed_profile is not None:
        scheme = tables.scheme_for(pool.accelerator, pool.model)
        profiles = [str(cast(JSONObject, s)["profile"]) for s in cast(list[object], (scheme or {}).get("slices", []))]
        if pool.fixed_profile not in profiles:
            raise SpecError(
                f"fixed slice profile {pool.fixed_profile!r} is not one the partitioning table gives this device "
                f"(expected one of {', '.join(profiles) or 'none: it cannot be partitioned'})",
                source=source,
                field=where("fixed_profile"),
            )
    return pool


def check_workload_facts(workload: Workload, tables: Tables) -> Workload:
    """What the reviewed tables say of a workload: its data region must be a known region, its
    project a project of the budgets table, its priority a class of the priorities table, and each
    model it would take a known model of its accelerator. A name the tables do not know is bad
    input (SpecError), whichever table it names: nothing is decided or recorded for it."""
    if workload.data_region is not None and not tables.region_known(workload.data_region):
        raise SpecError(
            f"data_region {workload.data_region!r} is not in the reviewed regions table "
            "(policies/examlops/tables/regions.yaml); its jurisdiction would be unknown",
            source=f"workload {workload.name!r}",
            field="data_region",
        )
    projects = cast(Mapping[str, object], tables.budgets.get("projects") or {})
    if workload.project is not None and workload.project not in projects:
        raise SpecError(
            f"unknown project {workload.project!r} (known: {', '.join(sorted(projects)) or 'none'}; "
            "policies/examlops/tables/budgets.yaml)",
            source=f"workload {workload.name!r}",
            field="project",
        )
    if workload.priority is not None and workload.priority not in tables.priority_classes:
        raise SpecError(
            f"unknown priority class {workload.priority!r} (known: {', '.join(tables.priority_classes)}; "
            "policies/examlops/tables/priorities.yaml)",
            source=f"workload {workload.name!r}",
            field="priority",
        )
    for model in workload.models:
        entry = tables.models.get(model)
        if not isinstance(entry, dict):
            raise SpecError(
                f"unknown model {model!r} (known: {', '.join(sorted(tables.models))}; add it to policies/examlops/tables/models.yaml)",
                source=f"workload {workload.name!r}",
                field="models",
            )
        if entry.get("accelerator") != workload.accelerator:
            raise SpecError(
                f"model {model!r} is {article(str(entry.get('accelerator')))} device, not {workload.accelerator}",
                source=f"workload {workload.name!r}",
                field="models",
            )
    return workload


def check_request_id(request_id: str) -> str:
    """An idempotency key: up to 128 letters, digits, '.', '_', '-' or ':'."""
    if not isinstance(request_id, str) or not 0 < len(request_id) <= 128 or not all(c.isascii() and (c.isalnum() or c in "._-:") for c in request_id):
        raise SpecError(
            f"a request id is 1 to 128 letters, digits, '.', '_', '-' or ':' (got {request_id!r})", field="request_id"
        )
    return request_id


def _build(cls: type[Pool] | type[Workload], values: dict[str, object], source: str, field: str = "") -> object:
    try:
        return cls(**values)  # type: ignore[arg-type]
    except SpecError as exc:
        raise exc.at(source, field) from exc
    except TypeError as exc:
        known = ", ".join(cls.__dataclass_fields__)
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        missing = sorted(
            n for n, f in cls.__dataclass_fields__.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.init and n not in values
        )  # fmt: skip
        what = f"unknown field(s): {', '.join(unknown)}" if unknown else f"missing field(s): {', '.join(missing)}"
        raise SpecError(f"{what} (fields: {known})", source=source, field=field or None) from exc


def _count_from_nodes(values: Mapping[str, object], source: str, field: str) -> dict[str, object]:
    """``count`` where the nodes say it: N nodes x devices_per_node, or the listed nodes summed."""
    nodes, each = values.get("nodes"), values.get("devices_per_node")
    where = f"{field}.count" if field else "count"
    if isinstance(nodes, int) and not isinstance(nodes, bool) and isinstance(each, int) and not isinstance(each, bool):
        return {"count": nodes * each}
    if isinstance(nodes, (list, tuple)) and all(isinstance(n, Mapping) and isinstance(n.get("devices"), int) for n in nodes):
        return {"count": sum(cast(int, cast(Mapping[str, object], n)["devices"]) for n in nodes)}
    if isinstance(nodes, int) and not isinstance(nodes, bool):
        raise SpecError("missing: give count (split evenly over the nodes) or devices_per_node", source=source, field=where)
    return {}


def _no_named_nodes(values: Mapping[str, object], source: str, field: str) -> None:
    """A node named where no ``nodes:`` states it (a pool given alone: add-pool, the service, a
    trace): SpecError naming it."""
    nodes = values.get("nodes")
    for index, node in enumerate(nodes if isinstance(nodes, list) else []):
        if isinstance(node, str):
            where = f"{field}.nodes[{index}]" if field else f"nodes[{index}]"
            raise SpecError(
                f"node {node!r} is named, and nothing here states it: a pools file states its nodes once under nodes: "
                f"(docs/inventory.md); a pool on its own lists them, e.g. {{name: {node}, devices: 4}}",
                source=source,
                field=where,
            )


def check_registrable(pool: Pool, *, source: str | None = None, field: str = "") -> Pool:
    """A pool as it may be registered (added or applied): not drained. Whether a registered pool
    is drained is set by ``exa hardware drain``/``undrain`` and kept by add-pool and apply."""
    if pool.drained:
        raise SpecError(
            "a pool is not registered drained: drain it with 'exa hardware drain NAME' (Hardware.drain) once it is registered; "
            "apply keeps a registered pool's drained state",
            source=source or f"pool {pool.name!r}",
            field=f"{field}.drained" if field else "drained",
        )
    return pool


def pool_from_mapping(data: Mapping[str, object], *, source: str = "pool", field: str = "", tables: Tables | None = None) -> Pool:
    """Build and check one Pool from a mapping (command-line options or one entry of a file)."""
    values = {k: v for k, v in data.items() if v is not None}
    if isinstance(values.get("capabilities"), list):
        values["capabilities"] = tuple(cast(list[str], values["capabilities"]))
    _no_named_nodes(values, source, field)
    if "count" not in values:
        values.update(_count_from_nodes(values, source, field))
    pool = cast(Pool, _build(Pool, values, source, field))
    check_registrable(pool, source=source, field=field)
    return check_pool_facts(pool, tables or load_tables(), source=source, field=field)


def pools_from_file(path: Path, tables: Tables | None = None) -> list[Pool]:
    """Read a pools file (``pools: [...]``, and optionally ``nodes: [...]``, the nodes its pools
    name, each stated once: ``inventory``); names must be unique."""
    return pools_from_document(read_yaml(path), source=str(path), tables=tables)


def pools_from_document(data: object, *, source: str, tables: Tables | None = None) -> list[Pool]:
    """The pools of a pools file's document (``pools``, optionally ``nodes``), checked against
    ``pools-file.schema.json``: each pool that names nodes of ``nodes`` holds their facts as nodes
    it lists (``inventory.pool_over_nodes``), so it is stored as a pool listing its nodes is."""
    validate(data, "pools-file.schema.json", source=source)
    doc = cast(JSONObject, data)
    tables = tables or load_tables()
    stated: Mapping[str, object] = {}
    if doc.get("nodes"):
        from examlops_policy import inventory

        stated = inventory.read_nodes(cast(list[JSONObject], doc["nodes"]), tables, source=source)
    pools: list[Pool] = []
    seen: set[str] = set()
    for index, item in enumerate(cast(list[JSONObject], doc["pools"])):
        where = f"pools[{index}]"
        name = cast(str, item["name"])
        if name in seen:
            raise SpecError(f"duplicate pool name {name!r}", source=source, field=f"{where}.name")
        seen.add(name)
        values: Mapping[str, object] = item
        if stated or any(isinstance(n, str) for n in cast(list[object], item.get("nodes") if isinstance(item.get("nodes"), list) else [])):
            from examlops_policy import inventory

            values = inventory.pool_over_nodes(item, cast("Mapping[str, inventory.StatedNode]", stated), source=source, field=where)
        pools.append(pool_from_mapping(values, source=source, field=where, tables=tables))
    return pools


def pool_over_stored_nodes(values: Mapping[str, object], names: Sequence[str], stored: Sequence[Pool], *, source: str) -> dict[str, object]:
    """A pool's options (``values``, as ``exa hardware add-pool`` gives them) over nodes the stored
    fleet (``stored``: the registered pools) states, by name: each written out as a listed node
    with its facts (``inventory.stored_nodes``), its count, where not given, their devices summed.
    SpecError naming the option (``--node NAME``, ``--model``, ``--nodes``) for a node the fleet
    does not state, a node without the pool's devices, or a fact said otherwise."""
    from examlops_policy import inventory

    if values.get("nodes") is not None:
        raise SpecError("give --node (stored nodes by name) or --nodes (a number of counted nodes), not both", source=source, field="--nodes")
    stated = inventory.stored_nodes(stored, str(values["accelerator"]))
    try:
        out = inventory.pool_over_nodes({**values, "nodes": list(names)}, stated, source=source, field="", said_by=inventory.STORED)
    except SpecError as exc:  # its fields as the command's options: "--node n1", "--model"
        field = (exc.field or "").lstrip(".")
        at = next((f"--node {name}" for j, name in enumerate(names) if field.startswith(f"nodes[{j}]")), None)
        raise SpecError(exc.detail, source=source, field=at or ("--node" if field == "nodes" else "--" + field.replace("_", "-"))) from exc
    if values.get("count") is None:
        out["count"] = sum(cast(int, cast(Mapping[str, object], n)["devices"]) for n in cast(list[object], out["nodes"]))
    return out


def workload_from_mapping(data: Mapping[str, object], *, source: str = "workload") -> Workload:
    """Build one Workload from a mapping; the dataclass checks every field."""
    values = {k: v for k, v in data.items() if v is not None}
    if values.get("target") == "any":
        values.pop("target")
    if isinstance(values.get("capabilities"), list):
        values["capabilities"] = tuple(cast(list[str], values["capabilities"]))
    return cast(Workload, _build(Workload, values, source))


def check_carbon_weight(values: Mapping[str, object], *, source: str, weight: str = "carbon_weight", optimize: str = "optimize") -> None:
    """A carbon weight weighs carbon against cost under ``optimize: balanced`` only: given with
    another objective it would be ignored without a word, so it is refused (SpecError naming
    ``weight``, the field or option as the user wrote it)."""
    objective = values.get("optimize") or "cost"
    if values.get("carbon_weight") is not None and objective != "balanced":
        raise SpecError(
            f"a carbon weight is used only with {optimize} balanced, and the objective here is {objective} "
            f"(it would be ignored): drop {weight}, or ask for {optimize} balanced",
            source=source,
            field=weight,
        )


def _timestamps_as_text(data: object) -> object:
    """YAML reads an unquoted ``deadline: 2026-12-01T14:00:00Z`` as a timestamp: give it back as the
    RFC 3339 text it was (a time without an offset stays without one, and is refused as such)."""
    if isinstance(data, dict) and isinstance(data.get("workload"), dict):
        workload = cast(JSONObject, data["workload"])
        value: object = workload.get("deadline")
        if isinstance(value, datetime.datetime):
            return {**data, "workload": {**workload, "deadline": value.isoformat()}}
        if isinstance(value, datetime.date):
            return {**data, "workload": {**workload, "deadline": value.isoformat()}}
    return data


def workload_from_file(path: Path) -> Workload:
    """Read a workload file (``workload: {...}``)."""
    return placement_from_file(path)[0]


def placement_from_file(path: Path) -> tuple[Workload, bool]:
    """Read a workload file: the workload, and whether it waits in the queue when its pools are
    only full (``queue: true``)."""
    data = _timestamps_as_text(read_yaml(path))
    validate(data, "workload-file.schema.json", source=str(path))
    doc = cast(JSONObject, data)
    workload = cast(Mapping[str, object], doc["workload"])
    check_carbon_weight(workload, source=str(path), weight="workload.carbon_weight", optimize="optimize:")
    return workload_from_mapping(workload, source=str(path)), bool(doc.get("queue", False))

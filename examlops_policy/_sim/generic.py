"""A site's own trace: its pools of nodes (with regions and prices) and the work that arrived, in
YAML, typed by ``schemas/trace.schema.json``.

    pools:                      # as a pools file (pool.schema.json): nodes listed, prices, regions
      - {name: a100-eu, target: hpc, accelerator: nvidia, model: a100, region: eu, cost_per_hour: 2.4,
         nodes: [{name: gpu-01, devices: 8, cpu: 96, memory: 1Ti}, ...]}
    host_cpu: true              # CPU-only work may use any node's host CPU and memory (default)
    workloads:                  # each arriving at ``arrival`` seconds, leaving after ``duration`` (if given)
      - {arrival: 0, duration: 3600, workload: {name: train, accelerator: nvidia, count: 4, cpu: 32, memory: 256Gi}}

``host_cpu`` adds, per region, a ``cpu`` pool listing every node of the region, its cores as its
devices (``cpu`` with one region, else ``cpu-<region>``): work asking for accelerator ``cpu``
goes there, sharing the node's CPU and memory with the device pools listing it.

Or the same in CSV (``read_csv_trace``): a node list, one node a row with its pool's facts
(``NODE_COLUMNS``), and a workload list (``WORKLOAD_COLUMNS``).

Bad input is one ``SpecError`` naming the file, the line and column of the entry, and the field
(in CSV: the file and line, and the column by name).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from examlops_policy import _nodes
from examlops_policy._sim.trace import PodKind
from examlops_policy.errors import SpecError
from examlops_policy.model import Node, Pool, Workload
from examlops_policy.tables import Tables


@dataclass(frozen=True)
class TraceWorkload:
    """One workload of a trace: when it arrives, how long it runs (None: it stays), where it was read."""

    workload: Workload
    arrival: float
    duration: float | None
    line: int

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def kind(self) -> PodKind:
        w = self.workload
        if w.accelerator == "cpu":
            return "cpu"
        if w.fraction < 1:
            return "share"
        return "one" if w.count * w.nodes == 1 else "multi"

    @property
    def device_milli(self) -> int:
        """Device milli asked (a fraction its thousandths; whole devices 1000 each, on each node)."""
        w = self.workload
        if w.accelerator == "cpu":
            return 0
        return round(w.fraction * _nodes.MILLI) if w.fraction < 1 else w.count * w.nodes * _nodes.MILLI

    @property
    def request(self) -> _nodes.NodeRequest:
        """What it asks of one node, as the node packers' expected workload counts it."""
        w = self.workload
        cpu = round(float(w.cpu) * _nodes.MILLI) if w.cpu is not None else 0
        models = frozenset(w.models) if w.models else None
        if w.accelerator == "cpu":
            return _nodes.NodeRequest(cpu_milli=cpu, memory_mib=w.memory or 0)
        if w.fraction < 1:
            return _nodes.NodeRequest(share_milli=self.device_milli, cpu_milli=cpu, memory_mib=w.memory or 0, models=models)
        return _nodes.NodeRequest(devices=w.count, cpu_milli=cpu, memory_mib=w.memory or 0, models=models)


@dataclass(frozen=True)
class GenericTrace:
    """A trace's pools (with the host CPU pools added) and its workloads, in file order."""

    pools: tuple[Pool, ...]
    workloads: tuple[TraceWorkload, ...]


def _marks(text: str) -> dict[tuple[object, ...], tuple[int, int]]:
    """Line and column (1-based) of each top-level list item and of its keys, by path."""
    import yaml

    out: dict[tuple[object, ...], tuple[int, int]] = {}
    root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(root, yaml.MappingNode):
        return out

    def walk(node: yaml.Node, path: tuple[object, ...]) -> None:
        out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                out[(*path, str(key.value))] = (key.start_mark.line + 1, key.start_mark.column + 1)
                walk(value, (*path, str(key.value)))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    walk(root, ())
    return out


def _where(path: Path, marks: Mapping[tuple[object, ...], tuple[int, int]], field: str | None) -> str:
    """``file line L column C`` of the deepest part of ``field`` (``workloads[3].workload.count``) found."""
    parts: list[object] = []
    for piece in (field or "").replace("]", "").split("."):
        for k, bit in enumerate(piece.split("[")):
            if bit:
                parts.append(int(bit) if k else bit)
    found = marks.get(())
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in marks:
            found = marks[tuple(parts[:n])]
            break
    return f"{path} line {found[0]} column {found[1]}" if found else str(path)


def read_trace(path: str | Path, tables: Tables) -> GenericTrace:
    """Read and check a generic trace; SpecError naming the file, line, column and field."""
    from examlops_policy import specs

    path = Path(path)
    text = specs.read_text(path)
    data = specs.read_yaml(path)
    marks = _marks(text)
    try:
        specs.validate(data, "trace.schema.json", source=str(path))
    except SpecError as exc:
        raise SpecError(exc.detail, source=_where(path, marks, exc.field), field=exc.field) from exc
    doc = cast(Mapping[str, object], data)
    pools: list[Pool] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(cast(list[Mapping[str, object]], doc["pools"])):
        field = f"pools[{i}]"
        name = str(item["name"])
        if name in seen:
            raise SpecError(f"pool {name!r} is already given at {seen[name]}", source=_where(path, marks, f"{field}.name"), field=f"{field}.name")
        seen[name] = _where(path, marks, field)
        try:
            pool = specs.pool_from_mapping(item, source=str(path), field=field, tables=tables)
        except SpecError as exc:
            raise SpecError(exc.detail, source=_where(path, marks, exc.field), field=exc.field) from exc
        pools.append(_listed(pool))
    if doc.get("host_cpu", True):
        pools.extend(_host_pools(pools, seen))
    workloads = []
    for i, item in enumerate(cast(list[Mapping[str, object]], doc["workloads"])):
        field = f"workloads[{i}]"
        try:
            workload = specs.workload_from_mapping(cast(Mapping[str, object], item["workload"]), source=str(path))
            specs.check_workload_facts(workload, tables)
        except SpecError as exc:
            inner = f"{field}.workload.{exc.field}" if exc.field else f"{field}.workload"
            raise SpecError(exc.detail, source=_where(path, marks, inner), field=inner) from exc
        duration = item.get("duration")
        workloads.append(TraceWorkload(workload, float(cast(float, item["arrival"])), None if duration is None else float(cast(float, duration)), marks.get((("workloads"), i), (0, 0))[0]))
    return GenericTrace(tuple(pools), tuple(workloads))


def _host_pools(pools: list[Pool], taken: Mapping[str, str]) -> list[Pool]:
    """Per region, a ``cpu`` pool listing every node of the region with CPU, its cores as devices
    (a node listed by several pools once)."""
    by_region: dict[str, dict[str, Node]] = {}
    for pool in pools:
        if pool.accelerator == "cpu":
            continue
        for node in pool.node_list():
            if node.cpu_milli is not None and node.cpu_milli >= _nodes.MILLI:
                by_region.setdefault(pool.region, {}).setdefault(node.name, node)
    out = []
    for region, nodes in sorted(by_region.items()):
        name = "cpu" if len(by_region) == 1 else f"cpu-{region}"
        if name in taken:
            continue
        listed = tuple(Node(n.name, int(n.cpu_milli or 0) // _nodes.MILLI, n.cpu, n.memory, n.state, n.block, n.switch) for n in nodes.values())
        out.append(Pool(name, pools[0].target, "cpu", sum(n.devices for n in listed), region, nodes=listed))
    return out


def with_pools(trace: GenericTrace, pools: list[Pool]) -> GenericTrace:
    """``trace``'s workloads over ``pools`` (a candidate fleet: any pools file ``apply`` takes),
    host CPU pools added."""
    listed = [_listed(p) for p in pools]
    return GenericTrace((*listed, *_host_pools(listed, {p.name: p.name for p in listed})), trace.workloads)


def _listed(pool: Pool) -> Pool:
    """``pool`` with its nodes listed by name, as the layer counts them (``Pool.node_list``): N
    identical nodes named ``<pool>-<i>``, or a pool without nodes as one node holding ``count``
    devices, named like the pool. A pool that lists its nodes already is itself."""
    if pool.nodes_named:
        return pool
    return dataclasses.replace(pool, nodes=pool.node_list(), devices_per_node=None, cpu_per_node=None, memory_per_node=None)


def trace_format(pods: Path) -> str:
    """The format of a trace file, read from it: ``generic`` for YAML or JSON (a site's trace) and
    for a CSV whose header names an ``arrival`` column (a generic workload list); else ``openb``
    (its pod list). A file that cannot be read is ``openb``'s to refuse."""
    if pods.suffix.lower() in (".yaml", ".yml", ".json"):
        return "generic"
    try:
        with pods.open(encoding="utf-8", newline="") as handle:
            header = handle.readline(65536)
    except (OSError, UnicodeDecodeError):
        return "openb"
    return "generic" if "arrival" in (c.strip().lower() for c in header.split(",")) else "openb"


NODE_COLUMNS = ("node", "pool", "region", "accelerator", "model", "devices", "cpu", "memory", "cost_per_hour")
"""A generic node list in CSV: one node a row, with its pool's facts (optional columns: ``target``,
``sharing``, ``shares_per_device``, ``block``, ``switch``); a pool's facts agree on all its rows."""
WORKLOAD_COLUMNS = ("name", "arrival", "duration", "accelerator", "count", "fraction", "cpu", "memory", "models")
"""A generic workload list in CSV: ``models`` as ``a100|h100``; empty cells: the default (``duration``: it stays)."""
POOL_COLUMNS = ("region", "accelerator", "model", "cost_per_hour", "target", "sharing", "shares_per_device")


def _value(text: str) -> object:
    """A cell as YAML would read it: a whole number, a number, else the text (``64Gi``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv_trace(nodes_path: str | Path, workloads_path: str | Path, tables: Tables, *, host_cpu: bool = True) -> GenericTrace:
    """A generic trace from two CSV files; SpecError naming the file, line and column."""
    from examlops_policy import specs
    from examlops_policy._sim.trace import _count, _rows

    nodes_path, workloads_path = Path(nodes_path), Path(workloads_path)
    facts: dict[str, dict[str, object]] = {}
    lines: dict[str, list[int]] = {}
    listed: dict[str, list[dict[str, object]]] = {}
    for line, row in _rows(nodes_path, NODE_COLUMNS):
        where = f"{nodes_path} line {line}"
        pool = row["pool"]
        mine = {c: _value(row[c]) for c in POOL_COLUMNS if row.get(c, "") != ""}
        first = facts.setdefault(pool, mine)
        for column in sorted(set(first) | set(mine)):
            if first.get(column) != mine.get(column):
                raise SpecError(
                    f"pool {pool!r} says {first.get(column)!r} on line {lines[pool][0]}, {mine.get(column)!r} here: a pool's facts agree on all its rows",
                    source=where, field=column,
                )  # fmt: skip
        lines.setdefault(pool, []).append(line)
        devices = _count(row, "devices", where)
        if devices < 1:
            raise SpecError("a node has at least 1 device", source=where, field="devices")
        node: dict[str, object] = {"name": row["node"], "devices": devices}
        for column in ("cpu", "memory", "block", "switch"):
            if row.get(column, "") != "":
                node[column] = _value(row[column])
        listed.setdefault(pool, []).append(node)
    pools = []
    for name, pool_facts in facts.items():
        try:
            pools.append(specs.pool_from_mapping({"name": name, "target": "hpc", **pool_facts, "nodes": listed[name]}, source="", tables=tables))
        except SpecError as exc:
            field = exc.field or ""
            at = lines[name][0]
            if field.startswith("nodes["):
                k, _, field = field[len("nodes[") :].partition("].")
                at = lines[name][int(k)] if k.isdigit() and int(k) < len(lines[name]) else at
            raise SpecError(exc.detail, source=f"{nodes_path} line {at}", field=field or None) from exc
    if host_cpu:
        pools.extend(_host_pools(pools, {p.name: p.name for p in pools}))
    workloads = []
    for line, row in _rows(workloads_path, WORKLOAD_COLUMNS):
        where = f"{workloads_path} line {line}"
        values: dict[str, object] = {"name": row["name"], "accelerator": row["accelerator"]}
        for column in ("count", "fraction", "cpu", "memory"):
            if row[column] != "":
                values[column] = _value(row[column])
        if row["models"]:
            values["models"] = tuple(m for m in row["models"].split("|") if m)
        try:
            workload = specs.workload_from_mapping(values, source=where)
            specs.check_workload_facts(workload, tables)
        except SpecError as exc:
            raise SpecError(exc.detail, source=where, field=exc.field) from exc
        times: list[float | None] = []
        for column in ("arrival", "duration"):
            text = row[column]
            if column == "duration" and text == "":
                times.append(None)
                continue
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not (value >= 0 if column == "arrival" else value > 0) or value != value or value == float("inf"):
                raise SpecError(f"expected seconds, a number {'>= 0' if column == 'arrival' else '> 0'} (got {text!r})", source=where, field=column)
            times.append(value)
        workloads.append(TraceWorkload(workload, cast(float, times[0]), times[1], line))
    if not workloads:
        raise SpecError("the workload list holds no workload", source=str(workloads_path))
    return GenericTrace(tuple(pools), tuple(workloads))

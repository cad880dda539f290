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
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

from examlops_policy import _nodes
from examlops_policy._sim.layer import REPLAY_EPOCH, SIGNATURE
from examlops_policy._sim.trace import PodKind
from examlops_policy.errors import SpecError
from examlops_policy.model import Node, Pool, Workload
from examlops_policy.tables import Tables


class Shape:
    """What a workload asks, whatever its name: the workload as the policy judges it (named
    ``workload``; the policy is asked once per signature) and what the replay counts of it. Rows
    asking the same share one (a trace of a million rows holds a few shapes, not a million
    workloads)."""

    __slots__ = ("workload", "kind", "device_milli", "request")

    def __init__(self, workload: Workload) -> None:
        w = self.workload = workload if workload.name == SIGNATURE else dataclasses.replace(workload, name=SIGNATURE)
        self.kind: PodKind = "cpu" if w.accelerator == "cpu" else "share" if w.fraction < 1 else "one" if w.count * w.nodes == 1 else "multi"
        # Device milli asked (a fraction its thousandths; whole devices 1000 each, on each node).
        self.device_milli = 0 if w.accelerator == "cpu" else round(w.fraction * _nodes.MILLI) if w.fraction < 1 else w.count * w.nodes * _nodes.MILLI
        cpu = round(float(w.cpu) * _nodes.MILLI) if w.cpu is not None else 0
        models = frozenset(w.models) if w.models else None
        # What it asks of one node, as the node packers' expected workload counts it.
        if w.accelerator == "cpu":
            self.request = _nodes.NodeRequest(cpu_milli=cpu, memory_mib=w.memory or 0)
        elif w.fraction < 1:
            self.request = _nodes.NodeRequest(share_milli=self.device_milli, cpu_milli=cpu, memory_mib=w.memory or 0, models=models)
        else:
            self.request = _nodes.NodeRequest(devices=w.count, cpu_milli=cpu, memory_mib=w.memory or 0, models=models)


class TraceWorkload:
    """One workload of a trace: its name, when it arrives, how long it runs (None: it stays), where
    it was read (its line), and what it asks (``shape``, shared by the rows asking the same)."""

    __slots__ = ("name", "arrival", "duration", "line", "shape")

    def __init__(self, name: str, arrival: float, duration: float | None, line: int, shape: Shape) -> None:
        self.name = name
        self.arrival = arrival
        self.duration = duration
        self.line = line
        self.shape = shape

    @classmethod
    def of(cls, workload: Workload, arrival: float, duration: float | None, line: int) -> TraceWorkload:
        return cls(workload.name, arrival, duration, line, Shape(workload))

    @property
    def workload(self) -> Workload:
        """The workload itself, under its own name (made when asked)."""
        return dataclasses.replace(self.shape.workload, name=self.name)

    @property
    def kind(self) -> PodKind:
        return self.shape.kind

    @property
    def device_milli(self) -> int:
        return self.shape.device_milli

    @property
    def request(self) -> _nodes.NodeRequest:
        return self.shape.request

    def __repr__(self) -> str:
        return f"TraceWorkload({self.name!r}, arrival={self.arrival}, duration={self.duration}, line={self.line})"


@dataclass(frozen=True)
class GenericTrace:
    """A trace's pools (with the host CPU pools added) and its workloads, in order of arrival:
    a tuple (a YAML trace, read whole: at most ``specs.MAX_FILE_BYTES``) or read row by row each
    time they are iterated (``CsvWorkloads``: never held). ``source``: the file they come from."""

    pools: tuple[Pool, ...]
    workloads: Iterable[TraceWorkload]
    source: str = ""
    start: datetime = REPLAY_EPOCH  # the instant arrival 0 stands for (the trace's ``start``)

    def at(self, arrival: float) -> datetime:
        """The instant a workload arriving at ``arrival`` (seconds) is decided at."""
        return self.start + timedelta(seconds=arrival)


def in_order(trace: GenericTrace) -> Iterator[TraceWorkload]:
    """The trace's workloads, refused (SpecError naming the file, line and ``arrival``) at the
    first that arrives before the one listed above it: a trace lists its workloads in order of
    arrival, and a replay reads them once, as they come, never holding them to sort."""
    last = -1.0
    above = 0
    for w in trace.workloads:
        if w.arrival < last:
            raise SpecError(
                f"arrival {w.arrival:g} s is before {last:g} s of the workload on line {above}: a trace lists its workloads in order of "
                "arrival (sort it by arrival first)",
                source=f"{trace.source} line {w.line}" if trace.source else None, field="arrival",
            )  # fmt: skip
        last, above = w.arrival, w.line
        yield w


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
        line = marks.get((("workloads"), i), (0, 0))[0]
        if workload.deadline is not None and "start" not in doc:
            inner = f"{field}.workload.deadline"
            raise SpecError(
                "a deadline is an instant: say in the trace's start (RFC 3339) which instant arrival 0 stands for",
                source=_where(path, marks, inner), field=inner,
            )  # fmt: skip
        workloads.append(TraceWorkload.of(workload, float(cast(float, item["arrival"])), None if duration is None else float(cast(float, duration)), line))
    return GenericTrace(tuple(pools), tuple(workloads), str(path), _start(doc, path, marks))


def _start(doc: Mapping[str, object], path: Path, marks: Mapping[tuple[object, ...], tuple[int, int]]) -> datetime:
    """The trace's ``start`` (REPLAY_EPOCH when it gives none); SpecError for one that is no
    instant."""
    from examlops_policy import quantities

    given = doc.get("start")
    if given is None:
        return REPLAY_EPOCH
    try:
        return quantities.instant(cast(str, given))
    except (TypeError, ValueError) as exc:
        raise SpecError(f"start is an RFC 3339 instant such as 2026-12-01T00:00:00Z ({exc})", source=_where(path, marks, "start"), field="start") from exc


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
    return GenericTrace((*listed, *_host_pools(listed, {p.name: p.name for p in listed})), trace.workloads, trace.source)


def _listed(pool: Pool) -> Pool:
    """``pool`` with its nodes listed by name, as the layer counts them (``Pool.node_list``): N
    identical nodes named ``<pool>-<i>``, or a pool without nodes as one node holding ``count``
    devices, named like the pool. A pool that lists its nodes already is itself."""
    if pool.nodes_named:
        return pool
    return dataclasses.replace(pool, nodes=pool.node_list(), devices_per_node=None, cpu_per_node=None, memory_per_node=None)


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
    """A generic trace from two CSV files: the node list read now, the workload list read row by
    row each time the trace's workloads are iterated (``CsvWorkloads``; its first row is checked
    now). SpecError naming the file, line and column."""
    pools = read_csv_pools(nodes_path, tables, host_cpu=host_cpu)
    return GenericTrace(pools, CsvWorkloads(Path(workloads_path), tables), str(workloads_path))


def read_csv_pools(nodes_path: str | Path, tables: Tables, *, host_cpu: bool = True) -> tuple[Pool, ...]:
    """The pools of a node list in CSV (``NODE_COLUMNS``), host CPU pools added."""
    from examlops_policy import specs
    from examlops_policy._sim.trace import _count, _rows

    nodes_path = Path(nodes_path)
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
    return tuple(pools)


SHAPES_HELD = 4096
"""Shapes a workload list's reading keeps (``CsvWorkloads``): rows asking what an earlier row asked
share its checked shape; past this many distinct ones the kept ones are let go (memory stays
bounded whatever the trace; a shape let go is checked again when next asked)."""


class CsvWorkloads:
    """A workload list in CSV (``WORKLOAD_COLUMNS``), read row by row each time it is iterated,
    never held: each row checked (SpecError naming the file, line and column) as it is reached.
    A row's workload is checked once per shape (its columns but the name, arrival and duration;
    the name is checked on every row). Its first row is read and checked when it is made (a list
    without any workload is refused then)."""

    def __init__(self, path: Path, tables: Tables) -> None:
        self.path = path
        self.tables = tables
        if next(iter(self), None) is None:
            raise SpecError("the workload list holds no workload", source=str(path))

    def __iter__(self) -> Iterator[TraceWorkload]:
        from examlops_policy import specs
        from examlops_policy._sim.trace import _table
        from examlops_policy.model import NAME_MAX, NAME_RE, name_problem

        path, tables = self.path, self.tables
        shapes: dict[tuple[str, ...], Shape] = {}
        table = _table(path, WORKLOAD_COLUMNS)
        _, header = next(table)
        place = {column: j for j, column in enumerate(header)}  # a column named twice: its last, as a row's dict reads it
        at = [place[column] for column in WORKLOAD_COLUMNS]
        for line, cells in table:
            name, arrived, lasts, accelerator, count, fraction, cpu, memory, models = [cells[j] for j in at]
            key = (accelerator, count, fraction, cpu, memory, models)
            shape = shapes.get(key)
            if shape is None:
                values: dict[str, object] = {"name": name, "accelerator": accelerator}
                for column, cell in (("count", count), ("fraction", fraction), ("cpu", cpu), ("memory", memory)):
                    if cell != "":
                        values[column] = _value(cell)
                if models:
                    values["models"] = tuple(m for m in models.split("|") if m)
                try:
                    workload = specs.workload_from_mapping(values, source=f"{path} line {line}")
                    specs.check_workload_facts(workload, tables)
                except SpecError as exc:
                    raise SpecError(exc.detail, source=f"{path} line {line}", field=exc.field) from exc
                if len(shapes) >= SHAPES_HELD:
                    shapes.clear()
                shape = shapes[key] = Shape(workload)
            elif not (len(name) <= NAME_MAX and name.isascii() and name.isalnum()) and NAME_RE.fullmatch(name) is None:
                # ASCII letters and digits within NAME_MAX match NAME_RE (no pattern run for them); a
                # name it matches is fine: name_problem says what is not
                problem = name_problem(name, what="a workload name")
                if problem:
                    raise SpecError(problem, source=f"{path} line {line}", field="name")
            arrival = _seconds(arrived, path, line, "arrival")
            duration = None if lasts == "" else _seconds(lasts, path, line, "duration")
            yield TraceWorkload(name, arrival, duration, line, shape)


def _seconds(text: str, path: Path, line: int, column: str) -> float:
    """A time cell: seconds, >= 0 for an arrival, > 0 for a duration."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 if column == "arrival" else value > 0) or value != value or value == math.inf:
        raise SpecError(f"expected seconds, a number {'>= 0' if column == 'arrival' else '> 0'} (got {text!r})", source=f"{path} line {line}", field=column)
    return value

"""The nodes of a pools file, each stated once, and the pools that name them.

A pools file may state its nodes at the top level (``nodes:``): each node once, with what the
machine has: its devices (``devices`` of one ``model``, whose accelerator the models table says,
and whether they are cut, ``supports_fractions``: MIG or AMD compute partitions), its ``cpu``,
``memory``, ``state`` and topology labels (``block``, ``switch``). A pool names nodes
(``nodes: [gpu-0, gpu-1]``) and adds what a pool decides: target, region, price, capabilities,
partition and GRES type, the sharing it offers. Naming a node writes its facts into the pool as a
node listed inline: the devices of the pool's accelerator on it (a ``cpu`` pool's devices are the
node's whole cores), its CPU, memory, state and labels; the pool's ``model`` and
``supports_fractions`` where the pool leaves them out. So a pool is stored as one that lists its
nodes, and everything downstream (the shape, the store, the disagreement check of ``apply``) is
what it was.

A node a pool lists inline under a name the file's ``nodes:`` states is that node: a fact the
pool leaves out is taken from ``nodes:``, and a fact it says otherwise is refused (naming the
node, both places and the field), as ``apply`` refuses two pools that disagree about a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from examlops_policy.errors import SpecError
from examlops_policy.model import NODE_STATES, Node, Pool
from examlops_policy.quantities import cpu_text, memory_text
from examlops_policy.tables import Tables

NODE_FACTS = ("cpu", "memory", "state", "block", "switch")


@dataclass(frozen=True)
class StatedNode:
    """One node of a file's ``nodes:``: where it is stated (``index``), its devices (``model`` in
    lower case, their ``accelerator``, how many; all None for a node without devices),
    ``supports_fractions`` (None: not said) and the facts every pool naming it takes (``node``:
    its name, CPU, memory, state and labels, as ``model.Node`` checks and holds them)."""

    index: int
    node: Node
    model: str | None
    accelerator: str | None
    devices: int | None
    supports_fractions: bool | None
    slices: Mapping[str, int] = field(default_factory=dict)  # fixed slices offered as resources of their own, by profile
    # Who states it, for messages: a file's nodes: (at nodes[index]), or the stored fleet (a pool).
    said_by: str = "the file's nodes:"
    where: str | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def at(self) -> str:
        """Where it is stated: ``nodes[3]``, or the stored pool that states it."""
        return self.where if self.where is not None else f"nodes[{self.index}]"

    def fact(self, key: str) -> object:
        return getattr(self.node, key)


def read_nodes(items: Sequence[Mapping[str, object]], tables: Tables, *, source: str) -> dict[str, StatedNode]:
    """The nodes of a file's ``nodes:`` (already valid under the schema) by name; SpecError naming
    ``nodes[i]`` and the field for a duplicate name, a bad value or a model the tables do not know."""
    stated: dict[str, StatedNode] = {}
    for index, item in enumerate(items):
        where = f"nodes[{index}]"
        devices = item.get("devices")
        facts = {k: item[k] for k in NODE_FACTS if item.get(k) is not None}
        try:
            node = Node(name=cast(str, item.get("name")), devices=cast(int, devices) if devices is not None else 1, **facts)  # type: ignore[arg-type]
        except SpecError as exc:
            raise SpecError(exc.detail, source=source, field=f"{where}.{exc.field}" if exc.field else where) from exc
        if node.name in stated:
            first = stated[node.name].index
            raise SpecError(f"node {node.name!r} is stated twice (nodes[{first}] and here): a node is stated once", source=source, field=f"{where}.name")
        model, accelerator = None, None
        if item.get("model") is not None:
            model = str(item["model"]).lower()
            entry = tables.models.get(model)
            if not isinstance(entry, dict):
                raise SpecError(
                    f"unknown model {item['model']!r} (known: {', '.join(sorted(tables.models))}; add it to policies/examlops/tables/models.yaml)",
                    source=source,
                    field=f"{where}.model",
                )
            accelerator = str(cast(Mapping[str, object], entry).get("accelerator"))
        cut = item.get("supports_fractions")
        slices = {str(k): int(cast(int, v)) for k, v in cast(Mapping[str, object], item.get("slices") or {}).items()}
        if slices:
            scheme = tables.scheme_for(str(accelerator), model)
            profiles = [str(cast(Mapping[str, object], e)["profile"]) for e in cast(list[object], (scheme or {}).get("slices", []))]
            for profile in slices:
                if profile not in profiles:
                    raise SpecError(
                        f"node {node.name!r} offers slices of profile {profile!r}, which the partitioning table does not give a {model} "
                        f"(expected one of {', '.join(profiles) or 'none: it cannot be partitioned'})",
                        source=source,
                        field=f"{where}.slices",
                    )
        stated[node.name] = StatedNode(
            index, node, model, accelerator, None if devices is None else node.devices, None if cut is None else bool(cut), slices
        )
    return stated


STORED = "the stored fleet"


def stored_nodes(pools: Iterable[Pool], accelerator: str) -> dict[str, StatedNode]:
    """The nodes the stored fleet states, by name, as a file's ``nodes:`` would state them, for a
    new pool of ``accelerator`` to name (``exa hardware add-pool --node``): each node's CPU,
    memory and labels as the first pool listing it (by name) gives them, and the least available
    state any of them gives it (``up`` only where all say so); its devices, model and whether they
    are cut as a pool of its devices lists them (one of ``accelerator`` first; not a cpu pool,
    whose devices are the node's cores), and the fixed slices a pool of fixed slices counts there.
    Pools that state a node otherwise are refused by the pool's own check against them."""
    listed: dict[str, list[tuple[Pool, Node]]] = {}
    for pool in sorted(pools, key=lambda p: p.name):
        if pool.nodes_named:
            for node in pool.node_list():
                listed.setdefault(node.name, []).append((pool, node))
    stated: dict[str, StatedNode] = {}
    for index, (name, entries) in enumerate(sorted(listed.items())):
        first = entries[0][1]
        state = max((n.state for _, n in entries), key=NODE_STATES.index)
        node = dataclasses.replace(first, state=state)
        slices = {str(p.fixed_profile): n.devices for p, n in entries if p.fixed_profile is not None}
        devices = [(p, n) for p, n in entries if p.accelerator != "cpu" and p.fixed_profile is None]
        devices.sort(key=lambda pn: pn[0].accelerator != accelerator)
        if devices:
            pool, with_devices = devices[0]
            model = pool.model.lower() if pool.model is not None else None
            stated[name] = StatedNode(
                index, node, model, pool.accelerator, with_devices.devices, pool.supports_fractions or None, slices, STORED, f"pool {pool.name!r}"
            )
        else:
            stated[name] = StatedNode(index, node, None, None, None, None, slices, STORED, f"pool {entries[0][0].name!r}")
    return stated


def _text(key: str, value: object) -> str:
    if value is None:
        return "none named"
    if key == "cpu":
        return cpu_text(round(cast(float, value) * 1000))
    if key == "memory":
        return memory_text(cast(int, value))
    return str(value)


_WORDS = {"slices": "slices of the pool's profile", "cpu": "CPU", "memory": "memory", "state": "state", "block": "block", "switch": "switch", "devices": "devices", "model": "device model"}


def pool_over_nodes(
    item: Mapping[str, object], stated: Mapping[str, StatedNode], *, source: str, field: str, said_by: str = "the file's nodes:"
) -> dict[str, object]:
    """One pool entry of the file (``item``, at ``field``) with each node it names written out as
    a listed node, and each node it lists inline under a stated name checked against ``nodes:``
    and completed from it; its ``model`` and ``supports_fractions`` from the nodes where it leaves
    them out. SpecError (naming the file, the pool, the field and the node) for a node ``nodes:``
    does not state, a node without the pool's devices, or a fact said otherwise than ``nodes:``."""
    listed = item.get("nodes")
    if not isinstance(listed, list) or not stated and not any(isinstance(n, str) for n in listed):
        return dict(item)
    pool = str(item.get("name"))
    accelerator = str(item.get("accelerator"))
    profile = item.get("fixed_profile")
    fixed = None if profile is None else str(profile)  # a pool of fixed slices: their profile
    out: list[object] = []
    own: list[StatedNode] = []  # the stated nodes whose devices are the pool's devices
    for j, entry in enumerate(listed):
        where = f"{field}.nodes[{j}]"
        if isinstance(entry, str):
            node = stated.get(entry)
            if node is None:
                known = sorted(stated)
                said = f"stated there: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''}" if known else ("the file has no nodes: section" if said_by != STORED else "no registered pool lists a node by name")
                raise SpecError(f"pool {pool!r} names node {entry!r}, which {said_by} does not state ({said})", source=source, field=where)
            out.append(_named(pool, accelerator, fixed, node, source=source, field=where))
            if accelerator == node.accelerator:
                own.append(node)
            continue
        if not isinstance(entry, Mapping) or entry.get("name") not in stated:
            out.append(entry)
            continue
        node = stated[cast(str, entry["name"])]
        out.append(_inline(pool, accelerator, fixed, entry, node, source=source, field=where))
        if accelerator == node.accelerator and fixed is None:
            own.append(node)
    values = {**item, "nodes": out}
    values.update(_pool_facts(values, own, source=source, field=field))
    return values


def _named(pool: str, accelerator: str, fixed: str | None, node: StatedNode, *, source: str, field: str) -> dict[str, object]:
    """A named node as the pool lists it: its devices of the pool's accelerator (a pool of fixed
    slices: the node's slices of its profile) and its facts."""
    facts = {k: node.fact(k) for k in NODE_FACTS if node.fact(k) is not None}
    if node.node.state == "up":
        facts.pop("state")
    if accelerator == "cpu":
        cpu = node.node.cpu
        if cpu is None or cpu < 1 or cpu != int(cpu):
            has = "does not state its cpu" if cpu is None else f"has {_text('cpu', cpu)} CPU, not a whole number of cores"
            raise SpecError(
                f"pool {pool!r} (a cpu pool: its devices are a node's cores) names node {node.name!r}, which {has} "
                f"({node.at})",
                source=source,
                field=field,
            )
        return {"name": node.name, "devices": int(cpu), **facts}
    if node.accelerator != accelerator:
        has = "no devices" if node.accelerator is None else f"{node.devices} {node.accelerator} {node.model} device(s), no {accelerator} device"
        raise SpecError(
            f"pool {pool!r} ({accelerator}) names node {node.name!r}, which has {has} "
            f"({node.at}): a pool offers the devices of its accelerator on the nodes it names",
            source=source,
            field=field,
        )
    if fixed is not None:
        count = node.slices.get(fixed)
        if count is None:
            offered = ", ".join(f"{k}: {v}" for k, v in sorted(node.slices.items()))
            raise SpecError(
                f"pool {pool!r} is a pool of fixed {fixed} slices, and node {node.name!r} offers none "
                f"({node.at}: {f'slices: {{{offered}}}' if offered else 'no slices:'}): state them in nodes: "
                f"(slices: {{{fixed}: N}}), or list the node inline with its slices ({{name: {node.name}, devices: N}})",
                source=source,
                field=field,
            )
        return {"name": node.name, "devices": count, **facts}
    return {"name": node.name, "devices": node.devices, **facts}


def _inline(
    pool: str, accelerator: str, fixed: str | None, entry: Mapping[str, object], node: StatedNode, *, source: str, field: str
) -> dict[str, object]:
    """A node listed inline under a stated name: what it leaves out taken from ``nodes:``, what it
    says checked against it (its devices where they are the node's devices, or, for a pool of
    fixed slices, the node's slices of its profile where ``nodes:`` states them; not a cpu pool's
    cores)."""
    try:
        inline = Node(**entry)  # type: ignore[arg-type]
    except (SpecError, TypeError):
        return dict(entry)  # the pool's own check names what is wrong with it
    if accelerator != "cpu" and node.accelerator != accelerator:
        has = "no devices" if node.accelerator is None else f"{node.devices} {node.accelerator} {node.model} device(s), no {accelerator} device"
        raise _disagree(pool, node, "devices", f"{inline.devices} {accelerator}", has, source=source, field=f"{field}.devices")
    said: list[tuple[str, object, object]] = [(k, getattr(inline, k) if k in entry else None, node.fact(k)) for k in NODE_FACTS]
    if accelerator == node.accelerator and fixed is None:
        said.insert(0, ("devices", inline.devices, node.devices))
    elif accelerator == node.accelerator and fixed is not None and fixed in node.slices:
        said.insert(0, ("slices", inline.devices, node.slices[fixed]))
    values = dict(entry)
    for key, theirs, ours in said:
        if theirs is None:
            if ours is not None and not (key == "state" and ours == "up"):
                values[key] = ours
        elif ours is not None and theirs != ours:
            said_at = "devices" if key == "slices" else key  # a fixed-slice pool's slices are its listed devices
            raise _disagree(pool, node, key, _text(key, theirs), _text(key, ours), source=source, field=f"{field}.{said_at}")
    return values


def _disagree(pool: str, node: StatedNode, key: str, theirs: str, ours: str, *, source: str, field: str) -> SpecError:
    return SpecError(
        f"pool {pool!r} says node {node.name!r} has {_WORDS[key]} {theirs}, {node.said_by} says {ours} ({node.at}): "
        "a node is stated once; leave the fact out of the pool or make them agree",
        source=source,
        field=field,
    )


def _pool_facts(item: Mapping[str, object], own: Sequence[StatedNode], *, source: str, field: str) -> dict[str, object]:
    """The pool's ``model`` and ``supports_fractions`` from the stated nodes of its devices
    (``own``), where it leaves them out; SpecError where it says them otherwise."""
    if not own:
        return {}
    pool = str(item.get("name"))
    out: dict[str, object] = {}
    models = {n.model for n in own}
    if len(models) > 1:
        a, b = sorted(own, key=lambda n: (n.model or "", n.index))[0], sorted(own, key=lambda n: (n.model or "", n.index))[-1]
        raise SpecError(
            f"pool {pool!r} names nodes of two device models: {a.name!r} ({a.model}) and {b.name!r} ({b.model}); "
            "a pool is one model of device: make a pool for each",
            source=source,
            field=f"{field}.nodes",
        )
    model = next(iter(models))
    if item.get("model") is None:
        out["model"] = model
    elif str(item["model"]).lower() != model:
        node = own[0]
        raise SpecError(
            f"pool {pool!r} says its devices are {item['model']}, {node.said_by} says node {node.name!r} has {model} "
            f"({node.at}): leave model out of the pool (the nodes say it) or make them agree",
            source=source,
            field=f"{field}.model",
        )
    cut = [n for n in own if n.supports_fractions]
    whole = [n for n in own if n.supports_fractions is False]
    if item.get("supports_fractions") is True and whole:
        raise SpecError(
            f"pool {pool!r} grants slices (supports_fractions), and node {whole[0].name!r} says its devices are not cut "
            f"({whole[0].at}: supports_fractions: false)",
            source=source,
            field=f"{field}.supports_fractions",
        )
    shared = item.get("sharing") is not None or item.get("fixed_profile") is not None  # shares, or slices of one profile
    if item.get("supports_fractions") is None and cut and not shared:
        if len(cut) != len(own):
            other = next(n for n in own if not n.supports_fractions)
            raise SpecError(
                f"pool {pool!r} names node {cut[0].name!r}, whose devices are cut (supports_fractions), and node {other.name!r}, "
                "whose devices are not: say supports_fractions on the pool (false: it grants whole devices on both)",
                source=source,
                field=f"{field}.nodes",
            )
        out["supports_fractions"] = True
    return out

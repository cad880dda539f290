"""Nodes that take no new work, and what that takes out of their pool's capacity.

A scheduler reports a node drained (Slurm DRAIN, a cordoned Kubernetes node) or down (Slurm DOWN,
a NotReady node); reconcile records it (``node_states``). Such a node's devices are out of its
pool's capacity until it is up again, except what live grants already hold there (the scheduler,
not this layer, decides whether their jobs died). This is the one place that says so: every
capacity worked out and every grant packed goes through ``occupied``.

A pool's devices are numbered across its nodes in ``Pool.node_list()`` order: the first node holds
devices 0..d-1, the next the following ones. (Per-node capacity, when the core tracks holdings per
node, replaces this mapping; ``occupied`` stays the one function that says what a node's state
takes out.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from examlops_policy.model import Holding, Pool
from examlops_policy.store.api import HeldRow

# The id the devices of a node that takes no work are held under (never a decision's: ids are hex).
NODE_HOLDER: Final = "node:"


def devices_of(pool: Pool) -> dict[str, range]:
    """Each node's device indexes in the pool."""
    out: dict[str, range] = {}
    start = 0
    for node in pool.node_list():
        out[node.name] = range(start, min(start + node.devices, pool.count))
        start += node.devices
    return out


def node_of(pool: Pool, device: int) -> str | None:
    """The node holding device ``device`` of ``pool``."""
    for name, devices in devices_of(pool).items():
        if device in devices:
            return name
    return None


def occupied(pool: Pool, held: Sequence[HeldRow], states: Mapping[str, str]) -> list[HeldRow]:
    """What the pool's devices hold for capacity's sake: the live grants' holdings, and every device
    of a node not up that they leave (partly) free, held whole by the node (``NODE_HOLDER``), with
    the share of it the grants leave."""
    if not states:
        return list(held)
    used: dict[int, float] = {}
    for h in held:
        used[h.holding.device] = used.get(h.holding.device, 0.0) + h.share
    out = list(held)
    for name, devices in devices_of(pool).items():
        if states.get(name, "up") == "up":
            continue
        for i in devices:
            left = round(1.0 - used.get(i, 0.0), 9)
            if left > 0:
                out.append(HeldRow(NODE_HOLDER + name, Holding(i), left))
    return out


def outside_of(pool: Pool, busy: Sequence[HeldRow], states: Mapping[str, str], held_outside: float) -> float:
    """What a scheduler's report of devices busy beyond this layer's grants (``held_outside``, from
    discovery) still takes out once ``busy`` (``occupied``) holds the devices of nodes not up:
    discovery counts the free devices of a node that its spec says is not up as busy, so those the
    node holds in ``busy`` too are not taken out twice."""
    if not states:
        return held_outside
    down_in_spec = {n.name for n in pool.node_list() if n.state != "up"}
    twice = sum(h.share for h in busy if h.decision_id.startswith(NODE_HOLDER) and h.decision_id[len(NODE_HOLDER):] in down_in_spec)
    return max(0.0, round(held_outside - twice, 9))

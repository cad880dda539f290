"""The node packer's choice among pools that tie under the objective.

Selection ranks pools by tier, then the objective (the grant's cost, carbon, start, score or the
job's figure), then the pool's name. Pools that differ only by name tie: typically one pool per
GPU model at the accelerator's default price, or overlapping partitions priced alike. Picking the
first by name would hand the packer that pool's nodes alone and fill it before the others, however
well the others' nodes fit. Instead the packer scores the best node of each tied pool, and the
pool holding the best of them takes the work (``rooms.best_tied``): the packer chooses across the
pools as it chooses across one pool's nodes. Equal best scores go to the node earlier in the
fleet's order where one is given (a replay: the trace's node order), else to the first pool by name.

A CPU pool over device nodes (a CPU partition over GPU nodes) chooses its nodes by their whole
state (``packer_on``): its own rooms count cores as devices and would place CPU-only work blind to
the devices its CPU feeds.

Where the winner's start estimate came from its scheduler (Slurm's or Kubernetes' pools), only the
tied pools whose start was asked too compete: nothing waits on a scheduler under the write lock.
(A pool with room and no scheduler starts now, asked or not.)

The policy's reference decision says which pools tie (its ``tied``); the record keeps the pool
chosen, which must be one of them. Rebuilding a record prefers the pool it recorded (``select``'s
``prefer``); replaying it checks the pool is among the policy's tied pools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from examlops_policy._core import rooms as _rooms
from examlops_policy._node_packers import DEFAULT_PACKER, packer_named
from examlops_policy.model import NO_SCHEDULER, Capacity, Decision, Placement, Pool
from examlops_policy.tables import Tables
from examlops_policy._core.waiting import Starts

if TYPE_CHECKING:
    from examlops_policy import _nodes
    from examlops_policy._core.engine import Prepared


def choose(
    prepared: Prepared,
    decision: Decision,
    capacities: Sequence[Capacity],
    tables: Tables,
    starts: Starts | None,
    room_of: Callable[[str], _rooms.Rooms | None],
    packer_for: Callable[[str, _rooms.Rooms], _nodes.Packer] | None = None,
) -> tuple[Decision, _rooms.Rooms | None, _nodes.Packer | None]:
    """``decision`` (made on ``capacities`` with ``starts``) on the tied pool whose best node the
    packer scores highest, with that pool's rooms and the packer that scored them (to place with);
    ``room_of``: a pool's nodes and what is held on them (None: a pool without nodes);
    ``packer_for``: the packer a pool chooses its nodes with (``packer_on``; None: the default
    packer kept with its rooms). Equal scores go to the first pool by name. A decision that tied
    with no pool is returned as it is, with (None, None)."""
    if not isinstance(decision, Placement) or not decision.tied:
        return decision, None, None
    # Nothing waits on a scheduler here (this runs under the write lock): where the winner's start
    # came from its scheduler, a tied pool whose start was not asked is not chosen over it.
    grants = prepared.tied_grants(decision, capacities)
    said = None if starts is None else starts.of(decision.pool)
    if starts is not None and said is not None and said.source != NO_SCHEDULER:
        grants = [(n, g) for n, g in grants if n == decision.pool or starts.of(n) is not None]
    candidates = []
    for name, grant in grants:
        room = room_of(name)
        chooser = None if room is None else room.chooser() if packer_for is None else packer_for(name, room)
        candidates.append((room, grant, chooser))
    at = _rooms.best_tied(candidates)
    name = grants[at][0]
    if name != decision.pool:
        decision = prepared.on_tied(decision, capacities, tables, starts, name)
    return decision, candidates[at][0], candidates[at][2]


def settle(
    prepared: Prepared,
    decision: Decision,
    capacities: Sequence[Capacity],
    tables: Tables,
    starts: Starts | None,
    room_of: Callable[[str], _rooms.Rooms | None],
    pool_of: Callable[[str], Pool],
    sharers: Callable[[str], Sequence[Pool]],
) -> tuple[Decision, _rooms.Rooms | None, _nodes.Packer | None]:
    """``decision`` on the tied pool the packer's best node is on (``choose``, where a tied pool
    has nodes), with the rooms of the pool it is on (None: a pool without nodes) and the packer
    that pool chooses its nodes with (``packer_on``): what a commit places with and a dry run
    shows, worked out one way. ``room_of``: a pool's rooms (None: no nodes), kept by the caller;
    ``pool_of``: a pool by name; ``sharers``: the pools sharing a pool's nodes."""

    def packer_for(name: str, room: _rooms.Rooms) -> _nodes.Packer:
        return packer_on(pool_of(name), room, sharers(name), room_of)

    if not isinstance(decision, Placement):
        return decision, None, None
    room: _rooms.Rooms | None = None
    chooser: _nodes.Packer | None = None
    if any(pool_of(name).node_tracked for name in decision.tied):
        decision, room, chooser = choose(prepared, decision, capacities, tables, starts, room_of, packer_for)
        assert isinstance(decision, Placement)
    if room is None:
        room = room_of(decision.pool)
    if room is not None and chooser is None:
        chooser = packer_for(decision.pool, room)
    return decision, room, chooser


def packer_on(pool: Pool, room: _rooms.Rooms, sharers: Sequence[Pool], room_of: Callable[[str], _rooms.Rooms | None]) -> _nodes.Packer:
    """The packer ``pool`` chooses among its nodes (``room``) with: the default packer, scoring a
    CPU pool's nodes by their whole state where device pools list them (``sharers``: the pools
    sharing its nodes; ``room_of``: a pool's nodes and what is held on them, read only for a CPU
    pool's device sharers; ``rooms.OnNodes``), so that CPU-only work goes where its CPU feeds no
    free device, as one packer over every node places it."""
    if pool.accelerator != "cpu":
        return room.chooser()
    devices = [r for r in (room_of(p.name) for p in sharers if p.accelerator != "cpu") if r is not None]
    return _rooms.OnNodes(packer_named(DEFAULT_PACKER), _rooms.whole_nodes(room, devices)) if devices else room.chooser()

"""The fleet as workflows change and show it: pools registered, updated, drained and removed, their
nodes' states, what schedulers report busy, leases that ended, and every pool as people look at it.
A change that may add capacity offers it to the queue at once (``queue.offer_freed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from examlops_policy._core import commit
from examlops_policy._core.packing import PoolLayout, describe, device_layouts
from examlops_policy._core.selection import effective_cost
from examlops_policy._core.state import state_of
from examlops_policy.app import queue as queueing
from examlops_policy.app.cycle import SOURCE, DecisionCycle
from examlops_policy.model import Pool, PoolState
from examlops_policy.store.api import NodeUsageRow
from examlops_policy.tables import Tables
from examlops_policy.views import PoolChange, PoolDetail, PoolView


class Pools:
    """The fleet's workflows over one decision cycle (the ``Fleet`` port discovery and catalog
    import use); ``queue``: offered the capacity a change may add."""

    def __init__(self, cycle: DecisionCycle, queue: queueing.Queue) -> None:
        self.cycle = cycle
        self.queue = queue

    @property
    def tables(self) -> Tables:
        return self.cycle.tables

    def add(self, pool: Pool) -> PoolChange:
        """Register a new pool; SpecError for a name already registered or facts the tables refuse."""
        from examlops_policy import specs

        cycle = self.cycle
        specs.check_pool_facts(specs.check_registrable(pool), cycle.tables)
        return commit.apply_pools(cycle.store, cycle.capacities, [pool], replace=False, source=SOURCE)[0]

    def apply(self, pools: Sequence[Pool], *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """Register or update pools (idempotent). A pool that live decisions hold keeps its
        accelerator, model, target, region and partitioning, and no device they hold: SpecError.
        A registered pool keeps its drained state. ``prune``: registered pools not among ``pools``
        are removed, as ``remove_pool`` removes them (all or nothing). ``dry_run``: what would
        change, refusals included, with nothing written. A change offers the queue the capacity it
        may have added (``admit``)."""
        from examlops_policy import specs

        cycle = self.cycle
        for pool in pools:
            specs.check_pool_facts(specs.check_registrable(pool), cycle.tables)
        changes = commit.apply_pools(cycle.store, cycle.capacities, pools, replace=True, source=SOURCE, prune=prune, dry_run=dry_run)
        if not dry_run and any(c.action != "unchanged" for c in changes):
            queueing.offer_freed(self.queue)  # devices added may take waiting work (what it admits is audited)
        return changes

    def apply_file(self, path: Path, *, prune: bool = False, dry_run: bool = False) -> list[PoolChange]:
        """``apply`` the pools of a reviewed YAML file (``pools: [...]``)."""
        from examlops_policy.specs import pools_from_file

        return self.apply(pools_from_file(path, self.cycle.tables), prune=prune, dry_run=dry_run)

    def drain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Drain a pool: it takes no new grants (the policy denies it, ``pool_drained``, not_now),
        and the grants it holds are kept. Audited; ``unchanged`` when it is drained already.
        NotFoundError for an unknown pool; ``dry_run``: what would change, nothing written."""
        return commit.set_drained(self.cycle.store, self.cycle.capacities, name, True, source=SOURCE, dry_run=dry_run)

    def undrain(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Let a drained pool take new grants again (a pending removal is cancelled). Audited. The
        queue is offered the capacity it brings back (``admit``)."""
        change = commit.set_drained(self.cycle.store, self.cycle.capacities, name, False, source=SOURCE, dry_run=dry_run)
        if not dry_run and change.action != "unchanged":
            queueing.offer_freed(self.queue)  # waiting work may fit there again (what it admits is audited)
        return change

    def remove(self, name: str, *, dry_run: bool = False) -> PoolChange:
        """Remove a pool from the fleet (its decisions stay readable). Without live grants it goes
        now; drained, with live grants, it goes when the last of them ends (``removal_pending``);
        not drained, with live grants, SpecError naming them (nothing written). Audited.
        NotFoundError for an unknown pool; ``dry_run``: what would change, nothing written."""
        return commit.remove_pools(self.cycle.store, self.cycle.capacities, [name], source=SOURCE, dry_run=dry_run)[0]

    def pools(self) -> list[PoolState]:
        """Every pool with what it can still place, cheapest first (then by name)."""
        tables = self.cycle.tables
        return sorted(self.cycle.snapshot().states, key=lambda s: (effective_cost(s.pool, tables), s.pool.name))

    def views(self) -> list[PoolView]:
        """``pools()`` as people look at them: what is placeable, price and carbon per device-hour."""
        return [self.view(s) for s in self.pools()]

    def view(self, state: PoolState) -> PoolView:
        from examlops_policy.accounting import carbon_basis, carbon_method_text

        pool, tables = state.pool, self.cycle.tables
        layout = self.cycle.capacities.layout(pool)
        carbon = carbon_basis(pool, tables)
        return PoolView(
            state=state,
            packing=layout.kind,
            placeable=placeable_text(state, layout),
            cost_per_hour=effective_cost(pool, tables),
            cost_default=pool.cost_per_hour is None,
            carbon_per_hour=carbon.per_hour,
            carbon_default=pool.carbon_factor is None,
            carbon_method=carbon.method,
            carbon_method_text=carbon_method_text(carbon.method, tables),
        )

    def detail(self, name: str) -> PoolDetail:
        """One pool device by device (a node-tracked pool node by node): what its live grants
        hold (a grant whose lease ended holds nothing), and on its nodes what the pools sharing
        them and schedulers hold. NotFoundError for an unknown one."""
        cycle = self.cycle
        snap = cycle.snapshot()
        ended = snap.ended
        row, held = cycle.store.pool_row(name)
        state = state_of(row)
        capacities = cycle.capacities
        if ended and any(h.decision_id in ended for h in held):
            held = [h for h in held if h.decision_id not in ended]
            if not state.pool.node_tracked:
                capacity, free = capacities.of(state.pool, held, state.held_outside)
                state = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
        holdings = [h.holding for h in held]
        layout = capacities.layout(state.pool)
        if not state.pool.node_tracked:
            return PoolDetail(self.view(state), tuple(holdings), tuple(device_layouts(layout, holdings)))
        from examlops_policy._core import rooms

        sharing = capacities.sharing(snap.fleet_version, snap.pools)
        rows, grants, usage = cycle.store.node_rows(sharing.group(name))
        if ended:
            # What the pools on its nodes hold: grants whose lease ended hold nothing there either.
            rows = [r for r in rows if r.decision_id not in ended]
            grants = [g for g in grants if g.decision_id not in ended]
        room = capacities.rooms_of(state.pool, rows, grants, usage, sharing.devices(name), sharing.other_mode(name), sharing.states(name))
        if ended:
            capacity, free = rooms.summary(room)
            state = PoolState(state.pool, free, capacity, state.held_outside, state.removing)
        return PoolDetail(self.view(state), tuple(holdings), (), rooms.details(room))

    def record_usage(
        self, usage: Mapping[str, float], *, scheduler: str, nodes: Mapping[str, Sequence[NodeUsageRow]] | None = None
    ) -> dict[str, float]:
        """Record how many devices of each named pool its scheduler reports busy: those beyond this
        layer's own submitted, live placements are held outside it (audited per change). ``nodes``:
        what is busy node by node on pools of nodes (beyond this layer's submitted grants there)."""
        return commit.record_usage(self.cycle.store, self.cycle.capacities, usage, scheduler=scheduler, source=SOURCE, nodes=nodes)

    def set_node_states(self, states: Mapping[str, str]) -> list[PoolChange]:
        """Set the state of nodes by name (``up``, ``drained``, ``down``) in every pool that lists
        them, in one audited write: only up nodes take new grants; live ones stay, flagged while
        their node is down. A node no pool lists by name is a SpecError (nothing is written). The
        one place a node's state changes (discovery and reconcile call it)."""
        return commit.set_node_states(self.cycle.store, self.cycle.capacities, states, source=SOURCE)

    def expire_leases(self) -> list[str]:
        """Release the placements whose lease ended (audited as ``expired``): their ids."""
        return commit.expire_leases(self.cycle.store, self.cycle.capacities, source=SOURCE)


def placeable_text(state: PoolState, layout: PoolLayout) -> str | None:
    """What can still be placed, for people: slices (``1g x5, 3g x1``); on a pool of nodes, the
    largest block of whole devices free on one node and, shared, the most shares free on one
    device (None for a pool of whole devices counted as one node: its free devices say it)."""
    rooms = state.capacity.nodes
    if rooms is None:
        return None if layout.kind == "whole" else describe(state.capacity, layout)
    if not rooms:
        return "no node up"
    parts = [] if layout.kind == "whole" else [describe(state.capacity, layout)]
    if layout.kind != "fixed":
        parts.append(f"{max(r.whole for r in rooms)} whole on one node")
    pool = state.pool
    if pool.sharing is not None and pool.shares_per_device:
        most = max(pool.shares_per_device if r.whole else r.shares for r in rooms)
        parts.append(f"{most} of {pool.shares_per_device} shares on one device")
    return " · ".join(parts)

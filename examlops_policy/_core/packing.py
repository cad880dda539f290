"""How grants pack onto a pool's devices: what is still placeable, and where a new grant goes.

Capacity is per device, never a sum of shares (``policies/examlops/tables/geometry.yaml``):

* a whole device is given only when nothing is on it;
* a MIG instance holds a run of memory slices at one of its profile's allowed starts, beside runs
  that do not overlap it, and the compute slices of a device add up to at most 7;
* an AMD MI300X/MI325X device runs one compute-partition mode at a time: a device holding
  partitions of one mode takes only more of that mode until it is empty;
* a pool of fixed slices (a scheduler's typed MIG GRES or partition resource) counts its slices.

Pure: holdings in, a ``Capacity`` summary and new ``Holding``s out. The store calls ``choose`` in
the same transaction as the reservation, with the holdings it reads there; the policy judges
eligibility from ``summarize`` (how many of each profile could still be placed), and the two
agree by construction: a profile is placeable exactly when ``choose`` finds room for it.

Where a slice goes: among the free starts on every device, the one that strands the least capacity.
An empty device used up counts first of all (small slices fill devices that already hold slices and
keep whole devices placeable). Then what the device loses of each profile it could still place,
largest profile first: the first 1g on an empty H100 goes to start 6, where only a 1g fits, and
leaves the 4g (start 0 only) and the 3g at 0 placeable. Then, on MIG, the compute the device would
strand: over every maximal way its free memory slices could still be filled (each a set of
instances that leaves no room for another), the compute slices that way leaves unused, summed.
Then the room left on the device, the lowest device and start.

No online rule places every arrival order that fits one device (1g then 4g needs the 1g away from
0-3; 1g, 1g, 2g, 3g needs memory slice 7, which a 1g at 6 cuts off). This one places every
arrival order of slices that fit one device without memory slice 7 (whatever comes first), and
every order largest first; so a device's slices never take a second, empty device while a better
start keeps the first one's room: on two H100s, 1g, 4g and a whole device all fit (1g@6 and 4g@0
on device 0, device 1 whole). tests/test_invariants.py checks both on pools of devices and of
nodes, with whole devices asked for in between.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import Capacity, Holding, JSONObject, Pool
from examlops_policy.tables import Tables

Kind = Literal["whole", "fixed", "mig", "amd-compute-partition"]
PARTITIONED: Final = ("mig", "amd-compute-partition")


@dataclass(frozen=True)
class Share:
    """One share of a geometry: a MIG profile (compute slices, memory run, starts) or an AMD mode
    (partitions per device)."""

    profile: str
    units: int
    compute: int = 0
    memory: int = 0
    starts: tuple[int, ...] = ()
    partitions: int = 0


@dataclass(frozen=True)
class PoolLayout:
    """A pool's devices as the packer sees them: how many, what kind, which shares by profile."""

    devices: int
    kind: Kind
    shares: Mapping[str, Share] = field(default_factory=dict)
    compute_slices: int = 0
    memory_slices: int = 0
    fixed_profile: str | None = None

    @property
    def profiles_large_first(self) -> list[str]:
        return sorted(self.shares, key=lambda p: (-self.shares[p].units, p))


def layout_key(pool: Pool) -> tuple[object, ...]:
    """What ``layout_of`` reads of a pool: two pools alike in these have the same layout."""
    return (pool.fixed_profile, pool.count, pool.supports_fractions, pool.accelerator, pool.model)


def layout_of(pool: Pool, tables: Tables) -> PoolLayout:
    """The packing rules for ``pool``: whole devices, fixed slices, MIG or AMD partitions.

    A pool packs slices only where it enables partitioning and its device has a scheme
    (partitioning.yaml, by model else by vendor) with a geometry (geometry.yaml).
    """
    if pool.fixed_profile is not None:
        return PoolLayout(pool.count, "fixed", fixed_profile=pool.fixed_profile)
    scheme = tables.scheme_for(pool.accelerator, pool.model) if pool.supports_fractions else None
    if scheme is None:
        return PoolLayout(pool.count, "whole")
    geometry = cast(JSONObject, tables.geometry.get(str(scheme.get("geometry"))) or {})
    kind = geometry.get("kind")
    if kind not in PARTITIONED:
        raise PolicyError(f"partitioning scheme of pool {pool.name!r} names no known geometry ({scheme.get('geometry')!r})")
    by_units = cast(dict[str, JSONObject], geometry.get("shares") or {})
    shares: dict[str, Share] = {}
    for entry in cast(list[JSONObject], scheme["slices"]):
        units = int(cast(int, entry["units"]))
        raw = by_units.get(str(units))
        if raw is None:
            raise PolicyError(f"geometry {scheme.get('geometry')!r} has no share of {units} units")
        profile = str(entry["profile"])
        shares[profile] = Share(
            profile=profile,
            units=units,
            compute=int(cast(int, raw.get("compute", 0))),
            memory=int(cast(int, raw.get("memory", 0))),
            starts=tuple(int(s) for s in cast(list[int], raw.get("starts", []))),
            partitions=int(cast(int, raw.get("partitions", 0))),
        )
    return PoolLayout(
        pool.count,
        cast(Kind, kind),
        shares,
        compute_slices=int(cast(int, geometry.get("compute_slices", 0))),
        memory_slices=int(cast(int, geometry.get("memory_slices", 0))),
    )


@dataclass
class _Device:
    """What one device holds right now."""

    index: int
    whole: bool = False
    memory: set[int] = field(default_factory=set)  # MIG memory slices held
    compute: int = 0  # MIG compute slices held
    mode: int | None = None  # AMD: units of the mode the device runs
    partitions: set[int] = field(default_factory=set)  # AMD partition indexes held

    @property
    def empty(self) -> bool:
        return not self.whole and not self.memory and not self.partitions


def _devices(layout: PoolLayout, holdings: Iterable[Holding]) -> dict[int, _Device]:
    """The devices some holding names, by index (every other device is empty: only counted)."""
    held: dict[int, _Device] = {}
    for h in holdings:
        if not 0 <= h.device < layout.devices:
            continue  # a device beyond the pool's count (it shrank): nothing to place there
        d = held.get(h.device)
        if d is None:
            d = held[h.device] = _Device(h.device)
        if h.profile is None or layout.kind == "fixed":
            d.whole = True
        elif layout.kind == "mig":
            share = layout.shares.get(h.profile)
            if share is None or h.start is None:
                d.whole = True  # a slice this layout does not know: treat the device as taken
                continue
            d.memory.update(range(h.start, h.start + share.memory))
            d.compute += share.compute
        else:
            share = layout.shares.get(h.profile)
            if share is None or h.start is None:
                d.whole = True
                continue
            d.mode = share.units
            d.partitions.add(h.start)
    return held


def _in_use(held: Mapping[int, _Device]) -> list[_Device]:
    """The devices that are not empty, in index order."""
    return [held[i] for i in sorted(held) if not held[i].empty]


def _free(devices: int, taken: Iterable[int], n: int) -> list[int]:
    """The first ``n`` device indexes below ``devices`` that are not ``taken``."""
    skip = set(taken)
    out: list[int] = []
    i = 0
    while len(out) < n and i < devices:
        if i not in skip:
            out.append(i)
        i += 1
    return out


def _mig_free_starts(layout: PoolLayout, d: _Device, share: Share) -> list[int]:
    if d.whole or d.compute + share.compute > layout.compute_slices:
        return []
    return [s for s in share.starts if not d.memory.intersection(range(s, s + share.memory))]


def _fits(layout: PoolLayout, d: _Device, share: Share) -> int:
    """How many more of ``share`` this device could hold."""
    if d.whole:
        return 0
    if layout.kind == "mig":
        free_compute = layout.compute_slices - d.compute
        return min(len(_mig_free_starts(layout, d, share)), free_compute // share.compute if share.compute else 0)
    if d.mode is None:
        return share.partitions
    return share.partitions - len(d.partitions) if d.mode == share.units else 0


def _outside(held_outside: float) -> int:
    """Devices a scheduler reports busy with work this layer did not place: whole devices."""
    return max(0, math.ceil(held_outside - 1e-9))


def summarize(layout: PoolLayout, holdings: Sequence[Holding], held_outside: float = 0.0) -> Capacity:
    """What is still placeable: empty devices (``whole``) and, per profile, how many could still be
    placed (each profile counted on its own, the pool as it is now). Costs what the holdings cost,
    not what the pool's device count is."""
    outside = _outside(held_outside)
    if layout.kind == "fixed":
        taken = {h.device for h in holdings if 0 <= h.device < layout.devices}
        return Capacity(0, {str(layout.fixed_profile): max(0, layout.devices - len(taken) - outside)})
    devices = _in_use(_devices(layout, holdings))
    usable_empty = max(0, layout.devices - len(devices) - outside)
    slices: dict[str, int] = {}
    for profile, share in layout.shares.items():
        per_empty = _fits(layout, _Device(-1), share)
        partial = sum(_fits(layout, d, share) for d in devices)
        slices[profile] = partial + usable_empty * per_empty
    return Capacity(usable_empty, slices)


def choose(
    layout: PoolLayout, holdings: Sequence[Holding], profile: str | None, units: int, held_outside: float = 0.0
) -> tuple[Holding, ...] | None:
    """Where a grant of ``units`` of ``profile`` (None: whole devices) goes, or None if it does not
    fit. Deterministic for the same holdings; costs what the holdings and the grant cost."""
    outside = _outside(held_outside)
    if layout.kind == "fixed":
        taken = {h.device for h in holdings if 0 <= h.device < layout.devices}
        if profile != layout.fixed_profile or layout.devices - len(taken) - outside < units:
            return None
        return tuple(Holding(i, profile) for i in _free(layout.devices, taken, units))
    held = _devices(layout, holdings)
    devices = _in_use(held)
    empty = layout.devices - len(devices)
    in_use = (d.index for d in devices)
    if profile is None:
        if empty - outside < units:
            return None
        return tuple(Holding(i) for i in _free(layout.devices, in_use, units))
    share = layout.shares.get(profile)
    if share is None or units != 1:
        return None
    candidates = list(devices)
    if empty - outside > 0:
        candidates += [held.get(i) or _Device(i) for i in _free(layout.devices, in_use, 1)]
    best: tuple[tuple[object, ...], Holding] | None = None
    for d in candidates:
        for start in _starts(layout, d, share):
            key = _loss(layout, d, share, start)
            if best is None or key < best[0]:
                best = (key, Holding(d.index, profile, start, share.units))
    return None if best is None else (best[1],)


def _starts(layout: PoolLayout, d: _Device, share: Share) -> list[int]:
    if layout.kind == "mig":
        return _mig_free_starts(layout, d, share) if _fits(layout, d, share) > 0 else []
    if _fits(layout, d, share) <= 0:
        return []
    return [min(set(range(share.partitions)) - d.partitions)]


def _loss(layout: PoolLayout, d: _Device, share: Share, start: int) -> tuple[object, ...]:
    """The rank of putting ``share`` at ``start`` on ``d``: an empty device used up counts first,
    then what the device loses of each profile, largest first, then the MIG compute it would strand,
    the room left on the device, device and start."""
    after = _Device(d.index, d.whole, set(d.memory), d.compute, d.mode, set(d.partitions))
    if layout.kind == "mig":
        after.memory.update(range(start, start + share.memory))
        after.compute += share.compute
    else:
        after.mode = share.units
        after.partitions.add(start)
    lost = [_fits(layout, d, s) - _fits(layout, after, s) for s in (layout.shares[p] for p in layout.profiles_large_first)]
    stranded = _stranded(layout, after) - _stranded(layout, d) if layout.kind == "mig" else 0
    room = layout.compute_slices - after.compute if layout.kind == "mig" else -len(after.partitions)
    return (int(d.empty), *lost, stranded, room, d.index, start)


def _stranded(layout: PoolLayout, d: _Device) -> int:
    """The MIG compute slices ``d`` would leave unused, summed over every maximal way its free
    memory slices could still be filled (a set of instances no other instance can join)."""
    if d.whole:
        return 0
    shares = tuple(layout.shares[p] for p in layout.profiles_large_first)
    return _stranded_memo(layout.compute_slices, shares, frozenset(d.memory), d.compute)


@functools.lru_cache(maxsize=4096)
def _stranded_memo(compute_slices: int, shares: tuple[Share, ...], memory: frozenset[int], compute: int) -> int:
    # Every way the free memory slices could still be filled: the compute slices of each instance,
    # largest first.
    fillings = _fillings(compute_slices, shares, memory, compute, compute_slices)
    maximal = [f for f in fillings if not any(len(g) > len(f) and _within(f, g) for g in fillings)]
    return sum(compute_slices - compute - sum(f) for f in maximal)


@functools.lru_cache(maxsize=16384)
def _fillings(compute_slices: int, shares: tuple[Share, ...], held: frozenset[int], used: int, cap: int) -> frozenset[tuple[int, ...]]:
    """The ways a device holding memory slices ``held`` and ``used`` compute slices could still be
    filled with instances of at most ``cap`` compute slices each, largest first (none among them).
    Many orders of placing the same instances reach the same device: each is worked out once."""
    found: set[tuple[int, ...]] = {()}
    for share in shares:
        if used + share.compute > compute_slices or share.compute > cap:
            continue
        for start in share.starts:
            run = frozenset(range(start, start + share.memory))
            if not held & run:
                rest = _fillings(compute_slices, shares, held | run, used + share.compute, share.compute)
                found.update((share.compute, *more) for more in rest)
    return frozenset(found)


def _within(small: tuple[int, ...], large: tuple[int, ...]) -> bool:
    """Whether the multiset ``small`` is part of the multiset ``large``."""
    rest = list(large)
    for x in small:
        if x not in rest:
            return False
        rest.remove(x)
    return True


def describe(capacity: Capacity, layout: PoolLayout) -> str:
    """``1g x5, 3g x1``: what is still placeable, for people (profiles short, smallest first)."""
    if layout.kind == "fixed":
        return f"{layout.fixed_profile} x{capacity.slices.get(str(layout.fixed_profile), 0)}"
    parts = [f"{_short(p)} x{n}" for p, n in sorted(capacity.slices.items(), key=lambda i: layout.shares[i[0]].units) if n > 0]
    return ", ".join(parts) or "none"


def _short(profile: str) -> str:
    return profile.split(".", 1)[0]


def device_layouts(layout: PoolLayout, holdings: Sequence[Holding]) -> list[str]:
    """Each device's layout, for ``exa hardware pool NAME``: ``free``, ``whole``, or its slices."""
    lines = []
    by_device: dict[int, list[Holding]] = {}
    for h in holdings:
        by_device.setdefault(h.device, []).append(h)
    for i in range(layout.devices):
        held = sorted(by_device.get(i, []), key=lambda h: (h.start or 0, h.profile or ""))
        if not held:
            lines.append("free")
        elif layout.kind == "fixed":
            lines.append(f"{held[0].profile or 'slice'} held")
        elif any(h.profile is None for h in held):
            lines.append("whole device held")
        elif layout.kind == "mig":
            lines.append(", ".join(f"{h.profile}@{h.start}" for h in held))
        else:
            share = layout.shares.get(held[0].profile or "")
            total = share.partitions if share else "?"
            lines.append(f"{held[0].profile} mode: {len(held)}/{total} partitions held")
    return lines


__all__ = ["PoolLayout", "Share", "choose", "describe", "device_layouts", "layout_of", "summarize"]


def holdings_from_json(raw: object) -> tuple[Holding, ...]:
    """Holdings as stored (``[[device, profile, start, units], ...]``)."""
    items = cast(list[list[object]], raw or [])
    return tuple(
        Holding(int(cast(int, h[0])), cast("str | None", h[1]), cast("int | None", h[2]), cast("int | None", h[3])) for h in items
    )


def holdings_to_json(holdings: Sequence[Holding]) -> list[list[object]]:
    return [[h.device, h.profile, h.start, h.units] for h in holdings]

"""``exa hardware simulate``: a trace replayed against a fleet through the placement path, in memory.

``simulate_openb`` runs the openb protocol (``replay``) with a ``LayerPlacer`` per seed and packer;
``simulate_events`` replays a generic trace (``generic``) in time order, work leaving when its
duration ends. Both give a ``Simulation``: per packer, the allocation curve per seed and its mean,
failures by kind, fragmentation and placements per second; ``to_json`` is what ``--json`` prints,
``lines`` what a person reads, ``svg`` the plot.
"""

from __future__ import annotations

from heapq import heappop, heappush
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, ClassVar

from examlops_policy import _nodes
from examlops_policy._core.engine import Engine
from examlops_policy._node_packers import ExpectedWorkload, FragmentationPacker
from examlops_policy._sim.generic import GenericTrace, in_order
from examlops_policy._sim.layer import LayerPlacer, Placed, fleet_pools
from examlops_policy._sim.plot import Line, allocation_svg
from examlops_policy._sim.replay import Curve, ReplayResult, expected_workload, replay
from examlops_policy._sim.trace import POD_KINDS, TracePod
from examlops_policy._record import Record
from examlops_policy.errors import SpecError
from examlops_policy.model import JSONObject, Pool

POINTS = (100, 130)
# Failed workloads a person reads by name under a packer's line (all of them with --json).
SHOWN_FAILURES = 10


class WorkloadOutcome(Record):
    """What became of one workload of a generic trace: the pool it was placed on, or the reason
    it failed, as a placement's rejection says it (code and message)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("name", "arrival", "pool", "code", "message")

    name: str
    arrival: float
    pool: str | None
    code: str | None
    message: str | None

    def __init__(self, name: str, arrival: float, pool: str | None = None, code: str | None = None, message: str | None = None) -> None:
        self.name = name
        self.arrival = arrival
        self.pool = pool
        self.code = code
        self.message = message

    def to_json(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "arrival": self.arrival, "outcome": "placed" if self.pool is not None else "failed"}
        if self.pool is not None:
            out["pool"] = self.pool
        else:
            out["reason"] = {"code": self.code, "message": self.message}
        return out


class Outcomes:
    """Each workload's outcome, in the order they arrived: the first ``HELD`` in memory, the rest
    written to a temporary file as they come (a JSON line per ``HELD`` of them) and read back
    when iterated, so that a replay of millions of workloads holds none of them. Counted as they
    come: how many failed, by reason code (``codes``), and the first ``SHOWN_FAILURES`` failed
    (``first_failed``)."""

    HELD = 10_000

    def __init__(self, outcomes: Iterable[WorkloadOutcome] = ()) -> None:
        self._held: list[WorkloadOutcome] = []
        self._file: IO[str] | None = None
        self._count = 0
        self.codes: dict[str, int] = {}
        self.first_failed: list[WorkloadOutcome] = []
        for o in outcomes:
            self.append(o)

    def append(self, outcome: WorkloadOutcome) -> None:
        self._count += 1
        if outcome.pool is None:
            if outcome.code is not None:
                self.codes[outcome.code] = self.codes.get(outcome.code, 0) + 1
            if len(self.first_failed) < SHOWN_FAILURES:
                self.first_failed.append(outcome)
        self._held.append(outcome)
        if len(self._held) >= 2 * self.HELD:
            if self._file is None:
                self._file = tempfile.TemporaryFile("w+", encoding="utf-8", prefix="exa-outcomes-")
            spill, self._held = self._held[self.HELD :], self._held[: self.HELD]
            self._file.seek(0, os.SEEK_END)
            # One line a spill, a row per outcome: one encoder call for the lot.
            self._file.write(json.dumps([[o.name, o.arrival, o.pool, o.code, o.message] for o in spill]) + "\n")

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[WorkloadOutcome]:
        yield from self._held[: self.HELD]
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            for line in self._file:
                for name, arrival, pool, code, message in json.loads(line):
                    yield WorkloadOutcome(name, arrival, pool, code, message)
        yield from self._held[self.HELD :]

    def __repr__(self) -> str:
        return f"Outcomes({self._count} workloads, {sum(self.codes.values())} failed)"


@dataclass(frozen=True)
class PackerRun:
    """Every seed of one packer."""

    packer: str
    results: tuple[ReplayResult, ...]
    judged: int = 0  # workload signatures the policy judged (at most one OPA query each)
    refused: Mapping[str, int] = field(default_factory=dict)  # requests the policy refused outright, by reason code
    outcomes: Outcomes = field(default_factory=Outcomes)  # a generic trace: each workload's, in the order they arrived

    @property
    def failures(self) -> dict[str, int]:
        """How many workloads failed, by reason code (a generic trace: capacity included)."""
        return dict(sorted(self.outcomes.codes.items()))

    @property
    def alloc_pct(self) -> dict[int, float]:
        """The mean allocation % over the seeds at each arrived % every seed reached."""
        curves = [r.alloc_pct for r in self.results]
        if len(curves) == 1:
            return dict(curves[0])
        xs = sorted(set(curves[0]).intersection(*curves[1:]))
        return {x: round(statistics.fmean(c[x] for c in curves), 2) for x in xs}

    @property
    def failed(self) -> dict[str, float]:
        return {k: round(statistics.fmean(r.failed[k] for r in self.results), 1) for k in POD_KINDS}

    @property
    def fragmentation_pct(self) -> float:
        return round(statistics.fmean(r.fragmentation_pct for r in self.results), 2)

    @property
    def placements_per_second(self) -> float:
        seconds = sum(r.seconds for r in self.results)
        return round(sum(r.pods for r in self.results) / seconds, 1) if seconds > 0 else 0.0

    def to_json(self, points: Sequence[int]) -> JSONObject:
        mean = self.alloc_pct
        workloads: JSONObject = (
            {"failures": dict(self.failures), "workloads": [o.to_json() for o in self.outcomes]} if self.outcomes else {}
        )
        return {
            "packer": self.packer,
            "alloc_pct": {str(x): mean[x] for x in (points or sorted(mean)) if x in mean},
            "per_seed": [
                {
                    "seed": r.seed, "alloc_pct": {str(x): r.alloc_pct[x] for x in (points or sorted(r.alloc_pct)) if x in r.alloc_pct}, "pods": r.pods,
                    "placed": r.placed, "failed": dict(r.failed), "fragmentation_pct": round(r.fragmentation_pct, 2),
                    "seconds": round(r.seconds, 3), "placements_per_second": round(r.placements_per_second, 1),
                }  # fmt: skip
                for r in self.results
            ],
            "failed": dict(self.failed),
            "fragmentation_pct": self.fragmentation_pct,
            "placements_per_second": self.placements_per_second,
            "judged": self.judged,
            "refused": dict(self.refused),
            **workloads,
        }


@dataclass(frozen=True)
class Simulation:
    """A replay's figures, per packer (the first is the one ``--json`` puts at the top)."""

    trace: str
    policy_revision: str
    inflate: float | None
    seeds: tuple[int, ...]
    runs: tuple[PackerRun, ...]
    points: tuple[int, ...] = POINTS
    pools: tuple[str, ...] = field(default=())

    def to_json(self) -> JSONObject:
        first = self.runs[0].to_json(self.points)
        out: JSONObject = {
            **first, "trace": self.trace, "policy_revision": self.policy_revision, "inflate": self.inflate, "seeds": list(self.seeds),
            "pools": list(self.pools),
        }  # fmt: skip
        if len(self.runs) > 1:
            out["packers"] = [r.to_json(self.points) for r in self.runs]
        return out

    def lines(self) -> list[str]:
        out = [f"Replayed {self.trace} through the placement path (policy {self.policy_revision[:19]}..., pools {', '.join(self.pools)})"]
        if self.inflate is None:
            out.append("in time order, work leaving when its duration ends; allocation: devices held / devices, in %")
            for run in self.runs:
                r = run.results[0]
                lost = r.failed
                end, most = (100.0 * u / max(1, r.capacity_milli) for u in (r.allocated_milli, r.peak_milli))
                out.append(
                    f"{run.packer}: {r.placed} of {r.pods} placed; failed cpu/share/one/multi {lost['cpu']}/{lost['share']}/{lost['one']}/{lost['multi']}; "
                    f"allocation at the end {end:.2f} %, at most {most:.2f} %"
                )
                if run.refused:
                    out.append("  refused by the policy whatever the capacity: " + ", ".join(f"{c} x{n}" for c, n in run.refused.items()))
                failed = run.outcomes.first_failed
                if failed:
                    named = ", ".join(f"{o.name} at {o.arrival:g} s ({o.code})" for o in failed)
                    count = r.pods - r.placed
                    more = f" and {count - len(failed)} more (--json lists them all)" if count > len(failed) else ""
                    out.append(f"  failed: {named}{more}")
            return out
        out.append(f"seeds {', '.join(map(str, self.seeds))}, GPU demand tuned to {round(self.inflate * 100)} % of GPU capacity")
        for run in self.runs:
            mean = run.alloc_pct
            at = "  ".join(f"{x} %: {mean[x]}" for x in self.points if x in mean)
            f = run.failed
            out.append(
                f"{run.packer}: allocation at arrived {at}; failed cpu/share/one/multi {f['cpu']}/{f['share']}/{f['one']}/{f['multi']}; "
                f"fragmentation {run.fragmentation_pct} %; {run.placements_per_second} placements/s"
            )
            if run.refused:
                out.append("  refused by the policy whatever the capacity: " + ", ".join(f"{c} x{n}" for c, n in run.refused.items()))
            for r in run.results:
                seed_at = "  ".join(f"{x} %: {r.alloc_pct[x]}" for x in self.points if x in r.alloc_pct)
                out.append(f"  seed {r.seed}: {seed_at}  ({r.placed} of {r.pods} placed, {r.seconds:.2f} s)")
        return out

    def svg(self) -> str:
        lines = [Line(run.packer, run.alloc_pct) for run in self.runs]
        return allocation_svg(lines, title=f"{self.trace}: allocation against arrived demand", x_min=0)


def simulate_openb(
    engine: Engine,
    nodes: Sequence[_nodes.Node],
    pods: Sequence[TracePod],
    *,
    trace: str,
    seeds: Sequence[int],
    inflate: float,
    packers: Sequence[str],
    region: str,
    grouping: str = "model",
) -> Simulation:
    """The openb protocol for each seed and packer, each placement through a ``LayerPlacer``
    (the fleet's pools by ``grouping``, see ``layer.fleet_pools``)."""
    known = set(engine.tables.models)
    for node in nodes:
        if node.model is not None and node.model.lower() not in known:
            raise SpecError(f"GPU model {node.model!r} of node {node.name!r} is not in the policy's models table", field="model")
    for pod in pods:
        unknown = sorted(m for m in pod.request.models or () if m.lower() not in known)
        if unknown:
            raise SpecError(f"GPU model {unknown[0]!r} is not in the policy's models table", source=pod.source, field="gpu_spec")
        if pod.request.models and grouping != "model":
            raise SpecError("the pod names GPU models: replay it with a pool per model (--pools model)", source=pod.source, field="gpu_spec")
    confirmed = engine.confirm()
    expected = expected_workload(pods)
    runs = []
    pool_names: tuple[str, ...] = ()
    for packer in packers:
        placers: list[LayerPlacer] = []

        def build(ordered: Sequence[_nodes.Node], seed: int, packer: str = packer, placers: list[LayerPlacer] = placers) -> LayerPlacer:
            placer = LayerPlacer(
                engine, confirmed, fleet_pools(ordered, region=region, grouping=grouping), packer=packer, expected=expected, seed=seed,
                order=[n.name for n in ordered],
            )  # fmt: skip
            placers.append(placer)
            return placer

        results = tuple(replay(pods, nodes, build, seed=s, inflate=inflate, packer=packer, expected=expected) for s in seeds)
        runs.append(PackerRun(packer, results, sum(p.judged_new for p in placers), _refused(placers)))
        pool_names = tuple(p.name for p in placers[0].pools)
    _confirm_same(engine, confirmed)
    return Simulation(trace, confirmed[0], inflate, tuple(seeds), tuple(runs), pools=pool_names)


def simulate_events(engine: Engine, trace: GenericTrace, *, packers: Sequence[str], name: str) -> Simulation:
    """A generic trace in time order: each workload placed when it arrives (or failed: nothing
    waits), given back when its duration ends (before what arrives at that instant). The trace is
    read as it is replayed (once per packer; once more for ``fgd``'s expected workload), never
    held: what a replay holds is the work running, the curve (a number per whole percent of
    demand) and the outcomes (``Outcomes``: written aside past the first ones)."""
    confirmed = engine.confirm()
    runs = []
    for packer in packers:
        expected = ExpectedWorkload.from_requests(w.request for w in in_order(trace)) if packer == "fgd" else None
        placer = LayerPlacer(engine, confirmed, trace.pools, packer=packer, expected=expected)
        outcomes = Outcomes()
        result = _events(placer, trace, packer, outcomes)
        runs.append(PackerRun(packer, (result,), placer.judged_new, _refused([placer]), outcomes))
    _confirm_same(engine, confirmed)
    return Simulation(name, confirmed[0], None, (), tuple(runs), points=(), pools=tuple(sorted(p.name for p in trace.pools)))


def _events(placer: LayerPlacer, trace: GenericTrace, packer: str, outcomes: Outcomes) -> ReplayResult:
    """The replay of ``trace`` in time order; ``outcomes`` gets each workload's outcome."""
    total = max(1, sum(n.devices for n in placer.capacity.nodes))
    # Work running, by when it ends: the ends in a heap of floats (a float compares in a few
    # instructions, a tuple in hundreds), and per end what ends then, in arrival order.
    ends: list[float] = []
    ending: dict[float, list[tuple[Placed, int]]] = {}
    curve = Curve(total)
    curve.add(0, 0)
    failed = {k: 0 for k in POD_KINDS}
    arrived = allocated = placed = pods = 0
    units = {p.name: _unit(p) for p in placer.pools}
    start = time.perf_counter()
    for w in in_order(trace):
        pods += 1
        while ends and ends[0] <= w.arrival:
            end = heappop(ends)
            now_ending = ending[end]
            gone, milli = now_ending.pop(0) if len(now_ending) > 1 else ending.pop(end)[0]
            placer.release(gone)
            allocated -= milli
        shape = w.shape
        arrived += shape.device_milli
        got = placer.decide(shape.workload, name=w.name, at=_Instant(trace, w.arrival))
        if got is None:
            failed[shape.kind] += 1
            code, message = placer.why_failed()
            outcomes.append(WorkloadOutcome(w.name, w.arrival, code=code, message=message))
        else:
            outcomes.append(WorkloadOutcome(w.name, w.arrival, pool=got.pool))
            placed += 1
            milli = _milli(units[got.pool], got)
            allocated += milli
            if w.duration is not None:
                end = w.arrival + w.duration
                same = ending.get(end)
                if same is None:
                    ending[end] = [(got, milli)]
                else:
                    same.append((got, milli))
                heappush(ends, end)
        curve.add(arrived, allocated)
    seconds = time.perf_counter() - start
    curve.upto = max(100, round(arrived / total / 10))
    frag = FragmentationPacker(_blocks(placer)).fragmentation(placer.capacity) if total > 1 else None
    return ReplayResult(
        seed=0, packer=packer, pods=pods, placed=placed, alloc_pct=curve, failed=failed,
        capacity_milli=total * _nodes.MILLI, arrived_milli=arrived, allocated_milli=allocated,
        fragmentation_milli=float(frag.sum()) if frag is not None else 0.0, seconds=seconds, peak_milli=curve.peak_milli,
    )  # fmt: skip


class _Instant:
    """The instant a workload arriving at ``arrival`` is decided at (``GenericTrace.at``), worked out
    only when asked (for a workload whose wait the policy limits)."""

    def __init__(self, trace: GenericTrace, arrival: float) -> None:
        self.trace = trace
        self.arrival = arrival

    def __call__(self) -> datetime:
        return self.trace.at(self.arrival)


def _blocks(placer: LayerPlacer) -> ExpectedWorkload:
    return ExpectedWorkload.blocks(int(max((n.devices for n in placer.capacity.nodes), default=1)) or 1)


def _refused(placers: Sequence[LayerPlacer]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in placers:
        for code, n in p.refused.items():
            out[code] = out.get(code, 0) + n
    return dict(sorted(out.items()))


def _unit(pool: Pool) -> int:
    """What a device of ``pool`` counts in its shares (0: a ``cpu`` pool, whose devices are cores)."""
    return 0 if pool.accelerator == "cpu" else pool.shares_per_device or _nodes.MILLI


def _milli(unit: int, placed: Placed) -> int:
    """The device milli ``placed`` holds on its pool, whose device counts ``unit`` shares (``_unit``)."""
    if not unit:
        return 0
    slice_milli = int(placed.grant.share * _nodes.MILLI) if placed.grant.profile is not None else _nodes.MILLI
    return sum(a.share.shares * _nodes.MILLI // unit if a.share is not None else slice_milli * len(a.holdings) for a in placed.allocations)


def _confirm_same(engine: Engine, confirmed: tuple[str, str]) -> None:
    """The policy a replay decided under must still be the one served when it ends."""
    from examlops_policy._core.engine import same_policy
    from examlops_policy.errors import PolicyError

    now = engine.confirm()
    if not same_policy(now[0], confirmed[0]):
        raise PolicyError(f"the policy changed during the replay ({confirmed[0]} -> {now[0]}); run it again")

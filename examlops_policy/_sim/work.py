"""A generic trace replayed by its work: each workload waits until a pool has room (first come, first
served, a later one taking room an earlier one cannot use), runs for its duration or, when it says
its work instead (``work_class``, ``work``), for work / the throughput of the grant it was given
(throughput.yaml), and is judged under one objective for all (``cost``, ``work-cost``, ...).

What it reports per objective: the jobs that finished, the total cost (price per device-hour x
devices x hours run), the work done (in each class's unit, and in V100-hours: each job's work over
a V100's throughput of its class, the unit in which classes of different units add up), the cost
per unit of each, the mean and 95th-percentile completion time (finish - arrival) and the
utilisation of each device model (device-seconds held / devices x the replay's span).

Pure apart from the engine's verdicts (the real OPA, asked once per workload signature): the same
trace and objective give the same report.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from examlops_policy._core.selection import select
from examlops_policy._sim.generic import GenericTrace, TraceWorkload, in_order
from examlops_policy._sim.layer import LayerPlacer, Placed
from examlops_policy.errors import SpecError
from examlops_policy.model import OBJECTIVES, Grant, JSONObject, Pool

# The model the work of different classes is counted in, where its throughput is known.
REFERENCE_MODEL: Final = "v100"
_ONE: Final = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)


@dataclass(frozen=True)
class WorkRun:
    """One objective's replay of a trace."""

    objective: str
    jobs: int
    finished: int
    refused: int  # the policy refused them whatever the capacity
    unfinished: int  # still waiting or running when the trace ended, or with no run time known
    cost: float
    work: float
    reference_hours: float  # the finished work in V100-hours (classes a V100 row measures)
    completion_s: tuple[float, ...]
    utilisation: dict[str, float] = field(default_factory=dict)  # device model -> share of its device-seconds held
    span_s: float = 0.0

    @property
    def mean_completion_s(self) -> float:
        return sum(self.completion_s) / len(self.completion_s) if self.completion_s else 0.0

    @property
    def p95_completion_s(self) -> float:
        if not self.completion_s:
            return 0.0
        ordered = sorted(self.completion_s)
        return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]

    @property
    def cost_per_work(self) -> float:
        return self.cost / self.work if self.work else 0.0

    @property
    def cost_per_reference_hour(self) -> float:
        return self.cost / self.reference_hours if self.reference_hours else 0.0

    def to_json(self) -> JSONObject:
        return {
            "objective": self.objective, "jobs": self.jobs, "finished": self.finished, "refused": self.refused,
            "unfinished": self.unfinished, "total_cost": round(self.cost, 4), "work": round(self.work, 3),
            "cost_per_unit_of_work": self.cost_per_work, "v100_hours_of_work": round(self.reference_hours, 4),
            "cost_per_v100_hour_of_work": round(self.cost_per_reference_hour, 6),
            "mean_completion_s": round(self.mean_completion_s, 3), "p95_completion_s": round(self.p95_completion_s, 3),
            "utilisation": {k: round(v, 6) for k, v in self.utilisation.items()}, "span_s": round(self.span_s, 3),
        }  # fmt: skip


@dataclass(frozen=True)
class WorkSimulation:
    """Every objective's replay of one trace."""

    name: str
    policy_revision: str
    runs: tuple[WorkRun, ...]

    def to_json(self) -> JSONObject:
        return {"trace": self.name, "policy_revision": self.policy_revision, "runs": [r.to_json() for r in self.runs]}

    def svg(self) -> str:
        """No plot: a replay by work reports a table (``--plot`` draws a replay's allocation)."""
        raise SpecError("--plot draws a replay's allocation; a replay by work (--optimize) reports a table", source="--plot")

    def lines(self) -> list[str]:
        models = sorted({m for r in self.runs for m in r.utilisation})
        head = f"{'objective':<12}{'finished':>9}{'total $':>12}{'$/unit':>12}{'$/V100-h':>10}{'mean done':>11}{'p95 done':>11}"
        head += "".join(f"{'util ' + m:>11}" for m in models) + f"{'span':>10}"
        out = [f"Replayed {self.name} by work (policy {self.policy_revision[:19]}...; utilisation over each replay's span)", head]
        for r in self.runs:
            row = f"{r.objective:<12}{r.finished:>5}/{r.jobs:<3}{r.cost:>12.2f}{r.cost_per_work:>12.3g}{r.cost_per_reference_hour:>10.3f}"
            row += f"{r.mean_completion_s / 3600:>10.2f}h{r.p95_completion_s / 3600:>10.2f}h"
            row += "".join(f"{100 * r.utilisation.get(m, 0.0):>10.1f}%" for m in models) + f"{r.span_s / 3600:>9.0f}h"
            out.append(row)
        return out


def simulate_work(placer_for: Callable[[], LayerPlacer], trace: GenericTrace, objectives: Sequence[str], *, name: str, revision: str) -> WorkSimulation:
    """Replay ``trace`` once per objective (each over a fresh placer: ``placer_for()``)."""
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad or not objectives:
        raise SpecError(f"unknown objective {bad[0] if bad else ''!r}; known: {', '.join(OBJECTIVES)}", field="optimize")
    return WorkSimulation(name, revision, tuple(replay_work(placer_for(), trace, o) for o in objectives))


def run_s(placer: LayerPlacer, w: TraceWorkload, placed: Placed) -> float | None:
    """How long ``w`` runs where it was placed: its duration, else its work over its grant's
    throughput (None: neither is known)."""
    if w.duration is not None:
        return w.duration
    pool = _pool(placer, placed.pool)
    return placer.engine.tables.run_s(w.shape.workload.work_class, w.shape.workload.work, pool.model, placed.grant)


def _pool(placer: LayerPlacer, name: str) -> Pool:
    return next(p for p in placer.pools if p.name == name)


def reference_hours(placer: LayerPlacer, w: TraceWorkload) -> float:
    """The work of ``w`` in V100-hours (0 where it says none, or no V100 row measures its class)."""
    work = w.shape.workload
    if work.work_class is None or work.work is None:
        return 0.0
    rate = placer.engine.tables.work_rate(work.work_class, REFERENCE_MODEL, _ONE)
    return 0.0 if rate is None else work.work / rate / 3600


def replay_work(placer: LayerPlacer, trace: GenericTrace, objective: str) -> WorkRun:
    """One replay: arrivals in time order; at every arrival and departure the waiting workloads, in
    arrival order, are placed where selection puts them under ``objective`` (those with no room
    wait; those the policy refuses outright are counted as refused)."""
    arrivals = list(in_order(trace))  # a replay by work holds its trace (it is sized for a study, not a million rows)
    waiting: list[tuple[int, TraceWorkload]] = []
    leaving: list[tuple[float, int, Placed]] = []
    devices: dict[str, float] = {}  # device model -> devices of it in the fleet
    for p in placer.pools:
        if p.accelerator != "cpu":
            devices[p.model or p.name] = devices.get(p.model or p.name, 0.0) + p.count
    held: dict[str, float] = {}
    cost = work = ref_hours = 0.0
    completion: list[float] = []
    refused = stuck = 0
    now = 0.0
    at = 0
    first = arrivals[0].arrival if arrivals else 0.0

    def place_waiting(t: float) -> None:
        nonlocal cost, work, ref_hours, refused, stuck
        still: list[tuple[int, TraceWorkload]] = []
        for at_k, (k, w) in enumerate(waiting):
            if w.shape.workload.accelerator != "cpu" and not any(c.whole or any(c.slices.values()) for c in placer.summaries):
                still.extend(waiting[at_k:])  # no device free anywhere: the rest wait too
                break
            judged_w = dataclasses.replace(w.shape.workload, optimize=objective)
            _, judged = placer.judged(judged_w)
            if judged.workload.rejection is not None:
                refused += 1
                continue
            moment = trace.at(t)  # a deadline judged at the replay's instant; max_wait from it
            if select(judged, placer.summaries, placer.starts(judged, moment)).chosen is None:
                still.append((k, w))
                continue
            placed = placer.decide(judged_w, at=moment)
            if placed is None:  # pragma: no cover - select said it fits
                still.append((k, w))
                continue
            runs = run_s(placer, w, placed)
            if runs is None:
                stuck += 1  # no duration and no throughput known: it would hold its grant for ever
                placer.release(placed)
                continue
            pool = _pool(placer, placed.pool)
            devices_held = placed.grant.devices
            cost += (pool.cost_per_hour if pool.cost_per_hour is not None else placer.engine.tables.default_cost(pool.accelerator)) * devices_held * runs / 3600
            if pool.accelerator != "cpu":
                model = pool.model or pool.name
                held[model] = held.get(model, 0.0) + devices_held * runs
            work += w.shape.workload.work or 0.0
            ref_hours += reference_hours(placer, w)
            completion.append(t + runs - w.arrival)
            heapq.heappush(leaving, (t + runs, k, placed))
        waiting[:] = still

    while at < len(arrivals) or leaving or waiting:
        next_arrival = arrivals[at].arrival if at < len(arrivals) else math.inf
        next_leave = leaving[0][0] if leaving else math.inf
        if next_arrival == math.inf and next_leave == math.inf:
            break  # what waits can never be placed
        now = min(next_arrival, next_leave)
        while leaving and leaving[0][0] <= now:
            _, _, gone = heapq.heappop(leaving)
            placer.release(gone)
        while at < len(arrivals) and arrivals[at].arrival <= now:
            waiting.append((at, arrivals[at]))
            at += 1
        place_waiting(now)
    span = max(now - first, 1e-9)
    utilisation = {m: held.get(m, 0.0) / (n * span) for m, n in sorted(devices.items())}
    unfinished = stuck + len(waiting)
    return WorkRun(
        objective, len(arrivals), len(completion), refused, unfinished, cost, work, ref_hours, tuple(completion), utilisation, span,
    )  # fmt: skip

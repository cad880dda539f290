"""Why a placement went where it did, as people are shown it: the admissible pools of the winner's
tier ranked as the decision core ranks them under the workload's objective (``selection``'s order,
the balanced score its own ``balanced_scores``). Pure: what it reads is the decision's verdicts.
"""

from __future__ import annotations

import math
from datetime import datetime

from examlops_policy.model import WORK_OBJECTIVES, Decision, PoolVerdict
from examlops_policy.views import NOW_WITHIN_S, Explanation, JobFigures, Standing
from examlops_policy._core.selection import balanced_scores


def explain(decision: Decision) -> Explanation:
    """The ranking behind ``decision``: the eligible pools of the winner's tier under its objective.
    (Rejections have no winner: an empty ranking.)"""
    w = decision.workload
    chosen = getattr(decision, "pool", None)
    tier = next((v.tier for v in decision.verdicts if v.pool == chosen), None)
    pool_rows = [v for v in decision.verdicts if v.eligible and v.tier == tier] if chosen else []
    if w.optimize == "balanced":
        scores = balanced_scores([(v.grant_cost_per_hour, v.grant_carbon_per_hour) for v in pool_rows], w.carbon_weight)
        ranked = sorted(zip(pool_rows, scores), key=lambda r: (r[1], r[0].grant_cost_per_hour, r[0].pool))
        standings = [Standing(v.pool, v.grant_cost_per_hour, v.grant_carbon_per_hour, s, v.estimate) for v, s in ranked]
    elif w.optimize == "earliest":
        now = decision.decided_at

        def soonest(v: PoolVerdict) -> tuple[object, ...]:
            e = v.estimate
            if e is None or e.at is None or now is None:
                return (1, 0.0, v.grant_cost_per_hour, v.pool)
            at, moment = math.floor(e.at.timestamp()), math.floor(now.timestamp())
            return (0, moment if at <= moment + NOW_WITHIN_S else at, v.grant_cost_per_hour, v.pool)

        standings = [Standing(v.pool, v.grant_cost_per_hour, v.grant_carbon_per_hour, None, v.estimate) for v in sorted(pool_rows, key=soonest)]
    elif w.optimize in WORK_OBJECTIVES:
        standings = [
            Standing(v.pool, v.grant_cost_per_hour, v.grant_carbon_per_hour, None, v.estimate, JobFigures.of(v, w.work))
            for v in sorted(pool_rows, key=lambda v: _by_work(v, w.optimize, w.work, decision.decided_at))
        ]
    else:
        carbon = w.optimize == "carbon"

        def order(v: PoolVerdict) -> tuple[float, ...]:
            return (v.grant_carbon_per_hour, v.grant_cost_per_hour) if carbon else (v.grant_cost_per_hour,)

        standings = [
            Standing(v.pool, v.grant_cost_per_hour, v.grant_carbon_per_hour, None, v.estimate) for v in sorted(pool_rows, key=lambda v: (*order(v), v.pool))
        ]
    # The winner first even where room, not rank, decided (a cheaper pool full at commit time).
    standings.sort(key=lambda s: s.pool != chosen)
    return Explanation(tier, w.optimize, w.carbon_weight, tuple(standings), decision.decided_at)


def _by_work(v: PoolVerdict, objective: str, work: float | None, now: datetime | None) -> tuple[object, ...]:
    """Where a pool ranks by work (as selection ranks it): those whose throughput is known first,
    by the job's cost, carbon or completion; the others by the hour (or by start)."""
    job = JobFigures.of(v, work)
    e = v.estimate
    if e is None or e.at is None or now is None:
        wait: tuple[int, float] = (1, 0.0)
    else:
        at, moment = math.floor(e.at.timestamp()), math.floor(now.timestamp())
        wait = (0, float(max(0, at - moment) if at > moment + NOW_WITHIN_S else 0))
    if objective == "work-time":
        rank: tuple[object, ...] = (1, *wait) if job is None else (0, wait[0], wait[1] + job.run_s)
    elif objective == "work-carbon":
        rank = (1, v.grant_carbon_per_hour) if job is None else (0, job.carbon_g)
    else:
        rank = (1, v.grant_cost_per_hour) if job is None else (0, job.cost)
    return (*rank, v.grant_cost_per_hour, v.pool)

"""The wait policy's answer (``checks/wait``: ``limits(workload)``), read, and the comparison of a
pool's start estimate with it, made exactly as the policy's ``exceeded`` makes it.

Part of the decision core (selection compares each candidate pool's estimate with the limits, as
it compares its price with the budget's and its room with the grant). The policy owns the limits
and every reason's text; the caller compares figures: ``exceeded(limits, estimate, now)`` gives the policy's own
reasons for a pool whose estimate is past a limit, or that has none under a limit, or every pool
past a deadline. ``tests/test_waiting.py`` holds it equal to the policy's ``exceeded`` through
the real OPA on a table of cases and generated ones.

``estimates.duration_text`` words a wait for people the way the policy words ``max_wait`` in its
messages ("2 h 05 m"); ``estimates.start_text`` shows an estimate ("slurm: expected start 14:20 UTC
(in 2 h 05 m)").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import JSONObject, JSONValue, Reason, StartEstimate

# Estimates are whole seconds: a start within this many seconds of a limit is within it (the
# policy's `slack`).
SLACK_S: Final = 1


@dataclass(frozen=True)
class WaitReasons:
    """What a pool gets: past max_wait, past the deadline, any pool once the deadline has passed,
    a pool with no estimate (each None where the workload has no such limit)."""

    max_wait: Reason | None = None
    deadline: Reason | None = None
    deadline_passed: Reason | None = None
    unknown: Reason | None = None


@dataclass(frozen=True)
class WaitLimits:
    """The wait policy's limits for one workload: start within ``start_within_s`` of the decision,
    by ``start_by_s`` (epoch seconds); ``invalid``: the reason every pool gets when the limits are
    malformed."""

    start_within_s: float | None = None
    start_by_s: float | None = None
    invalid: Reason | None = None
    reasons: WaitReasons = WaitReasons()

    @property
    def any(self) -> bool:
        """True when the workload has a limit (or a malformed one)."""
        return self.invalid is not None or self.start_within_s is not None or self.start_by_s is not None

    def as_json(self) -> JSONObject:
        """The limits as the policy answers them (and as a verdict set stores them)."""
        r = self.reasons
        return {
            "start_within_s": _whole(self.start_within_s),
            "start_by_s": _whole(self.start_by_s),
            "invalid": None if self.invalid is None else reasons_json([self.invalid])[0],
            "reasons": {} if self.invalid is not None else {
                name: None if reason is None else reasons_json([reason])[0]
                for name, reason in (("max_wait", r.max_wait), ("deadline", r.deadline), ("deadline_passed", r.deadline_passed), ("unknown", r.unknown))
            },
        }  # fmt: skip

    @classmethod
    def from_json(cls, raw: object, where: str = "wait limits") -> WaitLimits:
        """The policy's ``limits`` answer, checked: PolicyError naming what is malformed."""
        top = _obj(raw, where, "")
        within = _number_or_null(top.get("start_within_s"), where, "start_within_s")
        by = _number_or_null(top.get("start_by_s"), where, "start_by_s")
        invalid = _reason_or_null(top.get("invalid"), where, "invalid")
        reasons_raw = _obj(top.get("reasons"), where, "reasons")
        reasons = WaitReasons(**{name: _reason_or_null(reasons_raw.get(name), where, f"reasons.{name}") for name in WaitReasons.__dataclass_fields__})
        if invalid is None:
            if within is not None and reasons.max_wait is None:
                raise PolicyError(f"{where}: malformed answer: start_within_s without reasons.max_wait")
            if by is not None and (reasons.deadline is None or reasons.deadline_passed is None):
                raise PolicyError(f"{where}: malformed answer: start_by_s without reasons.deadline and reasons.deadline_passed")
            if (within is not None or by is not None) and reasons.unknown is None:
                raise PolicyError(f"{where}: malformed answer: a limit without reasons.unknown")
        return cls(within, by, invalid, reasons)


def exceeded(limits: WaitLimits, estimate: StartEstimate | None, now: datetime) -> tuple[Reason, ...]:
    """The policy's reasons for a pool with ``estimate`` (None: it has none) at the decision's
    time ``now``; empty when the pool starts in time (or the workload has no limit)."""
    if limits.invalid is not None:
        return (limits.invalid,)
    if limits.start_within_s is None and limits.start_by_s is None:
        return ()
    moment = epoch_s(now)
    r = limits.reasons
    if limits.start_by_s is not None and moment > limits.start_by_s + SLACK_S:
        return (cast(Reason, r.deadline_passed),)
    if estimate is None or estimate.at is None:
        return (cast(Reason, r.unknown),)
    start = max(epoch_s(estimate.at), moment)
    late: list[Reason] = []
    if limits.start_within_s is not None and start > moment + limits.start_within_s + SLACK_S:
        late.append(cast(Reason, r.max_wait))
    if limits.start_by_s is not None and start > limits.start_by_s + SLACK_S:
        late.append(cast(Reason, r.deadline))
    return tuple(late)


def _whole(value: float | None) -> JSONValue:
    return None if value is None else int(value) if value == int(value) else value


def epoch_s(moment: datetime) -> int:
    """An instant as whole epoch seconds, as the policy is given it (the decision's time and the
    estimates are compared in whole seconds: exact on both sides)."""
    return math.floor(moment.timestamp())


# -- decoding ----------------------------------------------------------------------------------


def _shown(value: object) -> str:
    try:
        return json.dumps(value)[:120]
    except (TypeError, ValueError):
        return type(value).__name__


def _obj(value: object, where: str, path: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: malformed answer at {path or '(top)'}: expected an object, got {_shown(value)}")
    return cast(Mapping[str, object], value)


def _number_or_null(value: object, where: str, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(f"{where}: malformed answer at {path}: expected a number or null, got {_shown(value)}")
    return float(value)


def _reason_or_null(value: object, where: str, path: str) -> Reason | None:
    if value is None:
        return None
    raw = _obj(value, where, path)
    code, kind, message, details = raw.get("code"), raw.get("kind"), raw.get("message"), raw.get("details")
    if not (isinstance(code, str) and isinstance(kind, str) and isinstance(message, str) and isinstance(details, dict)):
        raise PolicyError(f"{where}: malformed answer at {path}: expected a reason (code, kind, message, details), got {_shown(value)}")
    return Reason(code, kind, message, cast(JSONObject, details))


def reasons_json(reasons: Sequence[Reason]) -> list[JSONObject]:
    """Reasons as the policy writes them (to compare with its answer)."""
    return [{"code": r.code, "kind": r.kind, "message": r.message, "details": dict(r.details)} for r in reasons]




@dataclass(frozen=True)
class Starts:
    """What a decision knows of when its candidate pools would start the workload: their estimates
    (by pool name; a pool not named has none) and the decision's time ``now``, which max_wait counts
    from and the estimates are judged at."""

    now: datetime
    estimates: Mapping[str, StartEstimate]

    @property
    def now_s(self) -> int:
        return epoch_s(self.now)

    def of(self, pool: str) -> StartEstimate | None:
        return self.estimates.get(pool)

    def start_s(self, pool: str) -> int | None:
        """When ``pool`` would start (whole epoch seconds; an estimate in the past, or within the
        slack of now, means now), or None without an estimate: what ``optimize: earliest`` ranks
        by."""
        e = self.estimates.get(pool)
        if e is None or e.at is None:
            return None
        at = epoch_s(e.at)
        return self.now_s if at <= self.now_s + SLACK_S else at

    def policy_input(self, pool: str) -> JSONValue:
        """The pool's estimate as the policy reads it (``input.pools[].estimate``), or null."""
        e = self.estimates.get(pool)
        return None if e is None else e.policy_input()


__all__ = ["SLACK_S", "Starts", "WaitLimits", "WaitReasons", "epoch_s", "exceeded", "reasons_json"]

"""Quotas per project and accelerator class: the policy's figures per grant, compared with what the
projects hold.

The policy (``checks/quota``) answers, per grant, the figures of the workload's project for the
pool's accelerator class (``QuotaLimits``): its nominal quota, how far it may borrow from its
cohort, its device-hours per period, and the reasons a pool over them gets. What the projects
hold changes with every placement and release, so the comparison is the caller's, as for the
budget and the capacity: ``over`` makes exactly the comparison ``quota.exceeded`` makes in Rego
(the property test holds the two equal through the real OPA). ``QuotaUse`` is what the store says
the projects hold: the devices of their live grants per class, and the device-hours their grants
used in the last ``period_days``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from examlops_policy.model import JSONObject, JSONValue, Reason

# Devices compare with this slack (shares of a device are sevenths and such), as in Rego.
EPSILON: Final = 1e-9


@dataclass(frozen=True)
class QuotaLimits:
    """A grant's quota figures (checks/quota ``limits``): see schemas/verdicts-answer.schema.json."""

    project: str
    accelerator: str
    devices: float
    nominal: float | None = None
    ceiling: float | None = None
    cohort: str | None = None
    members: tuple[str, ...] = ()
    cohort_nominal: float | None = None
    device_hours: float | None = None
    period_days: float | None = None
    always: tuple[Reason, ...] = ()
    devices_reason: Reason | None = None
    hours_reason: Reason | None = None

    @property
    def counted(self) -> bool:
        """Whether the comparison depends on what the projects hold (a device or device-hour quota,
        and no reason that refuses the grant whatever the use)."""
        return not self.always and (self.nominal is not None or self.device_hours is not None)


@dataclass(frozen=True)
class QuotaUse:
    """What the projects hold: ``devices[project][class]`` (their live grants, shares summed) and
    ``device_hours[project][class]`` (their grants' device-hours in the period of the class's
    quota). Absent entries are 0. The policy's ``input.quota_use``."""

    devices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    device_hours: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def held(self, project: str, accelerator: str) -> float:
        return float(self.devices.get(project, {}).get(accelerator, 0.0))

    def hours(self, project: str, accelerator: str) -> float:
        return float(self.device_hours.get(project, {}).get(accelerator, 0.0))

    @property
    def empty(self) -> bool:
        return not any(self.devices.values()) and not any(self.device_hours.values())

    def as_json(self) -> JSONObject:
        """The policy's ``quota_use`` (and a record's): sorted, rounded as stored."""
        def table(t: Mapping[str, Mapping[str, float]]) -> JSONValue:
            return {p: {c: round(float(n), 9) for c, n in sorted(row.items())} for p, row in sorted(t.items()) if row}

        out: JSONObject = {}
        if any(self.devices.values()):
            out["devices"] = table(self.devices)
        if any(self.device_hours.values()):
            out["device_hours"] = table(self.device_hours)
        return out

    @classmethod
    def from_json(cls, raw: object) -> QuotaUse:
        if not isinstance(raw, Mapping):
            return cls()

        def table(t: object) -> dict[str, dict[str, float]]:
            if not isinstance(t, Mapping):
                return {}
            return {str(p): {str(c): float(n) for c, n in row.items()} for p, row in t.items() if isinstance(row, Mapping)}

        return cls(table(raw.get("devices")), table(raw.get("device_hours")))


NO_USE: Final = QuotaUse()


def over(lim: QuotaLimits | None, use: QuotaUse) -> tuple[Reason, ...]:
    """The reasons a pool gets from its quota given what the projects hold, exactly as
    ``quota.exceeded(limits, quota.use_of(limits, quota_use))``: the reasons whatever the use if
    any, else the devices reason unless the grant fits, then the device-hours reason when the
    period's device-hours are used up."""
    if lim is None:
        return ()
    if lim.always:
        return lim.always
    out: list[Reason] = []
    if lim.nominal is not None and not _fits(lim, use) and lim.devices_reason is not None:
        out.append(lim.devices_reason)
    if lim.device_hours is not None and use.hours(lim.project, lim.accelerator) >= lim.device_hours - EPSILON and lim.hours_reason is not None:
        out.append(lim.hours_reason)
    return tuple(out)


def _fits(lim: QuotaLimits, use: QuotaUse) -> bool:
    """Within the nominal quota; or, borrowing, within the ceiling and the cohort's unused quota."""
    assert lim.nominal is not None
    need = use.held(lim.project, lim.accelerator) + lim.devices
    if need <= lim.nominal + EPSILON:
        return True
    if lim.cohort is None or lim.cohort_nominal is None:
        return False
    if lim.ceiling is not None and need > lim.ceiling + EPSILON:
        return False
    cohort_held = sum(use.held(m, lim.accelerator) for m in lim.members)
    return cohort_held + lim.devices <= lim.cohort_nominal + EPSILON


@dataclass(frozen=True)
class Needs:
    """What a judged fleet's quotas compare with: the (project, class) pairs whose live devices
    count, and per (project, class) the period whose device-hours count (the longest asked)."""

    devices: frozenset[tuple[str, str]] = frozenset()
    hours: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.devices and not self.hours


def needs_of(limits: Iterable[QuotaLimits | None]) -> Needs:
    devices: set[tuple[str, str]] = set()
    hours: dict[tuple[str, str], float] = {}
    for lim in limits:
        if lim is None or not lim.counted:
            continue
        if lim.nominal is not None:
            devices.add((lim.project, lim.accelerator))
            devices.update((m, lim.accelerator) for m in lim.members)
        if lim.device_hours is not None and lim.period_days is not None:
            key = (lim.project, lim.accelerator)
            hours[key] = max(hours.get(key, 0.0), float(lim.period_days))
    return Needs(frozenset(devices), hours)


def relevant(use: QuotaUse, needs: Needs) -> QuotaUse:
    """Only the entries ``needs`` asks for (what a record keeps and its input digest covers)."""
    devices: dict[str, dict[str, float]] = {}
    for p, c in needs.devices:
        n = use.held(p, c)
        if n > 0:
            devices.setdefault(p, {})[c] = n
    hours: dict[str, dict[str, float]] = {}
    for p, c in needs.hours:
        h = use.hours(p, c)
        if h > 0:
            hours.setdefault(p, {})[c] = h
    return QuotaUse(devices, hours)

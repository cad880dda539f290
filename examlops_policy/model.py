"""The decision core's vocabulary: pools, workloads, verdicts, placements and rejections.

Plain frozen dataclasses with no I/O. Names follow the E8 specification: a ``Workload`` is placed
on a ``Pool``; ``place()`` returns a ``Placement`` or a ``Rejection``; every pool gets a
``PoolVerdict`` with stable reason codes.

``Pool`` and ``Workload`` check every field on construction, types and values, as a YAML file is
checked (``SpecError`` naming the field and what was expected), so a bare string where a list of
tags belongs never becomes a tuple of letters. Facts that need the reviewed tables (a region's
jurisdiction, a model's accelerator) are checked where the tables are at hand
(``examlops_policy.specs``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Union

from examlops_policy.errors import SpecError

# The vocabulary. The reviewed tables (accelerators.yaml, engines.yaml, vocabulary.yaml) are the
# source; tests/test_vocabulary.py holds these, the JSON Schemas, the Rego and the CLI to them.
ACCELERATORS: Final = ("nvidia", "amd", "intel-gaudi", "tpu", "cpu")
ENGINES: Final = ("vllm", "sglang", "ipex", "cpu", "generic")
POOL_TARGETS: Final = ("hpc", "cloud")
WORKLOAD_TARGETS: Final = ("hpc", "cloud", "any")
# Ordered: each class at least as strict as the one before.
RESIDENCIES: Final = ("open", "eu-only", "no-egress", "restricted")
# What selection minimises among the admissible pools of the best tier.
OBJECTIVES: Final = ("cost", "carbon", "balanced")

JSONValue = Union[None, bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject = dict[str, JSONValue]

NAME_MAX: Final = 63
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_TAG_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")
_REGION_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_SOURCE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$")
MAX_TAGS: Final = 64
MAX_COUNT: Final = {"workload": 100_000, "pool": 10_000_000}


def name_problem(value: object, *, pattern: re.Pattern[str] = _NAME_RE, limit: int = NAME_MAX, what: str = "a name") -> str | None:
    """What is wrong with ``value`` as a name (or tag, or region), or None when it is fine."""
    if not isinstance(value, str):
        return f"{what} must be a string (got {type(value).__name__})"
    if not value:
        return f"{what} must not be empty"
    if len(value) > limit:
        return f"{what} is at most {limit} characters (got {len(value)})"
    if pattern.fullmatch(value):
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{what} must not hold control characters (newline, tab, escape, ...)"
    if pattern is not _NAME_RE and any(c.isupper() for c in value):
        return f"{what} must be lower case (got {value!r})"
    if not value[0].isalnum() or not value[0].isascii():
        return f"{what} must start with a letter or digit (got {value!r})"
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "._-"))})
    shown = ", ".join(repr(c) for c in bad[:5])
    return f"{what} may hold only letters, digits, '.', '_' and '-' (got {shown} in {value!r})"


# Said as letters or with a vowel sound: "an nvidia device", "an amd device", "an intel-gaudi device".
_AN: Final = frozenset({"nvidia", "amd", "intel-gaudi"})


def article(word: str) -> str:
    """``word`` with its indefinite article, as it is said: ``an nvidia``, ``a tpu``."""
    return f"an {word}" if word.lower() in _AN or word[:1].lower() in "aeiou" else f"a {word}"


def _bad(field_: str, message: str, owner: str) -> SpecError:
    return SpecError(message, source=owner, field=field_)


def _check_number(owner: str, name: str, value: object, *, low: float, high: float, low_open: bool = False, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        kind = "a whole number" if integer else "a number"
        raise _bad(name, f"must be {kind} (got {value!r})", owner)
    if not math.isfinite(value):
        raise _bad(name, "must be a finite number (not NaN or infinity)", owner)
    if value < low or (low_open and value == low) or value > high:
        lower = f"greater than {low:g}" if low_open else f"at least {low:g}"
        raise _bad(name, f"must be {lower} and at most {high:g} (got {value:g})", owner)


def _check_choice(owner: str, name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _bad(name, f"expected one of {', '.join(choices)} (got {value!r})", owner)


def _check_bool(owner: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _bad(name, f"must be true or false (got {value!r})", owner)


def _tags(owner: str, name: str, value: object) -> tuple[str, ...]:
    """A sequence of capability tags, never a bare string (which would become its letters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise _bad(name, f"must be a list of tags such as ['fp8'] (got {value!r})", owner)
    if len(value) > MAX_TAGS:
        raise _bad(name, f"at most {MAX_TAGS} tags (got {len(value)})", owner)
    for tag in value:
        problem = name_problem(tag, pattern=_TAG_RE, limit=32, what="a capability tag")
        if problem:
            raise _bad(name, problem, owner)
    return tuple(sorted(set(value)))


def _optional_name(owner: str, name: str, value: object, *, pattern: re.Pattern[str] = _NAME_RE, what: str = "a name") -> None:
    if value is not None:
        problem = name_problem(value, pattern=pattern, what=what)
        if problem:
            raise _bad(name, problem, owner)


@dataclass(frozen=True)
class Pool:
    """A set of identical devices, on an HPC system or in a cloud region.

    ``count`` counts devices, or slices for a pool of fixed slices (``fixed_profile``: a
    scheduler that exposes e.g. MIG ``1g.10gb`` instances as their own resource).
    """

    name: str
    target: str
    accelerator: str
    count: int
    region: str
    cost_per_hour: float | None = None
    carbon_factor: float | None = None
    supports_fractions: bool = False
    capabilities: tuple[str, ...] = ()
    model: str | None = None
    power_w: float | None = None
    pue: float | None = None
    partition: str | None = None
    gres_type: str | None = None
    fixed_profile: str | None = None
    spot: bool = False
    price_source: str | None = None

    def __post_init__(self) -> None:
        owner = f"pool {self.name!r}" if isinstance(self.name, str) else "pool"
        problem = name_problem(self.name, what="a pool name")
        if problem:
            raise _bad("name", problem, owner)
        _check_choice(owner, "target", self.target, POOL_TARGETS)
        _check_choice(owner, "accelerator", self.accelerator, ACCELERATORS)
        _check_number(owner, "count", self.count, low=1, high=MAX_COUNT["pool"], integer=True)
        # "" while a discovery does not know it yet; registering such a pool is refused.
        problem = None if self.region == "" else name_problem(self.region, pattern=_REGION_RE, what="a region")
        if problem:
            raise _bad("region", problem, owner)
        if self.cost_per_hour is not None:
            _check_number(owner, "cost_per_hour", self.cost_per_hour, low=0, high=1_000_000)
        if self.carbon_factor is not None:
            _check_number(owner, "carbon_factor", self.carbon_factor, low=0, high=10_000_000)
        _check_bool(owner, "supports_fractions", self.supports_fractions)
        object.__setattr__(self, "capabilities", _tags(owner, "capabilities", self.capabilities))
        _optional_name(owner, "model", self.model, what="a model")
        if self.power_w is not None:
            _check_number(owner, "power_w", self.power_w, low=0, high=100_000, low_open=True)
        if self.pue is not None:
            _check_number(owner, "pue", self.pue, low=1, high=10)
        _optional_name(owner, "partition", self.partition, what="a partition")
        _optional_name(owner, "gres_type", self.gres_type, what="a GRES type")
        _optional_name(owner, "fixed_profile", self.fixed_profile, what="a slice profile")
        _check_bool(owner, "spot", self.spot)
        if self.price_source is not None and not (isinstance(self.price_source, str) and _SOURCE_RE.fullmatch(self.price_source)):
            raise _bad("price_source", f"must say where the price came from, e.g. skypilot:v7/aws/vms.csv@001367d22a00 (got {self.price_source!r})", owner)
        if self.model is not None:
            object.__setattr__(self, "model", self.model.lower())


# Fields that joined Pool later: left out of a pool's stored spec while they have their default,
# so a pool registered before them reads back unchanged.
_LATER_DEFAULTS: Final[dict[str, object]] = {"spot": False}


def pool_spec(pool: Pool) -> JSONObject:
    """The pool as stored and hashed: every field that is set (capabilities always, as a list)."""
    spec: JSONObject = {}
    for name in Pool.__dataclass_fields__:
        value = getattr(pool, name)
        if value is None or value == () or _LATER_DEFAULTS.get(name, ...) == value:
            continue
        spec[name] = list(value) if isinstance(value, tuple) else value
    spec["capabilities"] = list(pool.capabilities)
    return spec


@dataclass(frozen=True)
class Holding:
    """One device a grant holds: the whole device (``profile`` None), or one slice on it.

    ``start`` is where a MIG instance's run of memory slices starts, or an AMD partition's index;
    ``units`` the slice's compute units (sevenths on MIG, eighths on AMD).
    """

    device: int
    profile: str | None = None
    start: int | None = None
    units: int | None = None


@dataclass(frozen=True)
class Capacity:
    """What a pool can still place: devices with nothing on them (``whole``) and, per slice
    profile, how many could still be placed."""

    whole: int
    slices: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolState:
    """A pool with what is still free on it: ``free`` devices (shares summed, for people),
    ``capacity`` (what can really be placed, device by device) and the devices its scheduler
    reports busy with work this layer did not place (``held_outside``)."""

    pool: Pool
    free: float
    capacity: Capacity = field(default_factory=lambda: Capacity(0))
    held_outside: float = 0.0

    @classmethod
    def empty(cls, pool: Pool) -> PoolState:
        """A pool with nothing held (what-if decisions); slices are summarised by the caller."""
        return cls(pool, float(pool.count), Capacity(pool.count))


@dataclass(frozen=True)
class Workload:
    """What a workload needs, said neutrally (accelerator family, tags, target, engine, share).

    ``data_region`` says where the workload's data lives (a region of the regions table), for the
    stricter residency classes; ``allow_cpu_fallback`` lets a CPU stand in for the accelerator.
    ``optimize`` is what selection minimises among the best tier's admissible pools: the grant's
    cost, its carbon (then cost), or ``balanced`` (both normalised, carbon weighted by
    ``carbon_weight``). ``max_cost_per_hour`` / ``max_carbon_per_hour`` cap what the grant may
    cost and emit per hour, as do the caps of the ``project`` (budgets.yaml).
    """

    name: str
    accelerator: str
    capabilities: tuple[str, ...] = ()
    target: str | None = None
    engine: str = "generic"
    fraction: float = 1.0
    count: int = 1
    residency: str = "open"
    allow_burst: bool = False
    data_region: str | None = None
    allow_cpu_fallback: bool = False
    optimize: str = "cost"
    carbon_weight: float = 0.5
    max_cost_per_hour: float | None = None
    max_carbon_per_hour: float | None = None
    project: str | None = None

    def __post_init__(self) -> None:
        owner = f"workload {self.name!r}" if isinstance(self.name, str) else "workload"
        problem = name_problem(self.name, what="a workload name")
        if problem:
            raise _bad("name", problem, owner)
        _check_choice(owner, "accelerator", self.accelerator, ACCELERATORS)
        object.__setattr__(self, "capabilities", _tags(owner, "capabilities", self.capabilities))
        if self.target is not None:
            _check_choice(owner, "target", self.target, WORKLOAD_TARGETS)
        _check_choice(owner, "engine", self.engine, ENGINES)
        _check_number(owner, "fraction", self.fraction, low=0, high=1, low_open=True)
        _check_number(owner, "count", self.count, low=1, high=MAX_COUNT["workload"], integer=True)
        if self.fraction < 1 and self.count != 1:
            raise _bad("count", f"must be 1 when a fraction below 1 is requested (got {self.count})", owner)
        _check_choice(owner, "residency", self.residency, RESIDENCIES)
        _check_bool(owner, "allow_burst", self.allow_burst)
        _optional_name(owner, "data_region", self.data_region, pattern=_REGION_RE, what="a region")
        _check_bool(owner, "allow_cpu_fallback", self.allow_cpu_fallback)
        _check_choice(owner, "optimize", self.optimize, OBJECTIVES)
        _check_number(owner, "carbon_weight", self.carbon_weight, low=0, high=1)
        if self.max_cost_per_hour is not None:
            _check_number(owner, "max_cost_per_hour", self.max_cost_per_hour, low=0, high=1_000_000)
        if self.max_carbon_per_hour is not None:
            _check_number(owner, "max_carbon_per_hour", self.max_carbon_per_hour, low=0, high=1_000_000_000)
        _optional_name(owner, "project", self.project, what="a project")
        object.__setattr__(self, "fraction", float(self.fraction))
        object.__setattr__(self, "carbon_weight", float(self.carbon_weight))

    @property
    def effective_target(self) -> str:
        """``any`` when no target was given (HPC first, cloud only by bursting)."""
        return self.target or "any"


@dataclass(frozen=True)
class CheckInfo:
    """A check as the policy's metadata describes it: its name, a title for people, whether it
    judges shapes or pools, and its reason codes as (code, kind, meaning)."""

    name: str
    title: str
    stage: str
    codes: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class Reason:
    """Why a pool is not eligible (or why a workload is rejected), with a stable code."""

    code: str
    kind: str
    message: str
    details: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Grant:
    """What a pool gives: ``units`` of a slice ``profile`` (None: whole devices).

    ``share`` is one unit's share of a device, ``devices`` the devices held in all (shares
    summed): what is priced and accounted. ``honored`` is False when a fraction was asked for and a
    whole device is given instead (``why`` says why).
    """

    requested: float
    honored: bool
    share: float
    units: int
    devices: float
    scheme: str | None = None
    geometry: str | None = None
    profile: str | None = None
    why: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class PoolVerdict:
    """One pool's verdict for one workload: eligible or not, and every reason."""

    pool: str
    eligible: bool
    admissible: bool
    tier: int
    fallback: bool
    burst: bool
    reasons: tuple[Reason, ...]
    grant: Grant
    cost_per_hour: float
    note: str | None = None
    grant_cost_per_hour: float = 0.0
    accelerator: str = ""
    target: str = ""
    region: str = ""
    grant_carbon_per_hour: float = 0.0
    spot: bool = False  # spot (preemptible) capacity: the provider may reclaim it


@dataclass(frozen=True)
class BurstVerdict:
    """Whether cloud pools were considered, and if so whether the burst was allowed."""

    attempted: bool
    verdict: str | None = None  # "allowed" | "blocked" | "unavailable"
    pool: str | None = None
    region: str | None = None
    reason: Reason | None = None


@dataclass(frozen=True)
class Provenance:
    """What a decision is a function of, so it can be replayed.

    ``input_digest`` covers the workload, the fleet revision and the capacity the decision saw;
    ``policy_revision`` is the bundle revision OPA reported serving; ``verdicts`` says whether the
    pool verdicts were asked for (``fresh``) or reused from earlier answers under the same revision.
    """

    input_digest: str
    policy_revision: str
    opa_version: str
    verdicts: str = "fresh"
    fleet_revision: str | None = None


@dataclass(frozen=True)
class Placement:
    """A workload placed on a pool; ``holdings`` are the devices (and slices) it holds."""

    workload: Workload
    pool: str
    accelerator: str
    target: str
    region: str
    fallback: bool
    fraction_honored: bool
    note: str | None
    grant: Grant
    cost_per_hour: float
    carbon_factor: float
    model: str | None
    grounded_carbon_per_hour: float | None
    verdicts: Sequence[PoolVerdict]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None
    holdings: tuple[Holding, ...] = ()
    checks: tuple[CheckInfo, ...] = ()

    ok: bool = field(default=True, init=False)

    @property
    def outcome(self) -> str:
        """``placed``."""
        return "placed"

    @property
    def device(self) -> str:
        """The device type placed on (the accelerator family)."""
        return self.accelerator

    @property
    def grant_cost_per_hour(self) -> float:
        """USD per hour of what the workload holds (price per device-hour x devices granted)."""
        return self.cost_per_hour * self.grant.devices


@dataclass(frozen=True)
class Rejection:
    """A workload that cannot be placed, with the reason; nothing was reserved."""

    workload: Workload
    reason: str
    code: str
    verdicts: Sequence[PoolVerdict]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None
    checks: tuple[CheckInfo, ...] = ()

    ok: bool = field(default=False, init=False)

    @property
    def burst_blocked(self) -> bool:
        """True when the rejection is a burst that data residency blocked."""
        return self.burst.verdict == "blocked"

    @property
    def outcome(self) -> str:
        """``blocked`` (a burst that data governance blocked) or ``rejected``."""
        return "blocked" if self.burst_blocked else "rejected"


Decision = Union[Placement, Rejection]

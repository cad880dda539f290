"""The decision core's vocabulary: pools, workloads, verdicts, placements and rejections.

Plain frozen dataclasses with no I/O. Names follow the E8 specification: a ``Workload`` is placed
on a ``Pool``; ``place()`` returns a ``Placement`` or a ``Rejection``; every pool gets a
``PoolVerdict`` with stable reason codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, Union

ACCELERATORS: Final = ("nvidia", "amd", "intel-gaudi", "tpu", "cpu")
ENGINES: Final = ("vllm", "sglang", "ipex", "cpu", "generic")
POOL_TARGETS: Final = ("hpc", "cloud")
WORKLOAD_TARGETS: Final = ("hpc", "cloud", "any")
RESIDENCIES: Final = ("open", "eu-only", "no-egress", "restricted")

# Reason kinds: "never" (the pool can never run this), "not_now" (capacity), "preference" (a
# better tier won), as the policy reports them.
ReasonKind = Literal["never", "not_now", "preference"]
JSONValue = Union[None, bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject = dict[str, JSONValue]


@dataclass(frozen=True)
class Pool:
    """A set of identical devices, on an HPC system or in a cloud region."""

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
    # Each counted unit of this pool is one fixed slice of this MIG / partition profile
    # (``1g.10gb``, ``cpx``): the partitions were made ahead of time, as Kubernetes device plugins
    # and typed Slurm GRES expose them, so a unit is never split further.
    fixed_profile: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", tuple(sorted(set(self.capabilities))))
        if self.model is not None:
            object.__setattr__(self, "model", self.model.lower())


@dataclass(frozen=True)
class PoolState:
    """A pool with the devices still free on it (count minus what live decisions hold)."""

    pool: Pool
    free: float


@dataclass(frozen=True)
class Workload:
    """What a workload needs, said neutrally (accelerator family, tags, target, engine, share)."""

    name: str
    accelerator: str
    capabilities: tuple[str, ...] = ()
    target: str | None = None
    engine: str = "generic"
    fraction: float = 1.0
    count: int = 1
    residency: str = "open"
    allow_burst: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", tuple(sorted(set(self.capabilities))))

    @property
    def effective_target(self) -> str:
        """``any`` when no target was given (HPC first, cloud only by bursting)."""
        return self.target or "any"


@dataclass(frozen=True)
class Reason:
    """Why a pool is not eligible (or why a workload is rejected), with a stable code."""

    code: str
    kind: str
    message: str
    details: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Grant:
    """The share of a device a pool gives: a partition that covers the fraction, or whole devices."""

    requested: float
    honored: bool
    granted: float
    devices: float
    scheme: str | None = None
    profile: str | None = None
    why: str | None = None


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
    """What a decision is a function of, so it can be replayed."""

    input_digest: str
    policy_revision: str
    opa_version: str


@dataclass(frozen=True)
class Placement:
    """A workload placed on a pool."""

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
    verdicts: tuple[PoolVerdict, ...]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None

    ok: bool = field(default=True, init=False)

    @property
    def device(self) -> str:
        """The device type placed on (the accelerator family)."""
        return self.accelerator


@dataclass(frozen=True)
class Rejection:
    """A workload that cannot be placed, with the reason; nothing was reserved."""

    workload: Workload
    reason: str
    code: str
    verdicts: tuple[PoolVerdict, ...]
    burst: BurstVerdict
    provenance: Provenance
    decision_id: str | None = None

    ok: bool = field(default=False, init=False)

    @property
    def burst_blocked(self) -> bool:
        """True when the rejection is a burst that data residency blocked."""
        return self.burst.verdict == "blocked"


Decision = Union[Placement, Rejection]

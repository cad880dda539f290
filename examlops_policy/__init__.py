"""examlops-policy: place work on heterogeneous accelerators across HPC and cloud, by policy.

    from examlops_policy import Workload, place, device_accounting

    placement = place(Workload("train", accelerator="amd", engine="vllm", target="hpc"))

``place`` with no pools places on the platform's registered pools and records the decision (as
``exa hardware place`` does); with ``pools=[...]`` it is a what-if over those pools, all free,
recording nothing. Both ask the Rego policies on a real OPA and fail closed without a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from examlops_policy._lazy import home_of, lazy_names

if TYPE_CHECKING:
    from examlops_policy.accounting import device_accounting
    from examlops_policy.errors import (
        AuditIntegrityError,
        ExaError,
        ExecutorError,
        NotFoundError,
        PolicyError,
        PolicyUnavailable,
        SpecError,
        StateBusy,
        StateCorrupt,
        StateError,
        StateFull,
        StateUnreachable,
        StateUnusable,
    )
    from examlops_policy.hardware import Hardware
    from examlops_policy.model import (
        BurstVerdict,
        Capacity,
        Decision,
        Grant,
        Holding,
        Node,
        Placement,
        Pool,
        PoolState,
        PoolVerdict,
        Provenance,
        Queued,
        Reason,
        Rejection,
        Workload,
    )
    from examlops_policy.views import (
        AdmissionReport,
        Admitted,
        BurstEvent,
        Cancelled,
        DecisionPage,
        DecisionRecord,
        DecisionSummary,
        DiscoveryResult,
        Explanation,
        FinopsReport,
        JobReport,
        ModelsCost,
        PoolChange,
        PoolDetail,
        PoolView,
        Portability,
        QueueEntry,
        QueueListing,
        QuotaRow,
        ReconcileChange,
        ReconcileReport,
        ReleaseReport,
        Replay,
        Submission,
        Submit,
    )
    from examlops_policy._core.explain import explain

__version__ = "0.1.0"

# Where each public name lives. A name is imported on first use (PEP 562), so that importing one
# module of the package (``examlops_policy.errors``, the CLI) does not import the whole library.
_HOMES: Final = {
    "examlops_policy.accounting": ("device_accounting",),
    "examlops_policy.errors": (
        "AuditIntegrityError", "ExaError", "ExecutorError", "NotFoundError", "PolicyError", "PolicyUnavailable", "SpecError",
        "StateBusy", "StateCorrupt", "StateError", "StateFull", "StateUnreachable", "StateUnusable",
    ),
    "examlops_policy.hardware": ("Hardware",),
    "examlops_policy.model": (
        "BurstVerdict", "Capacity", "Decision", "Grant", "Holding", "Node", "Placement", "Pool", "PoolState", "PoolVerdict",
        "Provenance", "Queued", "Reason", "Rejection", "Workload",
    ),
    "examlops_policy.views": (
        "AdmissionReport", "Admitted", "BurstEvent", "Cancelled", "DecisionPage", "DecisionRecord", "DecisionSummary",
        "DiscoveryResult", "Explanation", "FinopsReport", "JobReport", "ModelsCost", "PoolChange", "PoolDetail", "PoolView",
        "Portability", "QueueEntry", "QueueListing", "QuotaRow", "ReconcileChange", "ReconcileReport", "ReleaseReport", "Replay",
        "Submission", "Submit",
    ),
    "examlops_policy._core.explain": ("explain",),
}  # fmt: skip
_HOME_OF: Final = home_of(_HOMES)
__getattr__ = lazy_names(__name__, globals(), _HOME_OF)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def place(workload: Workload, pools: Sequence[Pool] | None = None, *, hardware: Hardware | None = None) -> Decision:
    """Place ``workload``: a ``Placement`` on the cheapest eligible pool, or a ``Rejection``.

    Without ``pools`` the decision is made over the registered pools and recorded (capacity
    reserved, decision and audit entries written). With ``pools`` it is a what-if over them.
    Raises ``PolicyUnavailable``/``PolicyError`` when no policy verdict can be had, ``SpecError``
    on invalid input.
    """
    from examlops_policy.hardware import Hardware

    owned = hardware is None
    hw = hardware or Hardware()
    try:
        if pools is None:
            return hw.place(workload).decision
        return hw.what_if(workload, pools)
    finally:
        if owned:
            hw.close()


__all__ = [
    "AdmissionReport",
    "Admitted",
    "AuditIntegrityError",
    "BurstEvent",
    "BurstVerdict",
    "Cancelled",
    "Capacity",
    "Decision",
    "DecisionPage",
    "DecisionRecord",
    "DecisionSummary",
    "DiscoveryResult",
    "ExaError",
    "ExecutorError",
    "Explanation",
    "FinopsReport",
    "Grant",
    "Hardware",
    "Holding",
    "JobReport",
    "ModelsCost",
    "Node",
    "NotFoundError",
    "Placement",
    "PolicyError",
    "PolicyUnavailable",
    "Pool",
    "PoolChange",
    "PoolDetail",
    "PoolState",
    "PoolVerdict",
    "PoolView",
    "Portability",
    "Provenance",
    "QueueEntry",
    "QueueListing",
    "Queued",
    "QuotaRow",
    "Reason",
    "ReconcileChange",
    "ReconcileReport",
    "Rejection",
    "ReleaseReport",
    "Replay",
    "SpecError",
    "StateBusy",
    "StateCorrupt",
    "StateError",
    "StateFull",
    "StateUnreachable",
    "StateUnusable",
    "Submission",
    "Submit",
    "Workload",
    "__version__",
    "device_accounting",
    "explain",
    "place",
]

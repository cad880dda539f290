"""What decisions are made under for one policy snapshot (``DecisionCycle.current``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine
    from examlops_policy._core.records import Reader
    from examlops_policy._core.state import Capacities
    from examlops_policy._reviewed import PolicySnapshot


@dataclass
class Under:
    """What decisions are made under for one policy snapshot: its packing rules, its engine (its
    verdicts kept per revision) and its reader of recorded decisions."""

    policy: PolicySnapshot
    capacities: Capacities
    engine: Engine | None = None
    reader: Reader | None = None

"""What every scheduler's adapter shares: the live placement a submission starts from, the region
of discovered pools, and typed readers of the options a caller gives (``text``, ``texts``: a value
of the wrong type is bad input, named, never cast). What reconcile reads of one: ``seen``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from examlops_policy.errors import SpecError

if TYPE_CHECKING:
    from examlops_policy.app.ports import Fleet, Jobs
    from examlops_policy.model import Pool
    from examlops_policy.views import DecisionRecord


def text(given: Mapping[str, object], name: str) -> str | None:
    """The option ``name`` as text (a path is its text; left out, None or empty: None).
    SpecError for any other type."""
    value = given.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value) if not isinstance(value, str) else value
    raise SpecError(f"expected text (got {type(value).__name__})", field=name)


def texts(given: Mapping[str, object], name: str) -> tuple[str, ...]:
    """The option ``name`` as a list of texts (left out or None: none). SpecError for any other type."""
    value = given.get(name)
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    raise SpecError(f"expected a list of texts (got {type(value).__name__})", field=name)


def region_of(fleet: Fleet, region: str | None) -> str:
    """A region given for discovered pools: one of the reviewed regions table (none: empty)."""
    if region is not None and not fleet.tables.region_known(region):
        raise SpecError(f"region {region!r} is not in the reviewed regions table (policies/examlops/tables/regions.yaml)", field="region")
    return region or ""


def placed(jobs: Jobs, ident: str) -> tuple[DecisionRecord, Pool]:
    """The live placement ``ident`` and its pool (SpecError when there is nothing to submit)."""
    from examlops_policy.executors.placed import live_placement

    record = jobs.decision(ident)
    pool = jobs.pool_by_name(str(getattr(record.decision, "pool", "") or ""))
    live_placement(record, pool, nothing="to submit")
    return record, pool

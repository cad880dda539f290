"""The policy as reviewed code, as the façade offers it (``Hardware`` calls these):

    policy_status    which revision the files are, and which the local OPA and EXA_OPA_URL's serve
    policy_docs      the reason-code table of docs/reason-codes.md, regenerated (or checked) from the metadata
    policy_tests     the Rego tests and the coverage gate (``opa test``)
    policy_lint      Regal over the policy folder
    policy_impact    recorded decisions and example workloads under another policy and this one

and the local OPA this layer runs: ``opa_status``, ``opa_stop``, ``opa_restart``, and the bundle
it serves (``opa_bundle``, also for an OPA this layer does not run). Each function is one call into
the module that does the work (``opa``, ``opa.revisions``, ``policy_docs``, ``policy_tools``,
``impact``), so that the command line only parses, calls the façade and renders.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy.errors import PolicyUnavailable, SpecError
from examlops_policy.tables import policy_dir

if TYPE_CHECKING:
    from examlops_policy.app.impact import Impact
    from examlops_policy.app.ports import Recorded
    from examlops_policy._policy_docs import DocsCheck
    from examlops_policy._policy_tools import LintReport, TestReport
    from examlops_policy.opa import OpaConnection, OpaStatus, StopReport
    from examlops_policy.opa.bundle import Bundle
    from examlops_policy.opa.revisions import PolicyStatus
    from examlops_policy.tables import Tables

# The example workloads and fleet of this project's source checkout (absent from a wheel).
EXAMPLES: Final = Path(__file__).resolve().parents[2] / "examples"


def policy_status(home: Path) -> PolicyStatus:
    from examlops_policy.opa.revisions import policy_status as status

    return status(home)


def policy_docs(readme: Path | None, *, write: bool) -> DocsCheck:
    """Regenerate (``write``) or only check the reason-code table of ``readme`` (default:
    docs/reason-codes.md beside the policy folder). SpecError when the page has no marked section;
    PolicyError/PolicyUnavailable when the policy's metadata cannot be read."""
    from examlops_policy._policy_docs import DocsCheck, update_readme

    path = readme or policy_dir().resolve().parent / "docs" / "reason-codes.md"
    stale = update_readme(path, write=write)
    return DocsCheck(path, stale, stale and write)


def policy_tests(threshold: float | None) -> TestReport:
    from examlops_policy._policy_tools import COVERAGE_THRESHOLD, run_tests

    return run_tests(threshold=COVERAGE_THRESHOLD if threshold is None else threshold)


def policy_lint() -> LintReport:
    from examlops_policy._policy_tools import lint

    return lint()


def policy_impact(
    recorded_from: Recorded,
    tables: Tables,
    against: str,
    *,
    last: int | None,
    since: str | None,
    recorded: bool,
    workloads: Path | None,
    fleet: Path | None,
    examples: bool,
) -> Impact:
    """The decisions that change between the policy ``against`` names (a git revision or a
    folder) and the policy files here: the recorded ones (``last`` N, default 100, or those
    made ``since``), unless not ``recorded``, and the workloads of ``workloads`` over the pools
    of ``fleet`` (default: the example workloads over ``examples/fleet.yaml`` where the
    checkout has them), unless not ``examples``.

    SpecError when there is nothing to evaluate or an input file is invalid; see
    ``impact.run_impact`` for the rest.
    """
    from examlops_policy.app import impact

    cases: list[impact.Case] = []
    skipped: list[str] = []
    if recorded:
        found, skipped = impact.recorded_cases(recorded_from, last=last, since=since)
        cases += found
    if examples:
        suite = workloads or EXAMPLES / "workloads"
        pools = fleet or EXAMPLES / "fleet.yaml"
        if workloads is not None or suite.is_dir():
            if not pools.is_file():
                raise SpecError(f"the workloads need a fleet file: {pools} is not a file", field="--fleet")
            cases += impact.suite_cases(suite, pools, tables)
    if not cases:
        raise SpecError("nothing to evaluate: no recorded decisions and no workloads (--workloads FILE_OR_DIR)")
    return impact.run_impact(against, cases, policy_root=policy_dir(), skipped=skipped)


# -- the local OPA -----------------------------------------------------------------------------------


def opa_status(home: Path) -> OpaStatus:
    from examlops_policy import opa

    return opa.status(home)


def opa_stop(home: Path, close_policy: Callable[[], None]) -> StopReport:
    """Stop ``home``'s local OPA (SIGTERM, then SIGKILL), saying what really happened, the policy
    connection closed first. SpecError when the deciding OPA is external (``EXA_OPA_URL``)."""
    from examlops_policy import opa

    _not_external("stop")
    close_policy()
    return opa.stop_server(home)


def opa_restart(home: Path, close_policy: Callable[[], None]) -> OpaConnection:
    """Stop ``home``'s local OPA and start it again on the current policy (SpecError when the
    deciding OPA is external)."""
    from examlops_policy import opa

    _not_external("restart")
    report = opa_stop(home, close_policy)
    if report.was_running and not report.stopped:
        raise PolicyUnavailable(f"the local OPA did not stop: {'; '.join(report.lines())}")
    return opa.connect(home)


def opa_bundle(out_dir: Path, *, signing_key: Path | None) -> Bundle:
    """Build the policy bundle OPA serves (``out_dir/bundle.tar.gz``, signed with
    ``signing_key`` when given), for an OPA this layer does not run. PolicyError when the
    policy does not build."""
    from examlops_policy import opa

    out_dir.mkdir(parents=True, exist_ok=True)
    return opa.build_bundle(policy_dir(), out_dir, signing_key=signing_key)


def _not_external(action: str) -> None:
    url = os.environ.get("EXA_OPA_URL")
    if url:
        raise SpecError(f"OPA at {url} is external (EXA_OPA_URL): exa neither starts nor stops it", source=f"exa opa {action}")

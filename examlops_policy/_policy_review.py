"""The policy as reviewed code, as the façade offers it (``Hardware`` calls these):

    policy_status    which revision the files are, and which the local OPA and EXA_OPA_URL's serve
    policy_docs      the reason-code table of docs/reason-codes.md, regenerated (or checked) from the metadata
    policy_tests     the Rego tests and the coverage gate (``opa test``)
    policy_lint      Regal over the policy folder
    policy_impact    recorded decisions and example workloads under another policy and this one

The bundle itself is ``Hardware.opa_bundle``. Each function is one call into the module that does
the work (``opa.revisions``, ``policy_docs``, ``policy_tools``, ``impact``), so that the command
line only parses, calls the façade and renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy.errors import SpecError
from examlops_policy.tables import policy_dir

if TYPE_CHECKING:
    from examlops_policy._impact import Impact, Recorded
    from examlops_policy._policy_docs import DocsCheck
    from examlops_policy._policy_tools import LintReport, TestReport
    from examlops_policy.opa.revisions import PolicyStatus
    from examlops_policy.tables import Tables

# The example workloads and fleet of this project's source checkout (absent from a wheel).
EXAMPLES: Final = Path(__file__).resolve().parents[1] / "examples"


def policy_status(home: Path) -> PolicyStatus:
    from examlops_policy.opa.revisions import policy_status as status

    return status(home)


def policy_docs(readme: Path | None, *, write: bool) -> DocsCheck:
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
    from examlops_policy import _impact as impact

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

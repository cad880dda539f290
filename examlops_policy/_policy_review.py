"""The policy as reviewed code, as the façade offers it: ``Hardware`` inherits these methods.

    policy_status    which revision the files are, and which the local OPA and EXA_OPA_URL's serve
    policy_docs      the README's reason-code table, regenerated (or checked) from the metadata
    policy_tests     the Rego tests and the coverage gate (``opa test``)
    policy_lint      Regal over the policy folder
    policy_impact    recorded decisions and example workloads under another policy and this one

The bundle itself is ``Hardware.opa_bundle``. Each method is one call into the module that does
the work (``opa.revisions``, ``policy_docs``, ``policy_tools``, ``impact``), so that the command
line only parses, calls the façade and renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from examlops_policy.errors import SpecError
from examlops_policy.tables import policy_dir

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware
    from examlops_policy._impact import Impact
    from examlops_policy.opa.revisions import PolicyStatus
    from examlops_policy._policy_docs import DocsCheck
    from examlops_policy._policy_tools import LintReport, TestReport

# The example workloads and fleet of this project's source checkout (absent from a wheel).
EXAMPLES: Final = Path(__file__).resolve().parents[1] / "examples"


class PolicyReview:
    """The policy-as-code workflows of the façade (see the module docstring)."""

    home: Path

    def policy_status(self) -> PolicyStatus:
        """The reviewed revision of the policy files and what each decision path serves; starts
        nothing. PolicyError when the policy files cannot be read."""
        from examlops_policy.opa.revisions import policy_status

        return policy_status(self.home)

    def policy_docs(self, readme: Path | None = None, *, write: bool = True) -> DocsCheck:
        """Regenerate (``write``) or only check the reason-code table of ``readme`` (default: the
        README beside the policy folder). SpecError when the README has no marked section;
        PolicyError/PolicyUnavailable when the policy's metadata cannot be read."""
        from examlops_policy._policy_docs import DocsCheck, update_readme

        path = readme or policy_dir().resolve().parent / "README.md"
        stale = update_readme(path, write=write)
        return DocsCheck(path, stale, stale and write)

    def policy_tests(self, threshold: float | None = None) -> TestReport:
        """The policy's Rego tests and its coverage against ``threshold`` percent (default: the
        project's gate)."""
        from examlops_policy._policy_tools import COVERAGE_THRESHOLD, run_tests

        return run_tests(threshold=COVERAGE_THRESHOLD if threshold is None else threshold)

    def policy_lint(self) -> LintReport:
        """Regal over the policy folder, with the project's ``.regal/config.yaml``."""
        from examlops_policy._policy_tools import lint

        return lint()

    def policy_impact(
        self,
        against: str,
        *,
        last: int | None = None,
        since: str | None = None,
        recorded: bool = True,
        workloads: Path | None = None,
        fleet: Path | None = None,
        examples: bool = True,
    ) -> Impact:
        """The decisions that change between the policy ``against`` names (a git revision or a
        folder) and the policy files here: the recorded ones (``last`` N, default 100, or those
        made ``since``), unless not ``recorded``, and the workloads of ``workloads`` over the pools
        of ``fleet`` (default: the example workloads over ``examples/fleet.yaml`` where the
        checkout has them), unless not ``examples``.

        SpecError when there is nothing to evaluate or an input file is invalid; see
        ``impact.run_impact`` for the rest.
        """
        from examlops_policy import _impact as impact

        hw = cast("Hardware", self)
        cases: list[impact.Case] = []
        skipped: list[str] = []
        if recorded:
            found, skipped = impact.recorded_cases(hw, last=last, since=since)
            cases += found
        if examples:
            suite = workloads or EXAMPLES / "workloads"
            pools = fleet or EXAMPLES / "fleet.yaml"
            if workloads is not None or suite.is_dir():
                if not pools.is_file():
                    raise SpecError(f"the workloads need a fleet file: {pools} is not a file", field="--fleet")
                cases += impact.suite_cases(suite, pools, hw.tables)
        if not cases:
            raise SpecError("nothing to evaluate: no recorded decisions and no workloads (--workloads FILE_OR_DIR)")
        return impact.run_impact(against, cases, policy_root=policy_dir(), skipped=skipped)

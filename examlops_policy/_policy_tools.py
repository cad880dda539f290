"""The policy's own gates, for people who do not know the tools: its tests and its linter.

    run_tests(root)     ``opa test`` over the policy folder, then ``opa test --coverage`` with the
                        coverage gate: every failing test named, the coverage measured
    lint(root)          ``regal lint`` with the project's ``.regal/config.yaml``

Both run the real binaries (OPA from ``opa_binary``; Regal from ``EXA_REGAL_BIN``, the project's
``.tools/bin/regal`` that ``scripts/setup`` builds, or ``regal`` on PATH) and return what they
found; a tool that cannot run is PolicyUnavailable. ``scripts/test`` runs the same gates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from examlops_policy.errors import PolicyError, PolicyUnavailable
from examlops_policy.opa.bundle import opa_binary
from examlops_policy.tables import policy_dir

REGAL_VERSION: Final = "0.42.0"
COVERAGE_THRESHOLD: Final = 90.0
_REPO: Final = Path(__file__).resolve().parents[1]
_REPO_REGAL: Final = _REPO / ".tools" / "bin" / "regal"
_TIMEOUT_S: Final = 600.0
_FAILED_RE: Final = re.compile(r"^(data\.\S+): (FAIL|ERROR)\b", re.MULTILINE)


def regal_binary() -> Path:
    """Regal: ``EXA_REGAL_BIN``, else the project's ``.tools/bin/regal``, else ``regal`` on PATH."""
    env = os.environ.get("EXA_REGAL_BIN")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PolicyUnavailable(f"EXA_REGAL_BIN={env} is not an executable file")
        return path.resolve()
    if _REPO_REGAL.is_file():
        return _REPO_REGAL.resolve()
    found = shutil.which("regal")
    if found:
        return Path(found).resolve()
    raise PolicyUnavailable(f"no Regal binary found: run scripts/setup (it builds Regal v{REGAL_VERSION}), or set EXA_REGAL_BIN")


def regal_config(policy_root: Path) -> Path | None:
    """The ``.regal/config.yaml`` beside the policy folder (the repository's), if there is one."""
    for folder in (policy_root, *policy_root.resolve().parents):
        candidate = folder / ".regal" / "config.yaml"
        if candidate.is_file():
            return candidate
    return None


def _run(args: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False, cwd=cwd)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyUnavailable(f"cannot run {args[0]} to {what}: {exc}") from exc


@dataclass(frozen=True)
class TestReport:
    """What ``opa test`` found: the failing tests (by name), the coverage and its gate.

    ``passed`` holds when no test failed and the coverage reached the threshold. ``output`` is
    OPA's report of the failures (empty when none failed).
    """

    __test__ = False  # not a pytest class

    passed_tests: int
    failed: tuple[str, ...]
    coverage: float | None
    threshold: float
    output: str

    @property
    def passed(self) -> bool:
        return not self.failed and self.coverage is not None and self.coverage >= self.threshold


# Each Rego test's deadline. OPA's default (5 s) catches a hang but also fails the property-style
# tests (2-4 s each on an idle 2-core machine) whenever the machine is busy; 120 s still catches a
# hang.
TEST_TIMEOUT = "--timeout=120s"


def run_tests(policy_root: Path | None = None, *, threshold: float = COVERAGE_THRESHOLD, opa: Path | None = None) -> TestReport:
    """Run the policy's Rego tests, then measure coverage (only when every test passed: OPA
    reports no coverage otherwise). Raises PolicyUnavailable when OPA cannot run, PolicyError when
    the policy does not compile."""
    root = policy_root or policy_dir()
    binary = str(opa or opa_binary())
    done = _run([binary, "test", TEST_TIMEOUT, str(root)], "run the policy tests")
    output = (done.stdout + done.stderr).strip()
    if done.returncode not in (0, 2):
        raise PolicyError(f"opa test could not run the policy tests in {root} (does the policy compile?):\n{output[-2000:]}")
    failed = tuple(sorted(set(m.group(1) for m in _FAILED_RE.finditer(output))))
    passed = re.search(r"^PASS: (\d+)/(\d+)", output, re.MULTILINE)
    passed_tests = int(passed.group(1)) if passed else 0
    if failed:
        return TestReport(passed_tests, failed, None, threshold, output)
    cov = _run([binary, "test", TEST_TIMEOUT, "--coverage", str(root)], "measure the policy's test coverage")
    try:
        coverage = float(json.loads(cov.stdout)["coverage"])
    except (ValueError, LookupError, TypeError) as exc:
        raise PolicyError(f"opa test --coverage gave no coverage for {root}: {exc}") from exc
    return TestReport(passed_tests, (), coverage, threshold, "")


@dataclass(frozen=True)
class LintReport:
    """What Regal found: one line per violation (``file:row: rule: description``)."""

    violations: tuple[str, ...]
    files: int
    config: Path | None

    @property
    def passed(self) -> bool:
        return not self.violations


def lint(policy_root: Path | None = None, *, regal: Path | None = None, config: Path | None = None) -> LintReport:
    """``regal lint`` over the policy folder with the project's config. Raises PolicyUnavailable
    when Regal cannot run, PolicyError when it fails without a report."""
    root = policy_root or policy_dir()
    binary = regal or regal_binary()
    cfg = config or regal_config(root)
    args = [str(binary), "lint", "--format", "json", *(["--config-file", str(cfg)] if cfg else []), str(root)]
    done = _run(args, "lint the policy")
    try:
        report = json.loads(done.stdout)
        found = report.get("violations") or []
        files = int(report.get("summary", {}).get("files_scanned", 0))
    except (ValueError, AttributeError, TypeError) as exc:
        raise PolicyError(f"regal lint gave no report for {root} (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}") from exc
    lines = []
    for v in found:
        loc = v.get("location", {})
        lines.append(f"{loc.get('file', '?')}:{loc.get('row', '?')}: {v.get('title', '?')}: {v.get('description', '')}")
    return LintReport(tuple(lines), files, cfg)

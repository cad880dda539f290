"""``exa policy build|status|docs|test|lint|impact``: the policy as reviewed code.

* ``build [--out DIR] [--signing-key KEY]``: the bundle OPA serves, with its revision (content
  digest, and the git commit of a clean checkout). ``exa opa bundle`` is the same command.
* ``status``: the reviewed revision of the policy files, and which revision the local OPA and
  ``EXA_OPA_URL``'s serve; whether each matches.
* ``docs [--check] [--page PAGE]``: regenerate the reason-code table of docs/reason-codes.md from the policies' metadata.
* ``test [--threshold P]``: the Rego tests, and the coverage gate.
* ``lint``: Regal, with the project's ``.regal/config.yaml``.
* ``impact --against REF|DIR``: the recorded decisions and the example workloads, decided under
  the policy of REF (a git revision) or DIR and under the working tree's; what changed.

Exit codes: 0 when the command did what it checks (built, all match, fresh, tests pass, no lint,
no change); 3 (``CHECK_FAILED``: the code of a rejection) when what it checks did not pass (stale
docs with ``--check``, failing tests or coverage below the gate, lint violations, a changed decision
with ``--fail-on-change``); 5 when a policy path serves another revision (``status``) or a tool
cannot run; 2 for bad input.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Final

from examlops_policy.cli.console import Console

from examlops_policy.cli import exits, render
from examlops_policy.cli.args import Commands, limit
from examlops_policy.hardware import Hardware

# A check that did not pass: the exit code of a rejected placement (see the module docstring).
CHECK_FAILED: Final = exits.REJECTED


def _threshold(text: str) -> float:
    """argparse type: a coverage percentage from 0 to 100."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"a coverage threshold is a percentage from 0 to 100 (got {text!r})")
    return value


# -- build, status ------------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    bundle = hw.opa_bundle(Path(args.out), signing_key=Path(args.signing_key) if args.signing_key else None)
    if args.json:
        render.dump_json(console, {"path": str(bundle.path), "revision": bundle.revision, "roots": list(bundle.roots), "signed": bool(args.signing_key)})
    else:
        signed = " (signed)" if args.signing_key else ""
        shown = Path(args.out) / bundle.path.name  # where the user asked for it
        console.print(f"✓ bundle {shown}{signed} · revision {bundle.revision} · roots {', '.join(bundle.roots)}")
    return exits.OK


def cmd_status(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    st = hw.policy_status()
    if args.json:
        render.dump_json(console, st.to_json())
    else:
        console.print(f"policy files {st.policy_root} · reviewed revision {st.reviewed}")
        for p in st.paths:
            if p.matches is True and p.proven:
                console.print(f"  ✓ {p.path} ({p.where}) serves {p.revision} · matches")
            elif p.matches is True:
                why = render.NOT_PROVEN if p.path == "EXA_OPA_URL" else render.UNSIGNED_LOCAL
                console.print(f"  ⚠ {p.path} ({p.where}) serves {p.revision} · matches: reported by the OPA, not proven ({why})", style="yellow")
            elif p.matches is False:
                console.print(f"  ✗ {p.path} ({p.where}) serves {p.revision or 'nothing'}{f' ({p.note})' if p.note else ''} · does NOT match", style="red")
            elif p in st.unanswered:
                console.print(f"  ✗ {p.path} ({p.where}): {p.note}; decisions fail closed until it answers", style="red")
            else:
                console.print(f"  · {p.path}{f' ({p.where})' if p.where else ''}: {p.note}")
    return exits.POLICY if st.mismatched or st.unanswered else exits.OK


# -- docs, test, lint ---------------------------------------------------------------------------


def cmd_docs(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    docs = hw.policy_docs(Path(args.readme) if args.readme else None, write=not args.check)
    if args.json:
        render.dump_json(console, {"readme": str(docs.readme), "stale": docs.stale, "written": docs.written})
    elif not docs.stale:
        console.print(f"✓ {docs.readme}: the reason-code table is up to date")
    elif args.check:
        console.print(f"✗ {docs.readme}: the reason-code table is stale; run exa policy docs", style="red")
    else:
        console.print(f"✓ {docs.readme}: the reason-code table was regenerated")
    return CHECK_FAILED if docs.stale and args.check else exits.OK


def cmd_test(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    report = hw.policy_tests(args.threshold)
    if args.json:
        render.dump_json(console, {"passed": report.passed, "tests_passed": report.passed_tests, "failed": list(report.failed),
                                   "coverage": report.coverage, "threshold": report.threshold})  # fmt: skip
    elif report.failed:
        console.print(report.output, markup=False, highlight=False)
        console.print(f"✗ {len(report.failed)} policy test(s) failed: {', '.join(report.failed)}", style="red")
    elif not report.passed:
        console.print(f"✗ {report.passed_tests} policy tests pass, but coverage {report.coverage:.2f}% is below {report.threshold:g}%", style="red")
    else:
        console.print(f"✓ {report.passed_tests} policy tests pass · coverage {report.coverage:.2f}% (gate {report.threshold:g}%)")
    return exits.OK if report.passed else CHECK_FAILED


def cmd_lint(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    report = hw.policy_lint()
    if args.json:
        render.dump_json(console, {"passed": report.passed, "files": report.files, "config": str(report.config) if report.config else None,
                                   "violations": list(report.violations)})  # fmt: skip
    elif report.passed:
        console.print(f"✓ regal lint: {report.files} files, no violations (config {report.config})")
    else:
        for line in report.violations:
            console.print(line, markup=False, highlight=False)
        console.print(f"✗ regal lint: {len(report.violations)} violation(s)", style="red")
    return exits.OK if report.passed else CHECK_FAILED


# -- impact -------------------------------------------------------------------------------------


def cmd_impact(args: argparse.Namespace, hw: Hardware, console: Console) -> int:
    result = hw.policy_impact(
        args.against, last=args.last, since=args.since, recorded=not args.no_recorded,
        workloads=Path(args.workloads) if args.workloads else None, fleet=Path(args.fleet) if args.fleet else None,
        examples=not args.no_workloads,
    )  # fmt: skip
    if args.json or args.format == "json":
        render.dump_json(console, result.to_json())
    elif args.format == "markdown":
        console.file.write(result.to_markdown())
    else:
        lines = result.lines()
        for line in lines[:3]:
            console.print(line, markup=False, highlight=False)
        render.emit_table(console, "Changes by kind", ["change", "decisions"], [[t, str(n)] for t, n in result.count_rows()], right=["decisions"])
        if result.changed:
            render.emit_table(console, "Affected", ["decision", "what changed"], [list(row) for row in result.change_rows()])
        for line in lines[3:]:
            console.print(line, markup=False, highlight=False)
    return CHECK_FAILED if args.fail_on_change and result.changed else exits.OK


# -- parser -------------------------------------------------------------------------------------


def register(groups: Commands, common: argparse.ArgumentParser) -> None:
    """Add ``exa policy ...`` to the command groups."""
    policy = groups.add_parser("policy", help="the policy as reviewed code: build, status, docs, test, lint, impact")
    commands = policy.add_subparsers(dest="command", required=True)

    p = commands.add_parser("build", parents=[common], help="build the policy bundle (revision: content digest + git commit)")
    p.add_argument("--out", default=".", help="folder to write bundle.tar.gz into (default: here)")
    p.add_argument("--signing-key", help="sign with this key (PEM RSA/EC private key, or an HMAC secret)")
    p.set_defaults(handler=cmd_build)

    p = commands.add_parser("status", parents=[common], help="which policy revision each decision path serves, and whether it matches")
    p.set_defaults(handler=cmd_status)

    p = commands.add_parser("docs", parents=[common], help="regenerate the reason-code table of the docs (docs/reason-codes.md) from the policies' metadata")
    p.add_argument("--check", action="store_true", help="only check: exit 3 when the table is stale")
    p.add_argument("--page", "--readme", dest="readme", metavar="PAGE", help="the page to rewrite (default: the repository's docs/reason-codes.md)")
    p.set_defaults(handler=cmd_docs)

    p = commands.add_parser("test", parents=[common], help="run the Rego tests (opa test) with the coverage gate")
    p.add_argument("--threshold", type=_threshold, help="least coverage in percent (default: the project's gate, 90)")
    p.set_defaults(handler=cmd_test)

    p = commands.add_parser("lint", parents=[common], help="lint the policies with Regal")
    p.set_defaults(handler=cmd_lint)

    p = commands.add_parser("impact", parents=[common], help="decisions that change between a git revision (or folder) and the working tree")
    p.add_argument("--against", required=True, metavar="REF|DIR", help="the policy to compare with: a git revision (main, HEAD~1, a commit) or a folder")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--last", type=limit, help="the last N recorded decisions (default 100)")
    which.add_argument("--since", metavar="TS", help="every decision recorded at or after TS (ISO 8601, UTC)")
    p.add_argument("--workloads", metavar="FILE_OR_DIR", help="workload files to decide too (default examples/workloads)")
    p.add_argument("--fleet", metavar="FILE", help="the pools the workloads are decided over (default examples/fleet.yaml)")
    p.add_argument("--no-recorded", action="store_true", help="leave out the recorded decisions")
    p.add_argument("--no-workloads", action="store_true", help="leave out the workload files")
    p.add_argument("--format", choices=["table", "json", "markdown"], default="table", help="table (default), json, or markdown for a pull-request comment")
    p.add_argument("--fail-on-change", action="store_true", help="exit 3 when any decision changed")
    p.set_defaults(handler=cmd_impact)

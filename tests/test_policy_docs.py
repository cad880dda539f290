"""The reason-code table of docs/reason-codes.md is generated from the policies' metadata (through the real OPA),
and a stale one fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from examlops_policy.errors import SpecError
from examlops_policy._policy_docs import BEGIN, END, decode, policy_metadata, reason_code_table, replace_section, update_readme
from tests.conftest import run_exa

pytestmark = pytest.mark.opa  # exa policy docs reads the policy through OPA

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "reason-codes.md"
POLICIES = ROOT / "policies"


def test_readme_reason_codes_are_up_to_date() -> None:
    """Fails when a check's metadata changed and `exa policy docs` was not run."""
    assert update_readme(README, write=False) is False, "docs/reason-codes.md's reason-code table is stale: run `exa policy docs`"


def test_every_declared_code_is_in_the_table_once() -> None:
    codes = decode(policy_metadata(POLICIES))
    table = reason_code_table(POLICIES)
    names = [c.code for c in codes.codes]
    assert len(names) == len(set(names)), "a reason code is declared by two packages"
    for name in names:
        assert table.count(f"| `{name}` |") == 1
    # Every check, in order, with its stage.
    assert [c.name for c in codes.checks][:4] == ["portability", "target", "capabilities", "residency"]
    assert [c.order for c in codes.checks] == sorted(c.order for c in codes.checks)
    assert {c.name: c.stage for c in codes.checks}["capacity"] == "pool"


def test_every_code_any_package_declares_is_in_the_table() -> None:
    """The table's codes are every ``custom.codes`` any policy package declares (``opa inspect``
    reads them all): a package whose codes the generator does not ask for fails here."""
    import json
    import subprocess

    from tests.conftest import OPA_BIN

    found = json.loads(subprocess.run([str(OPA_BIN), "inspect", "-a", "--format", "json", str(POLICIES)], capture_output=True, text=True, check=True).stdout)
    declared = {code for entry in found.get("annotations", []) for code in ((entry.get("annotations") or {}).get("custom") or {}).get("codes", {})}
    assert {"priority_unknown", "victim_within_quota", "capacity_exhausted"} <= declared
    assert declared == {c.code for c in decode(policy_metadata(POLICIES)).codes}


def test_a_new_check_appears_in_the_table(tmp_path: Path) -> None:
    """A plugin is documented from its own metadata, with no other edit."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    plugin = policies / "examlops" / "hardware" / "checks" / "quiet_hours"
    plugin.mkdir()
    (plugin / "quiet_hours.rego").write_text(
        "# METADATA\n# title: Quiet hours\n# custom:\n#   order: 55\n#   reads:\n#     shape: [region]\n#     workload: []\n"
        "#   codes:\n#     quiet_hours: {kind: not_now, meaning: \"the site is in its quiet hours | no new work\"}\n"
        "package examlops.hardware.checks.quiet_hours\n\n"
        "about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == \"package\"][0]\n\n"
        "deny contains {\"code\": \"quiet_hours\"} if false\n",
        encoding="utf-8",
    )
    table = reason_code_table(policies)
    assert "| check `quiet_hours` | `quiet_hours` | not_now | the site is in its quiet hours \\| no new work |" in table
    assert "| 55 | `quiet_hours` (Quiet hours) | per shape | `region` | — | no |" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nSTALE TABLE\n{END}\noutro\n", encoding="utf-8")
    assert update_readme(readme, policies) is True
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"intro\n{BEGIN}\n") and text.endswith(f"\n{END}\noutro\n")
    assert "quiet_hours" in text and "STALE TABLE" not in text
    assert update_readme(readme, policies) is False


@pytest.mark.parametrize(
    "text",
    [
        "no markers at all\n",
        f"{BEGIN}\nonly the beginning\n",
        f"{END}\n{BEGIN}\n",
        f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n",
    ],
    ids=["none", "no end", "reversed", "twice"],
)
def test_section_markers_are_required(text: str) -> None:
    with pytest.raises(SpecError, match="README.md"):
        replace_section(text, "table")


def test_replace_section_keeps_everything_else() -> None:
    text = f"a\n\n{BEGIN}\nold 1\nold 2\n{END}\n\nb\n"
    assert replace_section(text, "new") == f"a\n\n{BEGIN}\nnew\n{END}\n\nb\n"


def test_exa_policy_docs_check_and_write(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{BEGIN}\nstale\n{END}\n", encoding="utf-8")
    home = tmp_path / "home"
    stale = run_exa(home, "policy", "docs", "--check", "--readme", str(readme), shared_opa=False)
    assert stale.returncode == 3, stale.stdout + stale.stderr
    assert "stale" in stale.stdout
    assert "stale" in readme.read_text(encoding="utf-8")
    written = run_exa(home, "policy", "docs", "--readme", str(readme), shared_opa=False)
    assert written.returncode == 0, written.stderr
    assert readme.read_text(encoding="utf-8") == replace_section(f"# x\n{BEGIN}\nstale\n{END}\n", reason_code_table(POLICIES))
    fresh = run_exa(home, "policy", "docs", "--check", "--readme", str(readme), shared_opa=False)
    assert fresh.returncode == 0 and "up to date" in fresh.stdout

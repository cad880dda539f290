"""``exa policy impact``: decisions made under two policies, each on its own real OPA, compared.

The deliberate change: a copy of the policy in which AWS eu-central-1 (Frankfurt) is in CH, so
outside the EU. Exactly the decisions that relied on Frankfurt being in the EU change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from examlops_policy.app import impact
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.app.impact import Change, Summary, compare
from examlops_policy.model import Pool, Workload
from examlops_policy.opa.scratch import policy_source, scratch_opa
from tests.conftest import run_exa

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "policies"
EXAMPLES = ROOT / "examples"


def frankfurt_in_ch(target: Path) -> Path:
    """A copy of the policy with eu-central-1's country set to CH."""
    shutil.copytree(POLICIES, target)
    regions = target / "examlops" / "tables" / "regions.yaml"
    text = regions.read_text(encoding="utf-8")
    changed = text.replace("  eu-central-1: {country: DE,", "  eu-central-1: {country: CH,")
    assert changed != text
    regions.write_text(changed, encoding="utf-8")
    return target


def kinds(result: impact.Impact) -> dict[str, set[str]]:
    """Per changed case (by its workload's name), the kinds of change."""
    return {r.label.rsplit(" ", 1)[-1].strip("()"): {c.kind for c in r.changes} for r in result.changed}


# -- the example workloads --------------------------------------------------------------------


def suite(hw: Hardware) -> list[impact.Case]:
    return impact.suite_cases(EXAMPLES / "workloads", EXAMPLES / "fleet.yaml", hw.tables)


def test_an_unchanged_policy_changes_nothing(hardware: Hardware) -> None:
    result = impact.run_impact(str(POLICIES), suite(hardware), policy_root=POLICIES)
    assert len(result.results) == len(list((EXAMPLES / "workloads").glob("*.yaml")))
    assert result.changed == ()
    assert result.counts == dict.fromkeys(impact.KINDS, 0)
    assert result.base.revision == result.head.revision


def test_frankfurt_outside_the_eu_changes_the_examples_that_used_it(hardware: Hardware, tmp_path: Path) -> None:
    head = frankfurt_in_ch(tmp_path / "policies")
    result = impact.run_impact(str(POLICIES), suite(hardware), policy_root=head)
    assert result.base.revision != result.head.revision
    # gaudi-cloud (eu-only, cloud) was placed in Frankfurt: now nothing in the EU can take it, and
    # Frankfurt, stopped by residency alone, blocks the burst. train-llm-fp8 (eu-only) was not
    # placed in Frankfurt; its Frankfurt pools gain a reason.
    assert kinds(result) == {"gaudi-cloud": {"outcome", "burst", "reasons"}, "train-llm-fp8": {"reasons"}}
    gaudi = next(r for r in result.changed if r.label == "workload gaudi-cloud")
    assert (gaudi.base.outcome, gaudi.base.pool) == ("placed", "gaudi3-cloud-frankfurt")
    assert (gaudi.head.outcome, gaudi.head.burst) == ("blocked", (True, "blocked", "gaudi3-cloud-frankfurt"))
    assert gaudi.head.codes("gaudi3-cloud-frankfurt") == ("residency_forbids",)
    assert result.counts == {"outcome": 1, "pool": 0, "fallback": 0, "burst": 1, "reasons": 2}


# -- recorded decisions -----------------------------------------------------------------------


FLEET = (
    Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5),
    Pool("cloud-frankfurt", "cloud", "nvidia", 8, "eu-central-1", cost_per_hour=3.0, capabilities=("nvlink",)),
    Pool("cloud-paris", "cloud", "nvidia", 8, "eu-west-3", cost_per_hour=3.5),
    Pool("cloud-frankfurt-amd", "cloud", "amd", 8, "eu-central-1", cost_per_hour=2.0),
)

RECORDED = (
    # Frankfurt is the cheapest EU cloud: moved to Paris.
    Workload("eu-cloud", "nvidia", engine="vllm", target="cloud", residency="eu-only"),
    # AMD only in Frankfurt: falls back to NVIDIA in Paris.
    Workload("eu-amd", "amd", engine="vllm", target="cloud", residency="eu-only"),
    # Only Frankfurt has nvlink: nothing else can take it, and Frankfurt blocks the burst.
    Workload("eu-nvlink", "nvidia", engine="vllm", target="cloud", residency="eu-only", capabilities=("nvlink",)),
    # Unchanged: no residency, or HPC.
    Workload("open-cloud", "nvidia", engine="vllm", target="cloud"),
    Workload("hpc", "nvidia", engine="vllm", target="hpc"),
)


@pytest.fixture()
def recorded(hardware: Hardware) -> Hardware:
    hardware.apply(list(FLEET))
    for w in RECORDED:
        hardware.place(w)
    return hardware


def test_recorded_decisions_replay_unchanged_under_the_same_policy(recorded: Hardware) -> None:
    cases, skipped = impact.recorded_cases(recorded)
    assert skipped == []
    assert sorted(c.workload.name for c in cases) == sorted(w.name for w in RECORDED)
    result = impact.run_impact(str(POLICIES), cases, policy_root=POLICIES)
    assert result.changed == ()
    placed = {r.label.split("(")[1].rstrip(")"): r.base.pool for r in result.results}
    assert placed == {"eu-cloud": "cloud-frankfurt", "eu-amd": "cloud-frankfurt-amd", "eu-nvlink": "cloud-frankfurt",
                      "open-cloud": "cloud-frankfurt", "hpc": "hpc-nvidia"}  # fmt: skip


def test_recorded_decisions_with_waiting_limits_are_compared_with_their_own_estimates(hardware: Hardware) -> None:
    """A recorded decision that depended on start estimates is asked again with the estimates and
    the time it was decided with (else every pool would be judged without one)."""
    hardware.apply(list(FLEET))
    hurried = hardware.place(Workload("hurried", "nvidia", engine="vllm", target="cloud", max_wait="15m"))
    rushed = hardware.place(Workload("rushed", "nvidia", engine="vllm", target="cloud", max_wait="5m"))
    assert getattr(hurried.decision, "pool", None) == "cloud-frankfurt" and rushed.decision.outcome == "rejected"
    cases, _ = impact.recorded_cases(hardware, last=2)
    assert all(c.starts is not None and c.starts.of("cloud-frankfurt") is not None for c in cases)
    result = impact.run_impact(str(POLICIES), cases, policy_root=POLICIES)
    assert result.changed == ()
    assert {r.label.split("(")[1].rstrip(")"): r.base.pool for r in result.results} == {"hurried": "cloud-frankfurt", "rushed": None}


def test_recorded_decisions_are_compared_with_what_the_projects_held_for_their_quotas(hardware: Hardware) -> None:
    """A decision that waited for its project's quota is asked again with what the projects held
    then (else the quota would have room, and every such decision would look changed)."""
    hardware.apply([Pool("big", "hpc", "nvidia", 40, "eu", cost_per_hour=0.5, carbon_factor=10)])
    hardware.place(Workload("first", "nvidia", count=10, project="inference-eu"))  # inference-eu: 16 nvidia devices
    waiting = hardware.place(Workload("second", "nvidia", count=10, project="inference-eu"), queue=True)
    assert waiting.decision.outcome == "queued"
    cases, _ = impact.recorded_cases(hardware, last=1)
    assert cases[0].quota_use == {"devices": {"inference-eu": {"nvidia": 10.0}}}
    result = impact.run_impact(str(POLICIES), cases, policy_root=POLICIES)
    assert result.changed == () and result.results[0].base.pool is None


def test_frankfurt_outside_the_eu_changes_exactly_the_recorded_decisions_that_used_it(recorded: Hardware, tmp_path: Path) -> None:
    head = frankfurt_in_ch(tmp_path / "policies")
    cases, _ = impact.recorded_cases(recorded)
    result = impact.run_impact(str(POLICIES), cases, policy_root=head)
    assert kinds(result) == {
        "eu-cloud": {"pool", "reasons"},
        "eu-amd": {"pool", "fallback", "reasons"},
        "eu-nvlink": {"outcome", "burst", "reasons"},
    }
    by_name = {r.label.split("(")[1].rstrip(")"): r for r in result.results}
    assert by_name["eu-cloud"].head.pool == "cloud-paris"
    amd = by_name["eu-amd"]
    assert (amd.head.pool, amd.head.fallback, amd.head.note) == ("cloud-paris", True, "requested amd unavailable — fell back to nvidia")
    assert by_name["eu-nvlink"].head.outcome == "blocked"
    assert by_name["eu-nvlink"].head.burst == (True, "blocked", "cloud-frankfurt")
    assert result.counts == {"outcome": 1, "pool": 2, "fallback": 1, "burst": 1, "reasons": 3}
    # The last N only.
    last_two, _ = impact.recorded_cases(recorded, last=2)
    assert [c.workload.name for c in last_two] == ["hpc", "open-cloud"]


# -- against a git revision -------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def test_against_a_git_revision(hardware: Hardware, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shutil.copytree(POLICIES, repo / "policies")
    git(repo, "add", "policies")
    git(repo, "commit", "-q", "-m", "reviewed policy")
    commit = git(repo, "rev-parse", "HEAD")
    # The working tree moves Frankfurt; main keeps the reviewed policy.
    shutil.rmtree(repo / "policies")
    frankfurt_in_ch(repo / "policies")
    source = policy_source("main", repo / "policies", tmp_path / "scratch")
    assert source.commit == commit and source.label == f"main ({commit[:12]})"
    result = impact.run_impact("main", suite(hardware), policy_root=repo / "policies")
    assert result.base.label == f"main ({commit[:12]})"
    assert set(kinds(result)) == {"gaudi-cloud", "train-llm-fp8"}


def test_against_what_is_no_policy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shutil.copytree(POLICIES, repo / "policies")
    git(repo, "add", "policies")
    git(repo, "commit", "-q", "-m", "reviewed policy")
    with pytest.raises(SpecError, match="'no-such-branch' is neither a directory nor a git revision of"):
        policy_source("no-such-branch", repo / "policies", tmp_path / "a")
    outside = shutil.copytree(POLICIES, tmp_path / "outside")
    with pytest.raises(SpecError, match="is not in a git checkout to find it as a revision"):
        policy_source("main", outside, tmp_path / "b")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="holds no policy"):
        policy_source(str(tmp_path / "empty"), POLICIES, tmp_path / "c")


# -- the scratch OPAs are private and stopped ------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] == [b"run", b"--server"]


@pytest.mark.opa
def test_a_scratch_opa_is_stopped_even_when_the_block_fails(tmp_path: Path) -> None:
    pid = 0
    with pytest.raises(RuntimeError, match="boom"), scratch_opa(POLICIES, tmp_path / "s") as opa:
        pid = opa.pid
        assert alive(pid)
        assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
        assert opa.policy.about().revision == opa.revision
        raise RuntimeError("boom")
    assert pid and not alive(pid)


# -- comparing, pure --------------------------------------------------------------------------


def summary(outcome: str = "placed", pool: str | None = "a", *, fallback: bool = False, note: str | None = None,
            burst: tuple[bool, str | None, str | None] = (False, None, None), codes: dict[str, tuple[str, ...]] | None = None) -> Summary:  # fmt: skip
    pools = {name: tuple((c, f"{c} message") for c in cs) for name, cs in (codes or {"a": (), "b": ("x",)}).items()}
    return Summary(outcome, pool, fallback, note, burst, None if outcome == "placed" else ("no_eligible_pool", "none"), pools, ())


@pytest.mark.parametrize(
    ("base", "head", "expected"),
    [
        (summary(), summary(), ()),
        (summary(), summary(pool="b", codes={"a": ("y",), "b": ()}), (Change("pool", "a → b"), Change("reasons", "a: none → y; b: x → none"))),
        (summary(), summary("rejected", None, codes={"a": ("y",), "b": ("x",)}), (Change("outcome", "placed → rejected"), Change("reasons", "a: none → y"))),
        (summary(fallback=True, note="n1"), summary(fallback=True, note="n2"), (Change("fallback", "note \"n1\" → \"n2\""),)),
        (summary(burst=(True, "allowed", None)), summary("blocked", None, burst=(True, "blocked", "b")),
         (Change("outcome", "placed → blocked"), Change("burst", "allowed → blocked (b)"))),
    ],
    ids=["same", "pool", "outcome", "note", "burst"],
)
def test_compare(base: Summary, head: Summary, expected: tuple[Change, ...]) -> None:
    assert compare(base, head) == expected


def test_reason_order_within_a_pool_counts() -> None:
    """The codes are compared in the order the checks gave them: a reordering is a change of explanation."""
    assert [c.kind for c in compare(summary(codes={"a": ("x", "y")}), summary(codes={"a": ("y", "x")}))] == ["reasons"]


# -- the command ------------------------------------------------------------------------------


@pytest.mark.opa
def test_exa_policy_impact_formats_and_exit_codes(tmp_path: Path) -> None:
    head_copy = frankfurt_in_ch(tmp_path / "policies")
    home = tmp_path / "home"
    env = {"EXA_POLICY_DIR": str(head_copy)}
    same = run_exa(home, "policy", "impact", "--against", str(head_copy), "--no-recorded", "--fail-on-change", env=env, shared_opa=False)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "5 example workloads evaluated; 0 changed" in same.stdout

    md = run_exa(home, "policy", "impact", "--against", str(POLICIES), "--no-recorded", "--format", "markdown", "--fail-on-change", env=env, shared_opa=False)
    assert md.returncode == 3, md.stdout + md.stderr
    assert md.stdout.startswith("### Policy impact\n")
    assert "| outcome changed (placed ↔ rejected / blocked) | 1 |" in md.stdout
    assert "#### outcome changed (placed ↔ rejected / blocked); burst verdict changed; reasons changed: workload gaudi-cloud" in md.stdout

    js = run_exa(home, "policy", "impact", "--against", str(POLICIES), "--no-recorded", "--json", env=env, shared_opa=False)
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert doc["changed"] == 2 and doc["counts"]["outcome"] == 1
    assert doc["examples"]["outcome"]["case"] == "workload gaudi-cloud"
    assert doc["examples"]["outcome"]["before"][0] == "placed on gaudi3-cloud-frankfurt"
    assert doc["examples"]["outcome"]["after"][0].startswith("blocked: residency_forbids: ")

    bad = run_exa(home, "policy", "impact", "--against", str(tmp_path / "nowhere"), "--no-recorded", env=env, shared_opa=False)
    assert bad.returncode == 2 and "nowhere' is not a directory" in bad.stderr

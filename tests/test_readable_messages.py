"""Messages a person reads: values said as they were written (never a Python object such as
``datetime.timedelta(0)``, ``None`` or ``['spot_not_accepted']``), negative values refused as
negative (not as argparse's "expected one argument"), limits written out (never ``1e+07``), and a
duration on the command line with its unit."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from examlops_policy import quantities
from examlops_policy._core.engine import differences
from examlops_policy.app.impact import Summary, compare
from examlops_policy.cli import exits
from examlops_policy.errors import SpecError
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Workload
from tests.conftest import run_exa

NV = ["hardware", "add-pool", "nv", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu"]
PYTHON_OBJECTS = ("datetime.", "timedelta(", "None", "True", "False", "['", "('", "e+0")


def no_python(text: str) -> None:
    for said in PYTHON_OBJECTS:
        assert said not in text, f"{said!r} in {text!r}"


# -- item 10: values as they were written -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "null"), (True, "true"), (["a", 1], '["a", 1]'), (timedelta(0), "0s"), (timedelta(minutes=90), "1h30m"),
     (20_000_000.0, "20000000"), (0.5, "0.5"), ("2TB", "'2TB'")],
)  # fmt: skip
def test_a_value_is_shown_as_written_never_as_a_python_object(value: object, expected: str) -> None:
    assert quantities.shown(value) == expected


@pytest.mark.parametrize(
    ("written", "letter", "binary"),
    [("2TB", "T as TiB, Kubernetes as 10^12 bytes", "2Ti"), ("2T", "T as TiB", "2Ti"), ("64G", "G as GiB, Kubernetes as 10^9 bytes", "64Gi"),
     ("512MB", "M as MiB, Kubernetes as 10^6 bytes", "512Mi")],
)  # fmt: skip
def test_a_decimal_size_is_refused_naming_the_suffix_written(written: str, letter: str, binary: str) -> None:
    with pytest.raises(ValueError) as caught:
        quantities.memory_mib(written)
    message = str(caught.value)
    assert f"Slurm reads {letter}" in message and f"e.g. {binary}" in message
    if "G" not in written:
        assert "G as GiB" not in message


def test_a_lease_of_nothing_says_0s_not_a_timedelta(hardware: Hardware) -> None:
    hardware.add_pool(Pool(name="nv", target="hpc", accelerator="nvidia", count=2, region="eu"))
    with pytest.raises(SpecError) as caught:
        hardware.place(Workload(name="w", accelerator="nvidia"), lease=timedelta(0))
    assert "(got 0s)" in str(caught.value)
    no_python(str(caught.value))


def test_a_lease_of_0s_on_the_command_line_says_so(exa_home: Path) -> None:
    run_exa(exa_home, *NV, check=True)
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--lease", "0s")
    assert result.returncode == exits.BAD_INPUT
    assert "--lease: must be at least 1s (got '0s')" in result.stderr
    no_python(result.stderr)


def test_a_replay_difference_is_said_in_words(hardware: Hardware) -> None:
    """What ``explain --replay`` prints when the policy answers otherwise: no ``None``, no list."""
    hardware.add_pool(Pool(name="nv", target="hpc", accelerator="nvidia", count=2, region="eu"))
    decision = hardware.place(Workload(name="w", accelerator="nvidia")).decision
    assert isinstance(decision, Placement)
    reference = {
        "outcome": "rejected",
        "pool": None,
        "reason": {"code": "spot_not_accepted", "message": "the pool is spot capacity"},
        "verdicts": {"nv": {"reasons": [{"code": "spot_not_accepted"}]}, "gone": {"reasons": []}},
    }
    lines = differences(decision, reference)
    assert "pool: nv here, no pool by the policy" in lines
    assert "pool nv: no reasons here, reason spot_not_accepted by the policy" in lines
    assert "pool gone: not judged here, no reasons by the policy" in lines
    for line in lines:
        no_python(line)


def test_a_policy_impact_change_of_note_is_said_in_words() -> None:
    base = Summary("placed", "nv", False, None, (False, None, None), None, {}, ("nv",))
    head = Summary("placed", "nv", True, "fell back", (False, None, None), None, {}, ("nv",))
    (change,) = compare(base, head)
    assert change.detail == 'fallback no → yes · note none → "fell back"'


# -- item 12: negative values and limits ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([*NV[:2], "n2", *NV[3:], "--nodes", "1", "--memory-per-node", "-5Gi"], "memory_per_node: cannot be negative (got '-5Gi')"),
        ([*NV[:2], "n2", *NV[3:], "--nodes", "1", "--cpu-per-node", "-2"], "cpu_per_node: cannot be negative (got '-2')"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--max-wait", "-1h"], "max_wait: cannot be negative (got '-1h')"),
        (["hardware", "place", "w", "--accelerator", "nvidia", "--memory", "-5Gi"], "memory: cannot be negative (got '-5Gi')"),
        (["hardware", "renew", "abc", "--lease", "-1h"], "--lease: cannot be negative (got '-1h')"),
    ],
    ids=["memory-per-node", "cpu-per-node", "max-wait", "memory", "lease"],
)
def test_a_negative_value_is_refused_as_negative(exa_home: Path, args: list[str], said: str) -> None:
    result = run_exa(exa_home, *args)
    assert result.returncode == exits.BAD_INPUT
    assert "expected one argument" not in result.stderr
    assert said in result.stderr


def test_a_limit_is_written_out(exa_home: Path) -> None:
    result = run_exa(exa_home, *NV[:8], "20000000", "--region", "eu", "--json")
    assert result.returncode == exits.BAD_INPUT
    message = json.loads(result.stderr)["message"]
    assert "count: must be at least 1 and at most 10000000 (got 20000000)" in message
    no_python(message)


# -- item 13: a duration on the command line says its unit ------------------------------------------


@pytest.mark.parametrize(
    ("option", "field"), [("--lease", "--lease"), ("--max-wait", "max_wait"), ("--walltime", "walltime")]
)
def test_a_duration_without_its_unit_is_refused(exa_home: Path, option: str, field: str) -> None:
    run_exa(exa_home, *NV, check=True)
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", option, "5")
    assert result.returncode == exits.BAD_INPUT
    assert f"{field}: say the unit: 5s, 5m, 5h or 5d (got 5 without one)" in result.stderr
    assert json.loads(run_exa(exa_home, "hardware", "decisions", "--json", check=True).stdout) == []


def test_a_duration_with_its_unit_and_a_wait_of_0_are_taken(exa_home: Path) -> None:
    run_exa(exa_home, *NV, check=True)
    placed = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--lease", "5m", "--max-wait", "0", "--json", check=True)
    decision = json.loads(placed.stdout)
    assert decision["outcome"] == "placed" and decision["workload"]["max_wait"] == 0
    assert decision["lease_expires_at"] is not None


# -- item 19: accounting for people, JSON with --json -----------------------------------------------


def test_accounting_prints_text_and_json_only_when_asked(exa_home: Path) -> None:
    run_exa(exa_home, *NV[:8], "2", "--region", "eu", "--cost-per-hour", "2.5", "--carbon-factor", "300", check=True)
    placed = json.loads(run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--count", "2", "--json", check=True).stdout)
    text = run_exa(exa_home, "hardware", "accounting", placed["id"], "--hours", "10", check=True).stdout
    assert text.splitlines() == [
        f"decision {placed['id'][:12]} · 2 nvidia devices on nv in eu · held 10 hours",
        "  cost    $50.00",
        "  carbon  6000 gCO2e",
    ]
    figures = json.loads(run_exa(exa_home, "hardware", "accounting", placed["id"], "--hours", "10", "--json", check=True).stdout)
    assert figures == {"device": "nvidia", "region": "eu", "hours": 10.0, "cost": 50.0, "carbon_g": 6000.0}


# -- item 21: policy impact shows each example decision once ----------------------------------------


def test_policy_impact_shows_each_example_once_with_every_kind_it_shows() -> None:
    from examlops_policy.app.impact import KIND_TITLES, CaseResult, Impact, Side

    def summary(outcome: str = "placed", burst: str | None = "allowed", codes: tuple[str, ...] = ()) -> Summary:
        reason = None if outcome == "placed" else ("residency_forbids", "data-residency eu-only forbids egress")
        return Summary(outcome, "cloud" if outcome == "placed" else None, False, None, (True, burst, "cloud"), reason,
                       {"cloud": tuple((c, c) for c in codes)}, ())  # fmt: skip

    def case(label: str, base: Summary, head: Summary) -> CaseResult:
        return CaseResult(label, "recorded", base, head, compare(base, head))

    reasons_only = case("decision aaaa (train)", summary(codes=("x",)), summary(codes=("x", "y")))
    everything = case("decision bbbb (gaudi)", summary(), summary("blocked", "blocked", ("residency_forbids",)))
    impact = Impact(Side("HEAD", "sha256:a"), Side("working tree", "sha256:b"), (reasons_only, everything), sources={"recorded": 2})
    assert [c.kind for c in everything.changes] == ["outcome", "burst", "reasons"]
    headers = [line for line in impact.lines() if " — e.g. " in line]
    assert headers == [f"{KIND_TITLES['outcome']}; {KIND_TITLES['burst']}; {KIND_TITLES['reasons']} — e.g. decision bbbb (gaudi):"]
    assert impact.lines().count("  before:") == 1
    markdown = impact.to_markdown()
    assert markdown.count("#### ") == 1 and "#### outcome changed" in markdown and markdown.count("\nBefore:\n") == 1
    examples = impact.to_json()["examples"]
    assert isinstance(examples, dict)
    assert {kind: example["case"] for kind, example in examples.items()} == dict.fromkeys(("outcome", "burst", "reasons"), "decision bbbb (gaudi)")  # type: ignore[index]


# -- item 24: the key audit verify wants, and the one checkpoint wants -------------------------------


def test_each_key_reader_recognises_the_other_half_and_says_which_it_wants() -> None:
    from examlops_policy.audit import SigningKey, VerifierKey, generate_key

    secret, public = generate_key("ops")
    with pytest.raises(SpecError) as given_secret:
        VerifierKey.parse(secret)
    message = str(given_secret.value)
    assert "this is a signer key" in message and "the verifier key, its public half (NAME.vkey" in message
    encoded = secret.split("+", 4)[4]  # PRIVATE+KEY+name+keyid+base64, and the base64 may hold "+"
    assert "8 hex digits" not in message and encoded not in message  # never echoes the secret
    with pytest.raises(SpecError) as given_public:
        SigningKey.parse(public)
    assert "this is a verifier key" in str(given_public.value) and "the signer key, its secret half (NAME.skey" in str(given_public.value)
    assert VerifierKey.parse(public) == SigningKey.parse(secret).verifier_key()


def test_audit_verify_given_the_signer_key_says_it_wants_the_verifier_key(exa_home: Path, tmp_path: Path) -> None:
    run_exa(exa_home, *NV, check=True)
    run_exa(exa_home, "audit", "keygen", "ops", "--out-dir", str(tmp_path / "keys"), check=True)
    checkpoint = tmp_path / "cp.txt"
    run_exa(exa_home, "audit", "checkpoint", "--key", str(tmp_path / "keys" / "ops.skey"), "--out", str(checkpoint), check=True)
    wrong = run_exa(exa_home, "audit", "verify", "--checkpoint", str(checkpoint), "--key", str(tmp_path / "keys" / "ops.skey"))
    assert wrong.returncode == exits.BAD_INPUT
    assert "this is a signer key" in wrong.stderr and "NAME.vkey" in wrong.stderr
    run_exa(exa_home, "audit", "verify", "--checkpoint", str(checkpoint), "--key", str(tmp_path / "keys" / "ops.vkey"), check=True)


def test_a_policy_metadata_or_audit_problem_shows_values_as_written() -> None:
    from examlops_policy import _policy_docs, audit
    from examlops_policy.errors import PolicyError

    with pytest.raises(SpecError) as caught:
        audit._require_string_keys({"a": {None: 1}}, "entry")
    assert "key null is not a string" in str(caught.value)
    with pytest.raises(PolicyError) as docs:
        _policy_docs._text(None, "title")
    assert str(docs.value) == "policy metadata: title is not a string: null"

"""When a workload must start, and how long it runs: ``optimize: earliest``, ``max_wait``,
``deadline`` and ``walltime``, checked on construction, from YAML and from the command line like
every other field (SpecError naming the field), held as whole seconds and RFC 3339 UTC text.

They reach the policy with the workload (max_wait and deadline are the wait check's reads, part of
the workload signature) and the records (walltime, for submit's ``--time``); the last tests hold
that they decide: a pool's start estimate against them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from examlops_policy import SpecError, Workload
from examlops_policy.model import OBJECTIVES
from examlops_policy.specs import workload_from_file, workload_from_mapping
from tests.conftest import run_exa


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(text)
    return path


def test_earliest_is_an_objective() -> None:
    assert "earliest" in OBJECTIVES
    assert Workload("w", "nvidia", optimize="earliest").optimize == "earliest"


def test_durations_and_the_deadline_are_held_as_a_spec_stores_them() -> None:
    w = Workload("w", "nvidia", max_wait="1h30m", deadline="2026-12-01T15:00:00+01:00", walltime="30m")
    assert (w.max_wait, w.deadline, w.walltime) == (5400, "2026-12-01T14:00:00Z", 1800)
    again = Workload("w", "nvidia", max_wait=w.max_wait, deadline=w.deadline, walltime=w.walltime)
    assert again == w


def test_a_workload_says_nothing_of_time_by_default() -> None:
    w = Workload("w", "nvidia")
    assert (w.max_wait, w.deadline, w.walltime) == (None, None, None)


def test_max_wait_of_zero_means_start_now() -> None:
    assert Workload("w", "nvidia", max_wait="0s").max_wait == 0


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("max_wait", "2 hours", "max_wait: expected a duration"),
        ("max_wait", -5, "max_wait: must be at least 0s"),
        ("max_wait", "400d", "max_wait: at most 366d"),
        ("walltime", 0, "walltime: must be at least 1s"),
        ("walltime", "1.5s", "walltime: must be a whole number of seconds"),
        ("deadline", "2026-12-01T14:00:00", "deadline: expected an RFC 3339 time with its offset"),
        ("deadline", "next tuesday", "deadline: expected an RFC 3339 time"),
        ("deadline", "1970-01-01T00:00:00Z", "deadline: must be between the years 2000 and 2200"),
        ("optimize", "soonest", "optimize: expected one of cost, carbon, balanced, earliest"),
    ],
)
def test_bad_values_name_the_field(field: str, value: object, expected: str) -> None:
    with pytest.raises(SpecError, match=expected) as raised:
        workload_from_mapping({"name": "w", "accelerator": "nvidia", field: value}, source="test")
    assert raised.value.field == field


def test_a_yaml_file_says_them_as_people_write_them(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "workload:\n  name: w\n  accelerator: nvidia\n  optimize: earliest\n  max_wait: 2h\n"
        "  deadline: 2026-12-01T15:00:00+01:00\n  walltime: 1800\n",
    )
    w = workload_from_file(path)
    assert (w.optimize, w.max_wait, w.deadline, w.walltime) == ("earliest", 7200, "2026-12-01T14:00:00Z", 1800)


def test_an_unquoted_yaml_time_without_an_offset_is_refused(tmp_path: Path) -> None:
    # YAML reads it as a timestamp; it is given back as the text it was and refused for its missing offset.
    path = write(tmp_path, "workload:\n  name: w\n  accelerator: nvidia\n  deadline: 2026-12-01 15:00:00\n")
    with pytest.raises(SpecError, match=r"workload.deadline: expected an RFC 3339 time with its offset") as raised:
        workload_from_file(path)
    assert raised.value.source == str(path)


def test_a_yaml_date_alone_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "workload:\n  name: w\n  accelerator: nvidia\n  deadline: 2026-12-01\n")
    with pytest.raises(SpecError, match=r"workload.deadline: expected an RFC 3339 time"):
        workload_from_file(path)


def test_a_yaml_duration_in_words_is_refused_by_the_schema_with_the_reader_s_words(tmp_path: Path) -> None:
    path = write(tmp_path, "workload:\n  name: w\n  accelerator: nvidia\n  max_wait: 2 hours\n")
    with pytest.raises(SpecError, match=r"workload.max_wait: expected a duration such as 90s, 30m, 2h"):
        workload_from_file(path)


# -- the command line ---------------------------------------------------------------------------


def test_the_cli_reads_them_and_prints_them_in_the_decision(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "hpc-a", "--target", "hpc", "--accelerator", "nvidia", "--count", "4",
            "--region", "de-juelich", check=True)  # fmt: skip
    # A deadline a day from now (one already passed is refused: deadline_passed), given at +01:00.
    due = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=0)
    given = due.astimezone(timezone(timedelta(hours=1))).isoformat()
    out = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--optimize", "earliest", "--max-wait", "2h",
                  "--deadline", given, "--walltime", "30m", "--dry-run", "--json", check=True)  # fmt: skip
    decision = json.loads(out.stdout)
    assert decision["outcome"] == "placed"
    w = decision["workload"]
    assert (w["optimize"], w["max_wait"], w["deadline"], w["walltime"]) == ("earliest", 7200, due.strftime("%Y-%m-%dT%H:%M:%SZ"), 1800)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--max-wait", "2hours", "max_wait: expected a duration"),
        ("--walltime", "0", "walltime: must be at least 1s"),
        ("--deadline", "2026-12-01T14:00", "deadline: expected an RFC 3339 time with its offset"),
    ],
)
def test_the_cli_refuses_bad_values_as_bad_input(exa_home: Path, option: str, value: str, expected: str) -> None:
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", option, value, "--dry-run")
    assert result.returncode == 2
    assert expected in result.stderr
    assert "command line" in result.stderr


def test_the_cli_refuses_them_beside_a_workload_file(exa_home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "workload:\n  name: w\n  accelerator: nvidia\n")
    result = run_exa(exa_home, "hardware", "place", "-f", str(path), "--max-wait", "2h", "--dry-run")
    assert result.returncode == 2
    assert "--max-wait would conflict" in result.stderr


def test_they_reach_the_policy_and_decide(exa_home: Path) -> None:
    """Pools with room start now: a max_wait of 0 s still takes the cheapest; the workload the
    policy sees carries the limits (another input digest); a deadline already passed takes no pool
    (deadline_passed, never: exit 3); the walltime is recorded."""
    from datetime import datetime, timedelta, timezone

    run_exa(exa_home, "hardware", "add-pool", "cheap", "--target", "hpc", "--accelerator", "nvidia", "--count", "2",
            "--region", "de-juelich", "--cost-per-hour", "1", check=True)  # fmt: skip
    run_exa(exa_home, "hardware", "add-pool", "dear", "--target", "hpc", "--accelerator", "nvidia", "--count", "2",
            "--region", "de-juelich", "--cost-per-hour", "3", check=True)  # fmt: skip
    soon = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plain = json.loads(run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--dry-run", "--json", check=True).stdout)
    timed = json.loads(run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--max-wait", "0s", "--walltime", "1h",
                               "--deadline", soon, "--dry-run", "--json", check=True).stdout)  # fmt: skip
    assert plain["pool"] == timed["pool"] == "cheap"
    assert timed["estimate_source"] == "now" and timed["workload"]["walltime"] == 3600
    assert plain["provenance"]["input_digest"] != timed["provenance"]["input_digest"]
    passed = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    late = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--deadline", passed, "--json")
    assert late.returncode == 3, late.stderr
    rejected = json.loads(late.stdout)
    assert rejected["code"] == "no_eligible_pool"
    assert {v["pool"]: [r["code"] for r in v["reasons"]] for v in rejected["verdicts"]} == {"cheap": ["deadline_passed"], "dear": ["deadline_passed"]}


def test_a_recorded_walltime_is_the_time_limit_submit_sends(exa_home: Path, tmp_path: Path) -> None:
    """The record keeps the walltime (it is part of the workload's input): submit asks Slurm for
    it as ``--time``, in whole minutes."""
    run_exa(exa_home, "hardware", "add-pool", "gpu-h100", "--target", "hpc", "--accelerator", "nvidia", "--count", "2",
            "--region", "de-juelich", "--partition", "gpu", "--gres-type", "h100", check=True)  # fmt: skip
    placed = json.loads(run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--walltime", "90m", "--json", check=True).stdout)
    assert placed["workload"]["walltime"] == 5400 and placed["estimate_source"] == "slurm"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    shown = run_exa(exa_home, "hardware", "submit", placed["id"], "--script", str(script), "--dry-run", check=True).stdout
    assert "--time=90 " in shown and "--partition=gpu" in shown

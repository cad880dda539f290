"""What a user trips on at the edges of the command line: options before the group, a reader that
goes away, a binary that is not OPA, exit codes that say what happened, a retry of a request whose
placement is over. Each through the real ``exa`` and, where a decision is made, the real OPA."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from examlops_policy.cli import exits
from examlops_policy.opa import stop_server
from tests.conftest import EXA, run_exa, shared_opa_env

POOLS = [
    ["hardware", "add-pool", "nv", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu", "--cost-per-hour", "2.5"],
    ["hardware", "add-pool", "mi", "--target", "hpc", "--accelerator", "amd", "--count", "2", "--region", "eu", "--cost-per-hour", "0.9"],
]  # fmt: skip


def seed(home: Path) -> None:
    for args in POOLS:
        run_exa(home, *args, check=True)


def decision_ids(home: Path) -> list[str]:
    return [row["id"] for row in json.loads(run_exa(home, "hardware", "decisions", "--json", "--limit", "100", check=True).stdout)]


# -- --home, --json and --debug before the group ---------------------------------------------------


def test_home_before_the_group_is_the_state_folder(exa_home: Path, tmp_path: Path) -> None:
    """``exa --home X hardware pools`` reads X, as ``exa hardware pools --home X`` does (the README
    says every command takes --home)."""
    seed(exa_home)
    elsewhere = tmp_path / "elsewhere"  # EXA_HOME points here; --home must win
    before = run_exa(elsewhere, "--home", str(exa_home), "hardware", "pools")
    after = run_exa(elsewhere, "hardware", "pools", "--home", str(exa_home))
    assert before.returncode == 0, before.stderr
    assert before.stdout == after.stdout and "mi " in before.stdout and "nv " in before.stdout
    as_json = run_exa(elsewhere, "--home", str(exa_home), "--json", "hardware", "pools", check=True)
    assert sorted(p["name"] for p in json.loads(as_json.stdout)) == ["mi", "nv"]


def test_a_relative_home_decides_with_its_own_opa(exa_home: Path) -> None:
    """``exa --home relhome ...`` (and ``EXA_HOME=relhome``) with no OPA running: the home is made
    absolute once, so the OPA started on demand (whose supervisor runs in the home) finds its
    files; a relative path handed on failed every decision with exit 5."""
    relative = exa_home.name  # run_exa runs in exa_home's parent
    for args in POOLS:
        run_exa(exa_home, "--home", relative, *args, check=True)
    by_option = run_exa(exa_home, "--home", relative, "hardware", "place", "a", "--accelerator", "amd", shared_opa=False)
    assert by_option.returncode == 0, by_option.stderr
    stop_server(exa_home)  # the next one starts it again, from EXA_HOME
    by_env = run_exa(exa_home, "hardware", "place", "b", "--accelerator", "amd", env={"EXA_HOME": relative}, shared_opa=False)
    assert by_env.returncode == 0, by_env.stderr
    assert len(decision_ids(exa_home)) == 2


@pytest.mark.opa  # exa reads the policy tables, which OPA compiles
def test_an_empty_home_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    """``--home ""`` or ``EXA_HOME=`` is bad input (exit 2) naming where it came from, not the
    default folder read (and created) in its place."""
    data = tmp_path / "xdg"
    env = {"HOME": str(tmp_path / "user"), "XDG_DATA_HOME": str(data)}
    by_option = run_exa(tmp_path / "unused", "--home", "", "hardware", "pools", env=env)
    assert by_option.returncode == exits.BAD_INPUT, by_option.stderr
    assert "--home: the state folder is empty" in by_option.stderr
    by_env = run_exa(tmp_path / "unused", "hardware", "pools", env={**env, "EXA_HOME": ""})
    assert by_env.returncode == exits.BAD_INPUT, by_env.stderr
    assert "EXA_HOME: the state folder is empty" in by_env.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.opa  # exa reads the policy tables, which OPA compiles
def test_a_home_through_a_missing_folder_creates_only_the_home(tmp_path: Path) -> None:
    """``--home x/../real`` is the folder ``real``: no ``x`` is made on the way."""
    home = tmp_path / "real"
    result = run_exa(home, "--home", "x/../real", "hardware", "pools")  # runs in tmp_path
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real"]


# -- a reader that goes away ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["hardware", "decisions", "--json"], ["hardware", "pools"], ["hardware", "explain", "FIRST"]],
    ids=["decisions-json", "pools", "explain"],
)
def test_a_closed_pipe_stops_quietly_like_a_unix_tool(exa_home: Path, args: list[str]) -> None:
    """``exa ... | head -c 100``: no BrokenPipeError traceback; the exit status a shell shows for a
    Unix tool killed by SIGPIPE (141)."""
    seed(exa_home)
    run_exa(exa_home, "hardware", "place", "j", "--accelerator", "amd", check=True)
    args = [decision_ids(exa_home)[0] if a == "FIRST" else a for a in args]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write fails with EPIPE
    try:
        env = {**os.environ, "EXA_HOME": str(exa_home), "COLUMNS": "200", **shared_opa_env()}
        done = subprocess.run([str(EXA), *args], stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=60, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode == exits.PIPE_CLOSED == 141


# -- an OPA binary that is not OPA ------------------------------------------------------------------


def test_an_opa_binary_that_is_not_opa_is_named_with_what_it_did(exa_home: Path) -> None:
    seed(exa_home)
    result = run_exa(exa_home, "hardware", "place", "j", "--accelerator", "amd", env={"EXA_OPA_BIN": "/bin/false"}, shared_opa=False)
    assert result.returncode == exits.POLICY
    message = result.stderr.strip()
    assert "(EXA_OPA_BIN=/bin/false) exited with status 1 and printed nothing" in message, message
    assert "does the policy compile" not in message
    assert decision_ids(exa_home) == []  # fail closed: nothing placed or recorded


# -- exit codes that say what happened --------------------------------------------------------------


@pytest.mark.opa
def test_a_home_others_can_write_to_is_an_unusable_state_folder_not_a_busy_store(tmp_path: Path) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o777)
    result = run_exa(home, "hardware", "pools")
    assert result.returncode == exits.STATE_UNUSABLE == 13, result.stderr
    assert result.stderr.startswith("StateUnusable: ") and f"chmod 700 {home}" in result.stderr
    assert list(home.iterdir()) == []  # nothing written


@pytest.mark.opa
def test_a_home_that_is_a_file_is_an_unusable_state_folder(tmp_path: Path) -> None:
    home = tmp_path / "a-file"
    home.write_text("not a folder\n", encoding="utf-8")
    result = run_exa(home, "hardware", "pools", "--json")
    assert result.returncode == exits.STATE_UNUSABLE, result.stderr
    assert json.loads(result.stderr) == {"error": "StateUnusable", "code": 13, "message": f"{home} is not a folder"}
    assert home.read_text(encoding="utf-8") == "not a folder\n"


def test_policy_status_fails_when_the_opa_that_decides_does_not_answer(exa_home: Path) -> None:
    """With EXA_OPA_URL set, that OPA decides; if it does not answer every decision fails closed,
    and ``exa policy status`` says so with exit 5 (not 0)."""
    from tests.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = run_exa(exa_home, "policy", "status", env={"EXA_OPA_URL": url}, shared_opa=False)
    assert result.returncode == exits.POLICY, result.stdout + result.stderr
    assert f"✗ EXA_OPA_URL ({url}): did not answer" in result.stdout
    as_json = json.loads(run_exa(exa_home, "policy", "status", "--json", env={"EXA_OPA_URL": url}, shared_opa=False).stdout)
    assert as_json["unanswered"] == ["EXA_OPA_URL"]
    assert run_exa(exa_home, "policy", "status", shared_opa=False).returncode == exits.OK  # a local OPA is started on demand


def test_an_ambiguous_id_prefix_is_bad_input_not_not_found(exa_home: Path) -> None:
    seed(exa_home)
    firsts: list[str] = []
    while len(set(firsts)) == len(firsts):  # at most 17 decisions: 16 hex digits begin an id
        run_exa(exa_home, "hardware", "place", f"j{len(firsts)}", "--accelerator", "amd")
        firsts = [i[0] for i in decision_ids(exa_home)]
    shared = next(c for c in firsts if firsts.count(c) > 1)
    result = run_exa(exa_home, "hardware", "explain", shared)
    assert result.returncode == exits.BAD_INPUT, result.stderr
    assert f"decision id prefix {shared!r} is ambiguous" in result.stderr
    unused = [c for c in "0123456789abcdef" if c not in firsts]
    assert run_exa(exa_home, "hardware", "explain", unused[0]).returncode == exits.NOT_FOUND


# -- a retry of a request whose placement is over ---------------------------------------------------


@pytest.mark.parametrize("ended", ["released", "lease ended"])
def test_a_retry_of_an_ended_request_is_not_reported_as_placed(exa_home: Path, ended: str) -> None:
    """It places nothing now: no check mark and no exit 0, but bad input (exit 2, as renewing or
    submitting that placement would be), saying when it was released or its lease ended."""
    seed(exa_home)
    lease = ["--lease", "1s"] if ended == "lease ended" else []
    first = run_exa(exa_home, "hardware", "place", "job", "--accelerator", "amd", "--request-id", "k1", *lease, check=True)
    assert first.stdout.splitlines() == ["✓ job → pool mi · amd on hpc"]
    ident = decision_ids(exa_home)[0]
    if ended == "released":
        run_exa(exa_home, "hardware", "release", ident, check=True)
    else:
        time.sleep(1.2)
    shown = json.loads(run_exa(exa_home, "hardware", "explain", ident, "--json", check=True).stdout)
    when = f"its lease ended at {shown['released_at']}" if ended == "lease ended" else f"it was released at {shown['released_at']}"
    assert shown["lease_ended"] is (ended == "lease ended")

    for extra in ([], ["--json"]):
        retry = run_exa(exa_home, "hardware", "place", "job", "--accelerator", "amd", "--request-id", "k1", *extra)
        assert (retry.returncode, retry.stdout) == (exits.BAD_INPUT, ""), retry.stdout + retry.stderr
        assert "✓" not in retry.stderr
        assert (
            f"--request-id: request id 'k1' was placed by decision {ident[:12]} (job → pool mi) and {when}: it holds nothing now, "
            "and nothing was placed again (use a new request id to place it again)"
        ) in retry.stderr
    assert decision_ids(exa_home) == [ident]  # the retry placed nothing
    assert json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)[0]["free"] == 2


# -- a period that ends before it starts ------------------------------------------------------------


@pytest.mark.parametrize("command", [["finops", "report", "--html", "r.html"], ["hardware", "decisions"]], ids=["report", "decisions"])
def test_since_after_until_is_bad_input(exa_home: Path, command: list[str]) -> None:
    seed(exa_home)
    result = run_exa(exa_home, *command, "--since", "2026-12-02", "--until", "2026-12-01")
    assert result.returncode == exits.BAD_INPUT, result.stdout + result.stderr
    assert "the period ends (2026-12-01) before it starts (2026-12-02)" in result.stderr
    assert not (exa_home.parent / "r.html").exists()


# -- messages ---------------------------------------------------------------------------------------


def test_a_pools_denial_names_backends_in_words_and_the_specifications_rejection_keeps_its_tuple(exa_home: Path) -> None:
    """The E8 specification's rejection line stays byte for byte (a Python tuple); every pool's
    denial names the engine's backends in words."""
    seed(exa_home)
    rejected = run_exa(exa_home, "hardware", "place", "train", "--accelerator", "amd", "--engine", "sglang")
    assert rejected.stdout.splitlines() == ["✗ Rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"]
    explained = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "nvidia", "--engine", "ipex", "--allow-cpu-fallback",
                        "--explain", "--dry-run").stdout  # fmt: skip
    assert "backend_unsupported: engine 'ipex' cannot run on amd (needs backend rocm; supports ipex and cpu)" in explained
    assert "('" not in explained.split("\n", 1)[1]  # no tuple below the first line


@pytest.mark.parametrize(("command", "what"), [(["hardware", "apply", "-f"], "pools file"), (["hardware", "place", "-f"], "workload file")])
def test_an_empty_yaml_file_says_it_is_empty(exa_home: Path, tmp_path: Path, command: list[str], what: str) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    result = run_exa(exa_home, *command, str(empty))
    assert result.returncode == exits.BAD_INPUT
    assert result.stderr.strip() == f"SpecError: {empty}: (top level): the file is empty (a {what} is a mapping)"
    assert "None is not of type" not in result.stderr


def test_a_whole_device_for_a_fraction_has_a_legend(exa_home: Path) -> None:
    seed(exa_home)
    out = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", "--fraction", "0.5", "--explain", "--dry-run", check=True).stdout
    assert "1 whole*" in out
    assert "* a whole device for the fraction asked: the pool cannot cut its devices into that share" in out.splitlines()


def test_a_kubeconfig_that_is_a_device_is_not_said_to_be_missing(exa_home: Path) -> None:
    result = run_exa(exa_home, "hardware", "discover", "kubernetes", env={"KUBECONFIG": "/dev/null"})
    assert result.returncode == exits.BAD_INPUT
    assert "KUBECONFIG /dev/null is not a kubeconfig file (a device or other special file)" in result.stderr
    assert "does not exist" not in result.stderr


def test_an_unknown_option_shows_the_commands_usage_not_the_roots(exa_home: Path) -> None:
    result = run_exa(exa_home, "hardware", "place", "w", "--accelerator", "amd", "--bogus")
    assert result.returncode == exits.BAD_INPUT
    assert result.stderr.startswith("usage: exa hardware place ") and "--spot {never,allow,require}" in result.stderr
    assert result.stderr.strip().endswith("exa hardware place: error: unrecognized arguments: --bogus")

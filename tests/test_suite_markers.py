"""The suite's own markers: what ``services`` covers, and that the fast suite cannot reach OPA."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import OPA_FIXTURES, ROOT

INNER_CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.conftest import *  # noqa: F403
from tests.conftest import _no_opa_left_behind, _session_env  # noqa: F401
"""

INNER_TESTS = """
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool, Workload

POOL = Pool("p", "hpc", "amd", 1, "eu")


def test_pure() -> None:
    assert Workload("w", "amd").accelerator == "amd"


def decide(home: Path) -> bool:
    from examlops_policy.opa import stop_server

    hw = Hardware(home)
    try:
        return hw.what_if(Workload("w", "amd"), [POOL]).ok
    finally:
        hw.close()
        stop_server(home)


def test_unmarked_but_reaches_opa(tmp_path: Path) -> None:
    assert decide(tmp_path)


@pytest.mark.opa
def test_marked_and_reaches_opa(tmp_path: Path) -> None:
    assert decide(tmp_path)


def test_by_fixture(hardware: Hardware) -> None:
    assert hardware.what_if(Workload("w", "amd"), [POOL]).ok
"""


def inner(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "inner"
    folder.mkdir(exist_ok=True)
    (folder / "conftest.py").write_text(INNER_CONFTEST, encoding="utf-8")
    (folder / "test_inner.py").write_text(INNER_TESTS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA", *args],
        cwd=folder, capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def outcomes(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    found = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED") and "::" in rest:
            found[rest.split("::", 1)[1].split(" ")[0]] = word
    return found


@pytest.mark.opa
def test_the_fast_suite_offers_no_opa_and_says_which_marker_is_missing(tmp_path: Path) -> None:
    fast = inner(tmp_path, "-m", "not services")
    assert outcomes(fast) == {"test_pure": "PASSED", "test_unmarked_but_reaches_opa": "FAILED"}, fast.stdout
    assert "needs the opa marker" in fast.stdout
    everything = inner(tmp_path)
    # With services selected the real OPA is there: the unmarked test passes, but only here.
    assert outcomes(everything) == {
        "test_pure": "PASSED", "test_unmarked_but_reaches_opa": "PASSED", "test_marked_and_reaches_opa": "PASSED", "test_by_fixture": "PASSED",
    }, everything.stdout  # fmt: skip


def test_the_services_marker_covers_the_service_markers_and_the_opa_fixtures() -> None:
    assert {"opa_home", "hardware", "seeded", "make_hardware", "exa_home"} <= OPA_FIXTURES
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "not services", "tests/test_cli.py", "tests/test_audit.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    ).stdout  # fmt: skip
    assert "tests/test_audit.py::" in collected and "tests/test_cli.py::" not in collected


GROUPED_TESTS = """
import os

import pytest


def record(name: str) -> None:
    with open(os.environ["RECORD"], "a", encoding="utf-8") as out:
        out.write(f"{__name__} {name} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.parametrize("i", range(4))
def test_plain(i: int) -> None:
    record("plain")


@pytest.mark.{marker}
@pytest.mark.parametrize("i", range(4))
def test_service(i: int) -> None:
    record("service")
"""


def test_parallel_runs_keep_a_files_tests_and_all_singleton_service_tests_on_one_worker(tmp_path: Path) -> None:
    folder = tmp_path / "grouped"
    folder.mkdir()
    (folder / "conftest.py").write_text(INNER_CONFTEST, encoding="utf-8")
    for name, marker in (("test_one", "slurm"), ("test_two", "kubernetes"), ("test_three", "postgres")):
        (folder / f"{name}.py").write_text(GROUPED_TESTS.replace("{marker}", marker), encoding="utf-8")
    record = tmp_path / "record.txt"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "RECORD": str(record)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup"],
        cwd=folder, capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    workers: dict[tuple[str, str], set[str]] = {}
    for line in record.read_text(encoding="utf-8").splitlines():
        module, kind, worker = line.split()
        workers.setdefault(("services", "") if kind == "service" else (module, kind), set()).add(worker)
    assert len(workers) == 4 and sum(1 for _ in record.read_text(encoding="utf-8").splitlines()) == 24
    assert all(len(on) == 1 for on in workers.values()), workers

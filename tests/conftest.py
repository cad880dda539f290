"""Shared fixtures: a real OPA (started by the product's own launcher), temp state, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool
from examlops_policy.opa_server import stop_server

ROOT = Path(__file__).resolve().parent.parent
OPA_BIN = Path(os.environ.get("EXA_OPA_BIN", ROOT / ".tools" / "bin" / "opa"))
EXA = Path(sys.executable).parent / "exa"

# The E8 specification's three pools.
SEED_POOLS = (
    Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5, carbon_factor=300, supports_fractions=True),
    Pool("hpc-mi300", "hpc", "amd", 4, "eu"),
    Pool("cloud-a100", "cloud", "nvidia", 100, "us"),
)


@pytest.fixture(scope="session", autouse=True)
def _opa_binary() -> None:
    if not OPA_BIN.is_file():
        pytest.exit(f"OPA binary missing at {OPA_BIN}: run scripts/setup", returncode=2)
    os.environ["EXA_OPA_BIN"] = str(OPA_BIN)
    os.environ.pop("EXA_OPA_URL", None)
    os.environ.pop("EXA_DB_URL", None)


@pytest.fixture(scope="session")
def opa_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state directory whose OPA server is shared by the whole session (started on demand)."""
    home = tmp_path_factory.mktemp("opa-home")
    yield home
    stop_server(home)


@pytest.fixture()
def hardware(tmp_path: Path, opa_home: Path) -> Iterator[Hardware]:
    """Fresh SQLite state in tmp_path; decisions from the session's OPA."""
    from examlops_policy.hardware import ManagedPolicy
    from examlops_policy.store.sqlite import SQLiteStore

    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db"), policy=ManagedPolicy(opa_home))
    yield hw
    hw.close()


@pytest.fixture()
def seeded(hardware: Hardware) -> Hardware:
    """The specification's three pools, registered."""
    for pool in SEED_POOLS:
        hardware.add_pool(pool)
    return hardware


@pytest.fixture(scope="session", autouse=True)
def _shared_opa(opa_home: Path) -> None:
    """One OPA for the CLI tests, so each test does not pay an OPA start (the launcher itself is
    exercised by the tests that pass ``shared_opa=False``)."""
    from examlops_policy.opa_server import ensure_server

    # An environment variable, not a module global: pytest's conftest and ``tests.conftest``
    # imported by test modules are two module objects.
    os.environ["EXA_TEST_OPA_URL"] = ensure_server(opa_home).url


def run_exa(
    home: Path, *args: str, check: bool = False, env: dict[str, str] | None = None, shared_opa: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real ``exa`` CLI with ``EXA_HOME=home`` (and the session's OPA unless told not to)."""
    opa = {"EXA_OPA_URL": os.environ["EXA_TEST_OPA_URL"]} if shared_opa and "EXA_TEST_OPA_URL" in os.environ else {}
    full_env = {**os.environ, "EXA_HOME": str(home), "COLUMNS": "200", **opa, **(env or {})}
    # cwd: outside the checkout, so files a command writes where it runs (e.g. Slurm job output)
    # land in the test's temporary directory.
    result = subprocess.run([str(EXA), *args], capture_output=True, text=True, env=full_env, timeout=60, cwd=home.parent)
    if check and result.returncode != 0:
        raise AssertionError(f"exa {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture()
def exa_home(tmp_path: Path) -> Iterator[Path]:
    """A fresh EXA_HOME for CLI tests; its on-demand OPA is stopped afterwards."""
    home = tmp_path / "exa-home"
    yield home
    stop_server(home)

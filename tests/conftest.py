"""Shared fixtures: a real OPA (started by the product's own launcher), temp state, the CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.hardware import Hardware
from examlops_policy.model import Pool
from examlops_policy.opa import ensure_server, stop_server

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
def _opa_binary(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not OPA_BIN.is_file():
        pytest.exit(f"OPA binary missing at {OPA_BIN}: run scripts/setup", returncode=2)
    os.environ["EXA_OPA_BIN"] = str(OPA_BIN)
    # The compiled tables of this session (and of the exa processes it starts), not the user's.
    os.environ["EXA_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    for var in ("EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_OPA_CA", "EXA_OPA_ALLOW_INSECURE", "EXA_OPA_IDLE_TIMEOUT", "EXA_DB_URL"):
        os.environ.pop(var, None)


def opa_servers_under(folder: Path) -> list[tuple[int, Path]]:
    """Running ``opa run --server`` processes whose last argument (a path in their state folder)
    lies under ``folder``: (pid, that path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if argv[1:3] == ["run", "--server"] and argv[-1].startswith(f"{folder}/"):
            found.append((int(entry.name), Path(argv[-1])))
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_opa_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every OPA a test starts is stopped by the end of the session: a leak is an error here.

    Leaked servers are stopped through their records (identity-checked), never by PID alone.
    """
    yield
    base = tmp_path_factory.getbasetemp()
    leaked = opa_servers_under(base)
    for _, last in leaked:
        stop_server(last.parent.parent)  # <home>/opa/runtime.json -> <home>
    if leaked:
        raise AssertionError(f"{len(leaked)} OPA server(s) outlived their tests: {sorted(str(p) for _, p in leaked)}")


@pytest.fixture(scope="session")
def opa_home(tmp_path_factory: pytest.TempPathFactory, _no_opa_left_behind: None) -> Iterator[Path]:
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
    # An environment variable, not a module global: pytest's conftest and ``tests.conftest``
    # imported by test modules are two module objects.
    os.environ["EXA_TEST_OPA_HOME"] = str(opa_home)


def shared_opa_env() -> dict[str, str]:
    """``EXA_OPA_URL`` and ``EXA_OPA_TOKEN`` of the session's OPA (started again if it went idle)."""
    home = Path(os.environ["EXA_TEST_OPA_HOME"])
    server = ensure_server(home)
    return {"EXA_OPA_URL": server.url, "EXA_OPA_TOKEN": (home / "opa" / "token").read_text(encoding="ascii").strip()}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_exa(
    home: Path, *args: str, check: bool = False, env: dict[str, str] | None = None, shared_opa: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real ``exa`` CLI with ``EXA_HOME=home`` (and the session's OPA unless told not to)."""
    opa = shared_opa_env() if shared_opa and "EXA_TEST_OPA_HOME" in os.environ else {}
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

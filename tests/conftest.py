"""Shared fixtures: a real OPA (started by the product's own launcher), temp state, the CLI.

One way to run ``exa`` (``run_exa``; ``exa_json`` for a ``--json`` command that must succeed)
and one way to get a ``Hardware`` (the ``make_hardware`` fixture, ``hardware`` and ``seeded``
built on it; ``open_hardware`` where a fixture cannot be used, e.g. in a module-scoped one) for
the whole suite.

Shared support: what several test files use lives here or in a ``tests/*_support.py`` module
(``placement_support``: placing a workload; ``backend_support``: a ``Hardware`` on each state
backend; ``clock_support``: the store's clock; ``kubernetes_support``: the test cluster;
``opa_support``, ``disk_support``, ``chromium_support``);
tests/test_test_support.py holds that no test module defines one of those names again.

Markers: a test that needs a real service process is marked ``services`` here, at collection:
one with a service marker (``slurm``, ``job_submit``, ``postgres``, ``kubernetes``, ``kueue``, ``multikueue``, ``chromium``, ``slow``) or a
fixture that reaches OPA (``OPA_FIXTURES``), or marked ``opa`` by hand (a test that starts OPA
itself). ``pytest -m "not services"`` runs the rest, the fast suite; in such a run no OPA binary
is offered, so a test that reaches OPA without saying so fails and names the marker it lacks.

Parallel runs (``pytest -n auto --dist loadgroup``, as scripts/test does): each worker has its own
temporary folder, OPA home and tables cache; a file's tests run on one worker (their module
fixtures are built once), and every test of a singleton service (Slurm, PostgreSQL, Kubernetes,
Chromium) on one worker, one at a time, as in a serial run (``group_of``; the scheduler is this
suite's, see below).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from examlops_policy.hardware import Hardware, ManagedPolicy
from examlops_policy.model import Pool
from examlops_policy.opa import ensure_server, stop_server
from examlops_policy.store.sqlite import SQLiteStore
from examlops_policy.tables import Tables

ROOT = Path(__file__).resolve().parent.parent
OPA_BIN = Path(os.environ.get("EXA_OPA_BIN", ROOT / ".tools" / "bin" / "opa"))
EXA = Path(sys.executable).parent / "exa"

# The E8 specification's three pools.
SEED_POOLS = (
    Pool("hpc-nvidia", "hpc", "nvidia", 8, "eu", cost_per_hour=2.5, carbon_factor=300, supports_fractions=True),
    Pool("hpc-mi300", "hpc", "amd", 4, "eu"),
    Pool("cloud-a100", "cloud", "nvidia", 100, "us"),
)

# -- markers: which tests need a service -----------------------------------------------------------

# Services only one test may use at a time in this suite (one group on one worker).
SINGLETON_SERVICES = ("slurm", "job_submit", "postgres", "kubernetes", "kueue", "multikueue", "chromium")
SERVICE_MARKERS = (*SINGLETON_SERVICES, "slow", "opa", "focus_validator")
# Fixtures that reach the session's OPA (or run exa, which does).
OPA_FIXTURES = frozenset({"opa_home", "make_hardware", "hardware", "seeded", "exa_home"})


def needs_services(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in SERVICE_MARKERS):
        return True
    return not OPA_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if needs_services(item):
            item.add_marker(pytest.mark.services)


# -- parallel runs (pytest-xdist, --dist loadgroup) ------------------------------------------------
#
# xdist's own loadgroup reads xdist_group marks through a node id suffix that pytest 9.2 no longer
# keeps (pytest-xdist issue 1386): tests of one group would silently spread over workers. So the
# scheduler is this suite's: each worker writes the group of every test it collected to a folder
# the controller made, and the controller schedules a group as one unit (as loadfile does a file).

_GROUPS = pytest.StashKey[Path]()


def group_of(item: pytest.Item) -> str:
    """The tests that run on one worker, in order: a file's, or all tests of the singleton services."""
    if any(item.get_closest_marker(name) for name in SINGLETON_SERVICES):
        return "services"
    return item.nodeid.split("::", 1)[0]


def _groups_dir(config: pytest.Config) -> Path:
    if _GROUPS not in config.stash:
        config.stash[_GROUPS] = Path(tempfile.mkdtemp(prefix="exa-test-groups-"))
    return config.stash[_GROUPS]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # controller: tell each worker where to write
    node.workerinput["exa_test_groups"] = str(_groups_dir(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = _groups_dir(config)

    class SuiteGroups(LoadScopeScheduling):  # type: ignore[misc]
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # Called once every worker has reported its collection. A worker writes its map in its
            # own pytest_collection_finish, which runs before xdist's (tryfirst), but the file may
            # still be reaching the disk: wait for it rather than spread a group over workers.
            deadline = time.monotonic() + 60
            while self.groups is None or nodeid not in self.groups:
                groups: dict[str, str] = {}
                for path in sorted(folder.glob("*.json")):
                    groups.update(json.loads(path.read_text(encoding="utf-8")))
                self.groups = groups
                if nodeid in groups:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tests/conftest.py: no worker wrote the group of {nodeid} to {folder}")
                time.sleep(0.05)
            return self.groups[nodeid]

    return SuiteGroups(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GROUPS in config.stash:
        shutil.rmtree(config.stash[_GROUPS], ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist tells the controller its collection is complete
def pytest_collection_finish(session: pytest.Session) -> None:
    # A run without any services test gets no OPA: a test that still reaches one fails, saying why.
    session.config.stash[_WITHOUT_SERVICES] = bool(session.items) and not any(i.get_closest_marker("services") for i in session.items)
    where = getattr(session.config, "workerinput", {}).get("exa_test_groups")
    if where:  # an xdist worker: the group of each test, for the controller's scheduler
        target = Path(where) / f"{session.config.workerinput['workerid']}.json"
        partial = target.with_suffix(".tmp")
        partial.write_text(json.dumps({item.nodeid: group_of(item) for item in session.items}), encoding="utf-8")
        partial.replace(target)


_WITHOUT_SERVICES = pytest.StashKey[bool]()


def _no_opa_stub(folder: Path) -> Path:
    stub = folder / "opa"
    stub.write_text(
        "#!/bin/sh\n"
        "echo 'this run selected no services tests, so it offers no OPA: the test that asked for one "
        "needs the opa marker (or a fixture of tests/conftest.py OPA_FIXTURES)' >&2\n"
        "exit 1\n",
        encoding="utf-8",
    )
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return stub


# -- the session's environment ---------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _session_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    if not OPA_BIN.is_file():
        pytest.exit(f"OPA binary missing at {OPA_BIN}: run scripts/setup", returncode=2)
    without = request.config.stash.get(_WITHOUT_SERVICES, False)
    os.environ["EXA_OPA_BIN"] = str(_no_opa_stub(tmp_path_factory.mktemp("no-opa")) if without else OPA_BIN)
    for var in ("EXA_OPA_URL", "EXA_OPA_TOKEN", "EXA_OPA_CA", "EXA_OPA_ALLOW_INSECURE", "EXA_OPA_IDLE_TIMEOUT", "EXA_DB_URL"):
        os.environ.pop(var, None)
    # The compiled tables of this session (and of the exa processes it starts), not the user's.
    os.environ["EXA_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    # exa processes run from bytecode compiled once per session, as from an installed package,
    # not compiled anew in every process where PYTHONDONTWRITEBYTECODE is set.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
    # One OPA home for the session, its server started on demand. An environment variable, not a
    # module global: pytest's conftest and ``tests.conftest`` imported by test modules are two
    # module objects.
    os.environ["EXA_TEST_OPA_HOME"] = str(tmp_path_factory.mktemp("opa-home"))


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
def _no_opa_left_behind(tmp_path_factory: pytest.TempPathFactory, _session_env: None) -> Iterator[None]:
    """Every OPA a test starts is stopped by the end of the session: a leak is an error here.

    The session's own OPA is stopped first; leaked servers are stopped through their records
    (identity-checked), never by PID alone.
    """
    yield
    stop_server(Path(os.environ["EXA_TEST_OPA_HOME"]))
    base = tmp_path_factory.getbasetemp()
    leaked = opa_servers_under(base)
    for _, last in leaked:
        stop_server(last.parent.parent)  # <home>/opa/runtime.json -> <home>
    if leaked:
        raise AssertionError(f"{len(leaked)} OPA server(s) outlived their tests: {sorted(str(p) for _, p in leaked)}")


@pytest.fixture(scope="session")
def opa_home() -> Path:
    """A state directory whose OPA server is shared by the whole session (started on demand,
    stopped at the end of the session)."""
    return Path(os.environ["EXA_TEST_OPA_HOME"])


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


# -- the one way to run exa ------------------------------------------------------------------------


def run_exa(
    home: Path,
    *args: str | bytes,
    check: bool = False,
    env: dict[str, str] | None = None,
    shared_opa: bool = True,
    timeout: float = 60,
    umask: int | None = None,
    binary: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """Run the real ``exa`` CLI with ``EXA_HOME=home``.

    ``shared_opa``: decide with the session's OPA (else ``home``'s own, started on demand; stop it
    with ``stop_server(home)``). ``env`` is added last. ``umask``: the process's. ``binary``: bytes
    out (for output that need not be UTF-8); arguments may be bytes (file names that are not).
    """
    opa = shared_opa_env() if shared_opa and "EXA_TEST_OPA_HOME" in os.environ else {}
    full_env = {**os.environ, "EXA_HOME": str(home), "COLUMNS": "200", **opa, **(env or {})}
    # cwd: outside the checkout, so files a command writes where it runs (e.g. Slurm job output)
    # land in the test's temporary directory.
    def with_umask() -> None:
        assert umask is not None
        os.umask(umask)

    result = subprocess.run(
        [str(EXA), *args], capture_output=True, text=not binary, env=full_env, timeout=timeout, cwd=home.parent,
        preexec_fn=None if umask is None else with_umask, check=False,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"exa {' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout!s}\n{result.stderr!s}")
    return result


def exa_json(home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """``exa ARGS --json`` run as ``run_exa`` runs it, which must succeed: the JSON it printed."""
    return json.loads(run_exa(home, *args, "--json", check=True, env=env).stdout)


@pytest.fixture()
def exa_home(tmp_path: Path) -> Iterator[Path]:
    """A fresh EXA_HOME for CLI tests; its on-demand OPA is stopped afterwards."""
    home = tmp_path / "exa-home"
    yield home
    stop_server(home)


# -- the one way to get a Hardware -----------------------------------------------------------------


def open_hardware(
    home: Path, *, pools: Sequence[Pool] = (), shared_opa: bool = True, tables: Tables | None = None, timeout: float | None = None
) -> Hardware:
    """The façade on SQLite state in ``home``, deciding with the session's OPA (``shared_opa``)
    or with ``home``'s own (started on demand; the caller stops it), with ``pools`` registered.
    The caller closes it; within a test, the ``make_hardware`` fixture does both."""
    opa_home = Path(os.environ["EXA_TEST_OPA_HOME"]) if shared_opa else home
    policy = ManagedPolicy(opa_home) if timeout is None else ManagedPolicy(opa_home, timeout=timeout)
    hw = Hardware(home, store=SQLiteStore(home / "state.db"), policy=policy, tables=tables)
    try:
        for pool in pools:
            hw.add_pool(pool)
    except BaseException:
        hw.close()
        raise
    return hw


HardwareFactory = Callable[..., Hardware]


@pytest.fixture()
def make_hardware(tmp_path: Path, opa_home: Path) -> Iterator[HardwareFactory]:
    """``make_hardware(home=None, *, pools=(), shared_opa=True, tables=None, timeout=None)``: a
    ``Hardware`` as ``open_hardware`` makes it (``home`` defaults to a new folder in tmp_path);
    every one is closed, and every home's own OPA stopped, when the test ends."""
    made: list[Hardware] = []
    own: list[Path] = []

    def make(home: Path | None = None, **options: Any) -> Hardware:
        home = home or tmp_path / f"hardware-{len(made)}"
        hw = open_hardware(home, **options)
        made.append(hw)
        if not options.get("shared_opa", True):
            own.append(home)
        return hw

    yield make
    for hw in made:
        hw.close()
    for home in own:
        stop_server(home)


@pytest.fixture()
def hardware(make_hardware: HardwareFactory, tmp_path: Path) -> Hardware:
    """Fresh SQLite state in tmp_path; decisions from the session's OPA."""
    return make_hardware(tmp_path)


@pytest.fixture()
def seeded(hardware: Hardware) -> Hardware:
    """The specification's three pools, registered."""
    for pool in SEED_POOLS:
        hardware.add_pool(pool)
    return hardware

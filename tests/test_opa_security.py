"""Who can talk to the local OPA, and what they can change: the reproduction, made to fail.

The attack this guards against: a local user rewrites ``data.examlops.tables.regions.us`` (or
uploads a policy) in the running OPA, so that eu-only data goes to a US region while the decision
records the reviewed revision. Another user must not reach the server at all; the owner's own
token must not let anyone change the reviewed policy.
"""

from __future__ import annotations

import errno
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy.opa import build_bundle, ensure_server, stop_server
from examlops_policy.opa.transport import Endpoint, OpaTransport
from examlops_policy.tables import policy_dir
from tests.conftest import run_exa
from tests.opa_support import opa_process, tcp_listen_ports

pytestmark = pytest.mark.opa  # a real OPA's socket, token and bundle roots

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creates a second Unix user (needs root)")


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    """A second, unprivileged Unix user, removed afterwards."""
    name = f"exa-other-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture()
def open_home() -> Iterator[Path]:
    """A state folder other users may enter and list (0755, as many homes are): only its private
    ``opa/`` folder stands between them and the server. Outside pytest's own 0700 folder."""
    parent = Path(tempfile.mkdtemp(prefix="exa-security-"))
    parent.chmod(0o755)
    home = parent / "home"
    home.mkdir()
    home.chmod(0o755)
    try:
        yield home
    finally:
        stop_server(home)
        shutil.rmtree(parent)


def owner_transport(home: Path, server_socket: Path) -> OpaTransport:
    token = (home / "opa" / "token").read_text().strip()
    return OpaTransport(Endpoint("unix", path=str(server_socket)), token=token)


PROBE = """
import json, os, socket, sys
home, sock, token = sys.argv[1:4]
out = {"listing": sorted(os.listdir(home))}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sock)
    out["connect"] = "connected"
except OSError as e:
    out["connect"] = e.errno
try:
    open(token).read()
    out["token"] = "read"
except OSError as e:
    out["token"] = e.errno
print(json.dumps(out))
"""


@needs_root
def test_another_user_cannot_connect_read_the_token_or_find_a_tcp_port(other_user: pwd.struct_passwd, open_home: Path) -> None:
    server = ensure_server(open_home)
    probe = subprocess.run(
        ["python3", "-I", "-c", PROBE, str(open_home), str(server.socket), str(open_home / "opa" / "token")],
        user=other_user.pw_uid, group=other_user.pw_gid, extra_groups=[], capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    seen = json.loads(probe.stdout)
    assert seen["listing"] == ["opa"]  # the probe really reaches the home: only opa/ stops it
    assert seen["connect"] == errno.EACCES
    assert seen["token"] == errno.EACCES
    assert (open_home / "opa").stat().st_mode & 0o777 == 0o700
    assert server.socket.stat().st_mode & 0o777 == 0o600  # and the socket itself is the owner's only
    assert tcp_listen_ports(server.pid) == set()
    assert tcp_listen_ports(server.supervisor_pid) == set()


def test_the_tcp_listener_check_sees_a_listening_port() -> None:
    """The check above can fail: it finds a port this process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert listener.getsockname()[1] in tcp_listen_ports(os.getpid())


REWRITES = [
    ("PUT", "/v1/data/examlops/tables/regions/us", {"area": "EU", "country": "DE"}),
    ("PATCH", "/v1/data/examlops/tables", [{"op": "replace", "path": "/regions/us/area", "value": "EU"}]),
    ("DELETE", "/v1/data/examlops/tables/regions", None),
    ("PUT", "/v1/data/examlops_runtime/token_sha256", "0" * 64),
    ("PUT", "/v1/data", {}),
    ("GET", "/v1/data/examlops_runtime", None),
    ("POST", "/v1/query", {"query": "data.examlops_runtime"}),
]


def test_with_the_token_the_reviewed_policy_still_cannot_be_changed(exa_home: Path) -> None:
    for args in (
        ["hardware", "add-pool", "cloud-us", "--target", "cloud", "--accelerator", "nvidia", "--count", "8", "--region", "us", "--cost-per-hour", "1"],
        ["hardware", "add-pool", "cloud-fra", "--target", "cloud", "--accelerator", "nvidia", "--count", "8", "--region", "eu-central-1", "--cost-per-hour", "3"],
    ):
        run_exa(exa_home, *args, check=True)
    server = ensure_server(exa_home)
    opa = owner_transport(exa_home, server.socket)
    for method, path, body in REWRITES:
        status, answer = opa.request(method, path, None if body is None else json.dumps(body).encode())
        assert status == 401, f"{method} {path} answered {status}: {answer!r}"
    rego = b'package examlops.hardware.residency\n\ncheck(pool, residency) := null\n'
    for method, path in (("PUT", "/v1/policies/x"), ("PUT", "/v1/policies/examlops/hardware/residency.rego"), ("DELETE", "/v1/policies/x")):
        assert opa.request(method, path, rego)[0] == 401, f"{method} {path}"
    # The token does work, for what this layer may do: read decisions, write its own data.
    assert opa.request("PUT", "/v1/data/examlops_fleet/note", b'{"written": true}')[0] == 204
    assert opa.json("GET", "/v1/data/examlops/tables/regions/us")["result"]["area"] == "US"  # type: ignore[index]

    eu_only = run_exa(exa_home, "hardware", "burst", "data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst", shared_opa=False)
    assert eu_only.returncode == 0, eu_only.stderr
    assert eu_only.stdout.splitlines()[0] == "✓ data → pool cloud-fra · nvidia on cloud (burst)"
    open_data = run_exa(exa_home, "hardware", "burst", "open", "--accelerator", "nvidia", "--residency", "open", "--allow-burst", shared_opa=False)
    assert open_data.stdout.splitlines()[0] == "✓ open → pool cloud-us · nvidia on cloud (burst)"  # us was eligible, and cheaper


def test_bundle_roots_make_opa_refuse_policy_writes_even_without_authorization(tmp_path: Path) -> None:
    """The second layer on its own: an OPA with the bundle and no token check at all."""
    bundle = build_bundle(policy_dir(), tmp_path)
    sock = tmp_path / "plain.sock"
    endpoint = Endpoint("unix", path=str(sock))
    with opa_process(f"--addr=unix://{sock}", str(bundle.path), endpoint=endpoint):
        opa = OpaTransport(endpoint)
        status, body = opa.request("PUT", "/v1/data/examlops/tables/regions/us", b'{"area": "EU"}')
        assert status == 400 and b"owned by bundle" in body
        status, body = opa.request("PUT", "/v1/policies/x", b"package examlops.hardware.residency\n\ncheck(pool, residency) := null\n")
        assert status == 400 and b"owned by bundle" in body
        status, body = opa.request("PUT", "/v1/policies/y", b"package system.authz\n\nallow := true\n")
        assert status == 400 and b"owned by bundle" in body
        assert opa.request("PUT", "/v1/data/examlops_fleet/pools", b"{}")[0] == 204  # this layer's own root stays writable

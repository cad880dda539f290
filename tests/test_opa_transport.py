"""The wire to OPA fails closed: wrong or missing token, TLS errors, another policy revision,
plain HTTP off the machine. Through the CLI (exit 5, nothing placed) where a user would meet it."""

from __future__ import annotations

import contextlib
import datetime
import http.server
import ipaddress
import json
import os
import shutil
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from examlops_policy import PolicyUnavailable
from examlops_policy.opa import OpaUnreachable, build_bundle
from examlops_policy.opa.transport import Endpoint, OpaTransport, parse_url
from examlops_policy.tables import policy_dir, revision
from tests.conftest import free_port, run_exa, shared_opa_env
from tests.opa_support import opa_process, runtime_data
from tests.test_cli import seed, state_snapshot

PLACE = ("hardware", "place", "w", "--accelerator", "amd", "--engine", "vllm")


def place_fails_closed(home: Path, env: dict[str, str]) -> str:
    """Run a placement that must exit 5 without writing anything; its stderr."""
    before = state_snapshot(home)
    result = run_exa(home, *PLACE, env=env)
    assert result.returncode == 5, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert state_snapshot(home) == before
    return result.stderr


def test_wrong_token_is_refused_and_nothing_is_placed(exa_home: Path) -> None:
    seed(exa_home)
    url = shared_opa_env()["EXA_OPA_URL"]
    err = place_fails_closed(exa_home, {"EXA_OPA_TOKEN": "not-the-token"})
    assert f"PolicyUnavailable: OPA at {url} refused GET /v1/data/system/bundles with 401" in err
    assert "a bearer token was sent; the token is wrong" in err
    assert run_exa(exa_home, *PLACE).returncode == 0  # the same command with the right token places


def test_missing_token_is_refused_and_says_which_variable_to_set(exa_home: Path) -> None:
    seed(exa_home)
    err = place_fails_closed(exa_home, {"EXA_OPA_TOKEN": ""})
    assert "with 401" in err and "no token was sent (set EXA_OPA_TOKEN)" in err


@pytest.fixture()
def policy_server(tmp_path: Path) -> Iterator[object]:
    """Start an external OPA on a Unix socket with the bundle of ``policies`` and a token."""
    token = "t0ken-for-an-external-opa"
    with contextlib.ExitStack() as servers:

        def start(policies: Path, name: str) -> tuple[str, str]:
            folder = tmp_path / f"server-{name}"
            folder.mkdir()
            bundle = build_bundle(policies, folder)
            sock = folder / "opa.sock"
            servers.enter_context(opa_process(
                f"--addr=unix://{sock}", "--authentication=token", "--authorization=basic", str(bundle.path),
                str(runtime_data(folder, token)), endpoint=Endpoint("unix", path=str(sock)), token=token,
            ))  # fmt: skip
            return f"unix://{sock}", token

        yield start


def test_an_opa_serving_another_policy_revision_is_refused(exa_home: Path, tmp_path: Path, policy_server) -> None:  # type: ignore[no-untyped-def]
    seed(exa_home)
    edited = tmp_path / "edited"
    shutil.copytree(policy_dir(), edited)
    regions = edited / "examlops" / "tables" / "regions.yaml"
    regions.write_text(regions.read_text().replace("us: {area: US,", "us: {area: EU,"))  # "us" made to look like the EU
    url, token = policy_server(edited, "edited")
    err = place_fails_closed(exa_home, {"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token})
    assert f"PolicyError: OPA at {url} serves policy revision {revision(edited)}" in err
    assert f"but the reviewed policy files in {policy_dir()} are {revision(policy_dir())}" in err
    status = run_exa(exa_home, "opa", "status", env={"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token})
    assert status.returncode == 5 and f"✗ policy {revision(edited)}, but the policy files are" in status.stdout

    url, token = policy_server(policy_dir(), "reviewed")  # the same server setup with the reviewed bundle places
    assert run_exa(exa_home, *PLACE, env={"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token}).returncode == 0
    status = run_exa(exa_home, "opa", "status", "--json", env={"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token})
    doc = json.loads(status.stdout)
    assert status.returncode == 0 and doc["managed"] is False and doc["revision_matches"] is True
    assert doc["protection"]["token_auth"] is True and doc["protection"]["bundle_roots"] == ["examlops", "system/authz"]
    stop = run_exa(exa_home, "opa", "stop", env={"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token})
    assert stop.returncode == 2 and "is external (EXA_OPA_URL): exa neither starts nor stops it" in stop.stderr


def test_an_opa_without_a_bundle_is_refused(exa_home: Path, tmp_path: Path) -> None:
    seed(exa_home)
    sock = tmp_path / "loose.sock"
    with opa_process(f"--addr=unix://{sock}", "--ignore=*_test.rego", str(policy_dir()), endpoint=Endpoint("unix", path=str(sock))):
        err = place_fails_closed(exa_home, {"EXA_OPA_URL": f"unix://{sock}", "EXA_OPA_TOKEN": ""})
    assert f"PolicyError: OPA at unix://{sock} serves no policy bundle for examlops" in err


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key (no CA anyone trusts)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "examlops test OPA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = folder / "opa.crt", folder / "opa.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_file, key_file


def test_tls_with_an_untrusted_certificate_fails_closed_and_the_ca_fixes_it(exa_home: Path, tmp_path: Path) -> None:
    seed(exa_home)
    cert, key = self_signed(tmp_path)
    token = "tls-token"
    bundle = build_bundle(policy_dir(), tmp_path)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    args = (f"--addr=127.0.0.1:{port}", f"--tls-cert-file={cert}", f"--tls-private-key-file={key}",
            "--authentication=token", "--authorization=basic", str(bundle.path), str(runtime_data(tmp_path, token)))  # fmt: skip
    with opa_process(*args, endpoint=Endpoint("https", host="127.0.0.1", port=port), token=token, ca=cert):
        err = place_fails_closed(exa_home, {"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token})
        assert f"PolicyError: TLS verification of OPA at {url} failed: " in err
        assert "give the CA that signed its certificate in EXA_OPA_CA" in err
        trusted = run_exa(exa_home, *PLACE, env={"EXA_OPA_URL": url, "EXA_OPA_TOKEN": token, "EXA_OPA_CA": str(cert)})
        assert trusted.returncode == 0, trusted.stderr


def test_plain_http_off_the_machine_is_refused_unless_allowed(exa_home: Path) -> None:
    seed(exa_home)
    err = place_fails_closed(exa_home, {"EXA_OPA_URL": "http://192.0.2.10:8181"})
    assert "plain HTTP to a host that is not loopback" in err and "EXA_OPA_ALLOW_INSECURE=1" in err
    assert parse_url("http://192.0.2.10:8181", allow_insecure=True) == Endpoint("http", host="192.0.2.10", port=8181)
    for loopback in ("http://127.0.0.1:8181", "http://[::1]:8181", "http://localhost:8181"):
        assert parse_url(loopback).scheme == "http"


@pytest.mark.parametrize("url", ["ftp://opa:1", "unix://relative/opa.sock", "https://opa:8181/v1/data", "http://:80"])
def test_urls_that_do_not_name_a_server_are_refused(url: str) -> None:
    with pytest.raises(PolicyUnavailable):
        parse_url(url)


class _Counting(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    connections = 0


def fake_server(sock: Path, *, keep_alive: bool) -> _Counting:
    """A tiny HTTP/1.1 server on a Unix socket that counts connections; without ``keep_alive`` it
    drops each connection after answering while announcing keep-alive (as an idle timeout does)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            server.connections += 1

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            self.close_connection = not keep_alive

        def log_message(self, *args: object) -> None:
            pass

    server = _Counting(str(sock), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("keep_alive", [True, False], ids=["kept", "dropped"])
def test_one_connection_is_kept_and_a_dropped_one_is_reopened_once(tmp_path: Path, keep_alive: bool) -> None:
    sock = tmp_path / "fake.sock"
    server = fake_server(sock, keep_alive=keep_alive)
    try:
        transport = OpaTransport(Endpoint("unix", path=str(sock)))
        assert [transport.request("GET", "/x") for _ in range(3)] == [(200, b"{}")] * 3
        assert server.connections == (1 if keep_alive else 3)
    finally:
        server.shutdown()
        server.server_close()


def test_no_server_is_unreachable_and_a_fresh_connection_is_not_retried(tmp_path: Path) -> None:
    transport = OpaTransport(Endpoint("unix", path=str(tmp_path / "absent.sock")))
    with pytest.raises(OpaUnreachable, match=r"absent.sock is not reachable \(No such file or directory\)"):
        transport.request("GET", "/health")
    tcp = OpaTransport(Endpoint("http", host="127.0.0.1", port=free_port()))
    with pytest.raises(OpaUnreachable, match=r"is not reachable \(Connection refused\)"):
        tcp.request("GET", "/health")


def test_a_socket_path_longer_than_an_address_holds_still_connects(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    sock = deep / "opa.sock"
    assert len(str(sock)) > 108
    cwd = os.getcwd()
    os.chdir(deep)  # bind by a short relative name, as the launcher does for OPA
    try:
        server = fake_server(Path("opa.sock"), keep_alive=True)
    finally:
        os.chdir(cwd)
    try:
        assert OpaTransport(Endpoint("unix", path=str(sock))).request("GET", "/x") == (200, b"{}")
    finally:
        server.shutdown()
        server.server_close()

"""``exa hardware serve --listen``: the placement service as a real process (SQLite here, and
PostgreSQL with two replicas), every endpoint, the token rules (missing, wrong, revoked, expired,
another project, a scope the token lacks) and the faults (malformed JSON, unknown fields, oversize
bodies, absurd numbers: 400/413/422 and nothing written; plain HTTP off loopback refused; SIGTERM
finishes what is under way). The OpenAPI document served is the one checked in."""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from examlops_policy.service import openapi, tokens
from examlops_policy.store.sqlite import SQLiteStore
from reliability.backends import fresh_backend
from tests.conftest import ROOT, run_exa
from tests.service_support import Service, start

pytestmark = pytest.mark.opa  # the service process decides with the session's OPA

PROJECT = "llm-pretraining"
OTHER = "inference-eu"


def pools(home: Path, env: dict[str, str] | None = None, count: int = 4) -> None:
    run_exa(home, "hardware", "add-pool", "small", "--target", "hpc", "--accelerator", "amd", "--count", str(count), "--region", "eu",
            "--cost-per-hour", "0.5", check=True, env=env)  # fmt: skip


def written(service: Service) -> tuple[int, int]:
    """(decisions, audit entries) in the state: what a refused request must not change."""
    store = SQLiteStore(service.home / "state.db")
    try:
        return len(store.decision_rows(limit=1000)), len(store.audit_rows())
    finally:
        store.close()


def problem(answer: object, status: int, exit_code: int) -> dict[str, object]:
    from tests.service_support import Answer

    assert isinstance(answer, Answer)
    assert answer.status == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json
    assert body["status"] == status and body["exit_code"] == exit_code and body["type"].startswith("https://") and body["detail"]
    return dict(body)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> object:
    home = tmp_path_factory.mktemp("service") / "home"
    pools(home)
    service = start(home)
    yield service
    code, out = service.stop()
    assert code == 0, out


def test_the_openapi_document_checked_in_is_the_one_the_code_makes_and_serves(svc: Service) -> None:
    checked_in = (ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8")
    assert checked_in == openapi.text(), "run: python -m examlops_policy.service.openapi > schemas/openapi.json"
    served = svc.call("GET", "/openapi.json")
    assert served.status == 200 and served.json == json.loads(checked_in)
    assert served.json["openapi"] == "3.1.0" and "/v1/decisions" in served.json["paths"]


def test_health_readiness_and_metrics_need_no_token(svc: Service) -> None:
    assert svc.call("GET", "/healthz").json == {"status": "alive"}
    ready = svc.call("GET", "/readyz")
    assert ready.status == 200 and ready.json["policy_revision"].startswith("sha256:")
    token, _ = svc.token()
    svc.call("POST", "/v1/decisions", token, {"workload": {"name": "m", "accelerator": "amd"}, "dry_run": True})
    metrics = svc.call("GET", "/metrics")
    assert metrics.status == 200 and metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = metrics.text
    assert 'exa_decisions_total{outcome="placed",dry_run="true"}' in text
    assert "exa_decision_seconds_bucket{le=\"+Inf\"}" in text and "exa_decision_seconds_count" in text
    assert "exa_queue_depth 0" in text and "exa_opa_errors_total 0" in text
    assert f'exa_policy_info{{revision="{ready.json["policy_revision"]}"}} 1' in text


def test_a_dry_run_records_nothing_and_a_placement_is_the_cli_json(svc: Service) -> None:
    token, ident = svc.token()
    before = written(svc)
    dry = svc.call("POST", "/v1/decisions", token, {"workload": {"name": "d", "accelerator": "amd"}, "dry_run": True})
    assert dry.status == 200 and dry.json["outcome"] == "placed" and "id" not in dry.json
    assert written(svc) == before
    compact = svc.call("POST", "/v1/decisions?verdicts=false", token, {"workload": {"name": "d", "accelerator": "amd"}, "dry_run": True}).json
    assert dry.json["verdicts"] and compact["verdicts"] == [] and (compact["outcome"], compact["pool"]) == (dry.json["outcome"], dry.json["pool"])
    placed = svc.call("POST", "/v1/decisions", token, {"workload": {"name": "p", "accelerator": "amd"}, "lease": "1h"}).json
    assert placed["outcome"] == "placed" and placed["pool"] == "small" and placed["workload"]["project"] == PROJECT
    assert placed["lease_expires_at"] is not None
    store = SQLiteStore(svc.home / "state.db")
    try:
        entries = [json.loads(r.canonical) for r in store.audit_rows()]
    finally:
        store.close()
    recorded = [e for e in entries if e["kind"] == "decision" and e.get("decision_id") == placed["id"]]
    assert [e["source"] for e in recorded] == [f"exa-service:token:{ident}"]  # who asked, from the token
    cli = json.loads(svc.exa("hardware", "explain", placed["id"], "--json").stdout)
    assert svc.call("GET", f"/v1/decisions/{placed['id']}", token).json == cli
    assert set(placed) == set(cli)
    text = svc.call("GET", f"/v1/decisions/{placed['id'][:12]}?format=text", token)
    assert text.status == 200 and text.text == svc.exa("hardware", "explain", placed["id"]).stdout
    explained = svc.call("GET", f"/v1/decisions/{placed['id']}?explain=true", token)
    assert explained.json["id"] == placed["id"]
    replay = svc.call("GET", f"/v1/decisions/{placed['id']}?replay=true", token)
    assert replay.status == 200 and replay.json["same"] is True
    listed = svc.call("GET", "/v1/decisions?limit=5", token).json
    assert placed["id"] in [d["id"] for d in listed["decisions"]]
    renewed = svc.call("POST", f"/v1/decisions/{placed['id']}/renew", token, {"lease": "2h"})
    assert renewed.status == 200 and renewed.json["lease_expires_at"] > placed["lease_expires_at"]
    released = svc.call("POST", f"/v1/decisions/{placed['id']}/release", token)
    assert released.status == 200 and released.json["already_released"] is False
    again = svc.call("POST", f"/v1/decisions/{placed['id']}/release", token)
    assert again.json["already_released"] is True
    problem(svc.call("GET", "/v1/decisions/ffffffffffff", token), 404, 8)


def test_start_estimates_for_a_workload_record_nothing(svc: Service) -> None:
    token, _ = svc.token()
    before = written(svc)
    got = svc.call("GET", "/v1/estimates?accelerator=amd&count=1", token)
    assert got.status == 200, got.text
    assert got.json["outcome"] == "placed" and got.json["estimate_source"] == "now" and got.json["estimated_start"]
    assert [p["pool"] for p in got.json["pools"]] == ["small"] and got.json["pools"][0]["estimate_source"] == "now"
    posted = svc.call("POST", "/v1/estimates", token, {"workload": {"name": "e", "accelerator": "amd"}})
    assert posted.status == 200 and posted.json["pool"] == "small"
    assert written(svc) == before
    problem(svc.call("GET", "/v1/estimates?accelerator=amd&count=x", token), 422, 2)
    problem(svc.call("GET", "/v1/estimates?accelerator=amd&colour=red", token), 422, 2)
    problem(svc.call("GET", "/v1/estimates?accelerator=amd"), 401, 2)


def test_a_retry_with_the_same_request_id_places_nothing_more(svc: Service) -> None:
    token, _ = svc.token()
    body = {"workload": {"name": "r", "accelerator": "amd"}, "request_id": "retry-1"}
    first = svc.call("POST", "/v1/decisions", token, body).json
    free = svc.call("GET", "/v1/pools/small", token).json["free"]
    counted = svc.call("GET", "/metrics").text
    second = svc.call("POST", "/v1/decisions", token, body).json
    assert second["id"] == first["id"] and svc.call("GET", "/v1/pools/small", token).json["free"] == free
    recounted = svc.call("GET", "/metrics").text  # the retry is counted as one, not as a decision

    def figure(text: str, name: str) -> str:
        return next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name))

    placed = 'exa_decisions_total{outcome="placed",dry_run="false"}'
    assert figure(recounted, placed) == figure(counted, placed)
    assert int(figure(recounted, "exa_decision_retries_total")) == int(figure(counted, "exa_decision_retries_total")) + 1
    other, _ = svc.token(OTHER)
    before = written(svc)
    problem(svc.call("POST", "/v1/decisions", other, {**body, "workload": {"name": "r", "accelerator": "amd"}}), 403, 2)
    assert written(svc) == before
    svc.call("POST", f"/v1/decisions/{first['id']}/release", token)
    problem(svc.call("POST", "/v1/decisions", token, body), 409, 2)


def test_pools_and_the_queue_read_as_the_cli_prints_them(svc: Service) -> None:
    token, _ = svc.token()
    assert svc.call("GET", "/v1/pools", token).json == json.loads(svc.exa("hardware", "pools", "--json").stdout)
    assert svc.call("GET", "/v1/pools?format=text", token).text == svc.exa("hardware", "pools").stdout
    assert svc.call("GET", "/v1/pools/small", token).json == json.loads(svc.exa("hardware", "pool", "small", "--json").stdout)
    problem(svc.call("GET", "/v1/pools/nope", token), 404, 8)
    held = [svc.call("POST", "/v1/decisions", token, {"workload": {"name": f"f{i}", "accelerator": "amd"}}).json for i in range(4)]
    held = [h for h in held if h["outcome"] == "placed"]
    queued = svc.call("POST", "/v1/decisions", token, {"workload": {"name": "q", "accelerator": "amd"}, "queue": True}).json
    assert queued["outcome"] == "queued", queued
    listing = svc.call("GET", "/v1/queue", token).json
    assert queued["id"] in [e["id"] for e in listing["entries"]]
    cli = json.loads(svc.exa("hardware", "queue", "--json").stdout)
    # The same listing (what is worked out from the time, such as used device-hours, moves on meanwhile).
    assert [(e["id"], e["state"], e["workload"]) for e in listing["entries"]] == [(e["id"], e["state"], e["workload"]) for e in cli["entries"]]
    assert set(listing["projects"]) == set(cli["projects"])
    other, _ = svc.token(OTHER)
    problem(svc.call("POST", f"/v1/queue/{queued['id']}/cancel", other), 403, 2)
    cancelled = svc.call("POST", f"/v1/queue/{queued['id']}/cancel", token)
    assert cancelled.status == 200 and cancelled.json["state"] == "cancelled" and cancelled.json["already_cancelled"] is False
    problem(svc.call("POST", f"/v1/decisions/{held[0]['id']}/release", other), 403, 2)
    for h in held:
        svc.call("POST", f"/v1/decisions/{h['id']}/release", token)


def test_the_token_rules(svc: Service) -> None:
    token, ident = svc.token()
    body = {"workload": {"name": "t", "accelerator": "amd"}, "dry_run": True}
    assert svc.call("POST", "/v1/decisions", token, body).status == 200
    missing = problem(svc.call("POST", "/v1/decisions", None, body), 401, 2)
    assert "bearer" in str(missing["detail"]).lower()
    assert svc.call("GET", "/v1/pools").headers["www-authenticate"].startswith("Bearer")
    problem(svc.call("POST", "/v1/decisions", token[:-2] + "xx", body), 401, 2)
    problem(svc.call("GET", "/v1/pools", headers={"Authorization": f"Basic {token}"}), 401, 2)
    store = SQLiteStore(svc.home / "state.db")
    try:
        expired = tokens.create(store, PROJECT, "place,read", expires=timedelta(seconds=-1)).token
    finally:
        store.close()
    assert "expired" in str(problem(svc.call("GET", "/v1/pools", expired), 401, 2)["detail"])
    svc.exa("tokens", "revoke", ident)
    assert "revoked" in str(problem(svc.call("POST", "/v1/decisions", token, body), 401, 2)["detail"])
    reader, _ = svc.token(scope="read")
    assert svc.call("GET", "/v1/pools", reader).status == 200
    assert "needs place" in str(problem(svc.call("POST", "/v1/decisions", reader, body), 403, 2)["detail"])
    placer, _ = svc.token(scope="place")
    problem(svc.call("GET", "/v1/pools", placer), 403, 2)
    before = written(svc)
    other = problem(svc.call("POST", "/v1/decisions", placer, {"workload": {"name": "t", "accelerator": "amd", "project": OTHER}}), 403, 2)
    assert OTHER in str(other["detail"]) and written(svc) == before
    pool = {"name": "extra", "target": "hpc", "accelerator": "amd", "count": 1, "region": "eu", "cost_per_hour": 0.4}
    problem(svc.call("POST", "/v1/pools", placer, {"pools": [pool], "dry_run": True}), 403, 2)
    admin, _ = svc.token(scope="admin")
    applied = svc.call("POST", "/v1/pools", admin, {"pools": [pool], "dry_run": True})
    assert applied.status == 200 and applied.json[0]["action"] == "added", applied.text
    # The nodes pools name, as a pools file states them (docs/inventory.md).
    node = {"name": "mi-0", "model": "MI300X", "devices": 2, "cpu": 16}
    named = {**pool, "nodes": ["mi-0"]}
    del named["count"]
    applied = svc.call("POST", "/v1/pools", admin, {"nodes": [node], "pools": [named], "dry_run": True})
    assert applied.status == 200 and applied.json[0]["action"] == "added", applied.text
    unknown = problem(svc.call("POST", "/v1/pools", admin, {"nodes": [node], "pools": [{**named, "nodes": ["mi-9"]}], "dry_run": True}), 422, 2)
    assert "node 'mi-9'" in str(unknown["detail"]), unknown


@pytest.mark.parametrize(
    ("raw", "status", "kind"),
    [
        (b'{"workload": {"name": "x", "accelerator": "amd"', 400, "malformed-json"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "count": NaN}}', 400, "malformed-json"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "fraction": 1e400}}', 400, "malformed-json"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "count": 1' + b"0" * 5000 + b"}}", 400, "malformed-json"),
        (b"\xff\xfe", 400, "malformed-json"),
        (b'{"workload": {"name": "x", "accelerator": "amd"}, "dryrun": true}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "colour": "red"}}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "count": 1000000000000}}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd", "nodes": -3}}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd"}, "lease": "-5m"}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd"}, "request_id": "a b"}', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd"}, "queue": "yes"}', 422, "SpecError"),
        (b'["workload"]', 422, "SpecError"),
        (b'{"workload": {"name": "x", "accelerator": "amd"}, "pad": "' + b"x" * 70000 + b'"}', 413, "body-too-large"),
    ],
)
def test_bad_bodies_are_refused_and_write_nothing(svc: Service, raw: bytes, status: int, kind: str) -> None:
    token, _ = svc.token()
    before = written(svc)
    body = problem(svc.call("POST", "/v1/decisions", token, raw=raw), status, 2)
    assert str(body["type"]).endswith(kind) or body["error"] == kind
    assert written(svc) == before


def test_a_stalled_client_blocks_no_one(svc: Service) -> None:
    """A client that sends half a body and stalls holds neither the worker nor the write lock:
    other clients place meanwhile."""
    import socket

    token, _ = svc.token()
    assert svc.port is not None
    stalled = socket.create_connection(("127.0.0.1", svc.port), timeout=60)
    try:
        stalled.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        + f"Authorization: Bearer {token}\r\nContent-Length: 1000\r\n\r\n".encode() + b'{"workload": {"na')
        others = [svc.call("POST", "/v1/decisions", token, {"workload": {"name": f"w{i}", "accelerator": "amd"}, "dry_run": i == 0}) for i in range(2)]
        assert [a.status for a in others] == [200, 200]
        placed = others[1].json
        assert svc.call("POST", f"/v1/decisions/{placed['id']}/release", token).status == 200
    finally:
        stalled.close()


def test_unknown_routes_and_methods_are_problems(svc: Service) -> None:
    token, _ = svc.token()
    problem(svc.call("GET", "/v1/nothing", token), 404, 2)
    problem(svc.call("DELETE", "/v1/pools", token), 405, 2)
    problem(svc.call("POST", "/v1/decisions", token, raw=b"name=x", headers={"Content-Type": "application/x-www-form-urlencoded"}), 415, 2)


def test_a_unix_socket_is_its_owners_and_sigterm_finishes_requests_under_way(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pools(home)
    service = start(home, unix=True)
    try:
        assert service.socket_path is not None
        assert stat.S_IMODE(service.socket_path.stat().st_mode) == 0o600
        record = json.loads(next((home / "serve").glob("*.json")).read_text(encoding="utf-8"))
        assert record["pid"] == service.proc.pid and "--listen" in record["argv"]
        token, _ = service.token()
        # The command line as a client over the socket prints what it prints locally.
        remote = {"EXA_SERVER": f"unix:{service.socket_path}", "EXA_TOKEN": token}
        local, served = run_exa(home, "hardware", "pools"), run_exa(home, "hardware", "pools", env=remote)
        assert (served.returncode, served.stdout) == (local.returncode, local.stdout), served.stderr
        answers: list[int] = []

        def place(i: int) -> None:
            try:
                answers.append(service.call("POST", "/v1/decisions", token, {"workload": {"name": f"s{i}", "accelerator": "amd"}}).status)
            except OSError:  # it came after the service stopped accepting: refused, nothing placed
                answers.append(0)

        workers = [threading.Thread(target=place, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        code, out = service.stop(signal.SIGTERM)
        for w in workers:
            w.join(timeout=120)
    finally:
        if service.proc.poll() is None:
            service.stop(signal.SIGKILL)
    assert code == 0, out
    assert "stopped" in out and not list((home / "serve").glob("*.json")) and not service.socket_path.exists()
    # Each request either was answered whole or never reached the service: no half-written decision.
    placed = len([a for a in answers if a == 200])
    store = SQLiteStore(home / "state.db")
    try:
        assert len(store.decision_rows(limit=100)) == placed
    finally:
        store.close()
    assert run_exa(home, "audit", "verify").returncode == 0


def test_plain_http_off_loopback_is_refused_without_insecure(tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = run_exa(home, "hardware", "serve", "--listen", "0.0.0.0:0", "--interval", "2s")
    assert refused.returncode == 2 and "--insecure" in refused.stderr and not (home / "serve").exists() or not list((home / "serve").glob("*.json"))
    half = run_exa(home, "hardware", "serve", "--listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "c.pem"))
    assert half.returncode == 2 and "--tls-key" in half.stderr
    (tmp_path / "c.pem").write_text("not a certificate", encoding="utf-8")
    (tmp_path / "k.pem").write_text("not a key", encoding="utf-8")
    bad = run_exa(home, "hardware", "serve", "--listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem"))
    assert bad.returncode == 2 and "do not load" in bad.stderr
    assert run_exa(home, "hardware", "serve", "--listen", "nowhere").returncode == 2


def test_tls_from_certificate_and_key(tmp_path: Path) -> None:
    import ssl

    cert, key = _self_signed(tmp_path)
    home = tmp_path / "home"
    pools(home)
    context = ssl.create_default_context(cafile=str(cert))
    service = start(home, "--tls-cert", str(cert), "--tls-key", str(key), tls=context)
    try:
        token, _ = service.token()
        assert service.call("GET", "/v1/pools", token).status == 200
        # The command line as a client over TLS: it trusts the CA EXA_SERVER_CA names, and no other.
        remote = {"EXA_SERVER": f"https://127.0.0.1:{service.port}", "EXA_TOKEN": token}
        served = run_exa(home, "hardware", "pools", "--json", env={**remote, "EXA_SERVER_CA": str(cert)})
        assert served.returncode == 0 and served.stdout == run_exa(home, "hardware", "pools", "--json").stdout, served.stderr
        untrusted = run_exa(home, "hardware", "pools", env=remote)
        assert untrusted.returncode == 12 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr, untrusted.stderr
    finally:
        code, out = service.stop()
    assert code == 0, out and "https://127.0.0.1" in out


def _self_signed(folder: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.postgres
def test_two_replicas_on_postgresql_serve_one_state_and_never_grant_twice(tmp_path: Path) -> None:
    with fresh_backend("postgres", tmp_path) as backend:
        home = tmp_path / "home"
        env = backend.env()
        pools(home, env, count=3)  # fewer than the project's quota: the pool is what runs out
        replicas = [start(home, env=env), start(tmp_path / "home2", env=env)]
        try:
            token, _ = replicas[0].token()
            made = replicas[0].call("POST", "/v1/decisions", token, {"workload": {"name": "seen", "accelerator": "amd"}}).json
            assert replicas[1].call("GET", f"/v1/decisions/{made['id']}", token).json["id"] == made["id"]
            answers: list[dict[str, object]] = []
            lock = threading.Lock()

            def place(replica: Service, i: int) -> None:
                got = replica.call("POST", "/v1/decisions", token, {"workload": {"name": f"c{i}", "accelerator": "amd"}}).json
                with lock:
                    answers.append(got)

            threads = [threading.Thread(target=place, args=(replicas[i % 2], i)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=180)
            outcomes = sorted(str(a["outcome"]) for a in answers)
            assert outcomes.count("placed") == 2 and len(outcomes) == 10, outcomes
            with backend.raw() as db:
                live = db.execute("SELECT SUM(devices) FROM allocations WHERE released_at IS NULL").fetchone()[0]
            assert live == 3
        finally:
            outs = [r.stop() for r in replicas]
        assert all(code == 0 for code, _ in outs), outs
        assert run_exa(home, "audit", "verify", env=env).returncode == 0



# -- the command line as the service's client -------------------------------------------------------


DECISION_CODE = ("examlops_policy.hardware", "examlops_policy._core", "examlops_policy.store", "examlops_policy.model",
                 "examlops_policy.app", "examlops_policy.specs", "examlops_policy.tables", "examlops_policy.opa")  # fmt: skip


def test_the_client_module_imports_nothing_of_the_package() -> None:
    import ast

    from examlops_policy.service import client

    tree = ast.parse(Path(client.__file__).read_text(encoding="utf-8"))
    named = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    named |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in named if m.startswith("examlops")], named


def untimed(value: object) -> object:
    """``value`` with every time in it (text that starts as an ISO 8601 instant) blanked, and the
    digests of what holds those times (the input, the start estimates)."""
    import re

    if isinstance(value, dict):
        return {k: "<digest>" if k.endswith("digest") else untimed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return "<time>" if isinstance(value, str) and re.match(r"\d{4}-\d\d-\d\dT\d\d:", value) else value


def test_the_cli_as_a_client_prints_what_it_prints_locally(svc: Service) -> None:
    token, _ = svc.token()
    remote = {"EXA_SERVER": f"http://127.0.0.1:{svc.port}", "EXA_TOKEN": token}
    place = ("hardware", "place", "c", "--accelerator", "amd", "--project", PROJECT, "--dry-run")
    for extra in ((), ("--json",), ("--explain",)):
        local = run_exa(svc.home, *place, *extra)
        served = run_exa(svc.home, *place, *extra, env=remote)
        assert served.returncode == local.returncode == 0, served.stderr
        if extra == ("--json",):  # the same decision, made a moment later
            served_json, local_json = untimed(json.loads(served.stdout)), untimed(json.loads(local.stdout))
            assert isinstance(served_json, dict) and isinstance(local_json, dict)
            # The service keeps the policy's verdicts while the fleet and policy stay as they are:
            # its provenance says "reused" where a cold process says "fresh".
            assert served_json["provenance"].pop("verdicts") in ("reused", "fresh") and local_json["provenance"].pop("verdicts") == "fresh"
            assert served_json == local_json
        else:  # (the explanation says where the verdicts came from, as above)
            assert served.stdout.replace("verdicts reused", "verdicts fresh") == local.stdout
    for args in (("hardware", "pools"), ("hardware", "pools", "--json"), ("hardware", "pool", "small"), ("hardware", "queue")):
        local, served = run_exa(svc.home, *args), run_exa(svc.home, *args, env=remote)
        assert (served.returncode, served.stdout) == (local.returncode, local.stdout), args
    # Decisions of the token's project only: here every decision is PROJECT's, so the page is the local one.
    listing: tuple[tuple[str, ...], ...] = (("hardware", "decisions"), ("hardware", "decisions", "--json"), ("hardware", "decisions", "--limit", "1"),
                                            ("hardware", "decisions", "--since", "2999-01-01T00:00:00Z"))  # fmt: skip
    for listed in listing:
        local, served = run_exa(svc.home, *listed), run_exa(svc.home, *listed, env=remote)
        assert (served.returncode, served.stdout) == (local.returncode, local.stdout), (listed, served.stdout, served.stderr, local.stdout)
    # burst: place asking for cloud, bursting opt-in (refused alike without --allow-burst).
    burst = ("hardware", "burst", "b", "--accelerator", "amd", "--project", PROJECT, "--dry-run")
    for asked in ((*burst, "--allow-burst"), (*burst, "--allow-burst", "--json"), burst):
        local, served = run_exa(svc.home, *asked), run_exa(svc.home, *asked, env=remote)
        if "--json" in asked:
            assert served.returncode == local.returncode and json.loads(served.stdout)["workload"] == json.loads(local.stdout)["workload"]
        else:
            assert (served.returncode, served.stdout, served.stderr) == (local.returncode, local.stdout, local.stderr), (asked, served, local)
    rejected = ("hardware", "place", "n", "--accelerator", "amd", "--count", "8", "--project", PROJECT, "--dry-run")
    local, served = run_exa(svc.home, *rejected), run_exa(svc.home, *rejected, env=remote)
    assert served.returncode == local.returncode == 3 and served.stdout == local.stdout
    made = run_exa(svc.home, "hardware", "place", "k", "--accelerator", "amd", "--json", env=remote)
    ident = json.loads(made.stdout)["id"]
    assert json.loads(made.stdout)["workload"]["project"] == PROJECT
    assert run_exa(svc.home, "hardware", "explain", ident, env=remote).stdout == run_exa(svc.home, "hardware", "explain", ident).stdout
    released = run_exa(svc.home, "hardware", "release", ident, env=remote)
    assert released.returncode == 0 and f"decision {ident[:12]}" in released.stdout
    missing = run_exa(svc.home, "hardware", "explain", "ffffffffffff", "--json", env=remote)
    assert missing.returncode == 8 and json.loads(missing.stderr)["code"] == 8
    other = run_exa(svc.home, "hardware", "place", "o", "--accelerator", "amd", "--project", OTHER, env=remote)
    assert other.returncode == 2 and OTHER in other.stderr
    assert run_exa(svc.home, *place, env={**remote, "EXA_TOKEN": token + "x"}).returncode == 2
    assert run_exa(svc.home, *place, env={"EXA_SERVER": remote["EXA_SERVER"]}).returncode == 2
    assert run_exa(svc.home, "audit", "verify", env=remote).returncode == 2  # not offered: said, not run locally
    assert run_exa(svc.home, *place, env={**remote, "EXA_SERVER": "http://127.0.0.1:9"}).returncode == 12


def test_the_client_path_loads_no_decision_code(svc: Service) -> None:
    import subprocess
    import sys

    token, _ = svc.token()
    code = (
        "import sys\n"
        "from examlops_policy.cli.main import main\n"
        "status = main(['hardware', 'place', 'i', '--accelerator', 'amd', '--dry-run', '--json'])\n"
        f"loaded = [m for m in sys.modules if m.startswith({DECISION_CODE!r})]\n"
        "assert not loaded, loaded\n"
        "sys.exit(status)\n"
    )
    env = {**os.environ, "EXA_SERVER": f"http://127.0.0.1:{svc.port}", "EXA_TOKEN": token}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "placed"


def test_apply_through_the_client_prints_and_does_what_it_does_locally(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pools(home)
    service = start(home)
    try:
        token, _ = service.token(scope="admin,read")
        remote = {"EXA_SERVER": f"http://127.0.0.1:{service.port}", "EXA_TOKEN": token}
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(
            "nodes:\n  - {name: g0, model: h100, devices: 4, cpu: 32}\n"
            "pools:\n  - {name: small, target: hpc, accelerator: amd, count: 4, region: eu, cost_per_hour: 0.5}\n"
            "  - {name: h100, target: hpc, accelerator: nvidia, region: eu, nodes: [g0]}\n",
            encoding="utf-8",
        )
        bad = tmp_path / "bad.yaml"
        bad.write_text("pools:\n  - {name: h100, target: hpc, accelerator: nvidia, region: eu, nodes: [g9]}\n", encoding="utf-8")
        for args in (("-f", str(fleet), "--dry-run"), ("-f", str(fleet), "--dry-run", "--json"), ("-f", str(bad)), ("-f", str(bad), "--json")):
            local = run_exa(home, "hardware", "apply", *args)
            served = run_exa(home, "hardware", "apply", *args, env=remote)
            assert (served.returncode, served.stdout) == (local.returncode, local.stdout), (args, served, local)
            if local.returncode:
                assert str(bad) in served.stderr and "node 'g9'" in served.stderr, served.stderr
                assert served.stderr == local.stderr, (served.stderr, local.stderr)
        done = run_exa(home, "hardware", "apply", "-f", str(fleet), env=remote)
        assert done.returncode == 0 and "+ h100 added" in done.stdout, done.stdout + done.stderr
        again = run_exa(home, "hardware", "apply", "-f", str(fleet), "--json")  # locally: what the service wrote
        assert {c["pool"]: c["action"] for c in json.loads(again.stdout)} == {"small": "unchanged", "h100": "unchanged"}
        reader, _ = service.token(scope="read")
        refused = run_exa(home, "hardware", "apply", "-f", str(fleet), env={**remote, "EXA_TOKEN": reader})
        assert refused.returncode != 0 and "admin" in refused.stderr, refused.stderr
        # drain, undrain, remove-pool: dry runs print alike; done through the service, seen locally.
        for args in (("drain", "h100", "--dry-run"), ("drain", "h100", "--dry-run", "--json"), ("remove-pool", "h100", "--dry-run"),
                     ("undrain", "h100", "--dry-run"), ("drain", "nope", "--dry-run")):  # fmt: skip
            local, served = run_exa(home, "hardware", *args), run_exa(home, "hardware", *args, env=remote)
            assert (served.returncode, served.stdout, served.stderr) == (local.returncode, local.stdout, local.stderr), (args, served, local)
        assert run_exa(home, "hardware", "drain", "h100", env=remote).returncode == 0
        assert json.loads(run_exa(home, "hardware", "pools", "--json").stdout)[-1]["drained"] is True
        assert "h100 drained already" in run_exa(home, "hardware", "drain", "h100", env=remote).stdout
        assert run_exa(home, "hardware", "remove-pool", "h100", env=remote).returncode == 0
        assert [p["name"] for p in json.loads(run_exa(home, "hardware", "pools", "--json").stdout)] == ["small"]
        assert run_exa(home, "hardware", "drain", "small", env={**remote, "EXA_TOKEN": reader}).returncode != 0
        for bad_body in ({"dry_run": "yes"}, {"dry": True}, [1]):
            problem(service.call("POST", "/v1/pools/small/drain", token, bad_body), 422, 2)
        assert not json.loads(run_exa(home, "hardware", "pools", "--json").stdout)[0]["drained"]  # nothing written
        # add-pool: what it prints and refuses locally, through the service; the pool is the state's.
        new = ("--target", "cloud", "--accelerator", "nvidia", "--count", "8", "--region", "eu", "--cost-per-hour", "2.5", "--supports-fractions",
               "--capabilities", "fp8,hbm3", "--model", "H100")  # fmt: skip
        made = run_exa(home, "hardware", "add-pool", "c-served", *new, env=remote)
        assert made.returncode == 0 and made.stdout == run_exa(home, "hardware", "add-pool", "c-local", *new).stdout.replace("c-local", "c-served")
        listed = {p["name"]: p for p in json.loads(run_exa(home, "hardware", "pools", "--json").stdout)}
        assert {k: v for k, v in listed["c-served"].items() if k != "name"} == {k: v for k, v in listed["c-local"].items() if k != "name"}
        for refused_args in (("x", "--target", "hpc", "--accelerator", "amd", "--region", "eu"),  # no --count, no --node
                             ("y", "--target", "moon", "--accelerator", "amd", "--count", "1", "--region", "eu"),
                             ("z", "--target", "hpc", "--accelerator", "amd", "--count", "1", "--region", "atlantis")):  # fmt: skip
            local, served = run_exa(home, "hardware", "add-pool", *refused_args), run_exa(home, "hardware", "add-pool", *refused_args, env=remote)
            assert served.returncode == local.returncode == 2, (served, local)
            if refused_args[0] != "y":  # (a target out of the command's choices: argparse's usage locally, the pool reader's words served)
                assert served.stderr == local.stderr, (served.stderr, local.stderr)
        assert run_exa(home, "hardware", "add-pool", "r", *new, env={**remote, "EXA_TOKEN": reader}).returncode == 2
        before = run_exa(home, "hardware", "pools", "--json").stdout
        for bad_pool in ({"target": "hpc", "accelerator": "amd"}, {"target": 1, "accelerator": "amd", "region": "eu"}, {"bogus": 1},
                         {"target": "hpc", "accelerator": "amd", "region": "eu", "count": True}, {"target": "hpc", "accelerator": "amd", "region": "eu", "node": [1]},
                         [1], {"target": "hpc", "accelerator": "amd", "region": "eu", "count": 1, "sharing": "mps", "shares_per_device": 0}):  # fmt: skip
            problem(service.call("POST", "/v1/pools/bad", token, bad_pool), 422, 2)
        assert run_exa(home, "hardware", "pools", "--json").stdout == before  # nothing written
    finally:
        code, out = service.stop()
        assert code == 0, out


def test_portable_accounting_burst_events_and_quotas_through_the_client(svc: Service) -> None:
    """The read commands the README's quick start uses print through the service what they print
    locally; a burst attempt or a decision of another project is not the token's to see."""
    token, _ = svc.token()
    other, _ = svc.token(project=OTHER)
    remote = {"EXA_SERVER": f"http://127.0.0.1:{svc.port}", "EXA_TOKEN": token}
    run_exa(svc.home, "hardware", "add-pool", "acct", "--target", "hpc", "--accelerator", "nvidia", "--count", "2", "--region", "eu", check=True)
    placed = [json.loads(run_exa(svc.home, "hardware", "place", f"acc-{n}", "--accelerator", "nvidia", "--json", env={**remote, "EXA_TOKEN": who}).stdout)
              for n, who in enumerate((token, other))]  # fmt: skip
    assert [(p["outcome"], p["pool"]) for p in placed] == [("placed", "acct")] * 2, placed
    mine, theirs = (p["id"] for p in placed)
    for who, project in ((token, PROJECT), (other, OTHER)):
        run_exa(svc.home, "hardware", "burst", f"b-{project}", "--accelerator", "nvidia", "--allow-burst", env={**remote, "EXA_TOKEN": who})
    for args in (("portable", "--engine", "vllm", "--accelerator", "amd"), ("portable", "--engine", "ipex", "--accelerator", "amd", "--json"),
                 ("accounting", mine, "--hours", "10"), ("accounting", mine[:12], "--hours", "2.5", "--json"), ("quotas",), ("quotas", "--json")):  # fmt: skip
        local, served = run_exa(svc.home, "hardware", *args), run_exa(svc.home, "hardware", *args, env=remote)
        assert (served.returncode, served.stdout) == (local.returncode, local.stdout), (args, served, local)
    assert run_exa(svc.home, "hardware", "portable", "--engine", "ipex", "--accelerator", "amd", env=remote).returncode == 3
    assert "  cost    $" in run_exa(svc.home, "hardware", "accounting", mine, "--hours", "10", env=remote).stdout
    admin, _ = svc.token(scope="read,admin")
    for asked, who in ((("finops", "cost", "--hours", "10"), token), (("finops", "carbon", "--hours", "2"), token),
                       (("finops", "cost", "--hours", "3", "--json"), token), (("audit", "verify"), admin), (("audit", "verify", "--json"), admin)):  # fmt: skip
        local, served = run_exa(svc.home, *asked), run_exa(svc.home, *asked, env={**remote, "EXA_TOKEN": who})
        assert (served.returncode, served.stdout) == (local.returncode, local.stdout), (asked, served, local)
    held = run_exa(svc.home, "finops", "carbon", env=remote)  # held until now (no --hours): as locally, a moment later
    assert held.returncode == 0 and held.stdout.startswith("Carbon by device type and region"), held
    assert "audit log verifies" in run_exa(svc.home, "audit", "verify", env={**remote, "EXA_TOKEN": admin}).stdout
    unscoped = run_exa(svc.home, "audit", "verify", env=remote)
    assert unscoped.returncode == 2 and "admin" in unscoped.stderr, unscoped.stderr
    keyed = run_exa(svc.home, "audit", "verify", "--key", "x.vkey", env={**remote, "EXA_TOKEN": admin})
    assert keyed.returncode == 2 and "unset EXA_SERVER" in keyed.stderr
    problem(svc.call("GET", "/v1/finops/cost?hours=abc", token), 422, 2)
    listed = json.loads(run_exa(svc.home, "hardware", "burst-events", "--json", env=remote).stdout)
    everyone = json.loads(run_exa(svc.home, "hardware", "burst-events", "--json").stdout)
    assert {e["workload"] for e in listed} == {f"b-{PROJECT}"} and {f"b-{PROJECT}", f"b-{OTHER}"} <= {e["workload"] for e in everyone}
    text = run_exa(svc.home, "hardware", "burst-events", env=remote).stdout
    assert f"b-{PROJECT}" in text and f"b-{OTHER}" not in text
    refused = run_exa(svc.home, "hardware", "accounting", theirs, "--hours", "1", env=remote)
    assert refused.returncode == 2 and OTHER in refused.stderr, refused.stderr
    problem(svc.call("GET", f"/v1/decisions/{mine}/accounting?hours=-1", token), 422, 2)
    problem(svc.call("GET", f"/v1/decisions/{mine}/accounting", token), 422, 2)
    problem(svc.call("GET", "/v1/portable?engine=vllm", token), 422, 2)
    problem(svc.call("GET", "/v1/portable?engine=nope&accelerator=amd", token), 422, 2)
    problem(svc.call("GET", "/v1/burst-events?limit=0", token), 422, 2)
    problem(svc.call("GET", "/v1/quotas"), 401, 2)
    for ident, who in ((mine, token), (theirs, other)):
        assert svc.call("POST", f"/v1/decisions/{ident}/release", who).status == 200
    assert run_exa(svc.home, "hardware", "remove-pool", "acct").returncode == 0


def test_add_pools_options_are_one_list_in_the_command_the_route_and_the_client() -> None:
    """``exa hardware add-pool``'s parser is the source; POST /v1/pools/{name} and the client's table
    name the same options with the same types."""
    import argparse

    from examlops_policy.cli.main import build_parser
    from examlops_policy.service import client, routes

    hardware = next(a for a in build_parser("hardware")._actions if isinstance(a, argparse._SubParsersAction))
    group = next(a for a in hardware.choices["hardware"]._actions if isinstance(a, argparse._SubParsersAction))
    parser = group.choices["add-pool"]
    kinds = {int: "integer", float: "number", None: "string"}
    command = {}
    for action in parser._actions:
        if action.dest in ("help", "json", "home", "debug", "name"):
            continue
        if isinstance(action, argparse._StoreTrueAction):
            command[action.dest] = "boolean"
        elif isinstance(action, argparse._AppendAction):
            command[action.dest] = "array"
        else:
            command[action.dest] = kinds[action.type]
    assert routes.POOL_OPTIONS == command
    as_json = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array"}
    assert {name: as_json[kind] for name, kind in client._POOL_OPTIONS} == command
    assert set(routes.POOL_REQUIRED) == {a.dest for a in parser._actions if a.required and a.option_strings}

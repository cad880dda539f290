"""Bearer JWTs of an OIDC issuer (``exa hardware serve --listen ADDR --oidc FILE``, ``service.oidc``),
against the real service process: RSA, EC and Ed25519 keys made here, a JWKS file written here,
tokens signed here. Accepted tokens place and read for the project their claim names, and their
decisions' audit entries name the issuer and subject; every refusal is a 401 with a short reason
that writes nothing; another project is 403; keys rotate by rewriting the JWKS file; the service's
own tokens keep working beside JWTs; a bad configuration is refused before anything serves."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from examlops_policy.errors import SpecError
from examlops_policy.service import oidc, tokens
from examlops_policy.store.sqlite import SQLiteStore
from tests.conftest import ROOT, run_exa
from tests.service_support import Answer, Service, start
from tests.test_service import OTHER, PROJECT, pools, problem, written

pytestmark = pytest.mark.opa  # the service process decides with the session's OPA

ISSUER = "https://id.example.org/realms/ml"
AUDIENCE = "exa-placement"
CLAIM = "exa_projects"


@dataclass(frozen=True)
class Key:
    """A signing key of the issuer: its private half, its id and its public JWK."""

    kid: str
    alg: str
    private: Any
    jwk: dict[str, object]


def rsa_key(kid: str, bits: int = 2048) -> Key:
    private = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return Key(kid, "RS256", private, {**RSAAlgorithm.to_jwk(private.public_key(), as_dict=True), "kid": kid, "use": "sig"})


def ec_key(kid: str) -> Key:
    private = ec.generate_private_key(ec.SECP256R1())
    return Key(kid, "ES256", private, {**ECAlgorithm.to_jwk(private.public_key(), as_dict=True), "kid": kid})


def ed_key(kid: str) -> Key:
    private = ed25519.Ed25519PrivateKey.generate()
    return Key(kid, "EdDSA", private, {**OKPAlgorithm.to_jwk(private.public_key(), as_dict=True), "kid": kid, "alg": "EdDSA"})


def write_jwks(path: Path, *keys: Key | Mapping[str, object], raw: str | None = None) -> None:
    """The JWKS file, renamed into place whole (as a key rotation writes it)."""
    text = raw if raw is not None else json.dumps({"keys": [k.jwk if isinstance(k, Key) else dict(k) for k in keys]})
    scratch = path.with_name(path.name + ".new")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, path)


def sign(key: Key, *, alg: str | None = None, kid: str | None = "same", drop: tuple[str, ...] = (), **claims: object) -> str:
    now = int(time.time())
    body: dict[str, object] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice@example.org", "iat": now, "exp": now + 600, CLAIM: PROJECT,
                               "scope": "openid exa:place exa:read", **claims}  # fmt: skip
    for name in drop:
        body.pop(name, None)
    headers = {} if kid is None else {"kid": key.kid if kid == "same" else kid}
    return jwt.encode(body, key.private, algorithm=alg or key.alg, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def handmade(header: Mapping[str, object], claims: Mapping[str, object], secret: bytes | None) -> str:
    """A token PyJWT would not sign: ``alg: none``, or HMAC with a public key as the secret."""
    signing = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    mac = b"" if secret is None else hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{b64(mac)}"


def configure(folder: Path, jwks: Path, **over: object) -> Path:
    doc: dict[str, object] = {"issuer": ISSUER, "audience": [AUDIENCE, "other-service"], "jwks_file": jwks.name,
                              "algorithms": ["RS256", "ES256", "EdDSA"], "project_claim": CLAIM, "scope_claim": "scope",
                              "scope_prefix": "exa:", "leeway": "30s", **over}  # fmt: skip
    path = folder / "oidc.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}), encoding="utf-8")
    return path


def audit_sources(service: Service, decision_id: str) -> list[str]:
    store = SQLiteStore(service.home / "state.db")
    try:
        entries = [json.loads(r.canonical) for r in store.audit_rows()]
    finally:
        store.close()
    return [e["source"] for e in entries if e["kind"] == "decision" and e.get("decision_id") == decision_id]


@dataclass
class Issuer:
    service: Service
    rsa: Key
    ec: Key
    ed: Key
    jwks: Path


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> object:
    folder = tmp_path_factory.mktemp("oidc")
    home = folder / "home"
    pools(home)
    keys = rsa_key("rsa-1"), ec_key("ec-1"), ed_key("ed-1")
    jwks = folder / "jwks.json"
    write_jwks(jwks, *keys)
    service = start(home, "--oidc", str(configure(folder, jwks)))
    yield Issuer(service, *keys, jwks)
    code, out = service.stop()
    assert code == 0, out
    assert f"oidc: bearer JWTs of {ISSUER}" in out and "3 key(s): ec-1, ed-1, rsa-1" in out


DRY = {"workload": {"name": "j", "accelerator": "amd"}, "dry_run": True}


def test_rs256_es256_and_eddsa_tokens_place_and_the_audit_names_issuer_and_subject(issuer: Issuer) -> None:
    svc = issuer.service
    for key in (issuer.rsa, issuer.ec, issuer.ed):
        answer = svc.call("POST", "/v1/decisions", sign(key), DRY)
        assert answer.status == 200 and answer.json["pool"] == "small", (key.alg, answer.text)
    token = sign(issuer.ec, sub="bob@example.org", aud=[AUDIENCE, "elsewhere"])
    placed = svc.call("POST", "/v1/decisions", token, {"workload": {"name": "p", "accelerator": "amd"}})
    assert placed.status == 200 and placed.json["outcome"] == "placed" and placed.json["workload"]["project"] == PROJECT, placed.text
    assert audit_sources(svc, placed.json["id"]) == [f"exa-service:oidc:{ISSUER}#bob@example.org"]
    assert svc.call("GET", f"/v1/decisions/{placed.json['id']}", sign(issuer.rsa)).status == 200
    assert svc.call("POST", f"/v1/decisions/{placed.json['id']}/release", sign(issuer.ed)).status == 200
    # The service's own tokens work beside JWTs.
    opaque, ident = svc.token()
    mine = svc.call("POST", "/v1/decisions", opaque, {"workload": {"name": "o", "accelerator": "amd"}}).json
    assert audit_sources(svc, mine["id"]) == [f"exa-service:token:{ident}"]
    assert svc.call("POST", f"/v1/decisions/{mine['id']}/release", opaque).status == 200


def refusals(issuer: Issuer) -> list[tuple[str, str, str]]:
    """(what is wrong, the token, what the 401's detail says)."""
    now = int(time.time())
    stranger = rsa_key("rsa-1")  # the issuer's key id, another key
    good = sign(issuer.rsa)
    head, claims, signature = good.split(".")
    forged = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    forged[CLAIM] = OTHER
    public_pem = issuer.rsa.private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 600, CLAIM: PROJECT, "scope": "exa:place exa:read"}
    return [
        ("expired beyond the leeway", sign(issuer.rsa, exp=now - 120), "expired"),
        ("not valid yet", sign(issuer.ec, nbf=now + 600), "not valid yet"),
        ("issued in the future", sign(issuer.ec, iat=now + 600), "not valid yet"),
        ("another audience", sign(issuer.rsa, aud="someone-else"), "audience"),
        ("another issuer", sign(issuer.rsa, iss="https://evil.example.org"), "issuer"),
        ("signed by another key", sign(stranger), "signature does not verify"),
        ("claims changed after signing", f"{head}.{b64(json.dumps(forged).encode())}.{signature}", "signature does not verify"),
        ("an unknown kid", sign(issuer.rsa, kid="rsa-9"), "not in the issuer's key set"),
        ("no kid", sign(issuer.rsa, kid=None), "names no key"),
        ("alg none", handmade({"alg": "none", "kid": "rsa-1", "typ": "JWT"}, base, None), "algorithm is not accepted"),
        ("HS256 keyed with the public key", handmade({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, base, public_pem), "algorithm is not accepted"),
        ("an algorithm not configured", sign(issuer.rsa, alg="RS384"), "algorithm is not accepted"),
        ("an EC signature under an RSA key's id", sign(issuer.ec, kid="rsa-1"), "does not match its key"),
        ("no exp", sign(issuer.rsa, drop=("exp",)), "no exp claim"),
        ("no sub", sign(issuer.rsa, drop=("sub",)), "no sub claim"),
        ("no project claim", sign(issuer.rsa, drop=(CLAIM,)), "names no project"),
        ("a project claim that is no project name", sign(issuer.rsa, **{CLAIM: ["ok", "../etc"]}), "not a project name"),
        ("not a JWT at all", "eyJ.not.valid", "malformed"),
    ]


def test_each_refusal_is_a_401_with_a_short_reason_that_leaks_no_key_and_writes_nothing(issuer: Issuer) -> None:
    svc = issuer.service
    material = [str(v) for key in (issuer.rsa, issuer.ec, issuer.ed) for m, v in key.jwk.items() if m in ("n", "x", "y")]
    before = written(svc)
    for what, token, reason in refusals(issuer):
        answer = svc.call("POST", "/v1/decisions", token, {"workload": {"name": "r", "accelerator": "amd"}})
        body = problem(answer, 401, 2)
        detail = str(body["detail"])
        assert reason in detail, (what, detail)
        assert answer.headers["www-authenticate"].startswith("Bearer"), what
        assert len(detail) < 160 and "BEGIN" not in answer.text and not any(m[:16] in answer.text for m in material), (what, answer.text)
    assert written(svc) == before


def test_the_project_claim_maps_to_projects_and_another_project_is_403(issuer: Issuer) -> None:
    svc = issuer.service
    single = sign(issuer.rsa)
    before = written(svc)
    refused = problem(svc.call("POST", "/v1/decisions", single, {"workload": {"name": "x", "accelerator": "amd", "project": OTHER}}), 403, 2)
    assert OTHER in str(refused["detail"]) and written(svc) == before
    both = sign(issuer.ec, sub="carol", **{CLAIM: [OTHER, PROJECT]})
    unnamed = problem(svc.call("POST", "/v1/decisions", both, {"workload": {"name": "x", "accelerator": "amd"}}), 422, 2)
    assert unnamed["field"] == "workload.project" and PROJECT in str(unnamed["detail"]) and OTHER in str(unnamed["detail"])
    problem(svc.call("POST", "/v1/decisions", both, {"workload": {"name": "x", "accelerator": "amd", "project": "research"}}), 403, 2)
    assert written(svc) == before
    placed = svc.call("POST", "/v1/decisions", both, {"workload": {"name": "x", "accelerator": "amd", "project": PROJECT}})
    assert placed.status == 200 and placed.json["outcome"] == "placed" and placed.json["workload"]["project"] == PROJECT, placed.text
    ident = placed.json["id"]
    assert audit_sources(svc, ident) == [f"exa-service:oidc:{ISSUER}#carol"]
    # Read and released by a token of that project only.
    outsider = sign(issuer.rsa, **{CLAIM: OTHER})
    problem(svc.call("GET", f"/v1/decisions/{ident}", outsider), 403, 2)
    problem(svc.call("POST", f"/v1/decisions/{ident}/release", outsider), 403, 2)
    assert ident not in [d["id"] for d in svc.call("GET", "/v1/decisions?limit=50", outsider).json["decisions"]]
    assert ident in [d["id"] for d in svc.call("GET", "/v1/decisions?limit=50", both).json["decisions"]]
    done = svc.call("POST", f"/v1/decisions/{ident}/release", sign(issuer.ed))
    assert done.status == 200 and done.json["already_released"] is False, done.text


def test_scopes_come_from_the_scope_claim(issuer: Issuer) -> None:
    svc = issuer.service
    reader = sign(issuer.rsa, scope="openid exa:read")
    assert svc.call("GET", "/v1/pools", reader).status == 200
    assert "needs place" in str(problem(svc.call("POST", "/v1/decisions", reader, DRY), 403, 2)["detail"])
    listed = sign(issuer.rsa, scope=["exa:place"])
    assert svc.call("POST", "/v1/decisions", listed, DRY).status == 200
    problem(svc.call("GET", "/v1/pools", listed), 403, 2)
    unprefixed = sign(issuer.rsa, scope="place read admin")  # only values with the prefix count
    assert "(none)" in str(problem(svc.call("GET", "/v1/pools", unprefixed), 403, 2)["detail"])
    problem(svc.call("GET", "/v1/pools", sign(issuer.rsa, drop=("scope",))), 403, 2)
    pool = {"name": "extra", "target": "hpc", "accelerator": "amd", "count": 1, "region": "eu", "cost_per_hour": 0.4}
    problem(svc.call("POST", "/v1/pools", sign(issuer.rsa), {"pools": [pool], "dry_run": True}), 403, 2)
    admin = sign(issuer.rsa, scope="exa:admin")
    assert svc.call("POST", "/v1/pools", admin, {"pools": [pool], "dry_run": True}).status == 200


def test_keys_rotate_by_rewriting_the_jwks_file_and_a_broken_one_keeps_the_last_good_keys(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pools(home)
    old, new = rsa_key("2026-11"), ec_key("2026-12")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, old)
    service = start(home, "--oidc", str(configure(tmp_path, jwks, scope_claim=None, scope_prefix=None, default_scopes=["place", "read"])))
    try:
        assert service.call("POST", "/v1/decisions", sign(old, scope="nothing"), DRY).status == 200  # default_scopes: every token's
        assert "not in the issuer's key set" in str(problem(service.call("POST", "/v1/decisions", sign(new), DRY), 401, 2)["detail"])
        write_jwks(jwks, old, new)  # the new key published beside the old one
        assert service.call("POST", "/v1/decisions", sign(new), DRY).status == 200
        assert service.call("POST", "/v1/decisions", sign(old), DRY).status == 200
        write_jwks(jwks, new)  # the old key withdrawn
        assert "not in the issuer's key set" in str(problem(service.call("POST", "/v1/decisions", sign(old), DRY), 401, 2)["detail"])
        for broken in ('{"keys": [', json.dumps({"keys": [{**old.jwk, "d": "AAAA"}]}), json.dumps({"keys": []})):
            write_jwks(jwks, raw=broken)  # a broken file: the last good keys stay in use
            assert service.call("POST", "/v1/decisions", sign(new), DRY).status == 200
            problem(service.call("POST", "/v1/decisions", sign(old), DRY), 401, 2)
        jwks.unlink()
        assert service.call("POST", "/v1/decisions", sign(new), DRY).status == 200
        write_jwks(jwks, old)
        assert service.call("POST", "/v1/decisions", sign(old), DRY).status == 200
    finally:
        code, out = service.stop()
    assert code == 0, out
    assert f"oidc: the JWKS file {jwks} changed: now 2 key(s): 2026-11, 2026-12" in out
    assert f"oidc: the JWKS file {jwks} changed: now 1 key(s): 2026-12" in out
    assert out.count("does not load") == 3 and out.count("keeping the 1 key(s): 2026-12 read at") == 4, out
    assert f"cannot read the JWKS file {jwks}" in out and "AAAA" not in out


# -- the configuration ------------------------------------------------------------------------------


def test_the_schema_lists_the_algorithms_and_scopes_of_the_code() -> None:
    schema = json.loads((ROOT / "schemas" / oidc.SCHEMA).read_text(encoding="utf-8"))
    assert schema["properties"]["algorithms"]["items"]["enum"] == list(oidc.ALGORITHMS)
    assert schema["properties"]["default_scopes"]["items"]["enum"] == list(tokens.SCOPES)
    assert not [a for a in oidc.ALGORITHMS if a == "none" or a.startswith("HS")]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"colour": "red"}, "(top level)", "unknown field(s): 'colour'"),
        ({"issuer": None}, "(top level)", "'issuer' is a required property"),
        ({"algorithms": ["HS256"]}, "algorithms[0]", "expected one of RS256"),
        ({"algorithms": ["none"]}, "algorithms[0]", "expected one of RS256"),
        ({"algorithms": []}, "algorithms", "should be non-empty"),
        ({"audience": ""}, "audience", "should be non-empty"),
        ({"default_scopes": ["read"]}, "scope_claim", "either scope_claim"),
        ({"scope_claim": None, "scope_prefix": "exa:", "default_scopes": ["read"]}, "scope_prefix", "give scope_claim too"),
        ({"scope_claim": None, "scope_prefix": None}, "scope_claim", "either scope_claim"),
        ({"default_scopes": ["root"], "scope_claim": None, "scope_prefix": None}, "default_scopes[0]", "expected one of place, read, admin"),
        ({"leeway": "1h"}, "leeway", "at most"),
        ({"leeway": "-5s"}, "leeway", "at most 300 s"),
    ],
)
def test_a_bad_configuration_names_the_file_the_field_and_what_was_expected(tmp_path: Path, change: dict[str, object], field: str, says: str) -> None:
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, ec_key("k"))
    path = configure(tmp_path, jwks, **change)
    with pytest.raises(SpecError) as caught:
        oidc.load_config(path)
    assert caught.value.source == str(path) and caught.value.field == field and says in caught.value.detail, str(caught.value)


@pytest.mark.parametrize(
    ("keys", "field", "says"),
    [
        (None, None, "cannot read file"),
        ('{"keys": [', None, "not JSON"),
        ('{"keys": []}', "keys", "expected 1 to 100 keys"),
        ([{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}], "keys[0].kid", "expected a kid"),
        ([{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}], "keys[0].kty", "symmetric key"),
        ("private", "keys[0]", "a private key (d, p, q, dp, dq, qi)"),
        ("small", "keys[0]", "RSA key of 1024 bits"),
        ("twice", "keys[1].kid", "is another key's too"),
        ([{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA", "kid": "e"}], "keys[0]", "the key does not load"),
        ("ed only", "keys", "no key here verifies any of the algorithms accepted (RS256, ES256)"),
    ],
)
def test_a_bad_jwks_file_is_refused_at_start(tmp_path: Path, keys: object, field: str | None, says: str) -> None:
    jwks = tmp_path / "jwks.json"
    if keys == "private":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_jwks(jwks, {**RSAAlgorithm.to_jwk(private, as_dict=True), "kid": "p"})
    elif keys == "small":
        write_jwks(jwks, rsa_key("s", bits=1024))
    elif keys == "twice":
        write_jwks(jwks, ec_key("k"), ec_key("k"))
    elif keys == "ed only":
        write_jwks(jwks, ed_key("e"))
    elif isinstance(keys, str):
        write_jwks(jwks, raw=keys)
    elif isinstance(keys, list):
        write_jwks(jwks, *keys)
    config = oidc.load_config(configure(tmp_path, jwks, algorithms=["RS256", "ES256"]))
    with pytest.raises(SpecError) as caught:
        oidc.Verifier(config)
    assert caught.value.source == str(jwks) and caught.value.field == field and says in caught.value.detail, str(caught.value)


def test_the_command_line_refuses_a_bad_configuration_with_exit_2_before_serving(tmp_path: Path) -> None:
    home = tmp_path / "home"
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, ec_key("k"))
    path = configure(tmp_path, jwks, algorithms=["HS256"])
    refused = run_exa(home, "hardware", "serve", "--listen", "127.0.0.1:0", "--oidc", str(path))
    assert refused.returncode == 2 and str(path) in refused.stderr and "algorithms[0]" in refused.stderr, refused.stderr
    assert not (home / "serve").exists() or not list((home / "serve").glob("*.json"))
    write_jwks(jwks, raw="[]")
    unread = run_exa(home, "hardware", "serve", "--listen", "127.0.0.1:0", "--oidc", str(configure(tmp_path, jwks)))
    assert unread.returncode == 2 and str(jwks) in unread.stderr, unread.stderr
    alone = run_exa(home, "hardware", "serve", "--oidc", str(path))
    assert alone.returncode == 2 and "--listen" in alone.stderr


def test_a_jwt_is_refused_where_no_issuer_is_configured(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pools(home)
    service = start(home)
    try:
        answer: Answer = service.call("GET", "/v1/pools", sign(ec_key("k")))
        assert "not valid" in str(problem(answer, 401, 2)["detail"])
    finally:
        service.stop()

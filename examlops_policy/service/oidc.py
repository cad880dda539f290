"""Bearer JWTs of one OIDC issuer, beside the service's own tokens (``exa hardware serve --listen
ADDR --oidc FILE``).

The configuration (a reviewed YAML file, ``schemas/oidc-config.schema.json``) names the issuer, the
audience, the JWKS file of the issuer's public keys, the algorithms accepted, the claim that names
the project(s) a token acts for, and the claim that holds its scopes (or the scopes every token
has). A token is accepted only when its header's ``alg`` is one of those algorithms and its ``kid``
names a key of the JWKS file made for that algorithm, its signature verifies with that key, and
``iss``, ``aud``, ``exp`` (required), ``nbf`` and ``iat`` (when present) hold, within the leeway.
``alg: none`` and the HMAC algorithms are never accepted: a public key is no shared secret.

The JWKS file is read from disk, never fetched: when its modification time, size or inode change
(a new file renamed into place), the next request reads it again, so keys rotate without a restart.
A new file that will not load leaves the keys read last in use, and the log says so.

Verification runs on the service's one worker thread (``service.app``): nothing here is shared
between threads.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy import quantities
from examlops_policy.errors import SpecError
from examlops_policy.service.tokens import SCOPES, Caller, TokenRefused, check_project

if TYPE_CHECKING:
    from jwt import PyJWK

SCHEMA: Final = "oidc-config.schema.json"
# Each algorithm accepted, with the key type (and curves) it is made for. One list: the schema's
# enum says the same (a test holds the two equal).
ALGORITHMS: Final[dict[str, tuple[str, frozenset[str] | None]]] = {
    "RS256": ("RSA", None), "RS384": ("RSA", None), "RS512": ("RSA", None),
    "PS256": ("RSA", None), "PS384": ("RSA", None), "PS512": ("RSA", None),
    "ES256": ("EC", frozenset({"P-256"})), "ES384": ("EC", frozenset({"P-384"})), "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}  # fmt: skip
MOST_LEEWAY_S: Final = 300
MOST_KEYS: Final = 100
MOST_PROJECTS: Final = 64
MIN_RSA_BITS: Final = 2048
JWKS_MAX_BYTES: Final = 1024 * 1024
# The members of a JWK that only a private key has: a JWKS file is public, and one that holds a
# private key is refused rather than used.
_PRIVATE: Final = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
_SUB: Final = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")
SOURCE_PREFIX: Final = "exa-service:oidc:"


@dataclass(frozen=True)
class OidcConfig:
    """What ``--oidc FILE`` says (``source``: the file, for errors and the log)."""

    issuer: str
    audience: tuple[str, ...]
    jwks_file: Path
    algorithms: tuple[str, ...]
    project_claim: str
    scope_claim: str | None = None
    scope_prefix: str = ""
    default_scopes: tuple[str, ...] = ()
    leeway_s: int = 0
    source: str = "oidc configuration"


def config_from_mapping(doc: object, *, source: str, base: Path) -> OidcConfig:
    """The configuration of ``doc`` (as the YAML file has it; ``jwks_file`` relative to ``base``);
    SpecError naming ``source``, the field and what was expected."""
    from examlops_policy import specs

    specs.validate(doc, SCHEMA, source=source)
    assert isinstance(doc, dict)
    claim, fixed = doc.get("scope_claim"), doc.get("default_scopes")
    if (claim is None) == (fixed is None):
        raise SpecError("expected either scope_claim (the claim holding the scopes) or default_scopes (the scopes every token has), "
                        "not both and not neither", source=source, field="scope_claim")  # fmt: skip
    if "scope_prefix" in doc and claim is None:
        raise SpecError("scope_prefix reads scope_claim's values: give scope_claim too, or drop scope_prefix", source=source, field="scope_prefix")
    try:
        leeway = quantities.duration_s(doc.get("leeway", 0), least=0, most=MOST_LEEWAY_S)
    except ValueError as exc:
        raise SpecError(f"{exc} (clock skew allowed on exp, nbf and iat: at most {MOST_LEEWAY_S} s)", source=source, field="leeway") from None
    audience = doc["audience"]
    return OidcConfig(
        issuer=doc["issuer"], audience=(audience,) if isinstance(audience, str) else tuple(audience),
        jwks_file=(base / doc["jwks_file"]).absolute(), algorithms=tuple(doc["algorithms"]), project_claim=doc["project_claim"],
        scope_claim=claim, scope_prefix=doc.get("scope_prefix", ""), default_scopes=tuple(s for s in SCOPES if s in (fixed or ())),
        leeway_s=leeway, source=source,
    )  # fmt: skip


def load_config(path: Path) -> OidcConfig:
    """``--oidc FILE``: the configuration, read strictly (SpecError naming the file and field)."""
    from examlops_policy import specs

    return config_from_mapping(specs.read_yaml(path), source=str(path), base=path.absolute().parent)


# -- the JWKS file -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeySet:
    """The usable keys of a JWKS file: each key id with the algorithms it verifies, and when read."""

    keys: Mapping[str, Mapping[str, PyJWK]]
    read_at: str

    def describe(self) -> str:
        return f"{len(self.keys)} key(s): {', '.join(sorted(self.keys))}"


def _usable(jwk: Mapping[str, object], algorithms: Sequence[str]) -> list[str]:
    """The accepted algorithms ``jwk`` is made for (its ``alg``, when it names one)."""
    kty, crv, named = jwk.get("kty"), jwk.get("crv"), jwk.get("alg")
    found = []
    for alg in algorithms:
        want_kty, curves = ALGORITHMS[alg]
        if kty == want_kty and (curves is None or crv in curves) and (named is None or named == alg):
            found.append(alg)
    return found


def read_jwks(path: Path, algorithms: Sequence[str]) -> KeySet:
    """The keys of the JWKS file ``path`` usable with ``algorithms``. SpecError naming the file, the
    key and what was expected for a file that is not a JWKS document, a key without a ``kid`` or
    with one another key has, a private or symmetric key, an RSA key under 2048 bits, a key that
    does not load, or a file with no key usable with ``algorithms``."""
    from jwt import PyJWK
    from jwt.exceptions import PyJWTError

    from examlops_policy import specs

    source = str(path)
    text = specs.read_text(path, max_bytes=JWKS_MAX_BYTES)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"not JSON: {exc}", source=source) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise SpecError('expected a JWKS document: {"keys": [...]}', source=source, field="keys")
    listed: list[object] = doc["keys"]
    if not 1 <= len(listed) <= MOST_KEYS:
        raise SpecError(f"expected 1 to {MOST_KEYS} keys (got {len(listed)})", source=source, field="keys")
    keys: dict[str, dict[str, PyJWK]] = {}
    for i, jwk in enumerate(listed):
        where = f"keys[{i}]"
        if not isinstance(jwk, dict):
            raise SpecError("expected a JWK (a JSON object)", source=source, field=where)
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid or len(kid) > 256:
            raise SpecError("expected a kid (the key id tokens name in their header): a string of 1 to 256 characters", source=source, field=f"{where}.kid")
        if kid in keys:
            raise SpecError(f"kid {quantities.shown(kid, 60)} is another key's too: each key needs its own", source=source, field=f"{where}.kid")
        if jwk.get("kty") == "oct":
            raise SpecError("a symmetric key (kty oct) has no place in a file of public keys", source=source, field=f"{where}.kty")
        private = [m for m in _PRIVATE if m in jwk]
        if private:
            raise SpecError(f"a private key ({', '.join(private)}): the file holds the issuer's public keys only", source=source, field=where)
        if jwk.get("use") not in (None, "sig"):
            keys[kid] = {}  # an encryption key: known, but no token is verified with it
            continue
        made: dict[str, PyJWK] = {}
        for alg in _usable(jwk, algorithms):
            try:
                key = PyJWK(jwk, alg)
            except (PyJWTError, ValueError, TypeError) as exc:
                raise SpecError(f"the key does not load: {exc}", source=source, field=where) from None
            bits = getattr(key.key, "key_size", None)
            if jwk.get("kty") == "RSA" and isinstance(bits, int) and bits < MIN_RSA_BITS:
                raise SpecError(f"an RSA key of {bits} bits: at least {MIN_RSA_BITS} are needed", source=source, field=where)
            made[alg] = key
        keys[kid] = made
    if not any(keys.values()):
        raise SpecError(f"no key here verifies any of the algorithms accepted ({', '.join(algorithms)})", source=source, field="keys")
    return KeySet(keys, datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


# -- verification --------------------------------------------------------------------------------


@dataclass
class Verifier:
    """Checks bearer JWTs against the configuration and the JWKS file's current keys (read again
    when the file changes; ``log`` says what happened)."""

    config: OidcConfig
    log: Callable[[str], None] = lambda _: None
    _keys: KeySet | None = field(default=None, init=False)
    _stamp: tuple[int, int, int, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.current()
        if self._keys is None:  # the file at start: bad input, said before anything serves
            self._keys = read_jwks(self.config.jwks_file, self.config.algorithms)

    def current(self) -> KeySet | None:
        """The keys in use: read again when the file changed since it was last read; the last good
        keys (and a line in the log) when the new file will not load or is gone."""
        path = self.config.jwks_file
        try:
            st = os.stat(path)
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            stamp = (-1, -1, -1, -1)
            if stamp != self._stamp and self._keys is not None:
                self.log(f"oidc: cannot read the JWKS file {path} ({exc.strerror}); keeping the {self._keys.describe()} read at {self._keys.read_at}")
            self._stamp = stamp
            return self._keys
        if stamp == self._stamp:
            return self._keys
        self._stamp = stamp
        try:
            keys = read_jwks(path, self.config.algorithms)
        except SpecError as exc:
            if self._keys is None:
                raise
            self.log(f"oidc: the JWKS file {path} changed but does not load ({exc.detail}"
                     f"{' at ' + exc.field if exc.field else ''}); keeping the {self._keys.describe()} read at {self._keys.read_at}")  # fmt: skip
            return self._keys
        if self._keys is not None:
            self.log(f"oidc: the JWKS file {path} changed: now {keys.describe()}")
        self._keys = keys
        return keys

    @staticmethod
    def is_jwt(token: str) -> bool:
        """A compact JWS (three parts), as opposed to one of the service's own tokens (which have no dot)."""
        return token.count(".") == 2

    def verify(self, token: str) -> Caller:
        """The caller a JWT names; TokenRefused with a short reason (never a key's material)."""
        import jwt
        from jwt import exceptions as jx

        try:
            header = jwt.get_unverified_header(token)
        except jx.PyJWTError:
            raise TokenRefused("the bearer JWT is malformed") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.config.algorithms:
            raise TokenRefused(f"the bearer JWT's algorithm is not accepted here (accepted: {', '.join(self.config.algorithms)})")
        if not isinstance(kid, str):
            raise TokenRefused("the bearer JWT names no key (kid)")
        keys = self.current()
        assert keys is not None
        if kid not in keys.keys:
            raise TokenRefused("the bearer JWT's key (kid) is not in the issuer's key set")
        key = keys.keys[kid].get(alg)
        if key is None:
            raise TokenRefused("the bearer JWT's algorithm does not match its key")
        try:
            claims = jwt.decode(
                token, key, algorithms=[alg], audience=list(self.config.audience), issuer=self.config.issuer, leeway=self.config.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"], "verify_signature": True, "verify_exp": True, "verify_nbf": True,
                         "verify_iat": True, "verify_aud": True, "verify_iss": True, "strict_aud": False},
            )  # fmt: skip
        except jx.ExpiredSignatureError:
            raise TokenRefused("the bearer JWT has expired") from None
        except jx.ImmatureSignatureError:
            raise TokenRefused("the bearer JWT is not valid yet (nbf or iat is in the future)") from None
        except jx.InvalidAudienceError:
            raise TokenRefused("the bearer JWT is for another audience (aud)") from None
        except jx.InvalidIssuerError:
            raise TokenRefused("the bearer JWT is from another issuer (iss)") from None
        except jx.MissingRequiredClaimError as exc:
            raise TokenRefused(f"the bearer JWT has no {exc.claim} claim") from None
        except jx.InvalidSignatureError:
            raise TokenRefused("the bearer JWT's signature does not verify") from None
        except jx.PyJWTError:
            raise TokenRefused("the bearer JWT is not valid") from None
        return self._caller(claims)

    def _caller(self, claims: Mapping[str, object]) -> Caller:
        sub = claims.get("sub")
        if not isinstance(sub, str) or not _SUB.match(sub):
            raise TokenRefused("the bearer JWT's sub claim is not an identity (1 to 255 characters, no control characters)")
        return Caller(projects=self._projects(claims), scopes=self._scopes(claims), source=f"{SOURCE_PREFIX}{self.config.issuer}#{sub}",
                      who=f"this JWT (sub {quantities.shown(sub, 60)})")  # fmt: skip

    def _projects(self, claims: Mapping[str, object]) -> tuple[str, ...]:
        name = self.config.project_claim
        given = claims.get(name)
        listed = [given] if isinstance(given, str) else given
        if not isinstance(listed, list) or not listed or len(listed) > MOST_PROJECTS:
            raise TokenRefused(f"the bearer JWT names no project: its {name} claim should hold a project name or a list of 1 to {MOST_PROJECTS}")
        try:
            projects = [check_project(p) for p in listed if isinstance(p, str)]
        except SpecError:
            projects = []
        if len(projects) != len(listed):
            raise TokenRefused(f"the bearer JWT's {name} claim holds a value that is not a project name")
        return tuple(dict.fromkeys(projects))

    def _scopes(self, claims: Mapping[str, object]) -> tuple[str, ...]:
        if self.config.scope_claim is None:
            return self.config.default_scopes
        given = claims.get(self.config.scope_claim)
        values = given.split() if isinstance(given, str) else [v for v in given if isinstance(v, str)] if isinstance(given, list) else []
        prefix = self.config.scope_prefix
        named = {v[len(prefix) :] for v in values if v.startswith(prefix)}
        return tuple(s for s in SCOPES if s in named)

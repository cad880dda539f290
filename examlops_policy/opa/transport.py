"""One keep-alive HTTP connection to an OPA server: over a Unix socket, plain TCP, or HTTPS.

Standard library only (``socket``, ``ssl``): a command-line call pays no import of an HTTP stack.
Every request carries the bearer token when one is set. The HTTP/1.1 spoken is the little a JSON
API needs (one request at a time on a kept connection: a request and its body in one write, an
answer of a given length or chunked, ``Connection: close`` honoured), so that a decision's small
queries (the revision confirmation on every one) cost the round trip and not the client: about a
third of ``http.client``'s time for the same query went to building the request and parsing the
answer's headers as mail.

Errors (all fail closed; the CLI maps both to exit 5):

    PolicyUnavailable
    └── OpaUnreachable      no answer: connection refused, socket missing, timed out
    PolicyError             TLS verification or handshake failed; an answer that is not HTTP;
                            (``json``) a status other than 2xx, or a body that is not JSON
    PolicyUnavailable       (``json``) 401/403: the token is missing or wrong, or the server's
                            authorization policy refuses the request

``request`` returns every HTTP answer as ``(status, body)``; ``json`` is the checked variant the
decision path uses.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from examlops_policy.errors import OpaUnreachable as OpaUnreachable  # its home: the error hierarchy
from examlops_policy.errors import PolicyError, PolicyUnavailable

if TYPE_CHECKING:
    import ssl  # imported when a transport speaks HTTPS: a Unix socket or plain HTTP pays none

DEFAULT_TIMEOUT_S: Final = 5.0
_SUN_PATH_MAX: Final = 108  # sizeof(sockaddr_un.sun_path) on Linux, the terminating NUL included
_MAX_LINE: Final = 65536  # the longest status or header line accepted (as http.client's)


class _NotHttp(Exception):
    """An answer that is not the HTTP asked for (a bad status line, header, length or chunk)."""


class _ClosedUnanswered(ConnectionResetError):
    """The server closed the connection before any byte of an answer."""


# A reused connection the server closed while idle fails on the next request: those errors mean
# "send it again on a fresh connection", once.
_DROPPED: Final = (_ClosedUnanswered, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class _Wire:
    """One HTTP/1.1 connection over a connected socket (Unix, TCP, or TLS over TCP)."""

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.sock = sock
        self._host = host  # the Host header's value
        self._buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def exchange(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> tuple[int, bytes, bool]:
        """Send one request, read its answer: ``(status, body, whether the server closes)``."""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}")
        self.sock.sendall("\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + (body or b""))
        return self._answer(method)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self._buffer += chunk
        return True

    def _line(self, first: bool = False) -> bytes:
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                return line
            if len(self._buffer) > _MAX_LINE:
                raise _NotHttp(f"a status or header line longer than {_MAX_LINE} bytes")
            if not self._fill():
                if first and not self._buffer:
                    raise _ClosedUnanswered(errno.ECONNRESET, "the server closed the connection without an answer")
                raise _NotHttp(f"the answer ends within a line ({len(self._buffer)} bytes read)")

    def _exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not self._fill():
                raise _NotHttp(f"the answer ends {n - len(self._buffer)} bytes short")
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _answer(self, method: str) -> tuple[int, bytes, bool]:
        status_line = self._line(first=True)
        try:
            version, code, _ = (status_line.decode("latin-1").split(" ", 2) + [""])[:3]
            status = int(code)
        except ValueError:
            raise _NotHttp(f"bad status line {status_line[:80]!r}") from None
        if not version.startswith("HTTP/1.") or not 100 <= status <= 999:
            raise _NotHttp(f"bad status line {status_line[:80]!r}")
        fields: dict[str, str] = {}
        while line := self._line():
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise _NotHttp(f"malformed header line {line[:80]!r}")
            fields[name.strip().lower()] = value.strip()
        connection = fields.get("connection", "").lower()
        closes = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        if 100 <= status < 200:
            return self._answer(method)  # an interim answer: the real one follows
        if method == "HEAD" or status in (204, 304):
            return status, b"", closes
        if "chunked" in fields.get("transfer-encoding", "").lower():
            return status, self._chunked(), closes
        length = fields.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise _NotHttp(f"malformed Content-Length {length[:40]!r}")
            return status, self._exactly(int(length)), closes
        while self._fill():  # no length given: the body ends when the server closes
            pass
        data = bytes(self._buffer)
        self._buffer.clear()
        return status, data, True

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _NotHttp(f"malformed chunk size {size_text[:40]!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(parts)
            parts.append(self._exactly(size))
            if self._exactly(2) != b"\r\n":
                raise _NotHttp("a chunk does not end with CRLF")


def _unix_socket(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if len(os.fsencode(path)) < _SUN_PATH_MAX:
            sock.connect(path)
        else:
            # A socket address holds at most 107 bytes; reach a deeper socket through its folder.
            folder = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
            try:
                sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
            finally:
                os.close(folder)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class Endpoint:
    """Where an OPA listens: ``scheme`` is ``unix``, ``http`` or ``https``."""

    scheme: str
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (no name lookup: a name could point anywhere)."""
    if host == "localhost":
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_url(url: str, *, allow_insecure: bool = False) -> Endpoint:
    """``unix:///path``, ``http://host:port`` or ``https://host:port`` as an Endpoint.

    Plain HTTP is accepted only to a loopback address, unless ``allow_insecure``: elsewhere the
    bearer token and every decision would cross the network in clear and could be altered.
    Raises PolicyUnavailable for anything else.
    """
    parts = urlsplit(url)
    if parts.scheme == "unix":
        if not parts.path.startswith("/") or parts.netloc:
            raise PolicyUnavailable(f"OPA URL {url!r}: a Unix socket URL is unix:///absolute/path/opa.sock")
        return Endpoint("unix", path=parts.path)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise PolicyUnavailable(f"OPA URL {url!r} is not an http(s):// or unix:// URL")
    if parts.path not in {"", "/"} or parts.query:
        raise PolicyUnavailable(f"OPA URL {url!r}: give only scheme, host and port")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise PolicyUnavailable(f"OPA URL {url!r}: {exc}") from exc
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not allow_insecure:
        raise PolicyUnavailable(
            f"OPA URL {url!r} is plain HTTP to a host that is not loopback: the token and the decisions would "
            "cross the network in clear. Use https:// (with EXA_OPA_CA), or set EXA_OPA_ALLOW_INSECURE=1 to accept that"
        )
    return Endpoint(parts.scheme, host=parts.hostname, port=port)


class OpaTransport:
    """A persistent connection to one OPA server. Not thread-safe: one per thread.

    ``request`` reuses the connection (HTTP/1.1 keep-alive) and, when a reused connection turns
    out to have been closed by the server, reconnects and sends the request once more; a fresh
    connection that fails is an error at once.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        ca_file: Path | None = None,
        describe: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.describe = describe or str(endpoint)
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.has_token = bool(token)
        self._ssl: ssl.SSLContext | None = None
        if endpoint.scheme == "https":
            import ssl

            try:
                # Verifies the chain and the host name; the CA bundle replaces the system's when given.
                self._ssl = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            except (OSError, ssl.SSLError) as exc:
                raise PolicyError(f"cannot load the CA bundle {ca_file} for OPA at {self.describe}: {exc}") from exc
        self._conn: _Wire | None = None
        self._reused = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        ca_file: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        allow_insecure: bool = False,
    ) -> OpaTransport:
        """A transport for ``url`` (see ``parse_url`` for what is accepted)."""
        return cls(parse_url(url, allow_insecure=allow_insecure), token=token, ca_file=ca_file, timeout=timeout, describe=url.rstrip("/"))

    def _connection(self) -> _Wire:
        if self._conn is None:
            ep = self.endpoint
            if ep.scheme == "unix":
                self._conn = _Wire(_unix_socket(ep.path, self.timeout), "localhost")  # a placeholder: no host
            else:
                sock = socket.create_connection((ep.host, ep.port), timeout=self.timeout)
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if self._ssl is not None:
                        sock = self._ssl.wrap_socket(sock, server_hostname=ep.host)
                except BaseException:
                    sock.close()
                    raise
                host = f"[{ep.host}]" if ":" in ep.host else ep.host.encode("idna").decode("ascii")
                default = 443 if ep.scheme == "https" else 80
                self._conn = _Wire(sock, host if ep.port == default else f"{host}:{ep.port}")
            self._reused = False
        return self._conn

    def _once(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        status, data, closes = self._connection().exchange(method, path, self._headers, body)
        if closes:
            self.close()
        else:
            self._reused = True
        return status, data

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """Send one request; return the HTTP status and body, whatever the status.

        Raises OpaUnreachable (no answer) or PolicyError (TLS failure, an answer that is not HTTP).
        """
        try:
            try:
                return self._once(method, path, body)
            except _DROPPED:
                if not self._reused:
                    raise
                self.close()  # the server closed an idle keep-alive connection: once more, fresh
                return self._once(method, path, body)
        except OSError as exc:
            self.close()
            raise self._failure(exc) from exc
        except _NotHttp as exc:
            self.close()
            raise PolicyError(f"OPA at {self.describe} gave an answer that is not HTTP: {exc}") from exc

    def _failure(self, exc: OSError) -> PolicyError | PolicyUnavailable:
        """What a failed exchange means: TLS refused (only where TLS is spoken), no answer in
        time, or no connection."""
        if self._ssl is not None:
            import ssl

            if isinstance(exc, ssl.SSLCertVerificationError):
                return PolicyError(
                    f"TLS verification of OPA at {self.describe} failed: {exc.verify_message or exc}; "
                    "give the CA that signed its certificate in EXA_OPA_CA"
                )
            if isinstance(exc, ssl.SSLError):
                return PolicyError(f"TLS with OPA at {self.describe} failed: {exc}")
        if isinstance(exc, TimeoutError):
            return OpaUnreachable(self.describe, "timed out", f"no answer within {self.timeout:g} s")
        return OpaUnreachable(self.describe, "is not reachable", exc.strerror or type(exc).__name__)

    def json(self, method: str, path: str, payload: Mapping[str, object] | None = None) -> object:
        """Send ``payload`` as JSON; return the decoded answer of a 2xx response (``None`` if empty).

        401/403 raise PolicyUnavailable naming the token; other statuses and bodies that are not
        JSON raise PolicyError with OPA's own message.
        """
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        status, raw = self.request(method, path, body)
        if status in (401, 403):
            sent = "a bearer token was sent" if self.has_token else "no token was sent (set EXA_OPA_TOKEN)"
            raise PolicyUnavailable(
                f"OPA at {self.describe} refused {method} {path} with {status} ({_opa_message(raw)}): {sent}; "
                "the token is wrong or the server's authorization policy does not allow this request"
            )
        if not 200 <= status < 300:
            raise PolicyError(f"OPA at {self.describe} answered {method} {path} with {status}: {_opa_message(raw)}")
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise PolicyError(f"OPA at {self.describe} gave an answer that is not JSON: {raw[:200]!r}") from exc

    def without_token(self) -> OpaTransport:
        """A new transport to the same server with the same TLS settings, sending no token."""
        import copy

        clone = copy.copy(self)
        clone._headers = {k: v for k, v in self._headers.items() if k != "Authorization"}
        clone.has_token = False
        clone._conn = None
        clone._reused = False
        return clone

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._reused = False


def _opa_message(raw: bytes) -> str:
    """OPA's error body is ``{"code": ..., "message": ...}``; anything else is shown shortened."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw[:300].decode("utf-8", "replace") or "empty body"
    if isinstance(doc, dict) and "message" in doc:
        return f"{doc.get('code', 'error')}: {doc['message']}"
    return raw[:300].decode("utf-8", "replace")


@dataclass(frozen=True)
class ServedBundle:
    """The bundle an OPA serves the ``examlops`` tree from: its name, revision and roots."""

    name: str
    revision: str | None
    roots: tuple[str, ...]


def served_bundle(transport: OpaTransport) -> ServedBundle | None:
    """The bundle serving the ``examlops`` tree, or None when none does.

    Reads ``GET /v1/data/system/bundles`` (each loaded bundle's manifest). A bundle serves
    ``examlops`` when one of its roots is ``examlops``, lies under it, or is ``""`` (a bundle
    without roots owns everything). Two such bundles are a PolicyError: which one decides is
    ambiguous. Transport errors propagate.
    """
    answer = transport.json("GET", "/v1/data/system/bundles")
    bundles = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(bundles, dict):
        return None
    serving: list[ServedBundle] = []
    for name, info in bundles.items():
        manifest = info.get("manifest") if isinstance(info, dict) else None
        if not isinstance(manifest, dict):
            continue
        roots = manifest.get("roots", [""])
        if isinstance(roots, list) and any(isinstance(r, str) and r.split("/")[0] in {"", "examlops"} for r in roots):
            served = manifest.get("revision")
            serving.append(ServedBundle(str(name), str(served) if served else None, tuple(str(r) for r in roots)))
    if len(serving) > 1:
        names = ", ".join(b.name for b in serving)
        raise PolicyError(f"OPA at {transport.describe} loads {len(serving)} bundles for the examlops tree ({names}); expected one")
    return serving[0] if serving else None


def served_revision(transport: OpaTransport) -> str | None:
    """The revision of the bundle serving ``examlops`` (see ``served_bundle``); None if none or unset."""
    bundle = served_bundle(transport)
    return None if bundle is None else bundle.revision

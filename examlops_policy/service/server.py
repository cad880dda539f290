"""``exa hardware serve --listen ADDR``: the serving loop (``_serve.Server``) with the HTTP API
(``service.app``) beside it, on uvicorn.

* ``ADDR``: ``HOST:PORT`` (``[::1]:PORT`` for IPv6), or ``unix:PATH`` (a socket only its owner may
  use, mode 0600). Plain HTTP only on a loopback address or a Unix socket, unless ``--insecure``;
  TLS from ``--tls-cert`` and ``--tls-key`` (both, read at start: a file that will not load is bad
  input, exit 2, before anything serves).
* ``--oidc FILE``: bearer JWTs of an OIDC issuer too (``service.oidc``): the file and the JWKS file
  it names are read at start (bad input, exit 2, before anything serves).
* The process records itself (``<home>/serve/<pid>.json``) before it binds, as serve does.
* SIGTERM, SIGINT: no new connection is accepted, requests under way finish (at most
  ``GRACE_S``), the loop's step under way finishes, exit 0.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from examlops_policy.errors import SpecError

if TYPE_CHECKING:
    from examlops_policy._serve import Server
    from examlops_policy.hardware import Hardware
    from examlops_policy.service.app import Answers, Worker
    from examlops_policy.service.oidc import Verifier

GRACE_S: Final = 20  # what a SIGTERM waits for requests under way


@dataclass(frozen=True)
class Listen:
    """Where the service listens: a host and port, or a Unix socket's path."""

    host: str | None = None
    port: int | None = None
    path: Path | None = None

    @property
    def loopback(self) -> bool:
        if self.path is not None:
            return True
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host or "").is_loopback
        except ValueError:
            return False

    def url(self, tls: bool, port: int | None = None) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{'https' if tls else 'http'}://{host}:{port if port is not None else self.port}"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[V6]:PORT`` or ``unix:PATH``; SpecError naming ``--listen`` otherwise."""
    if text.startswith("unix:"):
        path = text[5:]
        if not path:
            raise SpecError("expected unix:PATH (a socket file's path)", field="--listen")
        return Listen(path=Path(path).absolute())
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SpecError(f"expected HOST:PORT (e.g. 127.0.0.1:8080) or unix:PATH (got {text!r})", field="--listen")
    return Listen(host=host, port=int(port))


def check_transport(listen: Listen, *, cert: str | None, key: str | None, insecure: bool) -> ssl.SSLContext | None:
    """The TLS context of ``cert`` and ``key`` (None: plain HTTP, allowed on loopback or a Unix
    socket, or with ``insecure``); SpecError otherwise, before anything is bound."""
    if (cert is None) != (key is None):
        raise SpecError("give both --tls-cert and --tls-key (or neither)", field="--tls-cert" if cert is None else "--tls-key")
    if cert is not None and key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise SpecError(f"the certificate and key do not load: {exc}", field="--tls-cert") from None
        return context
    if not listen.loopback and not insecure:
        raise SpecError(
            f"plain HTTP on {listen.host} would send bearer tokens in the clear: give --tls-cert and --tls-key, listen on a "
            "loopback address or unix:PATH, or add --insecure (behind a proxy that ends TLS)",
            field="--listen",
        )
    return None


def bind(listen: Listen) -> socket.socket:
    """The listening socket (a Unix socket made with mode 0600; a stale socket file replaced)."""
    if listen.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if listen.path.is_socket():
                listen.path.unlink()
            old = os.umask(0o177)
            try:
                sock.bind(str(listen.path))
            finally:
                os.umask(old)
            os.chmod(listen.path, stat.S_IRUSR | stat.S_IWUSR)
        except OSError as exc:
            sock.close()
            raise SpecError(f"cannot listen on {listen.path}: {exc.strerror or exc}", field="--listen") from None
    else:
        family = socket.AF_INET6 if listen.host and ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response's head and body go out at once, not the body
        # held back until the client acknowledges the head (a delayed ACK: ~40 ms a request on a
        # kept-alive connection).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((listen.host or "127.0.0.1", listen.port or 0))
        except OSError as exc:
            sock.close()
            raise SpecError(f"cannot listen on {listen.host}:{listen.port}: {exc.strerror or exc}", field="--listen") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def http(listen: Listen, worker: Worker, answers: Answers, *, cert: str | None, key: str | None, tls: ssl.SSLContext | None,
         oidc: Verifier | None = None) -> Callable[[Server], int]:  # fmt: skip
    """What ``_serve.Server.run`` calls on the main thread while its loop runs beside it: bind,
    serve the API until SIGTERM or SIGINT, then return 0."""

    def serve(server: Server) -> int:
        import uvicorn

        from examlops_policy.service.app import Api

        api = Api(worker, answers, revision=lambda: server.revision, oidc=oidc)
        if oidc is not None:
            oidc.log = server.log
            keys = oidc.current()
            server.log(f"oidc: bearer JWTs of {oidc.config.issuer} for {', '.join(oidc.config.audience)} ({', '.join(oidc.config.algorithms)}), "
                       f"keys from {oidc.config.jwks_file}: {keys.describe() if keys is not None else 'none'}")  # fmt: skip
        sock = bind(listen)
        try:
            port = sock.getsockname()[1] if listen.path is None else None
            config = uvicorn.Config(
                api.app(), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=GRACE_S, timeout_keep_alive=5,
                ssl_certfile=cert, ssl_keyfile=key, server_header=False, proxy_headers=False, h11_max_incomplete_event_size=16 * 1024,
            )  # fmt: skip
            runner = uvicorn.Server(config)
            server.log(f"listening on {listen.url(tls is not None, port)}")
            runner.run(sockets=[sock])
            server.log("http: stopped accepting; requests under way finished")
        finally:
            sock.close()
            if listen.path is not None:
                listen.path.unlink(missing_ok=True)
        return 0

    return serve


def load_oidc(path: str) -> Verifier:
    """``--oidc FILE``: the configuration and the JWKS file it names, read (SpecError otherwise)."""
    try:
        from examlops_policy.service.oidc import Verifier, load_config
    except ImportError as exc:  # PyJWT is the oidc extra's
        raise SpecError(f"bearer JWTs need PyJWT: pip install 'examlops-policy[oidc]' ({exc})", field="--oidc") from None
    return Verifier(load_config(Path(path)))


def start(hw: Hardware, answers: Answers, *, listen: str, tls_cert: str | None, tls_key: str | None, insecure: bool, interval_s: float, out: TextIO,
          slurm: bool | None = None, kubernetes: dict[str, str | None] | None = None, oidc: str | None = None,
          slurm_table: Path | None = None, slurm_accounts: Path | None = None) -> int:  # fmt: skip
    """``exa hardware serve --listen``: checked (SpecError before anything starts), then served
    (``slurm_table``, ``slurm_accounts``: the job_submit plugin's decision table kept current, as
    ``serve`` keeps it)."""
    from examlops_policy._serve import Server, check_interval, slurm_keeper
    from examlops_policy.hardware import Hardware
    from examlops_policy.service.app import Worker

    check_interval(interval_s)
    keeper = slurm_keeper(slurm_table, slurm_accounts)
    where = parse_listen(listen)
    context = check_transport(where, cert=tls_cert, key=tls_key, insecure=insecure)
    verifier = load_oidc(oidc) if oidc is not None else None
    home = hw.home
    hw.close()
    server: Server | None = None

    def hardware() -> Hardware:
        assert server is not None
        return server.hw  # type: ignore[return-value]  # the façade Server made

    worker = Worker(hardware, reset=lambda: server.reset() if server is not None else None)
    server = Server(lambda: Hardware(home), interval_s=interval_s, slurm=slurm, kubernetes=kubernetes, out=out,
                    http=http(where, worker, answers, cert=tls_cert, key=tls_key, tls=context, oidc=verifier), confine=worker.call,
                    slurm_table=keeper)  # fmt: skip
    try:
        return server.run(home)
    finally:
        worker.close()

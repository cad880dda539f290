"""Finding the OPA that decides, and proving that it serves the reviewed policy.

``connect(home)`` is the one entry point the evaluator uses:

- ``EXA_OPA_URL`` set: that server (``unix:///path``, ``https://host:port``, or ``http://`` to a
  loopback address; other plain HTTP only with ``EXA_OPA_ALLOW_INSECURE=1``), with the bearer
  token ``EXA_OPA_TOKEN`` and the CA bundle ``EXA_OPA_CA`` for HTTPS. Never started or stopped here.
- otherwise: the local OPA of ``home``, started on demand (``server.ensure_server``), reached
  over its Unix socket with its token.

Either way the revision of the bundle OPA serves (``GET /v1/data/system/bundles``) must have the
content digest of the policy files here: a server without a bundle, or with another revision, is a
PolicyError and nothing is decided. The revision is only a label, so what an external OPA serves is
proven by content too: its policy computes the digest of the tables it evaluates (``content``),
which the connection carries (``tables_digest``; a policy that reports none is refused here) and
every decision holds to the digest of the tables of the policy snapshot it is made under
(``_core.engine.Engine.confirm``). The local OPA's content is proven when it starts: it loads
only a bundle signed with a key made for that start, its starter checks the digest its policy
reports, and OPA refuses writes under the bundle's roots.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from examlops_policy.errors import PolicyError
from examlops_policy.model import JSONObject
from examlops_policy.opa.bundle import content_digest
from examlops_policy.opa.content import content_problem, served_content
from examlops_policy.opa.server import OpaServer, Record, ServerPaths, ensure_running, locked, read_record, read_token, stop_server
from examlops_policy.opa.transport import DEFAULT_TIMEOUT_S, Endpoint, OpaTransport, OpaUnreachable, served_bundle
from examlops_policy.tables import policy_dir, revision

ENV_URL = "EXA_OPA_URL"
ENV_TOKEN = "EXA_OPA_TOKEN"
ENV_CA = "EXA_OPA_CA"
ENV_ALLOW_INSECURE = "EXA_OPA_ALLOW_INSECURE"


@dataclass(frozen=True)
class OpaConnection:
    """A transport to the deciding OPA, and the revision it was proven to serve.

    ``expected_revision`` is the served bundle revision (its content digest equals the local
    policy files'; it may carry ``@git:<commit>``): decisions made through ``transport`` are made
    under it. ``describe`` names the server in messages. ``server`` is the local managed OPA, or
    None for an external one.
    """

    transport: OpaTransport
    expected_revision: str
    describe: str
    server: OpaServer | None = None
    # External: the digest its policy gave of the tables it evaluates, which every decision holds to
    # its own policy snapshot's. None for the local OPA, whose signed bundle proves its content at
    # its start.
    tables_digest: str | None = None

    def still_serving(self) -> bool:
        """False once the local server this connection reached has stopped (idle, its state
        folder deleted, ``exa opa stop``, killed); always True for an external OPA.

        A record read and two process checks (about 0.1 ms), no request: cheap enough before
        each transaction, so that a long-lived process reconnects (and restarts the server)
        outside it instead of failing inside it.
        """
        if self.server is None:
            return True
        record, _ = read_record(ServerPaths(self.server.socket.parent.parent))
        return record is not None and record.running() and record.opa is not None and record.opa.pid == self.server.pid


def external_transport(env: Mapping[str, str] | None = None, *, timeout: float = DEFAULT_TIMEOUT_S) -> OpaTransport | None:
    """A transport to the OPA named by ``EXA_OPA_URL``, or None when it is not set."""
    env = os.environ if env is None else env
    url = env.get(ENV_URL)
    if not url:
        return None
    ca = env.get(ENV_CA)
    return OpaTransport.from_url(
        url,
        token=env.get(ENV_TOKEN) or None,
        ca_file=Path(ca) if ca else None,
        timeout=timeout,
        allow_insecure=env.get(ENV_ALLOW_INSECURE, "") in {"1", "true", "yes"},
    )


def check_revision(served: str | None, local: str, where: str, root: Path) -> str:
    """``served`` when its content digest is ``local`` (the policy files' digest), else PolicyError."""
    if served is None:
        raise PolicyError(
            f"OPA at {where} serves no policy bundle for examlops (GET /v1/data/system/bundles names none); "
            f"expected revision {local}: load the bundle 'exa policy build' builds from the reviewed policy"
        )
    if content_digest(served) != local:
        raise PolicyError(
            f"OPA at {where} serves policy revision {served}, but the reviewed policy files in {root} are {local}; "
            "restart OPA on the new bundle (exa opa restart; an external OPA loads the bundle 'exa policy build' builds)"
        )
    return served


def _local_transport(paths: ServerPaths, server: OpaServer, timeout: float) -> OpaTransport:
    endpoint = Endpoint("unix", path=str(server.socket))
    return OpaTransport(endpoint, token=read_token(paths), timeout=timeout, describe=server.url)


def connect(home: Path, *, policy_root: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> OpaConnection:
    """The deciding OPA (external from the environment, else this home's, started on demand).

    A local server that is recorded and alive but does not answer within ``timeout`` is stopped
    (SIGTERM, then SIGKILL) and started anew, once. Raises PolicyUnavailable (no answer, token refused, cannot start), PolicyError (TLS failure,
    no bundle or another policy revision served, policy does not build), SpecError (a bad
    ``EXA_OPA_IDLE_TIMEOUT``). One request (the served revision) when the server already runs.
    """
    root = policy_root or policy_dir()
    local = revision(root)
    transport = external_transport(timeout=timeout)
    if transport is not None:
        bundle = served_bundle(transport)
        served = check_revision(None if bundle is None else bundle.revision, local, transport.describe, root)
        # The revision is a label: the tables are proven by their digest, decision by decision.
        content = served_content(transport)
        if content.tables_digest is None:
            raise PolicyError(f"OPA at {transport.describe}: {content_problem(content, root)}; nothing was placed")
        return OpaConnection(transport, served, transport.describe, tables_digest=content.tables_digest)
    paths = ServerPaths(home)
    server = ensure_running(paths, root, local)
    transport = _local_transport(paths, server, timeout)
    try:
        bundle = served_bundle(transport)
    except OpaUnreachable:
        # Recorded and alive but not answering (hung, stopped): replace it, once.
        transport.close()
        stop_server(home)
        server = ensure_running(paths, root, local)
        transport = _local_transport(paths, server, timeout)
        bundle = served_bundle(transport)
    served = check_revision(None if bundle is None else bundle.revision, local, transport.describe, root)
    return OpaConnection(transport, served, transport.describe, server)


@dataclass(frozen=True)
class OpaStatus:
    """What ``exa opa status`` shows: whether and how the deciding OPA runs, and its protection."""

    running: bool
    managed: bool
    reached_at: str
    policy_revision: str
    served_revision: str | None = None
    pid: int | None = None
    supervisor_pid: int | None = None
    idle_s: float | None = None
    idle_timeout_s: float | None = None
    listeners: tuple[str, ...] = ()
    bundle_roots: tuple[str, ...] = ()
    refuses_anonymous: bool | None = None
    token_file: str | None = None
    note: str | None = None
    content_problem: str | None = None
    signed_bundle: bool | None = None

    @property
    def same_revision(self) -> bool:
        """Whether the served bundle's manifest names the local policy's revision (a label only)."""
        return self.served_revision is not None and content_digest(self.served_revision) == self.policy_revision

    @property
    def proven(self) -> bool:
        """Whether what it serves is proven to be what exa built, not only reported by the OPA: a
        local OPA whose recorded command line verifies the bundle's signature (a key made for the
        start). An external OPA's revision and table digest come from its own rules, which are
        trusted to its operator; a local one started without a verification key may serve any
        bundle its starter chose."""
        return self.managed and self.signed_bundle is True

    @property
    def matches(self) -> bool | None:
        """Whether the served bundle has the local policy's content: its revision, and the digest the
        policy computes of its tables (None when nothing is served)."""
        if self.served_revision is None:
            return None
        return content_digest(self.served_revision) == self.policy_revision and self.content_problem is None

    def to_json(self) -> JSONObject:
        return {
            "running": self.running,
            "managed": self.managed,
            "reached_at": self.reached_at,
            "pid": self.pid,
            "supervisor_pid": self.supervisor_pid,
            "served_revision": self.served_revision,
            "policy_revision": self.policy_revision,
            "revision_matches": self.matches,
            "proven": self.proven,
            "content_problem": self.content_problem,
            "idle_s": None if self.idle_s is None else round(self.idle_s, 1),
            "idle_timeout_s": self.idle_timeout_s,
            "listeners": list(self.listeners),
            "protection": {
                "token_auth": self.refuses_anonymous,
                "token_file": self.token_file,
                "authorization_policy": "system.authz" if self.bundle_roots and "system/authz" in self.bundle_roots else None,
                "bundle_roots": list(self.bundle_roots),
                "signed_bundle": self.signed_bundle,
            },
            "note": self.note,
        }


def _refuses_anonymous(transport: OpaTransport) -> bool:
    """Ask without the token: a protected server refuses (401/403)."""
    anonymous = transport.without_token()
    try:
        return anonymous.request("GET", "/v1/data/system/bundles")[0] in (401, 403)
    finally:
        anonymous.close()


def status(home: Path, *, policy_root: Path | None = None) -> OpaStatus:
    """The deciding OPA's status; starts nothing. A stale local record is removed, unsignalled.

    Raises what the transport raises when a server that should answer does not.
    """
    root = policy_root or policy_dir()
    local = revision(root)
    transport = external_transport()
    if transport is not None:
        bundle = served_bundle(transport)
        problem = None if bundle is None else content_problem(served_content(transport), root)
        return OpaStatus(
            running=True, managed=False, reached_at=transport.describe, policy_revision=local,
            served_revision=None if bundle is None else bundle.revision,
            bundle_roots=() if bundle is None else bundle.roots, refuses_anonymous=_refuses_anonymous(transport),
            content_problem=problem,
        )  # fmt: skip
    paths = ServerPaths(home)
    where = f"unix://{paths.socket}"
    record, problem = read_record(paths) if paths.dir.is_dir() else (None, None)
    if record is None or not record.running():
        note = problem
        if record is not None:
            note = _drop_stale(paths, record)
        return OpaStatus(running=False, managed=True, reached_at=where, policy_revision=local, note=note)
    server = OpaServer.of(record)
    transport = _local_transport(paths, server, DEFAULT_TIMEOUT_S)
    try:
        bundle = served_bundle(transport)
        anonymous_refused = _refuses_anonymous(transport)
        problem = None if bundle is None else content_problem(served_content(transport), root)
    finally:
        transport.close()
    idle = None
    with contextlib.suppress(OSError):
        idle = max(0.0, time.time() - paths.activity.stat().st_mtime)
    assert record.opa is not None
    return OpaStatus(
        running=True, managed=True, reached_at=server.url, policy_revision=local,
        served_revision=None if bundle is None else bundle.revision, pid=server.pid,
        supervisor_pid=server.supervisor_pid, idle_s=idle, idle_timeout_s=record.idle_timeout_s,
        listeners=tuple(a.split("=", 1)[1] for a in record.opa.argv if a.startswith("--addr=")),
        bundle_roots=() if bundle is None else bundle.roots, refuses_anonymous=anonymous_refused,
        token_file=str(paths.token), content_problem=problem,
        signed_bundle=any(a.startswith("--verification-key=") for a in record.opa.argv),
    )  # fmt: skip


def _drop_stale(paths: ServerPaths, record: Record) -> str | None:
    """Remove a record whose processes are not (or no longer) the recorded ones; signal nothing."""
    with locked(paths):
        current, _ = read_record(paths)
        if current != record or current is None:
            return None  # replaced meanwhile: not ours to judge now
        if current.running() or current.supervisor.alive():
            return "OPA is starting" if current.state == "starting" else None
        for path in (paths.record, paths.socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    pid = current.opa.pid if current.opa is not None else current.supervisor.pid
    return f"removed a stale record: pid {pid} is not the OPA it recorded (gone, or another process now); nothing was signalled"

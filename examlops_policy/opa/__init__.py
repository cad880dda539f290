"""The policy engine's edge: the reviewed policy as a bundle, the OPA that serves it, the wire.

    bundle       reviewed_revision, content_digest, build_bundle: the policy and its revision
    transport    OpaTransport: one keep-alive HTTP connection (Unix socket, TCP, HTTPS + token)
    server       the local OPA: one per state folder, recorded, supervised, private to its owner
    supervisor   the process that starts the local OPA and stops it when idle or orphaned
    procs        proving a recorded process is the one started, before any signal
    connection   connect(): the deciding OPA (external or local), its served revision checked

The evaluator calls ``connect(home)`` and sends its queries through ``connection.transport``.
Standard library only on this path (no HTTP client package): a cold ``exa`` pays for none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from examlops_policy._lazy import home_of, lazy_names

if TYPE_CHECKING:
    from examlops_policy.opa.bundle import OPA_VERSION, Bundle, build_bundle, content_digest, opa_binary, reviewed_revision
    from examlops_policy.opa.connection import OpaConnection, OpaStatus, connect, status
    from examlops_policy.opa.server import OpaServer, StopReport, ensure_server, stop_server
    from examlops_policy.opa.transport import OpaTransport, OpaUnreachable, ServedBundle, served_bundle, served_revision

# Imported on first use: a module of this package (content, transport) imports only what it needs.
_HOME_OF: Final = home_of({
    "examlops_policy.opa.bundle": ("OPA_VERSION", "Bundle", "build_bundle", "content_digest", "opa_binary", "reviewed_revision"),
    "examlops_policy.opa.connection": ("OpaConnection", "OpaStatus", "connect", "status"),
    "examlops_policy.opa.server": ("OpaServer", "StopReport", "ensure_server", "stop_server"),
    "examlops_policy.opa.transport": ("OpaTransport", "OpaUnreachable", "ServedBundle", "served_bundle", "served_revision"),
})  # fmt: skip
__getattr__ = lazy_names(__name__, globals(), _HOME_OF)

__all__ = [
    "OPA_VERSION",
    "Bundle",
    "OpaConnection",
    "OpaServer",
    "OpaStatus",
    "OpaTransport",
    "OpaUnreachable",
    "ServedBundle",
    "StopReport",
    "build_bundle",
    "connect",
    "content_digest",
    "ensure_server",
    "opa_binary",
    "reviewed_revision",
    "served_bundle",
    "served_revision",
    "status",
    "stop_server",
]

"""Which policy revision each decision path uses, and whether it is the reviewed one.

Three places can hold a revision (see ``bundle`` for its format):

- the policy files here (``reviewed_revision``: the content digest, plus ``@git:<commit>`` when the
  folder is a clean git checkout): what was reviewed;
- the local OPA of a state folder (``exa`` starts it on demand), when it runs;
- the OPA named by ``EXA_OPA_URL``, when set.

A served revision matches when its content digest is the files' (the git part may be absent on
either side: the same bytes are the same policy) and the digest the policy computes of the tables
it evaluates is the table files' (a revision is only a label; see ``content``). ``policy_status`` starts nothing and changes
nothing; an OPA that does not answer is reported as such, not raised.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from examlops_policy.errors import ExaError
from examlops_policy.model import JSONObject
from examlops_policy.opa.bundle import content_digest, reviewed_revision
from examlops_policy.opa.content import content_problem, served_content
from examlops_policy.opa.server import OpaServer, ServerPaths, read_record, read_token
from examlops_policy.opa.transport import Endpoint, OpaTransport, served_bundle
from examlops_policy.tables import policy_dir


@dataclass(frozen=True)
class PathRevision:
    """One decision path: where it is reached, whether it answered, the revision it serves.

    ``matches`` is None when there is nothing to compare (not running, not set, no answer).
    """

    path: str
    where: str | None
    running: bool
    revision: str | None = None
    matches: bool | None = None
    note: str | None = None
    # Whether a match is proven (a local OPA that verifies the bundle's signature at load), or only
    # reported by the OPA (an external one, or a local one started without a verification key).
    proven: bool = False

    def to_json(self) -> JSONObject:
        return {
            "path": self.path,
            "where": self.where,
            "running": self.running,
            "revision": self.revision,
            "matches": self.matches,
            "proven": self.proven if self.matches else None,
            "note": self.note,
        }


@dataclass(frozen=True)
class PolicyStatus:
    """The reviewed revision of the policy files, and each decision path's."""

    policy_root: Path
    reviewed: str
    paths: tuple[PathRevision, ...]

    @property
    def mismatched(self) -> tuple[PathRevision, ...]:
        """The paths that serve another policy than the files' (or none at all)."""
        return tuple(p for p in self.paths if p.matches is False)

    @property
    def unanswered(self) -> tuple[PathRevision, ...]:
        """The decision path ``EXA_OPA_URL`` names when it does not answer: every decision would
        fail closed (a local OPA not running is started on demand, and is not one)."""
        return tuple(p for p in self.paths if p.path == "EXA_OPA_URL" and p.where is not None and not p.running)

    def to_json(self) -> JSONObject:
        return {
            "policy_root": str(self.policy_root),
            "reviewed_revision": self.reviewed,
            "content_digest": content_digest(self.reviewed),
            "paths": [p.to_json() for p in self.paths],
            "all_match": not self.mismatched,
            "unanswered": [p.path for p in self.unanswered],
        }


def _served(transport: OpaTransport, reviewed: str, path: str, root: Path) -> PathRevision:
    """Ask ``transport`` which revision it serves, and the digest of its tables; errors become a
    note (status raises nothing)."""
    try:
        bundle = served_bundle(transport)
        problem = None if bundle is None or bundle.revision is None else content_problem(served_content(transport), root)
    except ExaError as exc:
        return PathRevision(path, transport.describe, False, note=f"did not answer: {exc}")
    finally:
        transport.close()
    if bundle is None or bundle.revision is None:
        return PathRevision(path, transport.describe, True, None, False, "serves no policy bundle for examlops")
    if problem is not None:
        return PathRevision(path, transport.describe, True, bundle.revision, False, problem)
    return PathRevision(path, transport.describe, True, bundle.revision, content_digest(bundle.revision) == content_digest(reviewed))


def _local(home: Path, reviewed: str, root: Path) -> PathRevision:
    paths = ServerPaths(home)
    where = f"unix://{paths.socket}"
    record, problem = read_record(paths) if paths.dir.is_dir() else (None, None)
    if record is None or not record.running():
        return PathRevision("local OPA", where, False, note=problem or "not running; the next decision starts it on the reviewed files")
    server = OpaServer.of(record)
    try:
        token = read_token(paths)
    except ExaError as exc:
        return PathRevision("local OPA", where, True, note=str(exc))
    transport = OpaTransport(Endpoint("unix", path=str(server.socket)), token=token, describe=server.url)
    served = _served(transport, reviewed, "local OPA", root)
    assert record.opa is not None
    return replace(served, proven=any(a.startswith("--verification-key=") for a in record.opa.argv))


def _external(env: Mapping[str, str], reviewed: str, root: Path) -> PathRevision:
    from examlops_policy.opa.connection import ENV_URL, external_transport

    url = env.get(ENV_URL)
    if not url:
        return PathRevision("EXA_OPA_URL", None, False, note="not set")
    try:
        transport = external_transport(env)
    except ExaError as exc:
        return PathRevision("EXA_OPA_URL", url, False, note=str(exc))
    assert transport is not None
    return _served(transport, reviewed, "EXA_OPA_URL", root)


def policy_status(home: Path, policy_root: Path | None = None, env: Mapping[str, str] | None = None) -> PolicyStatus:
    """The reviewed revision of ``policy_root`` and the revision each decision path serves.

    Raises PolicyError when the policy files cannot be read; never starts or stops an OPA.
    """
    root = policy_root or policy_dir()
    reviewed = reviewed_revision(root)
    environ = os.environ if env is None else env
    return PolicyStatus(root, reviewed, (_local(home, reviewed, root), _external(environ, reviewed, root)))

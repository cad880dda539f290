"""One workload's request: its policy input, built once per placement.

Everything a decision derives from the workload comes from here: the input the policy reads
(``input``), its projection onto a policy's signature and that projection's key (what verdicts are
kept under), the input digest of the decision, the workload the record stores, and the check that a
retried request asks for the same workload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cached_property

from examlops_policy.model import JSONObject, Workload
from examlops_policy._core.codec import canonical, content_key, workload_input
from examlops_policy._core.verdicts import Signature


class Request:
    """A workload and its policy input (the workload as the policy reads it), built once."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.input: JSONObject = workload_input(workload)
        self._signed: dict[Signature, tuple[JSONObject, str]] = {}

    @cached_property
    def input_bytes(self) -> bytes:
        return canonical(self.input)

    def signed(self, signature: Signature) -> tuple[JSONObject, str]:
        """The input's fields a policy's verdicts depend on, and their key."""
        found = self._signed.get(signature)
        if found is None:
            projection = signature.workload_of(self.input)
            found = self._signed[signature] = (projection, content_key(projection))
        return found

    def input_digest(self, fleet_revision: str, capacity_digest: str, quota: JSONObject | None = None) -> str:
        """``sha256:`` of the canonical ``{"capacity", "fleet", "quota", "workload"}`` a decision is a
        function of (the workload's input, the fleet revision, the digest of every pool's capacity,
        and what the projects its quotas count held: ``quota``, left out when nothing counted)."""
        middle = b',"quota":' + canonical(quota) if quota else b""
        body = b'{"capacity":' + canonical(capacity_digest) + b',"fleet":' + canonical(fleet_revision) + middle + b',"workload":' + self.input_bytes + b"}"
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def asks_as(self, stored_input: Mapping[str, object]) -> bool:
        """Whether a recorded decision's workload (its stored policy input) is this request's."""
        return dict(stored_input) == self.input

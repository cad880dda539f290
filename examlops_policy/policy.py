"""The policy evaluator seam, and its OPA adapter.

``PolicyEvaluator`` is what the decision core needs: one call per decision, every pool's verdict
back. ``OpaEvaluator`` asks a long-lived OPA server over its REST API, through an
``examlops_policy.opa.OpaTransport`` (a keep-alive connection over a Unix socket, TCP or HTTPS).
Everything that goes wrong fails closed: no verdict, no placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Protocol, cast

from examlops_policy.errors import PolicyError
from examlops_policy.model import JSONObject

if TYPE_CHECKING:
    from examlops_policy.opa.transport import OpaTransport

DECISION_PACKAGE: Final = "examlops.hardware.placement"
DECISION_RULE: Final = "decision_by_shape"
DEFAULT_TIMEOUT_S: Final = 5.0


class PolicyEvaluator(Protocol):
    """Evaluates the placement policy for one workload over all candidate pools.

    ``evaluate`` returns the policy's decision document (see policies/examlops/hardware/placement.rego)
    and never a partial one. It raises ``PolicyUnavailable`` when no answer could be had and
    ``PolicyError`` when the answer is not a usable decision. It has no side effects and may be
    called again with the same input for the same answer (same policy revision).
    """

    def evaluate(self, policy_input: Mapping[str, object]) -> JSONObject: ...

    @property
    def revision(self) -> str:
        """The policy revision the evaluator expects to be running (a digest)."""
        ...


_REQUIRED: Final = {"rejection", "shapes", "short", "eligible", "burst", "workload", "provenance", "selected_tier"}


def check_decision(answer: object, where: str) -> JSONObject:
    """Raise PolicyError unless ``answer`` has the shape of a decision document."""
    if not isinstance(answer, dict):
        raise PolicyError(f"{where}: the policy returned no decision (undefined); is the placement policy loaded?")
    missing = _REQUIRED - answer.keys()
    if missing:
        raise PolicyError(f"{where}: malformed decision, missing {sorted(missing)}")
    if not isinstance(answer["shapes"], dict) or not isinstance(answer["short"], list) or not isinstance(answer["eligible"], list):
        raise PolicyError(f"{where}: malformed decision (shapes must be an object, short and eligible lists)")
    if not isinstance(answer["burst"], dict) or "attempted" not in answer["burst"]:
        raise PolicyError(f"{where}: malformed decision (burst verdict missing)")
    return cast(JSONObject, answer)


class OpaEvaluator:
    """Queries ``data.examlops.hardware.placement.decision_by_shape`` on an OPA server.

    ``target`` is a transport (from ``examlops_policy.opa.connect``) or a URL for one without a
    token (``http://`` to loopback, ``https://``, ``unix://``).
    """

    def __init__(self, target: str | OpaTransport, *, revision: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        from examlops_policy.opa.transport import OpaTransport

        self._transport = target if isinstance(target, OpaTransport) else OpaTransport.from_url(target, timeout=timeout)
        self.url = self._transport.describe
        self._revision = revision
        self._path = f"/v1/data/{DECISION_PACKAGE.replace('.', '/')}/{DECISION_RULE}"

    @property
    def revision(self) -> str:
        return self._revision

    def evaluate(self, policy_input: Mapping[str, object]) -> JSONObject:
        from examlops_policy.opa.transport import OpaUnreachable

        try:
            raw = self._transport.json("POST", self._path, {"input": dict(policy_input)})
        except OpaUnreachable as exc:
            raise exc.nothing_placed() from exc
        return check_decision(raw.get("result") if isinstance(raw, dict) else None, f"OPA at {self.url}")

    def close(self) -> None:
        self._transport.close()

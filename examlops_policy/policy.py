"""The policy evaluator seam, and its OPA adapter.

``PolicyEvaluator`` is what the decision core needs: one call per decision, every pool's verdict
back. ``OpaEvaluator`` asks a long-lived OPA server over its REST API (through opa-python-client).
Everything that goes wrong fails closed: no verdict, no placement.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Final, Protocol, cast
from urllib.parse import urlsplit

import requests

from examlops_policy.errors import PolicyError, PolicyUnavailable
from examlops_policy.model import JSONObject

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


def _sync_client_class() -> type:
    """opa-python-client's synchronous ``OpaClient``, without its asyncio half.

    The package's ``__init__`` also imports ``AsyncOpaClient`` and with it aiohttp, which costs a
    command-line call about a fifth of a second and is never used here. Registering the package
    module without running its ``__init__`` lets ``opa_client.opa`` import on its own.
    """
    if "opa_client" not in sys.modules:
        spec = importlib.util.find_spec("opa_client")
        if spec is not None and spec.loader is not None:
            sys.modules["opa_client"] = importlib.util.module_from_spec(spec)
    from opa_client.opa import OpaClient

    return cast(type, OpaClient)


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
    """Queries ``data.examlops.hardware.placement.decision_by_shape`` on an OPA server."""

    def __init__(self, url: str, *, revision: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise PolicyUnavailable(f"EXA_OPA_URL {url!r} is not an http(s) URL")
        self.url = url.rstrip("/")
        self._revision = revision
        self._client = _sync_client_class()(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            timeout=timeout,
            retries=0,
        )
        # Loopback or a configured URL: no proxy lookup through the environment on every call.
        self._client._session.trust_env = False

    @property
    def revision(self) -> str:
        return self._revision

    def evaluate(self, policy_input: Mapping[str, object]) -> JSONObject:
        try:
            raw = self._client.query_rule(dict(policy_input), DECISION_PACKAGE, DECISION_RULE)
        except requests.Timeout as exc:
            raise PolicyUnavailable(f"OPA at {self.url} timed out; nothing was placed") from exc
        except requests.ConnectionError as exc:
            raise PolicyUnavailable(f"OPA at {self.url} is not reachable; nothing was placed") from exc
        except requests.HTTPError as exc:
            body = exc.response.text[:500] if exc.response is not None else ""
            raise PolicyError(f"OPA at {self.url} refused the query: {body}") from exc
        except (requests.RequestException, ValueError) as exc:
            raise PolicyError(f"OPA at {self.url} gave an unreadable answer: {exc}") from exc
        return check_decision(raw.get("result") if isinstance(raw, dict) else None, f"OPA at {self.url}")

    def close(self) -> None:
        self._client.close_connection()

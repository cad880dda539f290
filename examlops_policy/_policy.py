"""The policy evaluator seam, and its OPA adapter.

``PolicyEvaluator`` is what the engine needs from a policy engine: confirm the revision it serves
(one cheap call per decision), describe itself (once per revision), judge shapes for a workload
(only the shapes the engine has no verdict for), and the reference decision (replay, tests).
``OpaPolicy`` asks an OPA server over its REST API through a ``Transport`` (a Unix socket, or
HTTP(S)). Everything that goes wrong fails closed: no verdict, no placement.

The fleet's shapes live in OPA as data (``data.examlops_fleet.shapes[<key>]``, content-addressed),
so a verdict query carries only the workload's signature fields and the shape keys; a key OPA does
not hold (a new shape, or a restarted server) is uploaded and the query asked once more.

What each check, the tier and the grant see of the shapes (their *views*), and the denials of the
checks that read no workload field, depend only on the policy revision and the shapes, not on the
workload: for a query over many keys the policy works them out once (the ``views`` entry point)
and they are stored beside the shapes (``data.examlops_fleet.views[<key>]``, the key the policy
derives from the shape keys; a few per connection, once it asks about a key set a second time). A
verdict query for exactly those keys under the same revision that carries the digest the policy
gave with them reads them instead of working them out again; the answer is the same either way.
Whoever holds the token may rewrite that data, so views are read only when they still hash to
that digest (``examlops.fleet``, as the shapes to their keys): a connection reads only views it
was given the digest of, never views it merely finds stored.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from examlops_policy.errors import OpaUnreachable, PolicyError, PolicyUnavailable
from examlops_policy.model import JSONObject
from examlops_policy._core import codec
from examlops_policy._core.verdicts import About, Answer, Confirmation, PolicyEvaluator

PACKAGE_PATH: Final = "/v1/data/examlops/hardware/placement"
FLEET_PATH: Final = "/v1/data/examlops_fleet"
UPLOAD_ROUNDS: Final = 3
# A verdict query over at least this many keys has the fleet's views stored first (below it,
# working them out in the query costs about what reading them saves).
VIEWS_MIN_KEYS: Final = 32
# The views stored per connection (the oldest is removed from OPA when another is stored).
VIEWS_KEPT: Final = 4


class Transport(Protocol):
    """One HTTP exchange with OPA: ``(status, body)``. Raises ``PolicyUnavailable`` when the server
    cannot be reached or does not answer in time, ``PolicyError`` for what is not HTTP."""

    describe: str  # where the server is, for messages (never a secret)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]: ...

    def close(self) -> None: ...


class OpaPolicy:
    """The placement policy on an OPA server, through ``transport``."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._where = f"OPA at {transport.describe}"
        # The views this connection had OPA store, by key: (the revision they were worked out under,
        # their digest), oldest first; and the key sets it asked about once (stored when asked again).
        self._views: OrderedDict[str, tuple[str | None, str]] = OrderedDict()
        self._asked: OrderedDict[str, None] = OrderedDict()
        self._served: str | None = None  # the revision the last confirm said OPA serves

    def describe(self) -> str:
        return self._transport.describe

    def _request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            return self._transport.request(method, path, body)
        except OpaUnreachable as exc:
            raise exc.nothing_placed() from exc

    def _query(self, rule: str, policy_input: JSONObject | None) -> object:
        """The rule's answer to ``policy_input`` (None: a rule that reads no input, asked by GET)."""
        if policy_input is None:
            status, raw = self._request("GET", f"{PACKAGE_PATH}/{rule}", None)
        else:
            status, raw = self._request("POST", f"{PACKAGE_PATH}/{rule}", codec.query_body(policy_input))
        if status in (401, 403):
            raise PolicyUnavailable(f"{self._where} refused the query ({status}: {_message(raw)}): the token is missing or wrong; nothing was placed")
        if status != 200:
            raise PolicyError(f"{self._where} refused the query ({status}): {_message(raw)}")
        return codec.result_of(raw, rule, self._where)

    def confirm(self) -> Confirmation:
        # The smallest query there is: no input, no body; the revision and OPA's version back.
        confirmation = codec.decode_confirmation(self._query("confirm", None), self._where)
        self._served = confirmation.revision
        return confirmation

    def about(self) -> About:
        return codec.decode_about(self._query("about", {}), self._where)

    def verdicts(self, workload: JSONObject, keys: Sequence[str], shapes: Mapping[str, JSONObject]) -> Answer:
        # Views are stored for a key set this connection asks about again (a process that asks
        # once gains nothing from storing them).
        views = len(keys) >= VIEWS_MIN_KEYS and self._asked_before(codec.views_key(keys))
        for _ in range(UPLOAD_ROUNDS):
            policy_input: JSONObject = {"workload": workload, "keys": list(keys)}
            digest = self._stored_views(keys) if views else None
            if digest is not None:
                policy_input["views"] = digest
            answer = codec.decode_verdicts(self._query("verdicts", policy_input), keys, self._where)
            if not answer.missing:
                return answer
            self._upload({k: shapes[k] for k in answer.missing if k in shapes})
        raise PolicyError(f"{self._where} keeps losing the fleet's shapes (uploaded {UPLOAD_ROUNDS} times); nothing was placed")

    def _asked_before(self, key: str) -> bool:
        """Whether this connection asked about the key set ``key`` before (it is noted now)."""
        if key in self._views or key in self._asked:
            return True
        self._asked[key] = None
        while len(self._asked) > VIEWS_KEPT * 4:
            self._asked.popitem(last=False)
        return False

    def _stored_views(self, keys: Sequence[str]) -> str | None:
        """The digest of the views of the shapes of ``keys`` that this connection had OPA store
        under the revision it serves (stored now when it has none under it), or None: not while
        some shape is missing there (the views then cover fewer shapes, under another key; the
        verdict query says which, and they are uploaded first). Views found stored are never
        taken on trust: only the digest the policy gave this connection with them is carried."""
        key = codec.views_key(keys)
        served = self._served if self._served is not None else self.confirm().revision
        held = self._views.get(key)
        if held is not None and held[0] == served:
            self._views.move_to_end(key)
            return held[1]
        views, covered, digest = codec.stored_views(self._query("views", {"keys": list(keys)}), self._where)
        if covered != key:
            return None
        status, raw = self._request("PUT", f"{FLEET_PATH}/views/{key}", codec.json_bytes(views))
        if status not in (200, 204):
            raise PolicyError(f"{self._where} refused the fleet's views ({status}): {_message(raw)}")
        self._views[key] = (served, digest)
        self._views.move_to_end(key)
        while len(self._views) > VIEWS_KEPT:
            old, _ = self._views.popitem(last=False)
            self._request("DELETE", f"{FLEET_PATH}/views/{old}", None)
        return digest

    def _upload(self, shapes: Mapping[str, JSONObject]) -> None:
        if not shapes:
            raise PolicyError(f"{self._where} asked for shapes this fleet does not have")
        # The server lacks shapes (a new one, or restarted): what it held of views is not known.
        self._views.clear()
        status, raw = self._request("PATCH", f"{FLEET_PATH}/shapes", codec.shapes_patch(shapes))
        if status == 404:
            # No shapes yet (a fresh server): create them.
            status, raw = self._request("PUT", FLEET_PATH, codec.shapes_document(shapes))
        if status not in (200, 204):
            raise PolicyError(f"{self._where} refused the fleet's shapes ({status}): {_message(raw)}")

    def query(self, path: str, policy_input: JSONObject) -> object:
        """Another entry point of the reviewed policy (``examlops/queue/order/ranked``, ...): its
        answer as it is; PolicyError when it is undefined or refused."""
        status, raw = self._request("POST", f"/v1/data/{path}", codec.query_body(policy_input))
        if status in (401, 403):
            raise PolicyUnavailable(f"{self._where} refused the query ({status}: {_message(raw)}): the token is missing or wrong; nothing was placed")
        if status != 200:
            raise PolicyError(f"{self._where} refused the query ({status}): {_message(raw)}")
        return codec.result_of(raw, path, self._where)

    def decision(self, policy_input: JSONObject) -> JSONObject:
        raw = self._query("decision", policy_input)
        if not isinstance(raw, dict):
            raise PolicyError(f"{self._where}: malformed reference decision")
        return raw

    def close(self) -> None:
        self._transport.close()


def _message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:300].decode("utf-8", "replace")
    if isinstance(body, dict):
        return str(body.get("message") or body)[:300]
    return str(body)[:300]


__all__ = ["Confirmation", "OpaPolicy", "PolicyEvaluator", "PolicyUnavailable", "Transport"]

"""The placement service's HTTP API (ASGI, on Starlette): every route, what scope it needs, and
how it answers. One table (``service.routes.ROUTES``) is the source of the routing and of the OpenAPI
document (``service.openapi``).

Every use of the state and the policy runs on ONE worker thread (``Worker``) that uses this
process's one ``Hardware`` (one store connection, one policy snapshot, renewed by the decision
cycle when the reviewed files change), the serving loop's steps included: a request's body is read
whole, within ``MAX_BODY_BYTES``, on the event loop before it is handed over, so a slow or stalled
client never holds the write lock nor the worker. The answers are the command line's: the JSON
``--json`` prints, made by the same code (``Answers``: the CLI's handlers, run with their output
captured); ``?format=text`` gives the text it prints, and ``X-Exa-Exit-Code`` its exit code.

Identity: the audit entry of a decision made for a request names the caller's token
(``source: exa-service:token:<id>``), or, for a bearer JWT of the OIDC issuer that ``--oidc``
configures (``service.oidc``), its issuer and subject (``exa-service:oidc:<iss>#<sub>``). Each
request but ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json`` carries
``Authorization: Bearer <token>`` (401 without a valid one). The token's project is the project a
decision bills to (a JWT whose claim names several: the one the body names, among them); a body
naming another project, or a decision or queued workload of another project, gets 403 and nothing
is written. Scopes: ``read`` to read, ``place`` to place, release, renew and cancel, ``admin`` for
pool changes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from examlops_policy.app.cycle import SOURCE
from examlops_policy.errors import ExaError, PolicyError, PolicyUnavailable, SpecError, StateError
from examlops_policy.service import requests as reqs
from examlops_policy.service.metrics import Metrics
from examlops_policy.service.problems import CONTENT_TYPE, HttpProblem, forbidden, problem, unauthorized
from examlops_policy.service.routes import ROUTES, Spec

if TYPE_CHECKING:
    from examlops_policy.hardware import Hardware
    from examlops_policy.model import Decision
    from examlops_policy.service.oidc import Verifier
    from examlops_policy.service.tokens import Caller
    from examlops_policy.views import DecisionRecord, DecisionSummary, PoolChange

T = TypeVar("T")
Handler = Callable[[Request, "Hardware", "Caller | None", object], Response]


class Answers(Protocol):
    """What the API answers with: the command line's own output (``cli.serving.CliAnswers``,
    given by ``exa hardware serve --listen``; the service imports nothing of the command line)."""

    def command(self, command: str, hw: Hardware, *, text: bool, columns: int, **options: object) -> tuple[int, str]: ...

    def decision(
        self, decision: Decision, record: DecisionRecord | None, *, text: bool, explain: bool, columns: int, verdicts: bool = True
    ) -> tuple[int, str | dict[str, object]]: ...

    def summaries(self, rows: Sequence[DecisionSummary]) -> list[dict[str, object]]: ...

    def summaries_text(self, rows: Sequence[DecisionSummary], cursor: str | None, *, ranged: bool, columns: int) -> str: ...

    def changes_text(self, rows: Sequence[PoolChange], *, prune: bool, dry_run: bool, columns: int) -> tuple[int, str]: ...

    def changes(self, rows: Sequence[PoolChange]) -> list[dict[str, object]]: ...

    def exit_code(self, exc: ExaError) -> int: ...


class Worker:
    """The one thread that uses this process's ``Hardware`` (``hardware()``, made on that thread
    on first use; ``reset()`` drops it after a state fault): the API's requests and the serving
    loop's steps alike, one at a time."""

    def __init__(self, hardware: Callable[[], Hardware], reset: Callable[[], None]) -> None:
        self._hardware = hardware
        self._reset = reset
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exa-worker")

    def _guarded(self, work: Callable[[Hardware], T]) -> T:
        try:
            return work(self._hardware())
        except StateError:
            self._reset()
            raise

    async def run(self, work: Callable[[Hardware], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._guarded, work)

    def call(self, work: Callable[[], T]) -> T:
        """``work()`` on the worker's thread, waited for (the serving loop's steps)."""
        return self._pool.submit(work).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _json(body: object, status: int = 200) -> Response:
    return Response(json.dumps(body, ensure_ascii=False, sort_keys=True) + "\n", status, media_type="application/json")


def _problem(exc: ExaError, path: str, exit_code: Callable[[ExaError], int] = lambda _: 1) -> Response:
    status, body = problem(exc, path, exit_code=exit_code)
    headers = {"WWW-Authenticate": 'Bearer realm="exa"'} if status == 401 else None
    return Response(json.dumps(body, ensure_ascii=False) + "\n", status, media_type=CONTENT_TYPE, headers=headers)


async def _raw(request: Request) -> bytes:
    """The request's body, read whole (at most ``MAX_BODY_BYTES``: 413 past it) before any work."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > reqs.MAX_BODY_BYTES:
        raise reqs.too_large(int(declared))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > reqs.MAX_BODY_BYTES:
            raise reqs.too_large(size)
        chunks.append(chunk)
    return b"".join(chunks)


def _body(request: Request, raw: bytes) -> object:
    """The JSON of a body (None when empty): 415 for another media type, 400 for malformed JSON."""
    if not raw.strip():
        return None
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise HttpProblem(415, "unsupported-media-type", f"expected Content-Type application/json (got {kind}); nothing was written")
    return reqs.parse_json(raw)


def _int(text: str | None, default: int, name: str, *, most: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise SpecError(f"expected a whole number from 1 to {most} (got {text[:20]!r})", source="query", field=name)
    return int(text)


def _text(request: Request) -> bool:
    return request.query_params.get("format") == "text"


def _columns(request: Request) -> int:
    """The width text is rendered at (``?columns=``, as the client's ``COLUMNS``; default 160)."""
    given = request.query_params.get("columns", "")
    return min(max(int(given), 40), 1000) if given.isdigit() and len(given) < 6 else 160


class Api:
    """The routes over one ``Worker`` (see the module)."""

    def __init__(self, worker: Worker, answers: Answers, metrics: Metrics | None = None, *, revision: Callable[[], str | None] = lambda: None,
                 oidc: Verifier | None = None) -> None:  # fmt: skip
        self.worker = worker
        self.answers = answers
        self.metrics = metrics or Metrics()
        self.revision = revision
        self.oidc = oidc

    # -- identity ------------------------------------------------------------------------------

    def _caller(self, hw: Hardware, request: Request, scope: str) -> Caller:
        """Who asks, by the request's bearer token (the service's own, or a JWT with ``--oidc``):
        401 without a valid one, 403 without ``scope``."""
        from examlops_policy.service import tokens

        header = request.headers.get("authorization")
        try:
            token = tokens.bearer(header)
            if self.oidc is not None and self.oidc.is_jwt(token):
                caller = self.oidc.verify(token)
            else:
                caller = tokens.Caller.of(tokens.authenticate(hw.cycle.opened_store(), header))
        except tokens.TokenRefused as exc:
            raise unauthorized(str(exc)) from None
        if scope not in caller.scopes:
            raise forbidden(f"{caller.who} has scopes {','.join(caller.scopes) or '(none)'}; this needs {scope}")
        return caller

    @staticmethod
    def _own(caller: Caller | None, project: str | None, what: str) -> Caller:
        assert caller is not None
        if project not in caller.projects:
            acts = f"project {caller.projects[0]}" if len(caller.projects) == 1 else f"projects {', '.join(caller.projects)}"
            raise forbidden(f"{what} belongs to project {project or '(none)'}, and this token acts for {acts}; nothing was changed")
        return caller

    # -- dispatch ------------------------------------------------------------------------------

    def endpoint(self, spec: Spec, work: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                raw = await _raw(request) if request.method == "POST" else b""

                def job(hw: Hardware) -> Response:
                    caller = self._caller(hw, request, spec.scope) if spec.scope is not None else None
                    return work(request, hw, caller, _body(request, raw))

                response = await self.worker.run(job)
            except ExaError as exc:
                if isinstance(exc, (PolicyUnavailable, PolicyError)):
                    self.metrics.opa_error()
                response = _problem(exc, request.url.path, self.answers.exit_code)
            except Exception as exc:  # noqa: BLE001 - a server answers what it did not foresee as a 500
                internal = HttpProblem(500, "internal", f"{type(exc).__name__}: {exc}", exit_code=1, title="internal error")
                response = _problem(internal, request.url.path)
            self.metrics.answered(spec.name, response.status_code)
            return response

        return handle

    @staticmethod
    def _out(out: str | dict[str, object], code: int, text: bool) -> Response:
        headers = {"X-Exa-Exit-Code": str(code)}
        if isinstance(out, dict):
            return Response(json.dumps(out, ensure_ascii=False, sort_keys=True) + "\n", 200, media_type="application/json", headers=headers)
        return Response(out, 200, media_type="text/plain; charset=utf-8" if text else "application/json", headers=headers)

    # -- the routes ----------------------------------------------------------------------------

    def place(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        assert caller is not None
        asked = reqs.place_request(body, caller.projects)
        started = time.perf_counter()
        record = earlier = None
        if asked.dry_run:
            decision = hw.what_if(asked.workload, where=True)
        else:
            if asked.request_id is not None:
                earlier = hw.store.request_row(asked.request_id)
                if earlier is not None:
                    self._own(caller, hw.decision(earlier.id).decision.workload.project, f"request id {asked.request_id!r}")
            hw.cycle.source = caller.source  # the decision's audit entry names who asked
            try:
                record = hw.place(asked.workload, request_id=asked.request_id, lease=asked.lease, queue=asked.queue)
            finally:
                hw.cycle.source = SOURCE
            decision = record.decision
        self.metrics.decided(decision.outcome, asked.dry_run, time.perf_counter() - started, retry=earlier is not None)
        try:
            code, out = self.answers.decision(
                decision, record, text=_text(request), explain=asked.explain, columns=_columns(request),
                verdicts=request.query_params.get("verdicts") != "false",
            )  # fmt: skip
        except SpecError as exc:  # a retry of a request whose placement ended since: it places nothing again
            raise HttpProblem(409, "request-ended", str(exc), title="request id already used") from None
        return self._out(out, code, _text(request))

    def decision(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        record = hw.decision(request.path_params["id"])
        self._own(caller, record.decision.workload.project, f"decision {record.id[:12]}")
        replay = request.query_params.get("replay") == "true"
        code, out = self.answers.command(columns=_columns(request), command="explain", hw=hw, text=_text(request), id=record.id, replay=replay)
        return self._out(out, code, _text(request))

    def decisions(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        assert caller is not None
        q = request.query_params
        limit = _int(q.get("limit"), 20, "limit", most=1000)
        page = hw.decision_page(limit=limit, since=q.get("since"), until=q.get("until"), cursor=q.get("cursor"))
        mine = [s for s in page.decisions if hw.decision(s.id).decision.workload.project in caller.projects]
        if _text(request):
            ranged = any(q.get(k) for k in ("since", "until", "cursor"))
            return self._out(self.answers.summaries_text(mine, page.cursor, ranged=ranged, columns=_columns(request)), 0, True)
        return _json({"decisions": self.answers.summaries(mine), "cursor": page.cursor})

    def release(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        reqs.empty_or_object(body)
        record = hw.decision(request.path_params["id"])
        self._own(caller, record.decision.workload.project, f"decision {record.id[:12]}")
        code, out = self.answers.command(columns=_columns(request), command="release", hw=hw, text=_text(request), id=record.id, kubeconfig=None, context=None)
        return self._out(out, code, _text(request))

    def renew(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        lease = reqs.lease_of(body)
        record = hw.decision(request.path_params["id"])
        self._own(caller, record.decision.workload.project, f"decision {record.id[:12]}")
        code, out = self.answers.command(columns=_columns(request), command="renew", hw=hw, text=_text(request), id=record.id, lease=lease)
        return self._out(out, code, _text(request))

    def estimates(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        """Each pool's start estimate for a workload (query fields, or a body as ``place`` takes it),
        decided as a dry run: nothing is recorded."""
        assert caller is not None
        if body is None:
            fields = {"name": "estimate", **{k: v for k, v in request.query_params.items()}}
            for key in ("count", "nodes"):
                if key in fields:
                    fields[key] = _int(str(fields[key]), 1, key, most=1_000_000)  # type: ignore[assignment]
            if "fraction" in fields:
                try:
                    fields["fraction"] = float(str(fields["fraction"]))  # type: ignore[assignment]
                except ValueError:
                    raise SpecError(f"expected a number (got {str(fields['fraction'])[:20]!r})", source="query", field="fraction") from None
            body = {"workload": fields}
        if not isinstance(body, dict):
            raise SpecError("expected a JSON object with a workload", source="request body")
        asked = reqs.place_request({k: v for k, v in body.items() if k != "dry_run"}, caller.projects)
        decision = hw.what_if(asked.workload, where=True)
        _, answer = self.answers.decision(decision, None, text=False, explain=False, columns=160)
        assert isinstance(answer, dict)
        rows = answer.get("verdicts")
        pools = [{"pool": v.get("pool"), "admissible": v.get("admissible"), **(v.get("estimate") or {"estimated_start": None})}
                 for v in (rows if isinstance(rows, list) else []) if isinstance(v, dict)]  # fmt: skip
        return _json({"outcome": decision.outcome, "pool": answer.get("pool"), "estimated_start": answer.get("estimated_start"),
                      "estimate_source": answer.get("estimate_source"), "pools": pools})  # fmt: skip

    def pools(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "pools")

    def pool(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "pool", name=request.path_params["name"])

    def queue(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "queue", all=request.query_params.get("all") == "true")

    def cancel(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        reqs.empty_or_object(body)
        ident = request.path_params["id"]
        entry = next((e for e in hw.queue(every=True).entries if e.id == ident or e.id.startswith(ident)), None)
        if entry is not None:
            self._own(caller, entry.project, f"queued workload {entry.id[:12]}")
        code, out = self.answers.command(columns=_columns(request), command="cancel", hw=hw, text=_text(request), id=ident)
        return self._out(out, code, _text(request))

    def apply(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        from examlops_policy import specs

        given = body.get("source") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict) or set(body) - {"nodes", "pools", "dry_run", "prune", "source"} or not isinstance(body.get("pools"), list)
            or (given is not None and (not isinstance(given, str) or not 0 < len(given) <= 256 or not given.isprintable()))
        ):  # fmt: skip
            raise SpecError(
                'expected {"nodes": [...], "pools": [...], "dry_run": false, "prune": false, "source": "pools.yaml"}, the nodes and pools '
                "as a pools file has them (source: the file's name, for the messages; at most 256 printable characters)",
                source="request body",
            )
        source = given or "request body"
        made = specs.pools_from_document({k: v for k, v in body.items() if k in ("nodes", "pools")}, source=source, tables=hw.tables)
        prune, dry_run = bool(body.get("prune")), bool(body.get("dry_run"))
        changes = hw.apply(made, prune=prune, dry_run=dry_run)
        code, out = self.answers.changes_text(changes, prune=prune, dry_run=dry_run, columns=_columns(request))
        if _text(request):
            return self._out(out, code, True)
        answer = _json(self.answers.changes(changes))
        answer.headers["X-Exa-Exit-Code"] = str(code)  # a dry run that would be refused: as the write would exit
        return answer

    def _pool_change(self, request: Request, hw: Hardware, body: object, command: str) -> Response:
        name = request.path_params["name"]
        code, out = self.answers.command(
            columns=_columns(request), command=command, hw=hw, text=_text(request), name=name, dry_run=reqs.dry_run_of(body), handler_name=command
        )
        return self._out(out, code, _text(request))

    def drain(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._pool_change(request, hw, body, "drain")

    def undrain(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._pool_change(request, hw, body, "undrain")

    def remove(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._pool_change(request, hw, body, "remove-pool")

    def _read(self, request: Request, hw: Hardware, command: str, **options: object) -> Response:
        code, out = self.answers.command(columns=_columns(request), command=command, hw=hw, text=_text(request), **options)
        return self._out(out, code, _text(request))

    def add_pool(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "add-pool", name=request.path_params["name"], **reqs.pool_options(body))

    def quotas(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "quotas")

    def portable(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        q = request.query_params
        for name in ("engine", "accelerator"):
            if not q.get(name):
                raise SpecError("required", source="query", field=name)
        return self._read(request, hw, "portable", engine=q["engine"], accelerator=q["accelerator"])

    def accounting(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        record = hw.decision(request.path_params["id"])
        self._own(caller, record.decision.workload.project, f"decision {record.id[:12]}")
        if not request.query_params.get("hours"):
            raise SpecError("required: how many hours the placement is held", source="query", field="hours")
        return self._read(request, hw, "accounting", id=record.id, hours=request.query_params["hours"])

    def burst_events(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        assert caller is not None
        limit = _int(request.query_params.get("limit"), 50, "limit", most=1000)
        return self._read(request, hw, "burst-events", limit=limit, projects=caller.projects)

    def finops_cost(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "finops", kind="cost", hours=request.query_params.get("hours"))

    def finops_carbon(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "finops", kind="carbon", hours=request.query_params.get("hours"))

    def audit_verify(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return self._read(request, hw, "audit-verify", checkpoint=None, key=None)

    def healthz(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        return _json({"status": "alive"})

    def readyz(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        revision = hw.engine.confirm()[0]
        hw.pools()
        return _json({"status": "ready", "policy_revision": revision})

    def metrics_text(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        try:
            depth: int | None = len(hw.store.queue_rows())
        except ExaError:
            depth = None
        text = self.metrics.render(queue_depth=depth, revision=self.revision() or hw.policy_snapshot().revision)
        return Response(text, 200, media_type="text/plain; version=0.0.4; charset=utf-8")

    def openapi(self, request: Request, hw: Hardware, caller: Caller | None, body: object) -> Response:
        from examlops_policy.service.openapi import document

        return _json(document())

    def app(self) -> Starlette:
        routes = [Route(s.path, self.endpoint(s, getattr(self, s.name)), methods=[s.method], name=f"{s.name}-{s.method}") for s in ROUTES]

        async def not_found(request: Request, exc: Exception) -> Response:
            status = getattr(exc, "status_code", 404)
            kind = "method-not-allowed" if status == 405 else "no-such-route"
            missing = HttpProblem(status, kind, f"no route {request.method} {request.url.path} (GET /openapi.json lists them)")
            return _problem(missing, request.url.path)

        return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})

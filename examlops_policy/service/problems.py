"""Errors of the placement service as RFC 9457 problem details (``application/problem+json``), with
the command line's exit-code class in extension members (``exit_code``, ``error``): one table maps
each error class to its HTTP status, most specific first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from examlops_policy import errors

CONTENT_TYPE: Final = "application/problem+json"
BAD_INPUT: Final = 2  # the command line's exit code for bad input (cli.exits.BAD_INPUT)
INTERNAL: Final = 1
TYPE_BASE: Final = "https://examlops.example/problems/"


class HttpProblem(errors.ExaError):
    """A request refused by the service itself (not by the library): its HTTP status, a short
    title, the exit-code class it reads as on the command line, and what was wrong."""

    def __init__(self, status: int, kind: str, detail: str, *, exit_code: int = BAD_INPUT, title: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.exit_code = exit_code
        self.title = title or kind.replace("-", " ")


def unauthorized(detail: str) -> HttpProblem:
    return HttpProblem(401, "unauthorized", detail, exit_code=BAD_INPUT, title="no valid bearer token")


def forbidden(detail: str) -> HttpProblem:
    return HttpProblem(403, "forbidden", detail, exit_code=BAD_INPUT, title="not allowed for this token")


# (error class, HTTP status): an error's own class first, then its nearest ancestor's.
STATUS: Final[tuple[tuple[type[errors.ExaError], int], ...]] = (
    (errors.SpecError, 422),
    (errors.NotFoundError, 404),
    (errors.PolicyUnavailable, 503),
    (errors.PolicyError, 503),
    (errors.StateBusy, 503),
    (errors.StateUnreachable, 503),
    (errors.StateFull, 507),
    (errors.StateError, 503),
    (errors.ExecutorError, 502),
    (errors.AuditIntegrityError, 500),
)


def status_for(exc: errors.ExaError) -> int:
    if isinstance(exc, HttpProblem):
        return exc.status
    table = dict(STATUS)
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return 500


def problem(exc: errors.ExaError, instance: str | None = None, *, exit_code: Callable[[errors.ExaError], int] = lambda _: INTERNAL) -> tuple[int, dict[str, object]]:
    """The status and problem document of ``exc`` (``exit_code``: the command line's code of an error)."""
    status = status_for(exc)
    if isinstance(exc, HttpProblem):
        kind, title, code = exc.kind, exc.title, exc.exit_code
    else:
        kind, code = type(exc).__name__, exit_code(exc)
        title = {422: "bad input", 404: "not found", 503: "unavailable", 502: "scheduler failed", 507: "state full"}.get(status, "error")
    body: dict[str, object] = {
        "type": TYPE_BASE + kind, "title": title, "status": status, "detail": str(exc), "exit_code": code, "error": type(exc).__name__,
    }  # fmt: skip
    if isinstance(exc, errors.SpecError) and exc.field:
        body["field"] = exc.field
    if instance:
        body["instance"] = instance
    return status, body

"""Errors raised by examlops-policy, written for the people who read them.

    ExaError                    base: every error the library raises on purpose
    ├── SpecError               bad input: a spec file, a field, a value (names what was expected)
    ├── NotFoundError           a pool or decision that does not exist
    ├── PolicyUnavailable       no policy verdict could be had (OPA down, timing out, not started)
    ├── PolicyError             OPA answered, but not with a usable decision (undefined, malformed,
    │                           policy does not compile)
    ├── CapacityConflict        state changed under us and bounded retries did not settle it
    ├── StateError              the state store cannot be used (locked, corrupt, wrong schema)
    ├── ExecutorError           a scheduler (Slurm, Kubernetes) refused or failed
    └── AuditIntegrityError     the audit chain does not verify

Each class carries the CLI exit code it maps to (`exit_code`); the CLI catches ExaError once,
prints ``TypeName: message`` and exits with that code. Rejections and blocked bursts are results,
not errors: see ``examlops_policy.model``.
"""

from __future__ import annotations

from typing import ClassVar, Final

EXIT_OK: Final = 0
EXIT_INTERNAL: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_REJECTED: Final = 3
EXIT_BURST_BLOCKED: Final = 4
EXIT_POLICY_UNAVAILABLE: Final = 5
EXIT_CONFLICT: Final = 6
EXIT_AUDIT: Final = 7
EXIT_NOT_FOUND: Final = 8
EXIT_EXECUTOR: Final = 9


class ExaError(Exception):
    """Base class of every error examlops-policy raises on purpose."""

    exit_code: ClassVar[int] = EXIT_INTERNAL


class SpecError(ExaError):
    """Bad input: names the source (file or argument), the field path and what was expected."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.source = source
        self.field = field
        where = ": ".join(p for p in (source, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class NotFoundError(ExaError):
    """A named pool or decision does not exist."""

    exit_code = EXIT_NOT_FOUND


class PolicyUnavailable(ExaError):
    """No verdict could be had from the policy engine: nothing is placed."""

    exit_code = EXIT_POLICY_UNAVAILABLE


class PolicyError(ExaError):
    """The policy engine answered without a usable decision: nothing is placed."""

    exit_code = EXIT_POLICY_UNAVAILABLE


class CapacityConflict(ExaError):
    """Concurrent writers kept changing the state; bounded retries gave up."""

    exit_code = EXIT_CONFLICT


class StateError(ExaError):
    """The state store cannot be used as it is."""

    exit_code = EXIT_CONFLICT


class ExecutorError(ExaError):
    """A scheduler or cluster refused or failed a request."""

    exit_code = EXIT_EXECUTOR


class AuditIntegrityError(ExaError):
    """The audit log does not verify: an entry was edited, removed, reordered or truncated."""

    exit_code = EXIT_AUDIT

"""Errors raised by examlops-policy, written for the people who read them.

    ExaError                    base: every error the library raises on purpose
    ├── SpecError               bad input: a spec file, a field, a value (names what was expected)
    ├── NotFoundError           a pool or decision that does not exist
    ├── PolicyUnavailable       no policy verdict could be had (OPA down, timing out, not started)
    │   └── OpaUnreachable      no answer from OPA: where it was asked, what went wrong, the OS's detail
    ├── PolicyError             OPA answered, but not with a usable decision (undefined, malformed,
    │                           a policy that does not compile, a revision that is not the reviewed one)
    ├── StateError              the state store cannot be used as it is
    │   ├── StateBusy           locked or conflicting after bounded retries
    │   ├── StateCorrupt        the state file is damaged or is not a database
    │   ├── StateFull           the disk (or quota) is full
    │   ├── StateUnreachable    the database server cannot be reached
    │   └── StateUnusable       the state folder is not a folder, is another user's or others may
    │                           write to it
    ├── ExecutorError           a scheduler (Slurm, Kubernetes) refused or failed
    └── AuditIntegrityError     the audit chain does not verify

Nothing is written when any of them is raised. Rejections and blocked bursts are results, not
errors: see ``examlops_policy.model``. The command line maps each class to its documented exit
code in one table (``examlops_policy.cli.exits``).
"""

from __future__ import annotations


class ExaError(Exception):
    """Base class of every error examlops-policy raises on purpose."""


class SpecError(ExaError):
    """Bad input: names the source (file or argument), the field path and what was expected."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.detail = message
        self.source = source
        self.field = field
        where = ": ".join(p for p in (source, field) if p)
        super().__init__(f"{where}: {message}" if where else message)

    def at(self, source: str, field_prefix: str = "") -> SpecError:
        """The same problem, said of ``source`` (and a field under ``field_prefix``)."""
        field = f"{field_prefix}.{self.field}" if field_prefix and self.field else (field_prefix or self.field)
        return SpecError(self.detail, source=source, field=field)


class NotFoundError(ExaError):
    """A named pool or decision does not exist."""


class PolicyUnavailable(ExaError):
    """No verdict could be had from the policy engine: nothing is placed."""


class OpaUnreachable(PolicyUnavailable):
    """No answer from OPA: ``where`` it was asked, ``what`` went wrong, and the OS's ``detail``."""

    def __init__(self, where: str, what: str, detail: str) -> None:
        self.where = where
        self.what = what
        self.detail = detail
        super().__init__(f"OPA at {where} {what} ({detail})")

    def nothing_placed(self) -> PolicyUnavailable:
        """The same failure, worded for a placement that was therefore not made."""
        return PolicyUnavailable(f"OPA at {self.where} {self.what}; nothing was placed ({self.detail})")


class PolicyError(ExaError):
    """The policy engine answered without a usable decision: nothing is placed."""


class StateError(ExaError):
    """The state store cannot be used as it is."""


class StateBusy(StateError):
    """Concurrent writers kept the state locked or conflicting; bounded retries gave up."""


class StateCorrupt(StateError):
    """The state file is damaged, or is not a database at all."""


class StateFull(StateError):
    """The disk (or a quota) holding the state is full."""


class StateUnreachable(StateError):
    """The database server could not be reached, after bounded retries."""


class StateUnusable(StateError):
    """The state folder cannot be used as it is: not a folder, another user's, or writable by
    others (whoever can write there could swap the database for their own). Nothing was written."""


class ExecutorError(ExaError):
    """A scheduler or cluster refused or failed a request."""


class AuditIntegrityError(ExaError):
    """The audit log does not verify: an entry was edited, removed, reordered or truncated."""

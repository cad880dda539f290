"""The command line's exit codes: one table, documented in docs/cli.md (tests/test_cli.py holds the
two equal). Errors carry no exit codes; this table maps each class, most specific first."""

from __future__ import annotations

from typing import Final

from examlops_policy import errors

OK: Final = 0
INTERNAL: Final = 1
BAD_INPUT: Final = 2
REJECTED: Final = 3
BURST_BLOCKED: Final = 4
POLICY: Final = 5
STATE_BUSY: Final = 6
AUDIT: Final = 7
NOT_FOUND: Final = 8
EXECUTOR: Final = 9
STATE_CORRUPT: Final = 10
STATE_FULL: Final = 11
STATE_UNREACHABLE: Final = 12
STATE_UNUSABLE: Final = 13
INTERRUPTED: Final = 130
PIPE_CLOSED: Final = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away

# (class, code, meaning): the table of docs/cli.md, in code order.
TABLE: Final[tuple[tuple[type[errors.ExaError] | None, int, str], ...]] = (
    (None, OK, "success (placed, queued, portable, verified)"),
    (errors.ExaError, INTERNAL, "internal error"),
    (errors.SpecError, BAD_INPUT, "bad input: an unknown value, a field of the wrong type, a name that is too long or holds a "
     "forbidden character, an unknown region, model, project or priority class, malformed YAML, an id prefix that names more than one decision, a change that "
     "would move live work (a pool's accelerator or partitioning, a count below the devices live grants hold, removing or pruning a "
     "pool that live grants hold and that is not drained), renewing or submitting a placement that was released or whose lease "
     "ended, or retrying its `--request-id` (it places nothing again). Nothing is written."),
    (None, REJECTED, "rejected: not portable, or no eligible pool"),
    (None, BURST_BLOCKED, "burst blocked by data residency"),
    (errors.PolicyUnavailable, POLICY, "policy engine unavailable, not the reviewed revision, or no usable policy decision (fail closed)"),
    (errors.StateBusy, STATE_BUSY, "state store busy or conflicting after bounded retries"),
    (errors.AuditIntegrityError, AUDIT, "audit log does not verify"),
    (errors.NotFoundError, NOT_FOUND, "decision or pool not found"),
    (errors.ExecutorError, EXECUTOR, "scheduler (Slurm, Kubernetes) refused, failed or could not be reached (reconcile: one could not be read; the others' changes are written)"),
    (errors.StateCorrupt, STATE_CORRUPT, "state database damaged or not a database (the message names the file)"),
    (errors.StateFull, STATE_FULL, "disk full: nothing was written"),
    (errors.StateUnreachable, STATE_UNREACHABLE, "state database server unreachable after bounded retries"),
    (errors.StateUnusable, STATE_UNUSABLE, "state folder unusable: not a folder, another user's, or writable by others (the message "
     "says how to fix it). Nothing is written."),
    (None, INTERRUPTED, "interrupted (Ctrl-C)"),
    (None, PIPE_CLOSED, "the reader of the output went away (a pipe closed early, as by `head`): the output stops there, as a Unix "
     "tool's does (128 + SIGPIPE)"),
)
_EXTRA: Final[tuple[tuple[type[errors.ExaError], int], ...]] = (
    (errors.PolicyError, POLICY),
    (errors.StateError, STATE_BUSY),
)


def code_for(exc: errors.ExaError) -> int:
    """The exit code of ``exc``: its own class's, else its nearest ancestor's."""
    codes = {cls: code for cls, code, _ in TABLE if cls is not None}
    codes.update(_EXTRA)
    for cls in type(exc).__mro__:
        if cls in codes:
            return codes[cls]
    return INTERNAL

"""The registry of schedulers: every ``Scheduler`` (``app.ports``) this layer hands work to,
registered once by name (``SCHEDULERS``). The workflows (discovery, estimates, submission, job
status, cancel and release, reconcile, the queue) and the command line's choices ask it for a
scheduler by name and call it through the port; no name of a scheduler is tested anywhere else
(``tests/test_architecture.py`` holds it). A new scheduler (PBS, Flux) is its adapter (a module
beside ``slurm.py``, around its executor, discovery and estimates code) and one ``register`` line
below.

Importing the registry imports no scheduler's client: each adapter imports its executor,
discovery and estimates code when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from examlops_policy.errors import SpecError

if TYPE_CHECKING:
    from examlops_policy.app.ports import Scheduler

SCHEDULERS: Final[dict[str, Scheduler]] = {}
"""Every scheduler by name, in the order they are offered."""


def register(scheduler: Scheduler) -> Scheduler:
    """Add ``scheduler`` (a name is registered once: SpecError for a second)."""
    if scheduler.name in SCHEDULERS:
        raise SpecError(f"scheduler {scheduler.name!r} is registered already", field="scheduler")
    SCHEDULERS[scheduler.name] = scheduler
    return scheduler


def names() -> tuple[str, ...]:
    """The registered schedulers' names, in order (the CLI's choices)."""
    return tuple(SCHEDULERS)


def scheduler(name: str, *, field: str = "scheduler") -> Scheduler:
    """The scheduler registered as ``name``; SpecError (naming ``field``) for any other name."""
    found = SCHEDULERS.get(name)
    if found is None:
        raise SpecError(f"expected one of {', '.join(SCHEDULERS)} (got {name!r})", field=field)
    return found


def of_job(recorded: str | None) -> Scheduler:
    """The scheduler a recorded job was submitted to: ``recorded`` (the decision's ``scheduler``);
    None for a job recorded before schedulers were: Slurm, the only one there was."""
    return scheduler(recorded or UNRECORDED, field="scheduler")


def _register_all() -> None:
    from examlops_policy.app.schedulers.kubernetes import Kubernetes
    from examlops_policy.app.schedulers.slurm import Slurm

    register(Slurm())
    register(Kubernetes())


UNRECORDED: Final = "slurm"
_register_all()

__all__ = ["SCHEDULERS", "UNRECORDED", "names", "of_job", "register", "scheduler"]

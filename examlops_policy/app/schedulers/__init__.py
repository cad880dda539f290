"""The registry of schedulers: every ``Scheduler`` (``app.ports``) this layer hands work to,
registered once by name (``SCHEDULERS``). The workflows (discovery, estimates, submission, job
status, cancel and release, reconcile, the queue) and the command line's choices ask it for a
scheduler by name and call it through the port; no name of a scheduler is tested anywhere else
(``tests/test_architecture.py`` holds it). A new scheduler (PBS, Flux) is its adapter (a module
beside ``slurm.py``, around its executor, discovery and estimates code) and one ``register`` line
below.

A registration names where its adapter is (``module:attribute``), made when first looked up, and,
for a scheduler asked for start estimates unless told otherwise, where its ``StartAsking`` is
(Slurm's: ``estimates.gather.SlurmAsking``). Importing the registry imports no adapter: a cold
placement loads none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Final, cast

from examlops_policy.errors import SpecError, StateError

if TYPE_CHECKING:
    from examlops_policy.app.ports import Scheduler, StartAsking


def _load(where: str) -> object:
    module, _, attribute = where.partition(":")
    return getattr(importlib.import_module(module), attribute)


class _Entry:
    __slots__ = ("adapter", "asking")

    def __init__(self, adapter: Scheduler | str, asking: Callable[[], StartAsking] | str | None) -> None:
        self.adapter = adapter
        self.asking = asking


class Registry(Mapping[str, "Scheduler"]):
    """Every scheduler by name, in the order they were registered; an adapter is made (its module
    imported) when first looked up, never by listing the names."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __getitem__(self, name: str) -> Scheduler:
        entry = self._entries[name]
        if isinstance(entry.adapter, str):
            made = _load(entry.adapter)
            adapter = cast("Scheduler", made() if callable(made) else made)
            if adapter.name != name:
                raise StateError(f"scheduler {entry.adapter} is named {adapter.name!r}, registered as {name!r}")
            entry.adapter = adapter
        return entry.adapter

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, name: str, adapter: Scheduler | str, asking: Callable[[], StartAsking] | str | None) -> None:
        if name in self._entries:
            raise SpecError(f"scheduler {name!r} is registered already", field="scheduler")
        self._entries[name] = _Entry(adapter, asking)

    def remove(self, name: str) -> None:
        del self._entries[name]

    def askings(self) -> list[StartAsking]:
        """How each scheduler asked for start estimates unless told otherwise is asked: one each,
        new (what it caches lives as long as its caller keeps it)."""
        out = []
        for entry in self._entries.values():
            if entry.asking is not None:
                make = _load(entry.asking) if isinstance(entry.asking, str) else entry.asking
                assert callable(make)
                out.append(cast("StartAsking", make()))
        return out


SCHEDULERS: Final = Registry()


def register(name: str, adapter: Scheduler | str, *, asking: Callable[[], StartAsking] | str | None = None) -> None:
    """Register the scheduler ``name``: its ``adapter`` (a ``Scheduler``, or ``module:attribute``
    of its class, made when first looked up) and, when it is asked for start estimates unless told
    otherwise, how (``asking``: a ``StartAsking`` factory, or where it is). A name is registered
    once: SpecError for a second."""
    SCHEDULERS.add(name, adapter, asking)


def names() -> tuple[str, ...]:
    """The registered schedulers' names, in order (the CLI's choices)."""
    return tuple(SCHEDULERS)


def scheduler(name: str, *, field: str = "scheduler") -> Scheduler:
    """The scheduler registered as ``name``; SpecError (naming ``field``) for any other name."""
    if name not in SCHEDULERS:
        raise SpecError(f"expected one of {', '.join(SCHEDULERS)} (got {name!r})", field=field)
    return SCHEDULERS[name]


def of_job(recorded: str | None) -> Scheduler | None:
    """The scheduler a recorded job was submitted to: ``recorded`` (the decision's ``scheduler``);
    None for a job recorded before schedulers were: Slurm, the only one there was. None when no
    scheduler registered here has that name (a job a controller of its own records, such as
    Kueue's admission check: it reads and ends its jobs itself)."""
    name = recorded or UNRECORDED
    return SCHEDULERS[name] if name in SCHEDULERS else None


UNRECORDED: Final = "slurm"

register("slurm", "examlops_policy.app.schedulers.slurm:Slurm", asking="examlops_policy.estimates.gather:SlurmAsking")
register("kubernetes", "examlops_policy.app.schedulers.kubernetes:Kubernetes")  # a cluster is asked when told: Hardware.ask_kubernetes

__all__ = ["SCHEDULERS", "UNRECORDED", "Registry", "names", "of_job", "register", "scheduler"]

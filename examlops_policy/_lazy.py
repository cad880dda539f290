"""Names a package offers but imports on first use (PEP 562), so that importing one of its modules
(``examlops_policy.opa.content``, ``examlops_policy.executors.slurm``) does not import the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def home_of(homes: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """``{name: module}`` from ``{module: names}``."""
    return {name: module for module, names in homes.items() for name in names}


def lazy_names(package: str, namespace: dict[str, Any], homes: Mapping[str, str]) -> Callable[[str], object]:
    """The package's ``__getattr__``: a name of ``homes`` ({name: module}) imported from its module
    on first use, then kept in the package's ``namespace`` as a plain attribute."""

    def __getattr__(name: str) -> object:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__

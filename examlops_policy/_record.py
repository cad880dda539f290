"""Records the decision path makes by the million (a node's grant, a selection's outcome, a replay's
placement, a workload's outcome): plain classes with an ``__init__`` of their own.

A dataclass's ``__init__`` is written by the ``dataclasses`` module when the class is made and
runs in the interpreter, even in a module compiled by mypyc (``hatch_build.py``): 0.75 µs for a
frozen one of five fields, against 0.04 µs compiled. A record names its fields in ``FIELDS``
(annotated in its body, in the order of its ``__init__``'s parameters) and its ``__init__`` sets
each once. Records compare equal when they are of the same class with equal fields, hash alike,
show their fields and pickle, as a frozen dataclass's do.

They are immutable by use, not by force: nothing assigns a field after ``__init__``. Declared
``Final``, a field would refuse it when compiled, but mypyc (mypy 2.4.1) then keeps a Final field
it read without a reference of its own for the whole expression, and an expression that also
drops the record's last reference (a comprehension over the field, inside an index of it) reads
freed memory: the replay's ties crashed so (``tests/test_whole_nodes.py``, compiled)."""

from __future__ import annotations

from typing import ClassVar


class Record:
    """Equality, hash, repr and pickling of a record, from its ``FIELDS`` (the module's docstring)."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    def values(self) -> tuple[object, ...]:
        """The record's fields, in ``FIELDS`` order."""
        return tuple([getattr(self, name) for name in self.FIELDS])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self.values() == other.values()

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[type[Record], tuple[object, ...]]:
        return type(self), self.values()

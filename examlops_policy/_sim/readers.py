"""The trace readers ``exa hardware simulate`` knows (the ``TraceReader`` port), each registered
once by name (``READERS``): what files it reads, what it needs besides them, and the replay it
runs. The entry point (``Hardware.simulate``) asks ``reader_for`` and runs what it returns; no name
is tested anywhere else (``tests/test_architecture.py`` holds it).

``--format`` names a reader (``generic-yaml``, ``generic-csv``, ``openb``) or a family of readers
(``generic``: the generic readers, the one for the file's suffix); none: read from the file
(``infer``), the first reader whose suffix and content it has, else ``openb``'s pod list.

Limits: a YAML trace is read up to ``specs.MAX_FILE_BYTES`` (4 MiB), a CSV file up to
``trace.MAX_CSV_BYTES`` (256 MiB, refused before a row is read); a generic CSV workload list is
read row by row as it is replayed, never held, so it must list its workloads in order of arrival
(``generic.in_order``: refused at the first out of order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from examlops_policy import model
from examlops_policy.errors import SpecError, StateError
from examlops_policy.quantities import shown

if TYPE_CHECKING:
    from examlops_policy._core.engine import Engine
    from examlops_policy._sim.generic import GenericTrace
    from examlops_policy._sim.simulate import Simulation
    from examlops_policy._sim.work import WorkSimulation
    from examlops_policy.tables import Tables


@dataclass(frozen=True)
class Replay:
    """What a replay was asked: the trace's files and the options (see ``Hardware.simulate``)."""

    pods: Path
    nodes: Path | None
    inflate: float
    seeds: tuple[int, ...]
    packers: tuple[str, ...]
    region: str
    pools: str
    optimize: tuple[str, ...]


@dataclass(frozen=True)
class TraceReader:
    """One trace format: its ``name`` (``--format``), the ``family`` it answers to as well, the file
    suffixes it reads (``suffixes``; ``sniff``: whether a file with one is its, read from its first
    line), ``check`` (the options, before a policy is asked: SpecError) and ``replay``."""

    name: str
    family: str
    suffixes: tuple[str, ...]
    check: Callable[[Replay], None]
    replay: Callable[[Engine, Tables, Replay], Simulation | WorkSimulation]
    sniff: Callable[[Path], bool] = lambda path: True


READERS: dict[str, TraceReader] = {}
"""Every reader by name, in the order ``infer`` tries them."""


def register(reader: TraceReader) -> TraceReader:
    """Add ``reader`` (a name is registered once: SpecError for a second)."""
    if reader.name in READERS:
        raise SpecError(f"trace reader {reader.name!r} is registered already", field="format")
    READERS[reader.name] = reader
    return reader


def infer(pods: Path) -> TraceReader:
    """The reader of ``pods`` read from the file: the first whose suffix it has and whose
    ``sniff`` takes it, else the last registered (``openb``: its reader names what is wrong)."""
    suffix = pods.suffix.lower()
    for reader in READERS.values():
        if suffix in reader.suffixes and reader.sniff(pods):
            return reader
    return list(READERS.values())[-1]


def reader_for(format: str | None, pods: Path) -> TraceReader:
    """The reader ``format`` names (a reader, or a family: its reader for ``pods``' suffix, else
    its first); None: ``infer``. SpecError for a name no reader answers to."""
    if format is None:
        return infer(pods)
    named = [r for r in READERS.values() if format in (r.name, r.family)]
    if not named:
        raise SpecError(f"unknown trace format {format!r}; known: {', '.join(model.TRACE_FORMATS)}", field="format")
    suffix = pods.suffix.lower()
    return next((r for r in named if suffix in r.suffixes), named[0])


# -- openb --------------------------------------------------------------------------------------


def _openb_check(request: Replay) -> None:
    if request.nodes is None:
        raise SpecError("the openb format needs the node list (--nodes FILE)", field="nodes")
    inflate = request.inflate
    if not (isinstance(inflate, (int, float)) and math.isfinite(inflate) and 0 < inflate <= 10):
        raise SpecError(f"inflate is a ratio in (0, 10] (got {shown(inflate)})", field="inflate")
    if not request.seeds:
        raise SpecError("give at least one seed", field="seeds")
    if request.pools not in ("model", "one"):
        raise SpecError(f"pools are grouped by model or as one (got {shown(request.pools)})", field="pools")
    if request.optimize:
        raise SpecError("--optimize replays a generic trace by its work (--format generic)", field="optimize")


def _openb_replay(engine: Engine, tables: Tables, request: Replay) -> Simulation:
    from examlops_policy._sim import simulate as sim
    from examlops_policy._sim.trace import read_openb_nodes, read_openb_pods

    assert request.nodes is not None
    if not tables.region_known(request.region):
        raise SpecError(f"unknown region {request.region!r}", field="region")
    fleet = read_openb_nodes(request.nodes)
    listed = read_openb_pods(request.pods, fleet)
    return sim.simulate_openb(
        engine, fleet, listed, trace=request.pods.name, seeds=request.seeds, inflate=request.inflate, packers=request.packers,
        region=request.region, grouping=request.pools,
    )  # fmt: skip


# -- generic ------------------------------------------------------------------------------------


def _generic_replay(engine: Engine, trace: GenericTrace, request: Replay) -> Simulation | WorkSimulation:
    """A generic trace in time order, or by its work under each objective of ``optimize``."""
    from examlops_policy._sim import simulate as sim

    if request.optimize:
        from examlops_policy._sim.layer import LayerPlacer
        from examlops_policy._sim.work import simulate_work

        confirmed = engine.confirm()
        done = simulate_work(
            lambda: LayerPlacer(engine, confirmed, trace.pools, packer=request.packers[0]), trace, request.optimize, name=request.pods.name,
            revision=confirmed[0],
        )  # fmt: skip
        sim._confirm_same(engine, confirmed)
        return done
    return sim.simulate_events(engine, trace, packers=request.packers, name=request.pods.name)


def _yaml_replay(engine: Engine, tables: Tables, request: Replay) -> Simulation | WorkSimulation:
    from examlops_policy import specs
    from examlops_policy._sim.generic import read_trace, with_pools

    trace = read_trace(request.pods, tables)
    if request.nodes is not None:
        trace = with_pools(trace, specs.pools_from_file(request.nodes, tables))
    return _generic_replay(engine, trace, request)


def _csv_check(request: Replay) -> None:
    if request.nodes is None:
        raise SpecError("a generic trace in CSV needs its node list (--nodes FILE.csv)", field="nodes")


def _csv_replay(engine: Engine, tables: Tables, request: Replay) -> Simulation | WorkSimulation:
    from examlops_policy._sim.generic import read_csv_trace

    assert request.nodes is not None
    return _generic_replay(engine, read_csv_trace(request.nodes, request.pods, tables), request)


def _has_arrival(path: Path) -> bool:
    """Whether a CSV file's header names an ``arrival`` column (a generic workload list)."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            header = handle.readline(65536)
    except (OSError, UnicodeDecodeError):
        return False
    return "arrival" in (c.strip().lower() for c in header.split(","))


register(TraceReader("generic-yaml", "generic", (".yaml", ".yml", ".json"), lambda request: None, _yaml_replay))
register(TraceReader("generic-csv", "generic", (".csv",), _csv_check, _csv_replay, sniff=_has_arrival))
register(TraceReader("openb", "openb", (".csv",), _openb_check, _openb_replay))

FORMATS: Final[Sequence[str]] = (*READERS, *dict.fromkeys(r.family for r in READERS.values() if r.family not in READERS))
"""What ``--format`` takes: every reader's name, and each family that is not one."""
if sorted(FORMATS) != sorted(model.TRACE_FORMATS):
    raise StateError(f"model.TRACE_FORMATS ({', '.join(model.TRACE_FORMATS)}) must name the readers registered here ({', '.join(FORMATS)})")

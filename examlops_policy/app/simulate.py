"""A trace replayed against a fleet in memory through the placement path (``Hardware.simulate``,
``exa hardware simulate``): the input checked, the run made under one policy snapshot (the reviewed
one, made again once when OPA serves another revision, or a policy folder's own OPA), nothing
written. The replays themselves are ``_sim``'s; the policy is the one ``source`` (the decision
cycle) decides under.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from examlops_policy._core.engine import Engine, RevisionMismatch
from examlops_policy._reviewed import Reviewed
from examlops_policy.errors import SpecError
from examlops_policy.tables import Tables

if TYPE_CHECKING:
    from examlops_policy.app.ports import PolicySource
    from examlops_policy._sim.simulate import Simulation
    from examlops_policy._sim.work import WorkSimulation


def simulate(
    source: PolicySource,
    pods: Path,
    nodes: Path | None = None,
    *,
    format: str | None = None,
    inflate: float = 1.3,
    seeds: Sequence[int] = (42,),
    packers: Sequence[str] = ("exa",),
    policy: Path | None = None,
    region: str = "eu",
    pools: str = "model",
    optimize: Sequence[str] = (),
) -> Simulation | WorkSimulation:
    """Replay a trace against a fleet in memory through the placement path (the policy's
    verdicts from the real OPA, the core's selection, the node packer ``place`` uses): nothing
    is written, nothing audited. ``format`` ``openb``: ``nodes`` the node list, ``pods`` the pod
    list, the openb protocol (demand tuned to ``inflate`` x the GPU capacity, one replay per
    seed, none leaving), the GPU pools in ``region``, one per GPU model (``pools`` ``one``: one
    pool of every GPU node, for a trace that names no model); ``generic``: ``pods`` a trace
    (``schemas/trace.schema.json``; ``nodes``, when given, a pools file replacing its pools), or
    a workload list in CSV beside ``nodes``, a node list in CSV (``_sim.generic``'s columns),
    in time order, work leaving when its duration ends. ``format``: a reader of
    ``_sim.readers`` (``generic-yaml``, ``generic-csv``, ``openb``) or ``generic`` (the generic
    one for the file's suffix); None: read from ``pods`` (a YAML or JSON trace, or a CSV with an
    ``arrival`` column, is generic; else openb). ``policy``: a policy folder to judge
    with instead of the reviewed one (its own OPA, stopped afterwards). One run per packer.
    ``optimize`` (generic only): replay by work instead (``_sim.work``): waiting workloads placed
    as room frees, each running for its duration or its work over its grant's throughput, once
    per objective, with the first packer; a ``WorkSimulation`` (cost, cost per unit of work,
    completion times, utilisation per device model).

    SpecError for bad input (file, line, column); PolicyUnavailable/PolicyError without a policy."""
    from examlops_policy._node_packers import PACKERS
    from examlops_policy._sim import readers

    reader = readers.reader_for(format, Path(pods))
    if not packers or any(p not in PACKERS for p in packers):
        bad = next((p for p in packers if p not in PACKERS), "")
        raise SpecError(f"unknown packer {bad!r}; known: {', '.join(PACKERS)}", field="packer")
    request = readers.Replay(Path(pods), None if nodes is None else Path(nodes), inflate, tuple(seeds), tuple(packers), region, pools, tuple(optimize))
    reader.check(request)

    def run(engine: Engine, tables: Tables) -> Simulation | WorkSimulation:
        return reader.replay(engine, tables, request)

    if policy is None:
        under = source.current()
        try:
            return run(source.engine(under), under.policy.tables)
        except RevisionMismatch:
            # The files changed (or OPA serves another revision): looked at again, a local OPA
            # restarted on them, and the replay made again under that one policy, once.
            under = source.again(local_only=True)
            return run(source.engine(under), under.policy.tables)
    import tempfile

    from examlops_policy.opa.scratch import scratch_opa

    # The folder's tables and revision read together as the files are now (never a cached
    # read); its OPA must serve that revision (else RevisionMismatch: the files changed).
    candidate = Reviewed(Path(policy)).current(force=True)
    with tempfile.TemporaryDirectory(prefix="exa-sim-") as scratch, scratch_opa(candidate.root, Path(scratch) / "opa") as served:
        return run(Engine(served.policy, candidate.tables, reviewed=candidate.revision), candidate.tables)


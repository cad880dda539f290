"""Packers: which feasible node (and which devices on it) a request gets.

Each packer scores the feasible nodes of a ``NodeCapacity`` (higher is better; ties go to the
earlier node in the capacity's order) and picks devices on the chosen node. The baselines follow
the published descriptions in Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent" (USENIX ATC'23) and the formulas of its public
simulator (``hkust-adsl/kubernetes-scheduler-simulator``, ``pkg/simulator/plugin``), including its
whole-number scores (truncated, 0..100), which create the ties the node order then breaks:

``random``          a feasible node uniformly at random; a share on a random device that fits.
``best-fit``        least CPU and device milli left after the request (each normalised by the
                    largest node's, weighted 1/2 each).
``dot-product``     smallest dot product of the node's free (CPU, device milli) and the request
                    (Tetris-style alignment, normalised as best-fit).
``gpu-packing``     a device already shared (tightest first), then a partly used node, then an
                    empty node (fewest devices first), keeping whole nodes for large requests.
``gpu-clustering``  nodes already holding the same kind of grant (shares, 1, 2, ... devices), then
                    empty nodes, then mixed ones; fuller nodes first within each group.
``fgd``             fragmentation gradient descent: the placement that increases the node's
                    expected fragmentation least, against the expected workload (below).
``exa``             the layer's default: ``fgd``'s measure plus the device milli a node would
                    strand for lack of CPU (``ExaPacker``); above FGD on all four openb workloads.

Devices on the chosen node: whole devices take the lowest free indices; a share goes to the
tightest device already holding shares that covers it, else the lowest free device (``random``:
any device that fits; ``fgd``/``exa``: the device whose use fragments least).

The expected workload (``ExpectedWorkload``): FGD measures fragmentation against the requests a
pool expects, as frequencies of request shapes. Where it comes from is the caller's choice, and
must be something real: the replayed trace itself (the paper's experiments: the most frequent
shapes covering 95 % of the original pod list), a reviewed table of a site's typical jobs, or the
pool's recent decisions (``ExpectedWorkload.from_requests`` over a window of granted requests).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from examlops_policy.quantities import shown
from examlops_policy._nodes import MILLI, FloatArray, IntArray, NodeCapacity, NodeRequest
from examlops_policy.errors import SpecError
from examlops_policy import model

PACKERS: Final = model.PACKERS
"""Packer names, the default first."""

DEFAULT_PACKER: Final = "exa"
MAX_SCORE: Final = 100

MEMO_NODES: Final = 256
"""``fgd`` and ``exa`` look up the scores of the node states met before on pools of at most this many
nodes; larger ones are scored vectorised (numpy's cost per call is then spread over them)."""

MEMO_STATES: Final = 1 << 16
"""The node states whose scores a packer keeps at most (then it forgets them and starts again)."""

MEMO_REQUESTS: Final = 1 << 10
"""The request shapes whose scores a packer keeps at most (then it forgets them all)."""


@dataclass(frozen=True)
class ExpectedWorkload:
    """Request shapes a pool expects and their frequencies (summing to 1), most frequent first.

    A shape is a ``NodeRequest`` without memory (memory is checked, never scored) and with one node.
    """

    shapes: tuple[tuple[NodeRequest, float], ...]

    def __post_init__(self) -> None:
        if not self.shapes:
            raise SpecError("an expected workload names at least one request shape", field="shapes")
        total = sum(f for _, f in self.shapes)
        if any(f < 0 for _, f in self.shapes) or not math.isclose(total, 1.0, rel_tol=1e-6):
            raise SpecError(f"shape frequencies are >= 0 and sum to 1 (got {total:.6f})", field="shapes")

    @classmethod
    def from_requests(cls, requests: Iterable[NodeRequest], coverage: float = 0.95) -> ExpectedWorkload:
        """The most frequent shapes of ``requests`` that together cover ``coverage`` of them, renormalised.

        As the paper's simulator forms its "typical pods": shapes by decreasing count (ties: the
        larger CPU, device milli, device count first), taken until their share reaches ``coverage``.
        """
        if not 0 < coverage <= 1:
            raise SpecError(f"coverage is in (0, 1] (got {coverage})", field="coverage")
        counts: Counter[NodeRequest] = Counter(shape_of(r) for r in requests)
        if not counts:
            raise SpecError("an expected workload needs at least one request", field="requests")
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].cpu_milli, _per_device_milli(kv[0]), _device_count(kv[0]), _models_key(kv[0])), reverse=True)
        chosen: list[tuple[NodeRequest, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            chosen.append((shape, count))
            covered += count
        return cls(tuple((shape, count / covered) for shape, count in chosen))

    @classmethod
    def from_table(cls, rows: Iterable[Mapping[str, object]], *, source: str = "expected workload") -> ExpectedWorkload:
        """Shapes from a reviewed table: rows of ``devices`` / ``share_milli``, ``cpu_milli``, ``models``
        (list of names) and ``frequency`` (any positive weights; normalised). Bad rows name the row and field."""
        shapes: list[tuple[NodeRequest, float]] = []
        for i, row in enumerate(rows):
            where = f"{source} row {i + 1}"
            unknown = sorted(set(row) - {"devices", "share_milli", "cpu_milli", "models", "frequency"})
            if unknown:
                raise SpecError("unknown field (expected devices, share_milli, cpu_milli, models, frequency)", source=where, field=unknown[0])
            frequency = row.get("frequency")
            if not isinstance(frequency, (int, float)) or isinstance(frequency, bool) or not frequency > 0:
                raise SpecError(f"frequency must be a number > 0 (got {shown(frequency)})", source=where, field="frequency")
            share = row.get("share_milli", 0)
            if isinstance(share, int) and not isinstance(share, bool) and share >= MILLI:
                raise SpecError(f"a share is 1..{MILLI - 1} milli of one device (got {share})", source=where, field="share_milli")
            models = row.get("models")
            if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) and m for m in models)):
                raise SpecError(f"models must be a list of model names (got {shown(models)})", source=where, field="models")
            try:
                shape = NodeRequest(devices=row.get("devices", 0), share_milli=row.get("share_milli", 0), cpu_milli=row.get("cpu_milli", 0),  # type: ignore[arg-type]
                                    models=frozenset(models) if models else None)
            except SpecError as exc:
                raise exc.at(where) from None
            shapes.append((shape, float(frequency)))
        if not shapes:
            raise SpecError("an expected workload names at least one request shape", source=source)
        total = sum(f for _, f in shapes)
        return cls(tuple((shape, f / total) for shape, f in shapes))

    @classmethod
    def blocks(cls, largest: int) -> ExpectedWorkload:
        """Whole-device blocks of 1, 2, 4, ... up to ``largest`` devices, equally likely: the guess when nothing is known."""
        return _blocks(largest)


def _blocks(largest: int) -> ExpectedWorkload:
    sizes = [1]
    while sizes[-1] * 2 <= max(largest, 1):
        sizes.append(sizes[-1] * 2)
    return ExpectedWorkload(tuple((NodeRequest(devices=n), 1 / len(sizes)) for n in sizes))


def shape_of(request: NodeRequest) -> NodeRequest:
    """The shape ``request`` counts as in an expected workload: no memory, one node, models only with devices."""
    models = request.models if request.kind != "cpu" else None
    return NodeRequest(devices=request.devices, share_milli=request.share_milli, cpu_milli=request.cpu_milli, models=models)


def _per_device_milli(r: NodeRequest, unit: int = MILLI) -> int:
    return r.share_milli or (unit if r.devices else 0)


def _device_count(r: NodeRequest) -> int:
    return 1 if r.share_milli else r.devices


def _models_key(r: NodeRequest) -> str:
    return "|".join(sorted(r.models)) if r.models else ""


def _trunc(x: FloatArray) -> IntArray:
    """Go's float64 -> int64 conversion: towards zero."""
    return np.trunc(x).astype(np.int64)


# -- the baselines -------------------------------------------------------------------------------


class _Vectorised:
    """A packer that scores the feasible nodes afresh each time (``scores``): nothing kept for ``best``."""

    def best(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> int | None:
        return None


class RandomPacker(_Vectorised):
    """A feasible node uniformly at random; a share on a device chosen uniformly among those that fit.

    Each feasible node scores an independent uniform draw in [0, 1), so the best node is uniform
    among them, and the best of several pools' best nodes (pools that tie, compared by their best
    node's score) is uniform among all their feasible nodes, as one random packer over every node
    chooses. (A single top score per pool would make the pools' nodes tie, and the tie would go to
    the node earlier in the fleet's order: never uniform across pools.)"""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.draws = np.random.default_rng(seed)

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> FloatArray:
        return self.draws.random(feasible.size)

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        if request.kind != "share":
            return capacity.best_fit_devices(node, request)
        whole = int(capacity.whole_free[node])
        groups = sorted((v, ds) for v, ds in capacity.shared_by_free(node).items() if v >= request.share_milli)
        pick = self.rng.randrange(whole + sum(len(ds) for _, ds in groups))
        for _, ds in groups:
            if pick < len(ds):
                return (ds[pick],)
            pick -= len(ds)
        low = capacity.lowest_free_device(node)
        assert low is not None
        return (low,)


class BestFitPacker(_Vectorised):
    """Least left after the request: CPU and device milli, each over the largest node's, weighted 1/2."""

    name = "best-fit"

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> IntArray:
        max_cpu = capacity.max_cpu_milli or 1
        max_dev = capacity.max_device_milli or 1
        cpu_left = (capacity.cpu_free[feasible] - request.cpu_milli).astype(np.float64)
        cpu_term = np.where(capacity.cpu_tracked[feasible], cpu_left / max_cpu * 0.5, 0.0)
        dev_term = (capacity.free_milli[feasible] - capacity.units_of(request)).astype(np.float64) / max_dev * 0.5
        return _trunc((1.0 - (cpu_term + dev_term)) * MAX_SCORE)

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        return capacity.best_fit_devices(node, request)


class DotProductPacker(_Vectorised):
    """Smallest dot product of the node's free (CPU, device milli) and the request, both over the largest node's."""

    name = "dot-product"

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> IntArray:
        max_cpu = float(capacity.max_cpu_milli or 1)
        max_dev = float(capacity.max_device_milli or 1)
        cpu = np.where(capacity.cpu_tracked[feasible], capacity.cpu_free[feasible] / max_cpu, 0.0)
        dot = cpu * (request.cpu_milli / max_cpu) + (capacity.free_milli[feasible] / max_dev) * (capacity.units_of(request) / max_dev)
        return _trunc(MAX_SCORE * (1.0 - dot / 2))

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        return capacity.best_fit_devices(node, request)


class GpuPackingPacker(_Vectorised):
    """Shared devices first (tightest), then free devices on a partly used node, then an empty node."""

    name = "gpu-packing"

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> IntArray:
        if request.kind == "cpu":
            return np.zeros(feasible.size, dtype=np.int64)
        count = capacity.devices[feasible]
        empty = capacity.whole_free[feasible] == count
        empty_score = np.maximum(MAX_SCORE // 3 - count, count)
        if request.kind == "whole":
            used = max(MAX_SCORE // 2 - request.devices, MAX_SCORE // 3)
            return np.where(empty, empty_score, used)
        values = capacity.shared_values[feasible]
        unit = capacity.unit
        tight = np.where(values >= request.share_milli, values, unit).min(axis=1)
        shared_score = np.maximum(MAX_SCORE - (tight * 100 // unit) // 10, MAX_SCORE // 2)
        fresh_score = max(MAX_SCORE // 2 - 1, MAX_SCORE // 3)
        return np.where(empty, empty_score, np.where(tight < unit, shared_score, fresh_score))

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        return capacity.best_fit_devices(node, request)


class GpuClusteringPacker(_Vectorised):
    """Nodes holding only the same kind of grant, then mixed ones with it, then empty, then others; fuller first."""

    name = "gpu-clustering"

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> IntArray:
        kind = request.affinity
        if kind is None:
            return np.zeros(feasible.size, dtype=np.int64)
        max_dev = capacity.max_device_milli or 1
        quarter = MAX_SCORE // 4
        used = max_dev - capacity.free_milli[feasible]
        fuller = np.sign(used) * ((quarter * np.abs(used)) // max_dev)
        counts = capacity.affinity_counts.get(kind)
        has = counts[feasible] > 0 if counts is not None else np.zeros(feasible.size, dtype=np.bool_)
        kinds = capacity.affinity_kinds[feasible]
        group = np.where(has, np.where(kinds == 1, 3 * quarter, 2 * quarter), np.where(kinds == 0, quarter, 0))
        out: IntArray = (fuller + group).astype(np.int64)
        return out

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        return capacity.best_fit_devices(node, request)


# -- fragmentation ------------------------------------------------------------------------------


class _FragModel:
    """A node's expected fragmentation against an expected workload, vectorised over nodes.

    The paper's measure, per node: for each expected shape t (frequency f_t), the node's free device
    milli counts as fragment unless t fits there (model accepted, free CPU >= t's CPU, enough
    devices with >= t's per-device milli free), and then only the free milli on devices too small
    for t counts. Written with Q_mu = the node's free milli on devices with >= mu milli free:

        frag = free_total - sum over shapes t that fit of f_t * Q_mu(t)

    and t fits on the devices iff Q_mu(t) >= mu(t) * devices(t) (a share or one device: one device
    with mu free; several whole devices: that many free devices). Shapes with the same (mu,
    devices) form a column; a node is a row of Q over the columns, its free total, its CPU bucket
    (which shapes' CPU it covers) and its model; a request changes the row by a formula.
    """

    def __init__(self, expected: ExpectedWorkload, models: Sequence[str], unit: int = MILLI) -> None:
        self.unit = unit
        gpu = [(s, f) for s, f in expected.shapes if s.kind != "cpu"]
        columns = sorted({(_per_device_milli(s, unit), _device_count(s)) for s, _ in gpu}) or [(unit, 1)]
        self.col_milli = np.array([mu for mu, _ in columns], dtype=np.int64)
        self.col_need = np.array([mu * n for mu, n in columns], dtype=np.int64)
        self.cpu_steps = np.array(sorted({s.cpu_milli for s, _ in gpu}), dtype=np.int64)
        buckets = len(self.cpu_steps) + 1
        self.buckets = buckets
        self.n_models = len(models)
        weights = np.zeros((self.n_models + 1, buckets, len(columns)), dtype=np.float64)  # last model row: nodes without a model
        col_index = {c: j for j, c in enumerate(columns)}
        for shape, freq in gpu:
            j = col_index[(_per_device_milli(shape, unit), _device_count(shape))]
            first_bucket = int(np.searchsorted(self.cpu_steps, shape.cpu_milli)) + 1
            for m, model in enumerate(models):
                if shape.models is None or model in shape.models:
                    weights[m, first_bucket:, j] += freq
            if shape.models is None:
                weights[self.n_models, first_bucket:, j] += freq
        self.weights = weights.reshape((self.n_models + 1) * buckets, len(columns))
        self._taken: dict[int, IntArray] = {}  # share milli -> Q drop by a device's free milli (0..1000) and column

    def rows(self, model_id: IntArray, cpu_free: IntArray) -> IntArray:
        bucket = self.cpu_steps.searchsorted(cpu_free, side="right")
        return (model_id % (self.n_models + 1)) * self.buckets + bucket

    def q_row(self, whole_free: int, by_free: Mapping[int, Sequence[int]]) -> IntArray:
        q = np.full(self.col_milli.size, whole_free * self.unit, dtype=np.int64)
        for v, devices in by_free.items():
            if v > 0:
                q += np.where(self.col_milli <= v, v * len(devices), 0)
        return q

    def share_taken(self, value: IntArray, share: int) -> IntArray:
        """How much each column's Q drops when ``share`` milli are taken from a device with ``value`` free (n, columns)."""
        table = self._taken.get(share)
        if table is None:
            if len(self._taken) >= 256:
                self._taken.clear()
            v = np.arange(self.unit + 1, dtype=np.int64)[:, None]
            mu = self.col_milli
            table = self._taken[share] = np.where(mu <= v - share, share, np.where(mu <= v, v, 0))
        out: IntArray = table[value]
        return out

    def frag(self, q: IntArray, total: IntArray, rows: IntArray) -> FloatArray:
        """Fragmentation of rows ``q`` (n, columns) with free ``total`` (n) and weight rows ``rows`` (n)."""
        usable = np.where(q >= self.col_need, q, 0).astype(np.float64)
        out: FloatArray = total - np.einsum("ij,ij->i", self.weights[rows], usable)
        return out


class _Scores:
    """One request's score of each node (``FragmentationPacker._table``), as of the capacity's
    change ``mark``: ``known[i]`` False where node ``i`` changed since its score was kept."""

    def __init__(self, nodes: int) -> None:
        self.scores = [0] * nodes
        self.known = [False] * nodes
        self.mark = -1


class FragmentationPacker:
    """FGD: the placement that increases the node's expected fragmentation least (Weng et al.).

    Score: trunc(100 * sigmoid(-delta / 1000)), delta the change of the node's measure (milli) the
    placement causes; a share goes to the device with the best such score on the node (first
    device on ties). The whole-number score is part of the method: placements within a few tens of
    milli of each other tie, and ties go to the node order, which consolidates work on the same
    nodes (scored by the exact change, where ties are rare, the same measure allocated 1.4 points
    less on openb default at 130 %, seeds 42-44).
    """

    name = "fgd"

    def __init__(self, expected: ExpectedWorkload | None) -> None:
        self.expected = expected
        self._bound: NodeCapacity | None = None
        self._model: _FragModel | None = None
        self._q: IntArray = np.zeros((0, 0), dtype=np.int64)
        self._frag: FloatArray = np.zeros(0, dtype=np.float64)
        self._measure: FloatArray = np.zeros(0, dtype=np.float64)
        self._seen: IntArray = np.zeros(0, dtype=np.int64)
        # Scores by node state (see ``scores``): each node's state as an id (``_state``, as of the
        # capacity's change ``_state_mark``), the ids of the states seen, and per request a score by state id.
        self._state: list[int] = []
        self._state_mark = -1
        self._state_ids: dict[tuple[object, ...], int] = {}
        self._memo: dict[tuple[int, int, int], dict[int, int]] = {}
        self._tables: dict[tuple[int, int, int], _Scores] = {}  # per request, each node's score as of a change (``_table``)
        self._best_shares: dict[tuple[int, int], dict[int, frozenset[int]]] = {}  # a share's best free values, by request and state
        self._cpu_matters = True

    def _expected_for(self, capacity: NodeCapacity) -> ExpectedWorkload:
        if self.expected is None:
            raise SpecError(f"packer {self.name!r} needs the expected workload (its request shapes and their frequencies)", field="packer")
        return self.expected

    def _bind(self, capacity: NodeCapacity, expected: ExpectedWorkload) -> None:
        """Prepare for ``capacity`` (its models) and ``expected``: subclasses add their own tables."""

    def _extra(self, capacity: NodeCapacity, total: IntArray, cpu_free: IntArray, nodes: IntArray) -> FloatArray | None:
        """What a subclass adds to the fragmentation of nodes with ``total`` free milli and ``cpu_free`` CPU."""
        return None

    def _model_for(self, capacity: NodeCapacity) -> _FragModel:
        """The model of ``capacity`` (made, with empty per-node tables, when the packer first sees it)."""
        if self._bound is not capacity or self._model is None:
            expected = self._expected_for(capacity)
            self._bound = capacity
            self._model = _FragModel(expected, capacity.models, capacity.unit)
            self._q = np.zeros((len(capacity), self._model.col_milli.size), dtype=np.int64)
            self._frag = np.zeros(len(capacity), dtype=np.float64)
            self._measure = np.zeros(len(capacity), dtype=np.float64)
            self._seen = np.full(len(capacity), -1, dtype=np.int64)
            self._bind(capacity, expected)
            self._forget_states(capacity)
            steps = self._model.cpu_steps
            self._cpu_matters = bool((steps > 0).any()) or self._extra_uses_cpu()
        return self._model

    def _extra_uses_cpu(self) -> bool:
        """Whether ``_extra`` reads the nodes' CPU (then a node's CPU is part of its state for ``scores``)."""
        return False

    def _refresh(self, capacity: NodeCapacity) -> _FragModel:
        model = self._model_for(capacity)
        stale = (capacity.version != self._seen).nonzero()[0]
        if stale.size:
            for i in stale.tolist():
                self._q[i] = model.q_row(int(capacity.whole_free[i]), capacity.shared_by_free(i))
            rows = model.rows(capacity.model_id[stale], capacity.cpu_free[stale])
            total = capacity.free_milli[stale]
            self._frag[stale] = model.frag(self._q[stale], total, rows)
            extra = self._extra(capacity, total, capacity.cpu_free[stale], stale)
            self._measure[stale] = self._frag[stale] if extra is None else self._frag[stale] + extra
            self._seen[stale] = capacity.version[stale]
        return model

    def _after(self, capacity: NodeCapacity, request: NodeRequest, nodes: IntArray) -> FloatArray:
        """The node measure after the request on each of ``nodes`` (a share: on its best device)."""
        model = self._refresh(capacity)
        cpu = capacity.cpu_free[nodes] - request.cpu_milli
        rows = model.rows(capacity.model_id[nodes], cpu)
        total = capacity.free_milli[nodes] - capacity.units_of(request)
        if request.kind != "share":
            after = model.frag(self._q[nodes] - request.devices * capacity.unit, total, rows)
        else:
            s = request.share_milli
            # Candidates: a fresh device where the node has one, and each distinct free value of its shared devices.
            values = capacity.shared_values[nodes]
            at, slot = np.nonzero(values >= s)
            fresh = (capacity.whole_free[nodes] > 0).nonzero()[0]
            who = np.concatenate([fresh, at])
            value = np.concatenate([np.full(fresh.size, capacity.unit, dtype=np.int64), values[at, slot]])
            frag = model.frag(self._q[nodes[who]] - model.share_taken(value, s), total[who], rows[who])
            after = np.full(nodes.size, np.inf)
            np.minimum.at(after, who, frag)
        extra = self._extra(capacity, total, cpu, nodes)
        return after if extra is None else after + extra

    @staticmethod
    def _score(delta: FloatArray) -> IntArray:
        return _trunc(MAX_SCORE / (1.0 + np.exp((delta / 1000.0).clip(-700, 700))))

    def scores(self, capacity: NodeCapacity, request: NodeRequest, feasible: IntArray) -> IntArray:
        """Each feasible node's score. A node's score is a function of the request and of what
        ``_after`` and the measure read of the node: its free whole devices, free milli, model, the
        free milli of each device holding shares (and its CPU, where the expected workload's CPU
        or ``_extra`` reads it). So a pool of at most ``MEMO_NODES`` nodes (where numpy's cost per
        call outweighs the work) scores each node once per state it is in and request:
        the scores of the states met before are looked up, the others computed (vectorised, by the
        same formula) and kept. Large pools, and a packer's first request on a capacity (a packer
        made for one decision), are scored vectorised, every node every time."""
        if len(capacity) > MEMO_NODES or self._bound is not capacity:
            return self._fresh(capacity, request, feasible)  # a packer's first look at a capacity keeps nothing
        return np.array(self._kept(capacity, request, feasible.tolist()), dtype=np.int64)

    def best(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> int | None:
        """The place in ``nodes`` of the node ``scores`` ranks first (the first on ties), from the
        scores kept (``scores``); None where none are kept (a large pool, the packer's first look
        at the capacity)."""
        if len(capacity) > MEMO_NODES or self._bound is not capacity:
            return None
        scores = self._table(capacity, request, nodes)
        at, top = 0, scores[nodes[0]]
        for k in range(1, len(nodes)):
            score = scores[nodes[k]]
            if score > top:
                at, top = k, score
        return at

    def _kept(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> list[int]:
        """The scores of ``nodes``, from the scores kept (``_table``)."""
        scores = self._table(capacity, request, nodes)
        return [scores[i] for i in nodes]

    def _table(self, capacity: NodeCapacity, request: NodeRequest, nodes: list[int]) -> list[int]:
        """Each node's score for ``request`` by position, those of ``nodes`` up to date: kept per
        request and worked out again for a node only once it changed (``changed_since``), from the
        scores kept by node state (``_memo``), else by the formula (``_fresh``), and kept. A
        decision costs the nodes that changed and a read of each feasible node's score."""
        state = self._states(capacity)
        key = (request.devices, request.share_milli, request.cpu_milli if self._cpu_matters else 0)
        memo = self._memo.get(key)
        if memo is None:
            if len(self._memo) >= MEMO_REQUESTS:
                self._memo.clear()
                self._tables.clear()
            memo = self._memo[key] = {}
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Scores(len(capacity))
        changed, table.mark = capacity.changed_since(table.mark)
        known = table.known
        if changed is None:
            known[:] = [False] * len(known)
        else:
            for i in changed:
                known[i] = False
        scores = table.scores
        missing: list[int] = []
        for i in nodes:
            if not known[i]:
                score = memo.get(state[i])
                if score is None:
                    missing.append(i)
                else:
                    scores[i] = score
                    known[i] = True
        if missing:
            fresh: list[int] = self._fresh(capacity, request, np.array(missing, dtype=np.int64)).tolist()
            for i, score in zip(missing, fresh):
                scores[i] = memo[state[i]] = score
                known[i] = True
        return scores

    def _fresh(self, capacity: NodeCapacity, request: NodeRequest, nodes: IntArray) -> IntArray:
        """The scores of ``nodes`` worked out (the formula)."""
        return self._score(self._after(capacity, request, nodes) - self._measure[nodes])

    def _forget_states(self, capacity: NodeCapacity) -> None:
        self._state = [0] * len(capacity)
        self._state_mark = -1  # every node's state to work out
        self._state_ids = {}
        self._memo = {}
        self._tables = {}
        self._best_shares = {}

    def _states(self, capacity: NodeCapacity) -> list[int]:
        """Each node's state id, those of the nodes changed since worked out again (bounded: past
        ``MEMO_STATES`` states, all are forgotten and counted afresh)."""
        changed, self._state_mark = capacity.changed_since(self._state_mark)
        stale: range | list[int] = range(len(capacity)) if changed is None else changed  # a node there twice: the same state twice
        if changed is None or changed:
            if len(self._state_ids) + len(stale) > MEMO_STATES:
                self._forget_states(capacity)
                self._state_mark = capacity.changed_since(-1)[1]
                stale = range(len(capacity))
            ids, state = self._state_ids, self._state
            whole, milli, model_id = capacity.whole_free_list, capacity.free_milli_list, capacity.model_id_list
            cpu = capacity.cpu_free_list if self._cpu_matters else None
            tracked = capacity.cpu_tracked_list
            for i in stale:
                by_free = capacity.shared_by_free(i)
                key: tuple[object, ...] = (
                    whole[i], milli[i], model_id[i],
                    tuple(sorted((v, len(ds)) for v, ds in by_free.items())) if by_free else (),
                    (cpu[i], tracked[i]) if cpu is not None else None,
                )  # fmt: skip
                found = ids.get(key)
                if found is None:
                    found = ids[key] = len(ids)
                state[i] = found
        return self._state

    def devices(self, capacity: NodeCapacity, node: int, request: NodeRequest) -> tuple[int, ...]:
        """A share: the device whose use scores best (the lowest index on ties). The candidates are
        the lowest device of each free value among the devices holding shares, and the lowest free
        device: which values score best is a function of the node's state and the request, kept
        as the scores are (``scores``) once the packer has seen the capacity."""
        if request.kind != "share":
            return capacity.best_fit_devices(node, request)
        s = request.share_milli
        candidates: list[tuple[int, int]] = [(ds[0], v) for v, ds in capacity.shared_by_free(node).items() if v >= s]
        low = capacity.lowest_free_device(node)
        if capacity.whole_free[node] > 0 and low is not None:
            candidates.append((low, capacity.unit))
        candidates.sort()
        if self._bound is not capacity or len(capacity) > MEMO_NODES:
            best = self._best_values_of(capacity, node, request, candidates)
        else:
            state = self._states(capacity)[node]
            key = (request.cpu_milli if self._cpu_matters else 0, s)
            memo = self._best_shares.get(key)
            if memo is None:
                if len(self._best_shares) >= MEMO_REQUESTS:
                    self._best_shares.clear()
                memo = self._best_shares[key] = {}
            found = memo.get(state)
            if found is None:
                found = memo[state] = self._best_values_of(capacity, node, request, candidates)
            best = found
        return (next(d for d, v in candidates if v in best),)

    def _best_values_of(self, capacity: NodeCapacity, node: int, request: NodeRequest, candidates: list[tuple[int, int]]) -> frozenset[int]:
        """The free values of ``candidates`` (device, free value) whose device scores best for the share (the formula)."""
        model = self._refresh(capacity)
        s = request.share_milli
        value = np.array([v for _, v in candidates], dtype=np.int64)
        q = self._q[node][None, :] - model.share_taken(value, s)
        rows = np.repeat(model.rows(capacity.model_id[[node]], capacity.cpu_free[[node]] - request.cpu_milli), value.size)
        total = np.full(value.size, capacity.free_milli[node] - s, dtype=np.int64)
        # The same on every device of the node: what the measure adds beyond fragmentation.
        extra = self._extra(capacity, total[:1], capacity.cpu_free[[node]] - request.cpu_milli, np.array([node]))
        after = model.frag(q, total, rows) + (0.0 if extra is None else float(extra[0]))
        score = self._score(after - self._measure[node]).tolist()
        top = max(score)
        return frozenset(v for (_, v), x in zip(candidates, score) if x == top)

    def fragmentation(self, capacity: NodeCapacity) -> FloatArray:
        """Each node's expected fragmentation now (free device milli the expected workload cannot use)."""
        self._refresh(capacity)
        return self._frag.copy()


class ExaPacker(FragmentationPacker):
    """The layer's default: FGD's measure plus the device milli a node would strand for lack of CPU.

    FGD asks whether ONE expected request still fits a node; a node can pass that test and still be
    unable to fill its free devices, because the requests that would fill them need more CPU than
    it has left (on openb: 8-GPU nodes with 96 cores, GPU requests asking about 11 cores per GPU,
    CPU-only work beside them, and at 130 % demand more CPU asked than the cluster has). So the
    measure adds ``stranding`` x max(0, free milli - free CPU / rho), rho the expected workload's
    CPU per device milli: the device milli that CPU cannot feed. CPU-only requests then go where CPU
    is in excess, CPU-heavy shares to CPU-rich nodes. Scores and ties as FGD's (the consolidation
    by node order is worth keeping). Without an expected workload (a pool with no history and no
    table yet) the shapes are whole-device blocks of 1, 2, 4, ... up to the largest node, equally
    likely, and nothing is known of CPU, so the measure keeps large blocks whole.
    """

    name = "exa"

    def __init__(self, expected: ExpectedWorkload | None = None, *, stranding: float = 1.0) -> None:
        super().__init__(expected)
        self.stranding = stranding
        self._cpu_per_milli: float | None = None

    def _expected_for(self, capacity: NodeCapacity) -> ExpectedWorkload:
        return self.expected if self.expected is not None else ExpectedWorkload.blocks(int(capacity.devices.max(initial=1)))

    def _bind(self, capacity: NodeCapacity, expected: ExpectedWorkload) -> None:
        gpu = [(s, f) for s, f in expected.shapes if s.kind != "cpu"]
        cpu = sum(f * s.cpu_milli for s, f in gpu)
        milli = sum(f * capacity.units_of(s) for s, f in gpu)
        self._cpu_per_milli = cpu / milli if cpu > 0 and milli > 0 and self.stranding > 0 else None

    def _extra_uses_cpu(self) -> bool:
        return self._cpu_per_milli is not None

    def _extra(self, capacity: NodeCapacity, total: IntArray, cpu_free: IntArray, nodes: IntArray) -> FloatArray | None:
        rho = self._cpu_per_milli
        if rho is None:
            return None
        stranded = np.maximum(0.0, total - cpu_free / rho)
        out: FloatArray = self.stranding * np.where(capacity.cpu_tracked[nodes], stranded, 0.0)
        return out


def packer_named(name: str, *, expected: ExpectedWorkload | None = None, seed: int = 0) -> RandomPacker | BestFitPacker | DotProductPacker | GpuPackingPacker | GpuClusteringPacker | FragmentationPacker:
    """The packer called ``name`` (one of ``PACKERS``); ``fgd`` needs ``expected``, ``exa`` uses it when given."""
    if name == "random":
        return RandomPacker(seed)
    if name == "best-fit":
        return BestFitPacker()
    if name == "dot-product":
        return DotProductPacker()
    if name == "gpu-packing":
        return GpuPackingPacker()
    if name == "gpu-clustering":
        return GpuClusteringPacker()
    if name == "fgd":
        if expected is None:
            raise SpecError("packer 'fgd' needs the expected workload (its request shapes and their frequencies)", field="packer")
        return FragmentationPacker(expected)
    if name == "exa":
        return ExaPacker(expected)
    raise SpecError(f"unknown packer {name!r}; known: {', '.join(PACKERS)}", field="packer")

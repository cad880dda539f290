"""The node packer's scores kept by node state (``FragmentationPacker.scores``, ``best``) are the formula's.

A long-lived ``fgd`` or ``exa`` packer (a replay's, one per pool) looks up the score of a node
state it has met before for the same request (and the best device for a share); a packer made for
one decision (``place``) and a pool of more than ``MEMO_NODES`` nodes compute every score. Both
must give the same numbers: here a long-lived packer and a fresh one per request score the same
random capacities through random grants and releases, node for node.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from examlops_policy import _node_packers, _nodes
from examlops_policy._node_packers import ExaPacker, ExpectedWorkload, FragmentationPacker
from examlops_policy._nodes import Node, NodeCapacity, NodeGrant, NodeRequest


def random_request(rng: random.Random) -> NodeRequest:
    cpu = rng.choice((0, 1000, 2000, 4000, 8000, 16000))
    kind = rng.choice(("whole", "share", "cpu"))
    if kind == "whole":
        return NodeRequest(devices=rng.choice((1, 2, 4, 8)), cpu_milli=cpu, memory_mib=rng.choice((0, 1024)))
    if kind == "share":
        return NodeRequest(share_milli=rng.choice((100, 250, 300, 500, 700)), cpu_milli=cpu)
    return NodeRequest(cpu_milli=cpu or 1000)


def random_capacity(rng: random.Random, nodes: int) -> NodeCapacity:
    return NodeCapacity(
        Node(f"n{i}", rng.choice((1, 2, 4, 8)), rng.choice(("t4", "a100")), rng.choice((None, 32000, 64000, 96000)), rng.choice((None, 65536)))
        for i in range(nodes)
    )


EXPECTED = ExpectedWorkload(
    (
        (NodeRequest(share_milli=250, cpu_milli=2000), 0.3),
        (NodeRequest(devices=1, cpu_milli=8000), 0.3),
        (NodeRequest(devices=2, cpu_milli=16000, models=frozenset({"a100"})), 0.2),
        (NodeRequest(devices=4), 0.1),
        (NodeRequest(cpu_milli=4000), 0.1),
    )
)

PACKERS: dict[str, Callable[[], FragmentationPacker]] = {
    "exa": lambda: ExaPacker(),  # blocks: a node's CPU is not part of its state
    "exa-expected": lambda: ExaPacker(EXPECTED),  # CPU read by the stranding term and the shapes' CPU
    "fgd": lambda: FragmentationPacker(EXPECTED),
    "fgd-whole": lambda: FragmentationPacker(ExpectedWorkload(((NodeRequest(devices=1), 0.5), (NodeRequest(share_milli=500), 0.5)))),
}


@pytest.mark.parametrize("name", sorted(PACKERS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scores_kept_by_node_state_are_the_formula_s(name: str, seed: int) -> None:
    replay(name, seed)


@pytest.mark.parametrize("name", ["exa", "fgd"])
def test_a_packer_behind_more_changes_than_the_capacity_keeps_works_out_every_node(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_nodes, "CHANGES_KEPT", 2)
    replay(name, 4)


def test_changed_since_gives_the_nodes_changed_after_a_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_nodes, "CHANGES_KEPT", 2)
    cap = NodeCapacity(Node(f"n{i}", 2) for i in range(3))
    assert cap.changed_since(-1) == (None, 0)
    cap.allocate(NodeGrant("n2", (0,), 0, 0, 0))
    assert cap.changed_since(0) == ([2], 1)
    cap.allocate(NodeGrant("n1", (0,), 0, 0, 0))
    assert cap.changed_since(1) == ([1], 2)
    assert cap.changed_since(2) == ([], 2)
    cap.allocate(NodeGrant("n0", (0,), 0, 0, 0))
    cap.allocate(NodeGrant("n0", (1,), 0, 0, 0))  # 4 changes: the first 2 let go
    assert cap.changed_since(1) == (None, 4)
    assert cap.changed_since(2) == ([0, 0], 4)


def replay(name: str, seed: int) -> None:
    """Random grants and releases on a random capacity, each request scored by a long-lived packer
    and by a fresh one (and each share's device on every feasible node), which must agree."""
    rng = random.Random(seed)
    cap = random_capacity(rng, rng.choice((3, 12, 40)))
    kept = PACKERS[name]()
    held: list[NodeGrant] = []
    looked_up = 0
    for _ in range(400):
        if held and rng.random() < 0.45:
            cap.release(held.pop(rng.randrange(len(held))))
            continue
        request = random_request(rng)
        feasible = cap.feasible(request)
        if feasible.size == 0:
            continue
        before = sum(len(m) for m in kept._memo.values())
        scores = kept.scores(cap, request, feasible).tolist()
        looked_up += before > 0
        fresh = PACKERS[name]().scores(cap, request, feasible).tolist()  # a fresh packer computes them all
        assert scores == fresh, (request, feasible.tolist())
        if request.kind == "share":  # the device a share takes on each feasible node, kept and computed
            for node in feasible.tolist():
                assert kept.devices(cap, node, request) == PACKERS[name]().devices(cap, node, request), (request, node)
        # ``best``: the kept scores' first of the highest, where ``place`` goes (the formula's argmax).
        first = fresh.index(max(fresh))
        assert kept.best(cap, request, feasible.tolist()) == first, (request, feasible.tolist())
        grants = cap.place(request, kept)
        assert grants is not None
        assert [g.node for g in grants] == [cap.nodes[feasible.tolist()[first]].name]
        held.extend(grants)
    assert looked_up > 100  # the kept scores were used, not only computed
    assert kept._best_shares  # and the kept best devices of shares


def test_a_large_pool_is_scored_vectorised_and_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    cap = random_capacity(rng, 30)
    small, large = ExaPacker(EXPECTED), ExaPacker(EXPECTED)
    for _ in range(200):
        request = random_request(rng)
        feasible = cap.feasible(request)
        if feasible.size == 0:
            continue
        a = small.scores(cap, request, feasible).tolist()
        monkeypatch.setattr(_node_packers, "MEMO_NODES", 0)
        b = large.scores(cap, request, feasible).tolist()
        monkeypatch.setattr(_node_packers, "MEMO_NODES", 256)
        assert a == b
        grants = cap.place(request, small)
        if grants is not None and rng.random() < 0.4:
            for g in grants:
                cap.release(g)
    assert not large._memo and small._memo


def test_kept_scores_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_node_packers, "MEMO_STATES", 8)
    monkeypatch.setattr(_node_packers, "MEMO_REQUESTS", 3)
    rng = random.Random(11)
    cap = random_capacity(rng, 12)
    kept = ExaPacker(EXPECTED)
    for _ in range(300):
        request = random_request(rng)
        feasible = cap.feasible(request)
        if feasible.size == 0:
            continue
        assert kept.scores(cap, request, feasible).tolist() == ExaPacker(EXPECTED).scores(cap, request, feasible).tolist()
        grants = cap.place(request, kept)
        if grants is not None and rng.random() < 0.5:
            for g in grants:
                cap.release(g)
        assert len(kept._memo) <= 3
        assert len(kept._state_ids) <= 8 + len(cap)


def test_a_share_goes_to_the_lowest_of_the_devices_that_score_alike_on_nodes_in_the_same_state() -> None:
    # Whole-device blocks expected: a share on either shared device changes nothing the blocks
    # can use, so 500 and 600 free score alike; the lowest such device wins. Nodes a and b are in
    # the same state (one device with 500 free, one with 600, two free) with the values on other
    # devices: device 0 on both, whichever value it has.
    cap = NodeCapacity(Node(name, 4, "t4", 64000, 65536) for name in ("a", "b"))
    for node, first, second in (("a", 500, 400), ("b", 400, 500)):
        cap.allocate(NodeGrant(node, (0,), first, 0, 0))
        cap.allocate(NodeGrant(node, (1,), second, 0, 0))
    kept = ExaPacker()
    request = NodeRequest(share_milli=100)
    kept.scores(cap, request, cap.feasible(request))  # the packer has seen the capacity: it keeps from here
    assert kept.devices(cap, 0, request) == (0,)
    assert kept.devices(cap, 1, request) == (0,)
    assert kept._best_shares

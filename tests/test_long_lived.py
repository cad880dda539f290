"""A long-lived process (``exa hardware serve``, the library in a service) stays bounded: what a
write on a pool of nodes works out is freed by reference counting alone when the write is done
(no reference cycles left for the cyclic collector, no per-version cache), and the caches of
decoded stored text are bounded by the size of the text they hold, not by a number of entries."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from examlops_policy._core import codec
from examlops_policy.hardware import Hardware
from examlops_policy.model import Node, Pool

NODES = 400


@pytest.fixture()
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def live(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def test_changing_node_states_frees_every_pool_version_by_refcounting(hardware: Hardware, no_cyclic_gc: None) -> None:
    """A pool of 400 nodes, one node's state changed 30 times with the cyclic collector off: the
    decoded versions of the pool (its nodes) are freed as each write ends. A cache keyed by the
    pool itself kept each version (600 MiB after 150 changes of a pool of 20,000 nodes)."""
    nodes = tuple(Node(f"n{i:04d}", 8, cpu=64, memory="512Gi") for i in range(NODES))
    hardware.add_pool(Pool("big", "hpc", "nvidia", 8 * NODES, "eu", model="h100", cost_per_hour=1.0, nodes=nodes))
    del nodes
    for i in range(3):
        hardware.set_node_states({f"n{i:04d}": "drained"})
    codec.pool_from_text.cache_clear()  # bounded by size: see below
    codec.capacity_from_text.cache_clear()
    before = live(Node)
    for i in range(30):
        hardware.set_node_states({f"n{i % 10:04d}": "up" if (i // 10) % 2 else "drained"})
    codec.pool_from_text.cache_clear()
    codec.capacity_from_text.cache_clear()
    after = live(Node)
    assert after - before <= 2 * NODES, f"{(after - before) // NODES} versions of the pool are still held after 30 changes"
    assert [n.state for n in hardware.pool_by_name("big").node_list()][:10] == ["drained"] * 10


def test_the_caches_of_decoded_text_keep_what_their_budget_of_text_allows() -> None:
    """The caches every snapshot reads pools and capacities through keep the most recently used
    within a budget of characters: ten versions of a large spec do not stay as ten entries."""
    for cache in (codec.pool_from_text, codec.capacity_from_text):
        assert isinstance(cache, codec.TextCache)
    calls: list[str] = []

    def decode(text: str) -> int:
        calls.append(text)
        return len(text)

    cache = codec.TextCache(decode, chars=1000, entries=4)
    big = [str(i) * 300 for i in range(10)]  # 300 characters each: 3 fit the budget
    for text in big:
        assert cache(text) == 300
    entries, chars = cache.cache_size()
    assert (entries, chars) == (3, 900)
    assert cache(big[-1]) == 300 and len(calls) == 10  # the most recent is kept
    assert cache(big[0]) == 300 and len(calls) == 11  # an old one was dropped
    for i in range(10):
        cache(f"s{i}")
    assert cache.cache_size()[0] == 4  # and no more entries than allowed
    huge = "x" * 5000
    cache(huge)
    cache(huge)
    assert calls[-2:] == [huge, huge]  # a text over the whole budget is not kept

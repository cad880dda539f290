#!/usr/bin/env python3
"""Admission benchmark: how soon freed capacity reaches the queue, and how fast a queue is admitted.

    .venv/bin/python benchmarks/admission.py                 # 1,000 queued over 1,000 pools
    .venv/bin/python benchmarks/admission.py --queued 200 --pools 200 --latency-rounds 10

Through the product's own API, a real OPA (the managed local one) and SQLite (WAL, synchronous=FULL):

* release to placed: a pool of one device is held, a workload waits for it; ``Hardware.release``
  is called and the time from the call to the queued workload's placement being committed (the
  admission runs in the same process, after the release commits) is taken, over several rounds;
  the release alone is timed too (the same call on a state with nothing waiting).
* admissions per second: ``--pools`` pools of one device each, all held, ``--queued`` workloads
  waiting (queued through the library, their place in the order left to the pass); every holder is
  released without offering the queue the capacity, then one ``Hardware.admit`` pass is timed: it
  asks the policy's order once, then judges and places each waiting workload in turn.

Figures taken on a shared, loaded machine are labelled "under load" (``--label``). Writes JSON
(``--out``, default out/bench/admission.json). Everything lives in a temporary folder removed at the
end; the OPA server this run started is stopped.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from examlops_policy._core import commit  # noqa: E402
from examlops_policy._core.request import Request  # noqa: E402
from examlops_policy.app.cycle import SOURCE, Decided, Skip, Write  # noqa: E402
from examlops_policy.app.queue import intent, rank  # noqa: E402
from examlops_policy.hardware import Hardware  # noqa: E402
from examlops_policy.model import Pool, Workload  # noqa: E402
from examlops_policy.opa import stop_server  # noqa: E402


def pool(i: int) -> Pool:
    return Pool(f"p{i:05d}", "hpc", "amd", 1, "eu", cost_per_hour=round(0.5 + (i % 97) / 100, 2), carbon_factor=10)


def queue_fast(hw: Hardware, workload: Workload) -> str:
    """Queue ``workload`` through the library's write path without asking for its place in the
    order (what ``place(queue=True)`` asks first): the setup of a long queue stays linear."""
    ident = uuid.uuid4().hex

    def plan(decided: Decided) -> Write:
        assert commit.queueable(decided.decision), decided.decision
        waits = intent(hw.placing.queue, workload, None, ident, lease=None, submission=None)
        return Write(decided.decision, decided.snapshot, ident=ident, queue=waits)

    written = hw.cycle.run(Request(workload), plan, name=workload.name)
    assert not isinstance(written, Skip) and written.done.record is not None and written.done.record.decision.outcome == "queued"
    return ident


def latency(base: Path, rounds: int) -> dict[str, Any]:
    """Release to the next queued workload placed, in the releasing process."""
    home = base / "latency"
    hw = Hardware(home)
    try:
        hw.add_pool(Pool("one", "hpc", "amd", 1, "eu", cost_per_hour=0.5, carbon_factor=10))
        hw.add_pool(Pool("other", "hpc", "nvidia", 1, "eu", cost_per_hour=0.5, carbon_factor=10))
        holder = hw.place(Workload("holder", "amd")).id
        blocker = hw.place(Workload("blocker", "nvidia")).id  # stand-ins full too: the waiting one waits
        samples, plain = [], []
        for r in range(rounds):
            waiting = hw.place(Workload(f"w{r}", "amd"), queue=True)
            assert waiting.decision.outcome == "queued", waiting.decision
            start = time.perf_counter()
            report = hw.release(holder)
            samples.append(time.perf_counter() - start)
            assert report.admitted is not None and len(report.admitted.admitted) == 1, report
            holder = report.admitted.admitted[0].decision_id
        for r in range(rounds):  # the same release with nothing waiting (one indexed read of the queue)
            start = time.perf_counter()
            hw.release(holder)
            plain.append(time.perf_counter() - start)
            holder = hw.place(Workload(f"p{r}", "amd")).id
        hw.release(blocker)
        return {
            "rounds": rounds,
            "release_to_placed_ms": {"p50": round(statistics.median(samples) * 1000, 2), "min": round(min(samples) * 1000, 2),
                                     "max": round(max(samples) * 1000, 2)},  # fmt: skip
            "release_alone_ms": {"p50": round(statistics.median(plain) * 1000, 2)} if plain else None,
        }
    finally:
        hw.close()
        stop_server(home)


def throughput(base: Path, pools: int, queued: int) -> dict[str, Any]:
    """One admission pass over ``queued`` waiting workloads and ``pools`` freed pools."""
    home = base / "throughput"
    hw = Hardware(home)
    try:
        t0 = time.perf_counter()
        hw.apply([pool(i) for i in range(pools)])
        holders = [hw.place(Workload(f"h{i}", "amd")).id for i in range(pools)]
        setup_hold = time.perf_counter() - t0
        t1 = time.perf_counter()
        ids = [queue_fast(hw, Workload(f"q{i}", "amd", project=None)) for i in range(queued)]
        setup_queue = time.perf_counter() - t1
        for ident in holders:  # released without offering the queue the capacity
            commit.release(hw.store, hw.cycle.capacities, ident, source=SOURCE)
        start = time.perf_counter()
        report = hw.admit()
        took = time.perf_counter() - start
        admitted = len(report.admitted)
        order_start = time.perf_counter()
        rank(hw.placing.queue, hw.store.queue_rows(("admitted",))[:queued])
        order_alone = time.perf_counter() - order_start
        return {
            "pools": pools,
            "queued": queued,
            "admitted": admitted,
            "left_waiting": report.waiting,
            "pass_s": round(took, 3),
            "admissions_per_s": round(admitted / took, 1) if took else None,
            "order_once_s": round(order_alone, 3),
            "setup": {"hold_s": round(setup_hold, 1), "queue_s": round(setup_queue, 1), "queued_ids": len(ids)},
        }
    finally:
        hw.close()
        stop_server(home)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--latency-rounds", type=int, default=20)
    parser.add_argument("--label", default="under load", help="how the machine was when measured")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "admission.json")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="exa-bench-queue-"))
    try:
        results: dict[str, Any] = {"label": args.label, "machine": platform.platform(), "python": platform.python_version()}
        results["latency"] = latency(base, args.latency_rounds)
        print(f"release -> next queued placed ({args.label}): {results['latency']}", flush=True)
        results["throughput"] = throughput(base, args.pools, args.queued)
        print(f"admission pass ({args.label}): {results['throughput']}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

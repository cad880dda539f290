"""Wait-aware placement on the real Slurm of scripts/slurm-up (issue 22, "Tested for real").

Partition ``gpu`` (node vm: 2 CPUs) is filled with two running jobs of one CPU each and a time limit
of 60 minutes; pool ``gpu-h100`` (that partition) is the cheaper, ``nodes-h100`` (partition
``nodes``, free) the dearer. Every decision asks Slurm itself (``sbatch --test-only`` with exactly
what ``submit`` would send, ``--time`` from the walltime), before the write lock:

* ``optimize: earliest`` chooses the free pool;
* ``cost`` with a ``max_wait`` under the busy partition's estimate chooses the free one too, the busy
  one denied ``wait_exceeded``;
* ``cost`` alone chooses the busy one and records its estimated start, which is Slurm's own answer
  for that request (and when the filling jobs end);
* with the controller stopped: no estimate, the pools are judged without one (never a crash, never
  a silent "now") and the explanation says so.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from examlops_policy.cli.console import Console
from examlops_policy.cli.render import print_explanation
from examlops_policy.estimates.slurm import WILL_RUN_RE, slurm_time
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.executors.slurm import grant_request
from examlops_policy.hardware import Hardware
from examlops_policy.model import Grant, Placement, Pool, Rejection, Workload
from tests.conftest import HardwareFactory, free_port, run_exa
from tests.test_estimates_slurm import filled, slurm_run  # noqa: F401 - the fixture
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture

GPU_H100 = Pool("gpu-h100", "hpc", "nvidia", 4, "de-juelich", model="h100", partition="gpu", gres_type="h100", cost_per_hour=1.5)
NODES_H100 = Pool("nodes-h100", "hpc", "nvidia", 6, "de-juelich", model="h100", partition="nodes", gres_type="h100", cost_per_hour=3.0)
PROBE = Workload("probe", "nvidia", walltime="30m")


def _hardware(make_hardware: HardwareFactory) -> Hardware:
    hw = make_hardware()
    hw.apply([GPU_H100, NODES_H100])
    return hw


def slurms_answer(w: Workload, pool: Pool) -> datetime:
    """When Slurm itself says the request ``submit`` would send for ``w`` on ``pool`` starts."""
    one_device = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)  # what these workloads are granted
    request = grant_request(w, one_device, (), pool, load_gres_table())
    own = slurm_run(*request.test_only_argv())
    match = WILL_RUN_RE.search(own.stderr + own.stdout)
    assert match, own.stderr
    return slurm_time(match["at"])


@pytest.mark.slurm
def test_earliest_chooses_the_free_partition(filled: list[tuple[str, datetime]], make_hardware: HardwareFactory) -> None:  # noqa: F811
    hw = _hardware(make_hardware)
    last_end = max(end for _, end in filled)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    decision = hw.what_if(Workload("probe", "nvidia", walltime="30m", optimize="earliest"))
    assert isinstance(decision, Placement) and decision.pool == "nodes-h100"
    starts = {v.pool: v.estimate for v in decision.verdicts}
    busy, free = starts["gpu-h100"], starts["nodes-h100"]
    assert busy is not None and free is not None and busy.source == free.source == "slurm"
    assert busy.at == last_end
    assert free.at is not None and before <= free.at <= datetime.now(timezone.utc) + timedelta(seconds=2)
    assert decision.estimate == free


@pytest.mark.slurm
def test_cost_under_a_max_wait_shorter_than_the_busy_partitions_estimate_chooses_the_free_one(
    filled: list[tuple[str, datetime]],  # noqa: F811
    make_hardware: HardwareFactory,
) -> None:
    hw = _hardware(make_hardware)
    decision = hw.what_if(Workload("probe", "nvidia", walltime="30m", max_wait="30m"))
    assert isinstance(decision, Placement) and decision.pool == "nodes-h100"
    reasons = {v.pool: [r.code for r in v.reasons] for v in decision.verdicts}
    assert reasons["gpu-h100"] == ["wait_exceeded"]


@pytest.mark.slurm
def test_cost_alone_chooses_the_busy_partition_and_records_slurms_own_estimate(
    filled: list[tuple[str, datetime]],  # noqa: F811
    make_hardware: HardwareFactory,
) -> None:
    hw = _hardware(make_hardware)
    record = hw.place(PROBE)
    decision = record.decision
    assert isinstance(decision, Placement) and decision.pool == "gpu-h100"
    estimate = decision.estimate
    assert estimate is not None and estimate.source == "slurm" and estimate.at is not None
    assert estimate.at == slurms_answer(PROBE, GPU_H100) == max(end for _, end in filled)
    assert estimate.facts["partition"] == "gpu" and "--time=30" in str(estimate.facts["command"])
    # Recorded: the decision's columns and its record, read back as decided.
    with sqlite3.connect(hw.home / "state.db") as db:
        columns = db.execute("SELECT estimated_start, estimate_source FROM decisions WHERE id = ?", (record.id,)).fetchone()
    assert columns == (estimate.at.strftime("%Y-%m-%dT%H:%M:%SZ"), "slurm")
    again = hw.decision(record.id).decision
    assert isinstance(again, Placement) and again.estimate is not None and again.estimate.as_json() == estimate.as_json()
    assert hw.replay(record.id).same
    shown = json.loads(run_exa(hw.home, "hardware", "explain", record.id, "--json", check=True).stdout)
    assert shown["estimated_start"] == columns[0] and shown["estimate_source"] == "slurm"
    assert {v["pool"]: (v["estimate"] or {}).get("estimate_source") for v in shown["verdicts"]} == {"gpu-h100": "slurm", "nodes-h100": None}
    text = run_exa(hw.home, "hardware", "explain", record.id, check=True).stdout
    # A start on another day than the decision's says its date (a decision shortly before midnight).
    assert re.search(rf"Start: slurm: expected start ({estimate.at.strftime('%Y-%m-%d')} )?{estimate.at.strftime('%H:%M')} UTC \(in ", text), text


@pytest.fixture()
def stopped_controller(slurm: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:  # noqa: F811
    """The same Slurm configuration with the controller's port where nothing listens: what every
    client sees of a stopped slurmctld (scontrol ping: DOWN)."""
    conf = Path(slurm["SLURM_CONF"])
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join(f"SlurmctldPort={free_port()}" if line.startswith("SlurmctldPort=") else line
                              for line in conf.read_text().splitlines()) + "\n")  # fmt: skip
    for name in ("gres.conf", "topology.conf"):
        if (conf.parent / name).exists():
            (tmp_path / name).write_text((conf.parent / name).read_text())
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(dead)
    try:
        yield {"SLURM_CONF": str(dead)}
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


@pytest.mark.slurm
def test_with_the_controller_stopped_pools_are_judged_without_an_estimate_and_say_so(
    stopped_controller: dict[str, str], make_hardware: HardwareFactory, tmp_path: Path
) -> None:
    hw = _hardware(make_hardware)
    started = time.monotonic()
    cheapest = hw.what_if(PROBE)
    hurried = hw.what_if(Workload("probe", "nvidia", walltime="30m", max_wait="30m"))
    soonest = hw.what_if(Workload("probe", "nvidia", walltime="30m", optimize="earliest"))
    assert time.monotonic() - started < 10  # one scontrol ping, not sbatch retrying per pool
    # Cost: the cheapest pool, its start unknown and said so, never "now".
    assert isinstance(cheapest, Placement) and cheapest.pool == "gpu-h100"
    assert cheapest.estimate is not None and cheapest.estimate.at is None and cheapest.estimate.source == "slurm"
    assert "controller does not answer" in str(cheapest.estimate.reason)
    # Under a max_wait no pool whose start is unknown is taken.
    assert isinstance(hurried, Rejection) and hurried.code == "no_capacity"
    assert {v.pool: [r.code for r in v.reasons] for v in hurried.verdicts} == {"gpu-h100": ["estimate_unknown"], "nodes-h100": ["estimate_unknown"]}
    # Earliest: no start is known anywhere, so cost decides; no pool is said to start now.
    assert isinstance(soonest, Placement) and soonest.pool == "gpu-h100"
    assert all(v.estimate is not None and v.estimate.at is None for v in soonest.verdicts)
    out = tmp_path / "explain.txt"
    with out.open("w") as f:
        print_explanation(Console(file=f), soonest)
    text = out.read_text()
    assert "slurm: no estimate (Slurm's controller does not answer" in text
    assert "now: starts now" not in text
    assert "earliest start of 2 eligible" in text and "with no estimate at $1.50/h" in text
    # The command line: a placement, recorded without an estimate, exit 0.
    placed = run_exa(hw.home, "hardware", "place", "probe", "--accelerator", "nvidia", "--walltime", "30m", "--explain", env=stopped_controller)
    assert placed.returncode == 0, placed.stderr
    assert "Start: slurm: no estimate (Slurm's controller does not answer" in placed.stdout

"""Start estimates from Slurm: ``sbatch --test-only`` for exactly what ``submit`` would ask,
``squeue --start`` for a queued job, a stopped controller answered at once with no estimate.

The first part runs the estimator on recorded answers (a fake runner: the Python around Slurm);
the second on the real Slurm of scripts/slurm-up: a partition filled with running jobs of known
time limits, the estimate compared with Slurm's own answer for the same request and with when
those jobs end.
"""

from __future__ import annotations

import dataclasses

import os
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from examlops_policy.errors import ExecutorError
from examlops_policy.estimates import iso
from examlops_policy.estimates.gather import EstimateRequest, StartEstimator
from examlops_policy.estimates.slurm import SlurmEstimator, run_in_utc, slurm_time
from examlops_policy.executors.command import CommandResult, run_command
from examlops_policy.executors.gres import load_gres_table
from examlops_policy.executors.slurm import SlurmRequest, grant_request
from examlops_policy.model import Grant, Pool, Workload
from tests.conftest import free_port
from tests.test_slurm_integration import slurm  # noqa: F401 - the fixture

GRES = load_gres_table()
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
UP = CommandResult(("scontrol", "ping"), 0, "Slurmctld(primary) at vm is UP\n", "")
DOWN = CommandResult(("scontrol", "ping"), 1, "Slurmctld(primary) at vm is DOWN\n*****\n", "")


def will_run(at: str, nodes: str = "vm", partition: str = "gpu") -> str:
    return f"sbatch: Job 41 to start at {at} using 1 processors on nodes {nodes} in partition {partition}\n"


class Recorded:
    """A runner answering from recorded outputs: ``ping`` for ``scontrol ping``, ``answer(argv)``
    for the rest; it records every call and the most calls running at once."""

    def __init__(self, answer: object, ping: CommandResult = UP, delay: float = 0.0) -> None:
        self.answer = answer
        self.ping = ping
        self.delay = delay
        self.calls: list[tuple[str, ...]] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        args = tuple(argv)
        with self.lock:
            self.calls.append(args)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if args[:2] == ("scontrol", "ping"):
                return self.ping
            if self.delay:
                time.sleep(self.delay)
            result = self.answer(args) if callable(self.answer) else self.answer
            if isinstance(result, Exception):
                raise result
            assert isinstance(result, CommandResult)
            return result
        finally:
            with self.lock:
                self.running -= 1

    def asked(self, program: str = "sbatch") -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] == program]


def request(partition: str = "gpu", gres: str = "gpu:h100:2", time_min: int | None = 30) -> SlurmRequest:
    return SlurmRequest("", partition, "probe", Path(), gres=gres, time_min=time_min)


def ok(stderr: str) -> CommandResult:
    return CommandResult(("sbatch",), 0, "", stderr)


# -- what is asked ------------------------------------------------------------------------------


def test_the_estimate_asks_what_submit_asks_with_the_time_limit() -> None:
    pool = Pool("gpu-h100", "hpc", "nvidia", 4, "de-juelich", model="h100", partition="gpu", gres_type="h100", capabilities=("fp8",))
    workload = Workload("train", "nvidia", count=2, capabilities=("fp8",), walltime="90m")
    grant = Grant(requested=1.0, honored=True, share=1.0, units=2, devices=2.0)
    r = grant_request(workload, grant, (), pool, GRES, decision_id="d1", script=Path("/tmp/job.sh"))
    assert r.argv() == ["sbatch", "--parsable", "--partition=gpu", "--job-name=train", "--time=90", "--gres=gpu:h100:2",
                        "--constraint=fp8", "--comment=examlops-decision=d1", "/tmp/job.sh"]  # fmt: skip
    assert r.test_only_argv() == ["sbatch", "--test-only", "--partition=gpu", "--job-name=train", "--time=90", "--gres=gpu:h100:2",
                                  "--constraint=fp8", "--wrap=true"]  # fmt: skip


def test_the_estimate_of_a_gang_asks_each_node_what_the_grant_asks_of_it() -> None:
    """Before nodes are chosen (a candidate's estimate), a grant that asks of each node is asked
    per node: N nodes, each with its GPUs (or shards), CPUs and memory; Slurm picks the nodes."""
    pool = Pool("nodes-h100", "hpc", "nvidia", 6, "de-juelich", model="h100", partition="nodes", gres_type="h100", nodes=3)
    gang = Grant(requested=1.0, honored=True, share=1.0, units=2, devices=4.0, nodes=2, cpu_milli=1500, memory_mib=1024)
    r = grant_request(Workload("gang", "nvidia", count=2, nodes=2, cpu=1.5, memory=1024, walltime="1h"), gang, (), pool, GRES)
    assert r.test_only_argv() == ["sbatch", "--test-only", "--partition=nodes", "--job-name=gang", "--time=60", "--nodes=2",
                                  "--ntasks-per-node=1", "--cpus-per-task=2", "--mem=1024M", "--gres=gpu:h100:2", "--wrap=true"]  # fmt: skip
    shared = dataclasses.replace(pool, sharing="time-slice", shares_per_device=4)
    share = Grant(requested=0.5, honored=True, share=0.5, units=1, devices=0.5, scheme="time-slice", shares=2)
    r = grant_request(Workload("half", "nvidia", fraction=0.5), share, (), shared, GRES)
    assert r.options()[2:] == ["--nodes=1", "--ntasks-per-node=1", "--gres=shard:h100:2"]


@pytest.mark.parametrize(("walltime", "minutes"), [(1, 1), (59, 1), (60, 1), (61, 2), (5400, 90), (None, None)])
def test_the_time_limit_is_whole_minutes_rounded_up(walltime: int | None, minutes: int | None) -> None:
    pool = Pool("gpu-h100", "hpc", "nvidia", 4, "de-juelich", partition="gpu", gres_type="h100")
    grant = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)
    r = grant_request(Workload("w", "nvidia", walltime=walltime), grant, (), pool, GRES)
    assert r.time_min == minutes
    assert (f"--time={minutes}" in r.test_only_argv()) == (minutes is not None)


def test_slurm_prints_in_utc_for_the_estimator() -> None:
    seen: dict[str, str] = {}

    def capture(argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> CommandResult:
        seen.update(env or {})
        return UP

    import examlops_policy.estimates.slurm as module

    original = module.run_command
    module.run_command = capture  # type: ignore[assignment]
    try:
        run_in_utc(["scontrol", "ping"], 1.0)
    finally:
        module.run_command = original
    assert seen["TZ"] == "UTC" and seen["SLURM_TIME_FORMAT"] == "standard"
    assert slurm_time("2026-12-01T14:47:41") == datetime(2026, 12, 1, 14, 47, 41, tzinfo=timezone.utc)


# -- answers --------------------------------------------------------------------------------------


def test_the_answer_is_read_with_its_nodes_and_partition() -> None:
    runner = Recorded(ok(will_run("2026-12-01T14:47:41", nodes="exa-n[1-2]", partition="nodes")))
    e = SlurmEstimator(runner, clock=lambda: NOW).estimate("nodes-h100", request("nodes"))
    assert e.at == datetime(2026, 12, 1, 14, 47, 41, tzinfo=timezone.utc)
    assert (e.source, e.pool, e.observed_at, e.reason) == ("slurm", "nodes-h100", NOW, None)
    assert e.facts["nodes"] == "exa-n[1-2]" and e.facts["partition"] == "nodes"
    assert e.detail == "slurm: expected start 2026-12-01T14:47:41Z on nodes exa-n[1-2] in partition nodes (sbatch --test-only)"
    assert runner.asked() == [tuple(request("nodes").test_only_argv())]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (CommandResult(("sbatch",), 1, "", "sbatch: error: invalid partition specified: nope\n"), "invalid partition specified: nope"),
        (CommandResult(("sbatch",), 1, "", "allocation failure: Requested node configuration is not available\n"),
         "allocation failure: Requested node configuration is not available"),
        (ExecutorError("sbatch: no answer within 10 s"), "sbatch: no answer within 10 s"),
        (ExecutorError("sbatch: command not found"), "sbatch: command not found"),
        (ok("sbatch: something else entirely\n"), "unexpected answer from sbatch --test-only"),
        (CommandResult(("sbatch",), 1, "", "allocation failure: Unable to contact slurm controller (connect failure)\n"),
         "Slurm's controller does not answer"),
    ],
)  # fmt: skip
def test_no_answer_is_no_estimate_with_slurm_s_words(answer: object, reason: str) -> None:
    e = SlurmEstimator(Recorded(answer), clock=lambda: NOW).estimate("p", request())
    assert e.at is None and not e.known
    assert e.reason is not None and reason in e.reason
    assert e.detail.startswith("slurm: no estimate: ")


def test_a_stopped_controller_is_no_estimate_for_every_pool_at_once() -> None:
    runner = Recorded(ok(will_run("2026-12-01T14:47:41")), ping=DOWN)
    estimates = SlurmEstimator(runner, clock=lambda: NOW).estimate_many([(f"p{i}", request(f"part{i}")) for i in range(16)])
    assert all(not e.known for e in estimates)
    assert {e.reason for e in estimates} == {"Slurm's controller does not answer (Slurmctld(primary) at vm is DOWN)"}
    assert runner.asked() == []  # not one sbatch retrying for seconds per pool


def test_answers_are_reused_for_the_same_request_and_say_how_old_they_are() -> None:
    clock = [NOW]
    runner = Recorded(ok(will_run("2026-12-01T14:47:41")))
    est = SlurmEstimator(runner, ttl_s=60, clock=lambda: clock[0])
    first = est.estimate("a", request())
    clock[0] = NOW + timedelta(seconds=5)
    again = est.estimate_many([("b", request()), ("c", request())])
    assert len(runner.asked()) == 1 and est.asked == 1
    assert [e.pool for e in again] == ["b", "c"]
    assert all(e.at == first.at and e.observed_at == NOW for e in again)
    assert again[0].age(clock[0]) == timedelta(seconds=5)
    # Another grant or time limit is another question.
    est.estimate("d", request(time_min=60))
    est.estimate("e", request(gres="gpu:h100:1"))
    assert len(runner.asked()) == 3


def test_answers_expire() -> None:
    runner = Recorded(ok(will_run("2026-12-01T14:47:41")))
    est = SlurmEstimator(runner, ttl_s=0, clock=lambda: NOW)
    est.estimate("a", request())
    est.estimate("a", request())
    assert len(runner.asked()) == 2


def test_failures_are_not_cached() -> None:
    answers = [CommandResult(("sbatch",), 1, "", "sbatch: error: Socket timed out\n"), ok(will_run("2026-12-01T14:47:41"))]
    runner = Recorded(lambda _: answers.pop(0))
    est = SlurmEstimator(runner, ttl_s=60, clock=lambda: NOW)
    assert not est.estimate("a", request()).known
    assert est.estimate("a", request()).known


def test_questions_run_concurrently_within_the_bound() -> None:
    runner = Recorded(ok(will_run("2026-12-01T14:47:41")), delay=0.05)
    est = SlurmEstimator(runner, parallel=4, clock=lambda: NOW)
    estimates = est.estimate_many([(f"p{i}", request(f"part{i}")) for i in range(16)])
    assert all(e.known for e in estimates)
    assert [e.pool for e in estimates] == [f"p{i}" for i in range(16)]
    assert runner.most == 4  # at once, never more


def test_the_batch_is_bounded_in_time() -> None:
    runner = Recorded(ok(will_run("2026-12-01T14:47:41")), delay=0.5)
    est = SlurmEstimator(runner, parallel=2, budget_s=0.2, clock=lambda: NOW)
    started = time.monotonic()
    estimates = est.estimate_many([(f"p{i}", request(f"part{i}")) for i in range(4)])
    assert time.monotonic() - started < 0.45
    assert {e.reason for e in estimates} == {"Slurm did not answer within 0.2 s"}


QUEUE = {
    "pending": (CommandResult(("squeue",), 0, "31|PENDING|2026-12-01T13:57:42|debug||Resources\n", ""), None),
    "not planned yet": (CommandResult(("squeue",), 0, "31|PENDING|N/A|debug||Priority\n", ""), None),
    "running": (CommandResult(("squeue",), 0, "", ""), CommandResult(("squeue",), 0, "31|RUNNING|2026-12-01T11:57:42|gpu|vm|None\n", "")),
    "gone": (CommandResult(("squeue",), 0, "", ""), CommandResult(("squeue",), 0, "", "")),
    "unknown id": (CommandResult(("squeue",), 1, "", "slurm_load_jobs error: Invalid job id specified\n"), None),
}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "at", "words"),
    [
        ("pending", datetime(2026, 12, 1, 13, 57, 42, tzinfo=timezone.utc), "slurm: job 31 expected start 2026-12-01T13:57:42Z (squeue --start)"),
        ("not planned yet", None, "job 31 is pending (Priority); Slurm has planned no start for it yet"),
        ("running", datetime(2026, 12, 1, 11, 57, 42, tzinfo=timezone.utc), "slurm: job 31 started 2026-12-01T11:57:42Z on nodes vm"),
        ("gone", None, "job 31 is neither pending nor running"),
        ("unknown id", None, "Invalid job id specified"),
    ],
)  # fmt: skip
def test_a_queued_job_s_start_is_what_squeue_start_says(case: str, at: datetime | None, words: str) -> None:
    first, then = QUEUE[case]
    answers = [first] + ([then] if then is not None else [])
    runner = Recorded(lambda _: answers.pop(0))
    e = SlurmEstimator(runner, clock=lambda: NOW).queued("debug-h100", "31")
    assert e.at == at
    assert words in (e.detail if at is not None else str(e.reason))
    assert runner.asked("squeue")[0][:2] == ("squeue", "--start")


def test_a_queued_job_id_is_checked() -> None:
    runner = Recorded(ok(""))
    e = SlurmEstimator(runner, clock=lambda: NOW).queued("p", "31; rm -rf /")
    assert not e.known and "not a Slurm job id" in str(e.reason)
    assert runner.calls == []


# -- on the real Slurm ----------------------------------------------------------------------------

GPU_H100 = Pool("gpu-h100", "hpc", "nvidia", 4, "de-juelich", model="h100", partition="gpu", gres_type="h100")
NODES_H100 = Pool("nodes-h100", "hpc", "nvidia", 6, "de-juelich", model="h100", partition="nodes", gres_type="h100")
ONE_GPU = Grant(requested=1.0, honored=True, share=1.0, units=1, devices=1.0)


def slurm_run(*argv: str) -> CommandResult:
    return run_in_utc(list(argv), 30)


@pytest.fixture()
def filled(slurm: dict[str, str]) -> Iterator[list[tuple[str, datetime]]]:  # noqa: F811 - the fixture
    """Partition gpu (node vm: 2 CPUs) filled by two running jobs of one CPU each, time limit 60
    minutes: [(job id, when it ends)]. Cancelled afterwards."""
    jobs: list[str] = []
    try:
        for _ in range(2):
            done = slurm_run("sbatch", "--parsable", "--partition=gpu", "--job-name=exa-fill", "--time=60", "--cpus-per-task=1",
                             "--gres=gpu:h100:1", "--wrap=sleep 600")  # fmt: skip
            assert done.ok, done.stderr
            jobs.append(done.stdout.strip().split(";")[0])
        ends: list[tuple[str, datetime]] = []
        deadline = time.monotonic() + 60
        while True:
            rows = slurm_run("squeue", "--noheader", f"--jobs={','.join(jobs)}", "--format=%i|%T|%S|%e").stdout.split()
            states = {r.split("|")[0]: r.split("|") for r in rows}
            if all(states.get(j, ["", ""])[1] == "RUNNING" for j in jobs):
                ends = [(j, slurm_time(states[j][3])) for j in jobs]
                break
            assert time.monotonic() < deadline, f"the filling jobs did not start: {rows}"
            time.sleep(0.5)
        yield ends
    finally:
        for j in jobs:
            run_command(["scancel", j], timeout=30)


@pytest.mark.slurm
def test_a_filled_partition_starts_when_its_jobs_end_as_slurm_itself_says(filled: list[tuple[str, datetime]]) -> None:
    last_end = max(end for _, end in filled)
    est = SlurmEstimator()
    r = grant_request(Workload("probe", "nvidia", walltime="30m"), ONE_GPU, (), GPU_H100, GRES)
    estimate = est.estimate("gpu-h100", r)
    own = slurm_run(*r.test_only_argv())
    assert estimate.known, estimate.reason
    # Slurm's own answer for the same request, asked directly.
    assert f"to start at {iso(estimate.at)[:-1]} " in own.stderr, (own.stderr, estimate)  # type: ignore[arg-type]
    # The node's two CPUs are taken until the filling jobs' time limits end.
    assert estimate.at == last_end
    assert estimate.facts["nodes"] == "vm" and estimate.facts["partition"] == "gpu"


@pytest.mark.slurm
def test_a_free_partition_starts_now(filled: list[tuple[str, datetime]]) -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    estimates = StartEstimator(slurm=SlurmEstimator()).estimate([
        EstimateRequest(GPU_H100, Workload("probe", "nvidia", walltime="30m"), ONE_GPU, fits_now=True),
        EstimateRequest(NODES_H100, Workload("probe", "nvidia", walltime="30m"), ONE_GPU, fits_now=True),
    ])  # fmt: skip
    busy, free = estimates
    assert busy.at == max(end for _, end in filled)
    assert free.known and free.at is not None
    assert before <= free.at <= datetime.now(timezone.utc) + timedelta(seconds=2)
    assert free.facts["partition"] == "nodes"


@pytest.mark.slurm
def test_a_job_pending_ahead_comes_first_and_squeue_start_plans_it(filled: list[tuple[str, datetime]]) -> None:
    """A job pending ahead (both CPUs of the node, 120 minutes) starts when the filling jobs end:
    Slurm's answer for ours comes after it, and squeue --start reports the pending job's planned
    start once the backfill scheduler has made its plan."""
    pending = slurm_run("sbatch", "--parsable", "--partition=gpu", "--job-name=exa-ahead", "--time=120", "--cpus-per-task=2",
                        "--gres=gpu:h100:1", "--wrap=sleep 600")  # fmt: skip
    assert pending.ok, pending.stderr
    job_id = pending.stdout.strip().split(";")[0]
    try:
        est = SlurmEstimator(ttl_s=0)
        r = grant_request(Workload("probe", "nvidia", walltime="30m"), ONE_GPU, (), GPU_H100, GRES)
        estimate = est.estimate("gpu-h100", r)
        last_end = max(end for _, end in filled)
        # The job ahead runs from the filling jobs' end for its 120 minutes; ours comes after it.
        assert estimate.at == last_end + timedelta(minutes=120), estimate
        own = slurm_run(*r.test_only_argv())
        assert f"to start at {iso(estimate.at)[:-1]} " in own.stderr  # type: ignore[arg-type]
        # squeue --start: the backfill scheduler plans the queued job's start on its next pass.
        deadline = time.monotonic() + 75
        queued = est.queued("gpu-h100", job_id)
        while not queued.known and time.monotonic() < deadline:
            time.sleep(2)
            queued = est.queued("gpu-h100", job_id)
        assert queued.known, queued.reason
        assert queued.at == last_end
    finally:
        run_command(["scancel", job_id], timeout=30)


@pytest.mark.slurm
def test_a_controller_that_does_not_answer_gives_no_estimate_quickly(slurm: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    """The same Slurm configuration with the controller's port where nothing listens: what a
    client sees of a stopped slurmctld (scontrol ping: DOWN; sbatch retrying for about 18 s)."""
    conf = Path(slurm["SLURM_CONF"])
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join(f"SlurmctldPort={free_port()}" if line.startswith("SlurmctldPort=") else line
                              for line in conf.read_text().splitlines()) + "\n")  # fmt: skip
    for name in ("gres.conf", "topology.conf"):
        (tmp_path / name).write_text((conf.parent / name).read_text())
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(dead)
    try:
        started = time.monotonic()
        estimates = StartEstimator(slurm=SlurmEstimator()).estimate([
            EstimateRequest(GPU_H100, Workload("probe", "nvidia"), ONE_GPU, fits_now=True),
            EstimateRequest(NODES_H100, Workload("probe", "nvidia"), ONE_GPU, fits_now=True),
        ])  # fmt: skip
        took = time.monotonic() - started
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
    assert took < 5, took
    for e in estimates:
        assert not e.known and e.source == "slurm"
        assert "controller does not answer" in str(e.reason) and "DOWN" in str(e.reason)

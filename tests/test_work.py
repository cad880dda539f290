"""Cheapest per unit of work: the throughput table, a workload's work (``work_class``, ``work``),
the objectives that rank by it (work-cost, work-carbon, work-time) and what the explanation, the
JSON and Slurm's ``--time`` make of it.

The objectives themselves are held equal between Python selection and the policy's reference rule
by tests/test_invariants.py (test_ranking_by_work_...); the table's rows by policies' Rego tests
(reference_test.rego, test_work_objective_selects)."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from examlops_policy import SpecError, Workload
from examlops_policy.cli import exits
from examlops_policy.executors.slurm import time_limit_s
from examlops_policy.model import OBJECTIVES, WORK_OBJECTIVES, Grant, Pool
from examlops_policy.specs import workload_from_file, workload_from_mapping
from examlops_policy.tables import load_tables, read_table
from tests.conftest import run_exa

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "policies" / "examlops" / "tables" / "throughput.yaml"
GAVEL = ("Transformer", "CycleGAN", "ResNet-50", "LM", "ResNet-18", "A3C", "Recommendation")
# Gavel's measurements as the shared data beside the checkout holds them (../shared from the
# project's root; absent elsewhere: the test of equality then skips, the table's own checks do not).
GAVEL_CSV = ROOT.parent / "shared" / "data" / "gavel" / "solo_throughputs.csv"


def whole(devices: int = 1) -> Grant:
    return Grant(requested=float(devices), honored=True, share=1.0, units=devices, devices=float(devices))


# -- the table ------------------------------------------------------------------------------------


def test_every_row_has_a_positive_rate_a_known_model_and_a_cited_source() -> None:
    table = read_table(TABLE)["throughput"]
    assert isinstance(table, dict)
    sources, classes = table["sources"], table["classes"]
    models = load_tables().models
    assert isinstance(sources, dict) and isinstance(classes, dict) and classes
    assert all(isinstance(text, str) and len(text) > 40 for text in sources.values())
    for name, entry in classes.items():
        assert isinstance(entry, dict) and isinstance(entry["unit"], str) and entry["unit"], name
        rows = [(m, r) for m, r in entry["models"].items()]
        rows += [(m, r) for m, profiles in (entry.get("profiles") or {}).items() for r in profiles.values()]
        assert rows, f"{name}: a class without a row"
        for model, row in rows:
            assert model in models, f"{name}: {model} is not in models.yaml"
            assert set(row) == {"per_second", "source"}, f"{name}/{model}: {sorted(row)}"
            assert isinstance(row["per_second"], float) and row["per_second"] > 0 and math.isfinite(row["per_second"])
            assert row["source"] in sources, f"{name}/{model}: source {row['source']!r} is not cited under sources"


def test_gavel_s_seven_job_types_are_there_in_iterations_on_k80_p100_and_v100() -> None:
    classes = load_tables().throughput["classes"]
    assert isinstance(classes, dict)
    for name in GAVEL:
        entry = classes[name]
        assert isinstance(entry, dict) and entry["unit"] == "iterations"
        assert set(entry["models"]) == {"k80", "p100", "v100"}  # type: ignore[arg-type]
    lm = classes["LM"]["models"]  # type: ignore[index]
    assert round(lm["v100"]["per_second"] / lm["k80"]["per_second"]) == 61  # type: ignore[index]


@pytest.mark.skipif(not GAVEL_CSV.is_file(), reason="the shared Gavel data is not beside this checkout")
def test_gavel_s_rows_are_the_measurements_unchanged() -> None:
    classes = load_tables().throughput["classes"]
    with GAVEL_CSV.open(newline="") as handle:
        for row in csv.DictReader(handle):
            for model in ("k80", "p100", "v100"):
                assert classes[row["job_type"]]["models"][model]["per_second"] == float(row[model])  # type: ignore[index]


def test_today_s_accelerators_have_rows_only_from_the_mlperf_round_cited() -> None:
    """Llama 2 70B Offline (MLPerf Inference v4.1): the DGX-H100's 24,524.9 tokens/s over its 8
    GPUs, one MI300X's 3,062.72; nothing for the devices that round did not measure here."""
    entry = load_tables().throughput["classes"]["llama2-70b-99.9-offline"]  # type: ignore[index]
    assert entry["unit"] == "tokens"  # type: ignore[index]
    rows = entry["models"]  # type: ignore[index]
    assert {m: r["per_second"] for m, r in rows.items()} == {"h100": 24524.9 / 8, "mi300x": 3062.72}  # type: ignore[union-attr]


def test_k80_joins_the_models_table() -> None:
    k80 = load_tables().models["k80"]
    assert k80 == {"accelerator": "nvidia", "memory_gb": 12, "capabilities": [], "power_w": 150}


def test_a_grant_s_rate_is_the_row_times_its_devices_and_none_without_a_row() -> None:
    t = load_tables()
    row = t.throughput["classes"]["LM"]["models"]["v100"]["per_second"]  # type: ignore[index]
    assert t.work_rate("LM", "v100", whole()) == row
    assert t.work_rate("LM", "V100", whole(4)) == 4 * row  # type: ignore[operator]
    assert t.work_rate("LM", "h100", whole()) is None  # no row: never guessed
    assert t.work_rate("LM", None, whole()) is None
    assert t.work_rate(None, "v100", whole()) is None
    assert t.work_rate("no-such-class", "v100", whole()) is None
    slice_ = Grant(requested=0.25, honored=True, share=2 / 7, units=1, devices=2 / 7, profile="2g.20gb")
    shared = Grant(requested=0.25, honored=True, share=0.25, units=1, devices=0.25, shares=250, scheme="time-slice")
    assert t.work_rate("LM", "v100", slice_) is None and t.work_rate("LM", "v100", shared) is None
    assert t.run_s("LM", 1000.0, "v100", whole()) == pytest.approx(1000 / row)


# -- the workload says its work --------------------------------------------------------------------


def test_the_work_objectives_are_objectives() -> None:
    assert set(WORK_OBJECTIVES) <= set(OBJECTIVES)
    w = Workload("w", "nvidia", optimize="work-cost", work_class="ResNet-50", work=20000)
    assert (w.work_class, w.work) == ("ResNet-50", 20000.0)


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        ({"work": 10}, "work_class", "is needed with work"),
        ({"work_class": "LM"}, "work", "is needed with work_class"),
        ({"work_class": "LM", "work": 0}, "work", "must be greater than 0"),
        ({"work_class": "LM", "work": "lots"}, "work", "must be a number"),
        ({"work_class": "bad class", "work": 5}, "work_class", "may hold only letters"),
    ],
)
def test_bad_work_names_the_field(values: dict[str, object], field: str, expected: str) -> None:
    with pytest.raises(SpecError, match=expected) as caught:
        Workload("w", "nvidia", **values)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_a_yaml_file_and_a_mapping_say_it(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  name: w\n  accelerator: nvidia\n  optimize: work-time\n  work_class: LM\n  work: 500000\n")
    w = workload_from_file(path)
    assert (w.optimize, w.work_class, w.work) == ("work-time", "LM", 500000.0)
    assert workload_from_mapping({"name": "w", "accelerator": "nvidia", "work_class": "A3C", "work": 3}).work == 3.0
    path.write_text("workload:\n  name: w\n  accelerator: nvidia\n  work: 5\n")
    with pytest.raises(SpecError, match="work_class"):
        workload_from_file(path)


def test_slurm_s_time_limit_is_the_walltime_else_the_expected_run_time() -> None:
    v100 = Pool("v", "hpc", "nvidia", 4, "de-juelich", model="v100", partition="gpu")
    rate = load_tables().work_rate("LM", "v100", whole())
    assert rate is not None
    w = Workload("w", "nvidia", work_class="LM", work=100000)
    assert time_limit_s(w, whole(), v100) == math.ceil(100000 / rate)
    assert time_limit_s(Workload("w", "nvidia", work_class="LM", work=100000, walltime="2h"), whole(), v100) == 7200
    # No throughput known for the pool's model: no time limit is made up.
    assert time_limit_s(w, whole(), Pool("h", "hpc", "nvidia", 4, "de-juelich", model="h100", partition="gpu")) is None
    assert time_limit_s(Workload("w", "nvidia"), whole(), v100) is None


# -- the command line: cost and work-cost choose differently -----------------------------------------


def _two_pools(home: Path) -> None:
    for name, model, price in (("k80s", "k80", "0.45"), ("v100s", "v100", "2.48")):
        run_exa(home, "hardware", "add-pool", name, "--target", "hpc", "--accelerator", "nvidia", "--model", model,
                "--count", "36", "--region", "eu", "--cost-per-hour", price, check=True)  # fmt: skip


def test_cost_and_work_cost_choose_differently_and_the_json_says_the_job_figures(exa_home: Path) -> None:
    _two_pools(exa_home)
    common = ("hardware", "place", "lm", "--accelerator", "nvidia", "--work-class", "LM", "--work", "200000", "--dry-run", "--json")
    by_hour = json.loads(run_exa(exa_home, *common, check=True).stdout)
    by_work = json.loads(run_exa(exa_home, *common, "--optimize", "work-cost", check=True).stdout)
    assert (by_hour["pool"], by_work["pool"]) == ("k80s", "v100s")
    assert (by_work["workload"]["work_class"], by_work["workload"]["work"]) == ("LM", 200000.0)
    rows = {v["pool"]: v for v in by_work["verdicts"]}
    rate = load_tables().work_rate("LM", "v100", whole())
    assert rate is not None
    assert rows["v100s"]["work_rate"] == pytest.approx(rate)
    assert rows["v100s"]["run_s"] == pytest.approx(200000 / rate, abs=1e-3)
    assert rows["v100s"]["cost_per_job"] == pytest.approx(2.48 * 200000 / rate / 3600, abs=1e-6)
    assert rows["v100s"]["cost_per_job"] < rows["k80s"]["cost_per_job"]
    assert rows["v100s"]["carbon_g_per_job"] > 0


def test_the_explanation_shows_each_pool_s_job_and_why_the_winner_won(exa_home: Path) -> None:
    _two_pools(exa_home)
    run_exa(exa_home, "hardware", "add-pool", "plain", "--target", "hpc", "--accelerator", "nvidia", "--count", "4", "--region", "eu",
            "--cost-per-hour", "3.0", check=True)  # fmt: skip
    out = run_exa(exa_home, "hardware", "place", "lm", "--accelerator", "nvidia", "--work-class", "LM", "--work", "200000",
                  "--optimize", "work-cost", "--dry-run", "--explain", check=True).stdout  # fmt: skip
    assert "LM/s" in out and "run time" in out and "$/job" in out and "gCO2e/job" in out
    assert "Chosen: v100s, cheapest job of 3 eligible" in out
    assert "v100s does 61.0x the work per hour of k80s for 5.5x the price" in out
    plain = next(line for line in out.splitlines() if line.startswith("plain "))
    assert plain.split()[-4:] == ["-", "-", "-", "-"]
    assert "no throughput known for LM" in out


def test_a_work_class_the_table_lacks_is_rejected_by_the_policy(exa_home: Path) -> None:
    _two_pools(exa_home)
    out = run_exa(exa_home, "hardware", "place", "x", "--accelerator", "nvidia", "--work-class", "GPT-9", "--work", "1", "--dry-run", "--json")
    assert out.returncode == exits.REJECTED
    assert json.loads(out.stdout)["code"] == "work_class_unknown"


# -- the replay knows work ---------------------------------------------------------------------------

TRACE = """\
host_cpu: false
pools:
  - {name: k80s, target: hpc, accelerator: nvidia, model: k80, region: eu, cost_per_hour: 0.45, nodes: [{name: k-1, devices: 1}]}
  - {name: v100s, target: hpc, accelerator: nvidia, model: v100, region: eu, cost_per_hour: 2.48, nodes: [{name: v-1, devices: 1}]}
workloads:
  - {arrival: 0, workload: {name: lm-1, accelerator: nvidia, work_class: LM, work: 96246.38978858054}}
  - {arrival: 0, workload: {name: lm-2, accelerator: nvidia, work_class: LM, work: 96246.38978858054}}
  - {arrival: 10, workload: {name: lm-3, accelerator: nvidia, work_class: LM, work: 96246.38978858054}}
  - {arrival: 20, duration: 50, workload: {name: fixed, accelerator: nvidia}}
"""


def test_a_replay_by_work_runs_each_job_for_its_work_over_its_grant_s_throughput(exa_home: Path, tmp_path: Path) -> None:
    """LM on a V100 does 96.25 it/s, on a K80 1.58: 96,246 iterations take 1,000 s on the V100 and
    61,047 s on the K80. Two jobs at 0 take both GPUs; the third waits for the first to end, the
    fixed-duration one after it; cost is price x hours run."""
    (tmp_path / "t.yaml").write_text(TRACE)
    out = run_exa(exa_home, "hardware", "simulate", "--format", "generic", "--pods", str(tmp_path / "t.yaml"),
                  "--optimize", "cost", "work-cost", "work-time", "--json", check=True).stdout  # fmt: skip
    runs = {r["objective"]: r for r in json.loads(out)["runs"]}
    k80 = 96246.38978858054 / 1.5765846019570857
    for objective in ("cost", "work-cost", "work-time"):
        assert runs[objective]["finished"] == 4 and runs[objective]["unfinished"] == 0
        assert runs[objective]["work"] == pytest.approx(3 * 96246.38978858054, abs=1e-3)
        assert runs[objective]["v100_hours_of_work"] == pytest.approx(3 * 1000 / 3600, abs=1e-4)
    # cost: lm-1 on the K80 (cheapest per hour), lm-2 on the V100; lm-3 waits for the V100 (free
    # at 1,000 s), the fixed job for the next GPU after that (the V100 again, at 2,000 s).
    assert runs["cost"]["mean_completion_s"] * 4 == pytest.approx(k80 + 1000 + (2000 - 10) + (2050 - 20), abs=1e-2)
    assert runs["cost"]["p95_completion_s"] == pytest.approx(k80, abs=1e-2)
    assert runs["cost"]["total_cost"] == pytest.approx(0.45 * k80 / 3600 + 2.48 * (2000 + 50) / 3600, abs=1e-3)
    # work-cost: the V100 is cheaper per job ($0.69 against $7.63): lm-1 there; lm-2 too would
    # rather wait, but nothing waits for a cheaper pool with room elsewhere: it takes the K80.
    assert runs["work-cost"]["total_cost"] == pytest.approx(runs["cost"]["total_cost"], abs=1e-3)
    # Utilisation: device-seconds held over devices x the span (the K80's one job spans it all).
    assert runs["work-time"]["utilisation"] == {"k80": 1.0, "v100": pytest.approx(2050 / k80, abs=1e-5)}
    text = run_exa(exa_home, "hardware", "simulate", "--format", "generic", "--pods", str(tmp_path / "t.yaml"),
                   "--optimize", "work-cost", check=True).stdout  # fmt: skip
    assert "$/V100-h" in text and "mean done" in text and "util k80" in text


def test_a_replay_by_work_needs_a_generic_trace(exa_home: Path, tmp_path: Path) -> None:
    out = run_exa(exa_home, "hardware", "simulate", "--pods", str(tmp_path / "p.csv"), "--nodes", str(tmp_path / "n.csv"), "--optimize", "cost")
    assert out.returncode == exits.BAD_INPUT and "generic" in out.stderr


# -- fair share weighted by flavour -----------------------------------------------------------------


def _weighed(tables: Any, how: str) -> Any:
    """The tables with fair_share.yaml's usage_weight set to ``how``."""
    return dataclasses.replace(tables, fair_share={**tables.fair_share, "usage_weight": how})


def test_a_project_s_use_is_weighed_by_the_flavour_it_held(tmp_path: Path, opa_home: Path) -> None:
    """Ten hours of a K80 at $0.45 and ten of a V100 at $2.48: by devices 10 and 10; by price 4.5
    and 24.8 (dollars); by throughput 10 x the K80's speed against a V100 (the geometric mean of
    Gavel's seven ratios) and 10."""
    from examlops_policy.app import queue as queueing
    from examlops_policy.hardware import Hardware, ManagedPolicy
    from examlops_policy.store._sql import epoch
    from examlops_policy.store.sqlite import SQLiteStore

    clock = {"now": "2026-11-01T00:00:00.000000Z"}
    hw = Hardware(tmp_path, store=SQLiteStore(tmp_path / "state.db", clock=lambda: clock["now"]), policy=ManagedPolicy(opa_home))
    try:
        hw.apply([
            Pool("k80s", "hpc", "nvidia", 4, "eu", cost_per_hour=0.45, model="k80"),
            Pool("v100s", "hpc", "nvidia", 4, "eu", cost_per_hour=2.48, model="v100"),
        ])  # fmt: skip
        a = hw.place(Workload("a", "nvidia", models=("k80",), project="llm-pretraining"))
        b = hw.place(Workload("b", "nvidia", models=("v100",), project="inference-eu"))
        assert (a.decision.pool, b.decision.pool) == ("k80s", "v100s")  # type: ignore[union-attr]
        clock["now"] = "2026-11-01T10:00:00.000000Z"
        hw.release(a.id)
        hw.release(b.id)
        now = epoch("2026-11-01T12:00:00Z")
        hours = {how: {p: sum(h for _, h in rows) for p, rows in queueing.usage(hw.cycle, _weighed(hw.tables, how), now).items()}
                 for how in ("devices", "price", "throughput")}  # fmt: skip
        assert hours["devices"] == {"inference-eu": pytest.approx(10.0), "llm-pretraining": pytest.approx(10.0)}
        assert hours["price"] == {"inference-eu": pytest.approx(24.8), "llm-pretraining": pytest.approx(4.5)}
        rows = load_tables().throughput["classes"]
        ratios = [c["models"]["k80"]["per_second"] / c["models"]["v100"]["per_second"] for c in rows.values() if "k80" in c["models"]]  # type: ignore[index,union-attr,operator]
        assert len(ratios) == 7
        speed = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        assert hours["throughput"] == {"inference-eu": pytest.approx(10.0), "llm-pretraining": pytest.approx(10 * speed)}
        assert load_tables().throughput_weight("h100", "v100") == 1.0  # no class measures it: one device
        with pytest.raises(Exception, match="usage_weight is devices, price or throughput"):
            queueing.usage(hw.cycle, _weighed(hw.tables, "karma"), now)
    finally:
        hw.close()

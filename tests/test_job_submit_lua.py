"""The job_submit plugin's logic (examlops_policy/hooks/slurm/job_submit.lua), run by a Lua 5.1
interpreter with a stand-in for slurmctld's ``slurm`` table: what it reads of a job, how it finds
the row, what it does with a missing, stale or corrupt table and with a job the table cannot
decide, and that nothing it meets raises out of it. The table is the one ``job_submit.render``
writes (rows made here, no policy asked: the policy's side is tests/test_job_submit_table.py, the
real Slurm's tests/test_job_submit_slurm.py). Skipped when no ``lua5.1`` (or ``lua``) is installed.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from examlops_policy import job_submit
from examlops_policy.job_submit import Row, Table, lua_string

LUA = shutil.which("lua5.1") or shutil.which("lua")
pytestmark = pytest.mark.skipif(LUA is None, reason="no Lua interpreter (apt-get install lua5.1)")

POLICY = "sha256:" + "ab" * 32
PROFILE = "inference-eu/eu-only/eu"
OPEN = "default/open/-"
ROWS = (
    Row(f"{PROFILE}|h100|1|1|generic|", partition="nodes", admits=("gpu", "nodes"), no={"far": "region us is outside the EU [residency]"}),
    Row(f"{PROFILE}|h100|2|1|generic|fp8", partition="gpu", admits=("gpu",)),
    Row(f"{PROFILE}|mi300x|1|1|generic|", refuse="no pool in the EU has mi300x for slurm-job [residency_denied]", code="residency_denied"),
    Row(f"{OPEN}|mi300x|1|1|sglang|", refuse="engine 'sglang' cannot run on amd [backend_unsupported]", code="backend_unsupported"),
    Row(f"{OPEN}|mi300x|1|1|generic|", partition="gpu", admits=("gpu",)),
    Row(f"{OPEN}|h100|1|2|generic|", partition="nodes", admits=("nodes",)),
)


def table(rows: tuple[Row, ...] = ROWS, *, default: str | None = OPEN) -> Table:
    return Table(POLICY, "inputs", {"physics": PROFILE}, default, {"sglang": "sglang"}, rows, "cd" * 32)


class Plugin:
    """The plugin copied into a folder of its own, with its conf and table beside it."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        shutil.copy(job_submit.HOOK, folder / "job_submit.lua")

    def conf(self, **settings: object) -> None:
        text = "".join(f"{k} = {v}\n" for k, v in settings.items())
        (self.dir / job_submit.CONF_NAME).write_text(f"# test settings\n{text}", encoding="utf-8")

    def table(self, t: Table | None = None, *, written_at: float | None = None, text: str | None = None) -> None:
        path = self.dir / job_submit.TABLE_NAME
        path.write_text(text if text is not None else job_submit.render(t or table(), int(time.time() if written_at is None else written_at)), encoding="utf-8")

    def run(self, *jobs: Mapping[str, object], modify: Mapping[str, object] | None = None) -> list[dict[str, object]]:
        """Each job submitted in turn (one slurmctld: the plugin's cache is kept between them);
        with ``modify``, the first job is a pending job's record and ``modify`` the change."""
        calls = []
        for job in jobs:
            if modify is None:
                calls.append(f"report(slurm_job_submit({lua_table(job)}, {{}}, 0))")
            else:
                calls.append(f"report(slurm_job_modify({lua_table(modify)}, {lua_table(job)}, {{}}, 0))")
        driver = DRIVER.replace("CALLS", "\n".join(calls))
        (self.dir / "driver.lua").write_text(driver, encoding="utf-8")
        assert LUA is not None
        done = subprocess.run([LUA, "driver.lua"], cwd=self.dir, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return [parse(block) for block in done.stdout.split("\x1e\n") if block.strip()]


DRIVER = r"""
local out = {}
slurm = {SUCCESS = 0, ERROR = -1}
function slurm.log_user(fmt, ...) out[#out + 1] = "user\t" .. string.format(fmt, ...) end
function slurm.log_info(fmt, ...) out[#out + 1] = "info\t" .. string.format(fmt, ...) end
function slurm.log_error(fmt, ...) out[#out + 1] = "error\t" .. string.format(fmt, ...) end
local plugin_rc = dofile("job_submit.lua")
assert(plugin_rc == slurm.SUCCESS, "the plugin's chunk returns slurm.SUCCESS")
local last
function report(rc)
  out[#out + 1] = "rc\t" .. tostring(rc)
  for _, k in ipairs({"partition", "admin_comment"}) do
    if last[k] ~= nil then out[#out + 1] = k .. "\t" .. tostring(last[k]) end
  end
  io.write(table.concat(out, "\n"), "\n\30\n")
  out = {}
end
local submit, modify = slurm_job_submit, slurm_job_modify
slurm_job_submit = function(job, ...) last = job; return submit(job, ...) end
slurm_job_modify = function(desc, rec, ...) last = desc; return modify(desc, rec, ...) end
CALLS
"""


def lua_table(values: Mapping[str, object]) -> str:
    items = []
    for k, v in values.items():
        items.append(f"{k} = {lua_string(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v}")
    return "{" + ", ".join(items) + "}"


def parse(block: str) -> dict[str, object]:
    found: dict[str, object] = {"user": [], "info": [], "error": []}
    for line in block.splitlines():
        key, _, value = line.partition("\t")
        if key in ("user", "info", "error"):
            found[key].append(value)  # type: ignore[union-attr]
        elif key == "rc":
            found["rc"] = int(value)
        elif key:
            found[key] = value
    return found


@pytest.fixture()
def plugin(tmp_path: Path) -> Plugin:
    p = Plugin(tmp_path)
    p.conf(on_stale="closed", on_unknown="closed", max_age_seconds=300)
    p.table()
    return p


GPU = {"tres_per_node": "gres:gpu:h100:1", "account": "physics", "min_nodes": 4294967294}


def test_a_gpu_job_is_routed_to_the_partition_of_its_row_and_stamped(plugin: Plugin) -> None:
    [done] = plugin.run(GPU)
    assert done["rc"] == 0 and done["partition"] == "nodes"
    assert done["admin_comment"] == f"exa: {PROFILE}|h100|1|1|generic| -> partition nodes (policy {POLICY[:19]}, table {'cd' * 6})"
    assert not done["user"] and not done["error"]


def test_the_row_is_found_by_count_constraint_licence_nodes_and_account(plugin: Plugin) -> None:
    # Features in any order and case, joined by &: the sorted capability set.
    fp8 = plugin.run({**GPU, "tres_per_node": "gres:gpu:h100:2", "features": "FP8"})[0]
    assert (fp8["rc"], fp8["partition"]) == (0, "gpu")
    # --gpus=TYPE:N on one node (tres_per_job) reads as per node.
    per_job = plugin.run({"tres_per_job": "gres:gpu:h100:2", "features": "fp8", "account": "physics", "min_nodes": 1})[0]
    assert per_job["partition"] == "gpu"
    # Another account (or none): the default profile; two nodes: the row for two.
    other = plugin.run({"tres_per_node": "gres:gpu:h100:1", "min_nodes": 2})[0]
    assert (other["rc"], other["partition"]) == (0, "nodes")
    # A licence mapped to an engine picks that engine's row: refused by portability.
    sglang = plugin.run({"tres_per_node": "gres:gpu:mi300x:1", "licenses": "sglang:1,matlab:2"})[0]
    assert sglang["rc"] == -1 and sglang["user"] == [f"exa: refused by the placement policy (policy {POLICY[:19]}, table {'cd' * 6}): engine 'sglang' cannot run on amd [backend_unsupported]"]
    assert "partition" not in sglang


def test_a_row_that_refuses_refuses_the_job_with_the_policys_reason(plugin: Plugin) -> None:
    [done] = plugin.run({**GPU, "tres_per_node": "gres:gpu:mi300x:1"})
    assert done["rc"] == -1
    assert done["user"] == [f"exa: refused by the placement policy (policy {POLICY[:19]}, table {'cd' * 6}): no pool in the EU has mi300x for slurm-job [residency_denied]"]
    assert "partition" not in done and "admin_comment" not in done


def test_a_named_partition_is_kept_when_admitted_and_refused_with_its_reason_when_not(plugin: Plugin) -> None:
    kept = plugin.run({**GPU, "partition": "gpu"})[0]
    assert (kept["rc"], kept["partition"]) == (0, "gpu") and "kept partition gpu" in str(kept["admin_comment"])
    far = plugin.run({**GPU, "partition": "far"})[0]
    assert far["rc"] == -1 and "partition far is not admitted for this job: region us is outside the EU [residency]" in far["user"][0]
    # A list with one partition not admitted is refused; one the table knows nothing of names the admitted ones.
    mixed = plugin.run({**GPU, "partition": "gpu,elsewhere"})[0]
    assert mixed["rc"] == -1 and "partition elsewhere is not admitted for this job: the partitions the policy admits for this job are gpu, nodes" in mixed["user"][0]


def test_a_job_without_gpus_is_left_alone(plugin: Plugin) -> None:
    for job in ({"account": "physics"}, {"tres_per_node": "gres:nic:1", "partition": "debug"}):
        [done] = plugin.run(job)
        assert done["rc"] == 0 and "admin_comment" not in done and not done["info"]
        assert done.get("partition") == job.get("partition")


@pytest.mark.parametrize(
    ("job", "why"),
    [
        ({"tres_per_node": "gres:gpu:2"}, "a GPU without its type (gres:gpu:2)"),
        ({"tres_per_node": "gres:shard:h100:2"}, "a shard of a GPU"),
        ({"tres_per_task": "gres:gpu:1", "tres_per_node": "gres:gpu:h100:1"}, "GPUs asked per task"),
        ({"tres_per_node": "gres:gpu:h100:1", "features": "fp8|hbm3"}, "constraint 'fp8|hbm3' is more than features joined by &"),
        ({"tres_per_node": "gres:gpu:h100:3"}, "no row for default/open/- (project/residency/data region), gpu:h100:3 on 1 node(s)"),
        ({"tres_per_job": "gres:gpu:h100:2", "min_nodes": 2}, "GPUs per job (gres:gpu:h100:2) over 2 nodes"),
        ({"tres_per_node": "gres:gpu:h100:1,gres:gpu:a100:1"}, "more than one GPU request"),
    ],
)
def test_a_gpu_job_the_table_cannot_decide_follows_on_unknown(plugin: Plugin, job: dict[str, object], why: str) -> None:
    [closed] = plugin.run(job)
    assert closed["rc"] == -1 and why in closed["user"][0] and "(on_unknown=closed;" in closed["user"][0]
    plugin.conf(on_stale="closed", on_unknown="open")
    [opened] = plugin.run(job)
    assert opened["rc"] == 0 and not opened["user"]
    assert str(opened["admin_comment"]).startswith("exa: passed unchanged (on_unknown=open;") and why in str(opened["admin_comment"])
    assert opened.get("partition") == job.get("partition")  # unchanged
    assert any(why in line for line in opened["info"])  # logged


def test_an_account_without_a_profile_has_no_row(plugin: Plugin) -> None:
    plugin.table(table(default=None))
    [done] = plugin.run({"tres_per_node": "gres:gpu:h100:1", "account": "stranger"})
    assert done["rc"] == -1 and "account 'stranger' is not mapped to a project" in done["user"][0]


@pytest.mark.parametrize("setting", ["closed", "open"])
def test_a_stale_table_follows_on_stale(plugin: Plugin, setting: str) -> None:
    plugin.conf(on_stale=setting, max_age_seconds=60)
    plugin.table(written_at=time.time() - 3600)
    [done] = plugin.run(GPU)
    assert any("is stale: written 36" in line and "max_age_seconds = 60" in line for line in done["info"])
    if setting == "closed":
        assert done["rc"] == -1 and "partition" not in done
        assert "GPU jobs are refused while the placement policy's decision table cannot be used" in done["user"][0] and "on_stale=closed" in done["user"][0]
    else:
        assert done["rc"] == 0 and "partition" not in done and not done["user"]
        assert str(done["admin_comment"]).startswith("exa: passed unchanged (on_stale=open): the decision table at ")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not lua at all {{{",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn {",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nerror('boom')",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn os.exit(3)",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn io.open('/etc/passwd')",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn {format = 2, rows = {}}",
        "-- exa-job-submit-table format=1 revision=x written_at=1\nreturn 42",
    ],
    ids=["empty", "garbage", "truncated", "raises", "os-exit", "io", "other-format", "not-a-table"],
)
@pytest.mark.parametrize("setting", ["closed", "open"])
def test_a_corrupt_table_never_raises_and_follows_on_stale(plugin: Plugin, text: str, setting: str) -> None:
    plugin.conf(on_stale=setting)
    plugin.table(text=text)
    [done] = plugin.run(GPU)
    assert done["rc"] == (-1 if setting == "closed" else 0)
    assert "partition" not in done
    assert any("decision table at" in line for line in done["info"])


def test_a_missing_table_or_conf_fails_closed(plugin: Plugin) -> None:
    (plugin.dir / job_submit.TABLE_NAME).unlink()
    [missing] = plugin.run(GPU)
    assert missing["rc"] == -1 and "no decision table at" in missing["user"][0]
    (plugin.dir / job_submit.CONF_NAME).unlink()
    plugin.table()
    [no_conf] = plugin.run({"tres_per_node": "gres:gpu:h100:7"})
    assert no_conf["rc"] == -1 and "(on_unknown=closed;" in no_conf["user"][0]  # the default
    assert any("exa_job_submit.conf not found" in line for line in no_conf["error"])


def test_a_bad_conf_line_is_logged_and_the_setting_keeps_its_default(plugin: Plugin) -> None:
    (plugin.dir / job_submit.CONF_NAME).write_text("on_stale = maybe\nmax_age_seconds = -1\nwhat\nflavour = x\non_unknown = open\n", encoding="utf-8")
    plugin.table(written_at=time.time() - 3600)
    [done] = plugin.run(GPU)
    assert done["rc"] == -1  # stale (max age 300 kept) and closed (kept)
    assert len(done["error"]) == 4 and "on_stale must be open or closed (kept closed)" in done["error"][0]


def test_the_table_is_loaded_again_only_when_its_revision_changes(plugin: Plugin) -> None:
    """The service writes the same table again at every step with a new written_at: that costs
    the plugin a line read (the freshness is taken from it), not a reload of the rows."""
    other = table((Row(f"{PROFILE}|h100|1|1|generic|", partition="gpu", admits=("gpu",)),))
    # Same revision, other rows, written now: the rows loaded first are kept, and the time is read.
    (plugin.dir / "swap.lua").write_text(job_submit.render(other, int(time.time())), encoding="utf-8")
    assert [r["partition"] for r in plugin_run_with_swap(plugin, [GPU, GPU])] == ["nodes", "nodes"]
    # Same revision written long ago: stale, though the rows are cached.
    plugin.table()
    (plugin.dir / "swap.lua").write_text(job_submit.render(table(), int(time.time()) - 3600), encoding="utf-8")
    first, second = plugin_run_with_swap(plugin, [GPU, GPU])
    assert first["partition"] == "nodes" and second["rc"] == -1 and "is stale" in second["user"][0]
    # Another revision: loaded again.
    plugin.table()
    renamed = Table(POLICY, "inputs", {"physics": PROFILE}, OPEN, {}, other.rows, "ef" * 32)
    (plugin.dir / "swap.lua").write_text(job_submit.render(renamed, int(time.time())), encoding="utf-8")
    assert [r["partition"] for r in plugin_run_with_swap(plugin, [GPU, GPU])] == ["nodes", "gpu"]


def test_a_table_whose_header_and_body_disagree_is_not_used(plugin: Plugin) -> None:
    text = job_submit.render(table(), int(time.time())).replace('revision = "' + "cd" * 32 + '"', 'revision = "' + "00" * 32 + '"', 1)
    plugin.table(text=text)
    [done] = plugin.run(GPU)
    assert done["rc"] == -1 and "with the revision its header says" in done["user"][0]


def plugin_run_with_swap(plugin: Plugin, jobs: list[dict[str, object]]) -> list[dict[str, object]]:
    """The first job, then swap.lua renamed over the table (as the service replaces it), then the second."""
    calls = [f"report(slurm_job_submit({lua_table(jobs[0])}, {{}}, 0))",
             f"assert(os.rename('swap.lua', '{job_submit.TABLE_NAME}'))",
             f"report(slurm_job_submit({lua_table(jobs[1])}, {{}}, 0))"]  # fmt: skip
    (plugin.dir / "driver.lua").write_text(DRIVER.replace("CALLS", "\n".join(calls)), encoding="utf-8")
    assert LUA is not None
    done = subprocess.run([LUA, "driver.lua"], cwd=plugin.dir, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [parse(block) for block in done.stdout.split("\x1e\n") if block.strip()]


def test_a_modify_is_judged_as_the_job_would_be(plugin: Plugin) -> None:
    pending = {**GPU, "partition": "nodes", "admin_comment": "exa: routed"}
    moved = plugin.run(pending, modify={"partition": "far"})[0]
    assert moved["rc"] == -1 and "partition far is not admitted" in moved["user"][0]
    fine = plugin.run(pending, modify={"partition": "gpu"})[0]
    assert fine["rc"] == 0 and fine["partition"] == "gpu" and str(fine["admin_comment"]).startswith("exa: routed; exa: ")
    regres = plugin.run(pending, modify={"tres_per_node": "gres:gpu:mi300x:1"})[0]
    assert regres["rc"] == -1 and "[residency_denied]" in regres["user"][0]
    # A change the rules do not read (a name, a time limit) is not judged.
    untouched = plugin.run(pending, modify={"name": "renamed"})[0]
    assert untouched["rc"] == 0 and not untouched["user"] and "admin_comment" not in untouched


def test_the_timing_log_gets_one_line_per_decision(plugin: Plugin) -> None:
    plugin.conf(on_stale="closed", on_unknown="closed", timing_log="timing.txt")
    plugin.run(GPU, GPU, {"account": "physics"})
    lines = (plugin.dir / "timing.txt").read_text(encoding="utf-8").split()
    assert len(lines) == 3 and all(float(x) >= 0 for x in lines)


def test_table_strings_survive_any_text(plugin: Plugin) -> None:
    """The renderer's escaping: quotes, backslashes, newlines, control and non-ASCII bytes."""
    odd = 'a "quoted" \\ back\nslash \x00 \x7f héllo ]]'
    plugin.table(table((Row(f"{PROFILE}|h100|1|1|generic|", refuse=odd),)))
    [done] = plugin.run(GPU)
    assert done["rc"] == -1 and odd.split("\n")[0] in str(done["user"][0])


@pytest.mark.parametrize("setting", ["closed", "open"])
def test_an_error_inside_the_decision_is_caught_and_follows_on_stale(plugin: Plugin, setting: str) -> None:
    """A table of the right format whose row lacks a field: the decision raises inside Lua, and
    slurmctld gets a return code, never the error."""
    plugin.conf(on_stale=setting)
    text = job_submit.render(table(), int(time.time())).replace('["admits"] = {["gpu"] = true, ["nodes"] = true}', '["admits"] = false')
    assert '["admits"] = false' in text
    plugin.table(text=text)
    [done] = plugin.run({**GPU, "partition": "gpu"})
    assert done["rc"] == (-1 if setting == "closed" else 0)
    assert any("the decision failed" in line for line in done["error"])
    assert done.get("partition") == "gpu"

"""``exa hardware discover local``: vendor tool outputs and device files -> pools, else a cpu pool.

Tool outputs come from tests/fixtures/local (see its README); device files are made in a temporary
root. Nothing here needs a GPU: the CLI tests run the real command with fake tools first on PATH.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from examlops_policy import specs
from examlops_policy.discovery.local import Host, discover_local, parse_nvidia_smi
from examlops_policy.errors import ExecutorError
from examlops_policy.executors.command import DEFAULT_TIMEOUT_S, CommandResult
from examlops_policy.tables import load_tables
from tests.conftest import run_exa

FIXTURES = Path(__file__).parent / "fixtures" / "local"
TABLES = load_tables()


class Tools:
    """A runner that answers as recorded, per tool; ``None`` means the tool hangs."""

    def __init__(self, answers: Mapping[str, CommandResult | None]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def which(self, tool: str) -> str | None:
        return f"/opt/fake/{tool}" if tool in self.answers else None

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
        assert isinstance(argv, list) and timeout > 0
        self.calls.append(argv)
        tool = Path(argv[0]).name
        answer = self.answers[tool]
        if answer is None:
            raise ExecutorError(f"{argv[0]}: no answer within {timeout:g} s")
        if tool == "nvidia-smi" and answer.returncode == 0 and "compute_cap" in argv[1] and "no-compute-cap" in answer.argv[0]:
            return CommandResult(tuple(argv), 6, "", 'Field "compute_cap" is not a valid field to query.\n')
        return answer


def recorded(fixture: str) -> CommandResult:
    return CommandResult((fixture,), 0, (FIXTURES / fixture).read_text(), "")


def host(tmp_path: Path, answers: Mapping[str, CommandResult | None], *, env: dict[str, str] | None = None, cpus: int = 16) -> Host:
    tools = Tools(answers)
    return Host(runner=tools, which=tools.which, root=tmp_path, env=env or {}, cpu_count=cpus)


def pools(found: object) -> dict[str, tuple[str, str | None, int, tuple[str, ...], bool]]:
    return {d.pool.name: (d.pool.accelerator, d.pool.model, d.pool.count, d.pool.capabilities, d.pool.supports_fractions)
            for d in found.pools}  # type: ignore[attr-defined]  # fmt: skip


# id: (tool answers, expected pools: name -> (accelerator, model, count, capabilities, fractions))
CASES = {
    "nvidia-h100": ({"nvidia-smi": "nvidia-smi-h100x8.csv"}, {"local-h100": ("nvidia", "h100", 8, ("fp8", "mig"), False)}),
    "nvidia-a100-mig-enabled": (
        {"nvidia-smi": "nvidia-smi-a100-40gb-mig.csv"},
        {"local-a100-40gb": ("nvidia", "a100-40gb", 2, ("mig",), True)},
    ),
    "nvidia-mixed": (
        {"nvidia-smi": "nvidia-smi-mixed.csv"},
        {
            "local-b200": ("nvidia", "b200", 1, ("fp4", "fp8", "mig"), False),
            "local-l4": ("nvidia", "l4", 1, ("fp8",), False),  # Ada, compute capability 8.9; no MIG
            "local-t4": ("nvidia", "t4", 1, (), False),
        },
    ),
    "nvidia-old-driver": ({"nvidia-smi": "nvidia-smi-no-compute-cap.csv"}, {"local-v100": ("nvidia", "v100", 2, (), False)}),
    "amd-smi-mi300x": ({"amd-smi": "amd-smi-mi300x.json", "rocm-smi": "rocm-smi-mi250x.json"}, {"local-mi300x": ("amd", "mi300x", 8, ("fp8",), False)}),
    "amd-smi-newer-shape": ({"amd-smi": "amd-smi-gpu-data-mi325x.json"}, {"local-mi325x": ("amd", "mi325x", 4, ("fp8",), False)}),
    "rocm-smi-mi250x": ({"rocm-smi": "rocm-smi-mi250x.json"}, {"local-mi250x": ("amd", "mi250x", 8, (), False)}),
    "gaudi3": ({"hl-smi": "hl-smi-gaudi3.csv"}, {"local-gaudi3": ("intel-gaudi", "gaudi3", 8, ("fp8",), False)}),
    "gaudi2": ({"hl-smi": "hl-smi-gaudi2.csv"}, {"local-gaudi2": ("intel-gaudi", "gaudi2", 8, ("fp8",), False)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_tool_outputs_become_pools(tmp_path: Path, case: str) -> None:
    answers, expected = CASES[case]
    found = discover_local(TABLES, region="eu", host=host(tmp_path, {t: recorded(f) for t, f in answers.items()}))
    assert pools(found) == expected
    for d in found.pools:
        specs.check_pool_facts(d.pool, TABLES)
        assert len(d.details) == d.pool.count  # one line per device, for the record


def test_old_driver_without_compute_cap_is_asked_again_without_it(tmp_path: Path) -> None:
    h = host(tmp_path, {"nvidia-smi": recorded("nvidia-smi-no-compute-cap.csv")})
    found = discover_local(TABLES, host=h)
    calls = h.runner.calls  # type: ignore[attr-defined]
    assert [c[1] for c in calls] == [
        "--query-gpu=index,name,memory.total,compute_cap,mig.mode.current",
        "--query-gpu=index,name,memory.total,mig.mode.current",
    ]
    assert any("not a valid field" in w for w in found.warnings)


def test_tpu_device_files_with_the_accelerator_type(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for i in range(4):
        (tmp_path / "dev" / f"accel{i}").touch()
    found = discover_local(TABLES, region="us-central1", target="cloud", host=host(tmp_path, {}, env={"TPU_ACCELERATOR_TYPE": "v5p-8"}))
    assert pools(found) == {"local-tpu-v5p": ("tpu", "tpu-v5p", 4, (), False)}
    assert found.pools[0].pool.target == "cloud"


def test_tpu_vm_with_vfio_devices(tmp_path: Path) -> None:
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    for name in ("0", "1", "vfio"):
        (tmp_path / "dev" / "vfio" / name).touch()
    found = discover_local(TABLES, host=host(tmp_path, {}, env={"TPU_ACCELERATOR_TYPE": "v6e-8"}))
    assert pools(found) == {"local-tpu-v6e": ("tpu", "tpu-v6e", 2, (), False)}


def test_no_device_means_one_cpu_pool(tmp_path: Path) -> None:
    found = discover_local(TABLES, region="eu", host=host(tmp_path, {}, cpus=12))
    assert pools(found) == {"local-cpu": ("cpu", None, 12, (), False)}
    assert found.warnings == ()


def test_failing_tool_degrades_to_device_files_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / "dev" / name).touch()
    broken = CommandResult(("nvidia-smi",), 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "")
    found = discover_local(TABLES, host=host(tmp_path, {"nvidia-smi": broken}))
    assert pools(found) == {"local-nvidia": ("nvidia", None, 2, (), False)}
    assert any("couldn't communicate with the NVIDIA driver" in w for w in found.warnings)
    assert any("2 NVIDIA device file(s) but no working nvidia-smi" in w for w in found.warnings)


def test_hanging_tool_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    found = discover_local(TABLES, host=host(tmp_path, {"hl-smi": None}, cpus=4))
    assert pools(found) == {"local-cpu": ("cpu", None, 4, (), False)}
    assert any("no answer within" in w for w in found.warnings)


def test_amd_without_tools_counts_kfd_gpus(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").touch()
    for node, gpu_id in (("0", "0"), ("1", "52345"), ("2", "61234")):  # node 0 is the CPU
        (tmp_path / "sys/class/kfd/kfd/topology/nodes" / node).mkdir(parents=True)
        (tmp_path / "sys/class/kfd/kfd/topology/nodes" / node / "gpu_id").write_text(gpu_id + "\n")
    found = discover_local(TABLES, host=host(tmp_path, {}))
    assert pools(found) == {"local-amd": ("amd", None, 2, (), False)}


def test_several_vendors_on_one_host(tmp_path: Path) -> None:
    answers = {"nvidia-smi": recorded("nvidia-smi-h100x8.csv"), "hl-smi": recorded("hl-smi-gaudi3.csv")}
    assert sorted(pools(discover_local(TABLES, host=host(tmp_path, answers)))) == ["local-gaudi3", "local-h100"]


@pytest.mark.parametrize(
    ("line", "model", "capabilities"),
    [
        ("0, NVIDIA A100-SXM4-80GB, 81920, 8.0, Disabled", "a100", ()),
        ("0, NVIDIA A100-PCIE-40GB, 40960, 8.0, Disabled", "a100-40gb", ()),
        ("0, NVIDIA GH200 480GB, 97871, 9.0, Disabled", "gh200", ("fp8",)),
        ("0, NVIDIA H200, 143771, 9.0, Disabled", "h200", ("fp8",)),
        ("0, NVIDIA RTX 6000 Ada Generation, 49140, 8.9, [N/A]", None, ("fp8",)),
    ],
)
def test_nvidia_names_and_facts(line: str, model: str | None, capabilities: tuple[str, ...]) -> None:
    (device,) = parse_nvidia_smi(line + "\n")
    assert (device.model, device.capabilities) == (model, capabilities)


# -- the CLI ----------------------------------------------------------------------------------


def fake_tools(tmp_path: Path, **fixtures: str) -> dict[str, str]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, fixture in fixtures.items():
        script = bin_dir / tool.replace("_", "-")
        script.write_text(f'#!/bin/sh\ncat "{FIXTURES / fixture}"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_cli_on_this_machine_reports_what_it_has(exa_home: Path) -> None:
    """This machine has no accelerator tools: one cpu pool of os.cpu_count() CPUs."""
    result = run_exa(exa_home, "hardware", "discover", "local", "--json", env={"PATH": "/usr/bin:/bin"}, check=True)
    body = json.loads(result.stdout)
    assert body["source"] == "local" and body["applied"] is False
    if not any(Path("/dev").glob("nvidia[0-9]*")) and not Path("/dev/kfd").exists() and not any(Path("/dev").glob("accel*")):
        assert [(p["name"], p["accelerator"], p["count"], p["region"]) for p in body["pools"]] == [("local-cpu", "cpu", os.cpu_count(), None)]


def test_cli_with_a_real_nvidia_smi_on_path_registers_idempotently(tmp_path: Path, exa_home: Path) -> None:
    env = fake_tools(tmp_path, nvidia_smi="nvidia-smi-h100x8.csv")
    shown = run_exa(exa_home, "hardware", "discover", "local", "--json", env=env, check=True)
    (pool,) = json.loads(shown.stdout)["pools"]
    assert (pool["name"], pool["accelerator"], pool["model"], pool["count"], pool["capabilities"], pool["action"]) == (
        "local-h100", "nvidia", "h100", 8, ["fp8", "mig"], "add")  # fmt: skip
    assert pool["details"][0] == "GPU 0: NVIDIA H100 80GB HBM3, 81559 MiB, compute capability 9.0, MIG Disabled"

    refused = run_exa(exa_home, "hardware", "discover", "local", "--apply", env=env)
    assert refused.returncode == 2 and "give --region" in refused.stderr

    applied = run_exa(exa_home, "hardware", "discover", "local", "--region", "eu", "--apply", env=env, check=True)
    assert "✓ applied: 1 added, 0 updated, 0 unchanged" in applied.stdout
    again = run_exa(exa_home, "hardware", "discover", "local", "--apply", env=env, check=True)
    assert "✓ applied: 0 added, 0 updated, 1 unchanged" in again.stdout
    placed = run_exa(exa_home, "hardware", "place", "t", "--accelerator", "nvidia", "--capabilities", "fp8", "--target", "hpc", check=True)
    assert placed.stdout.startswith("✓ t → pool local-h100 · nvidia on hpc")

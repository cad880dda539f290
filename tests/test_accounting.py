"""Carbon per device-hour: one source (``accounting.carbon_basis``), a sourced figure for every
device family, and the method each figure used, shown where the figure is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examlops_policy import Hardware, Placement, Pool, Workload
from examlops_policy.accounting import CARBON_METHODS, carbon_basis
from examlops_policy.tables import load_tables
from reliability.backends import Backend, backend  # noqa: F401  (backend: the fixture)
from reliability.harness import open_hardware
from tests.conftest import run_exa

TABLES = load_tables()
KAJAANI = TABLES.grid_intensity("fi-kajaani")


def test_a_cpu_socket_is_not_priced_in_carbon_as_a_750_w_accelerator() -> None:
    """LUMI-C (a CPU pool, no model) against LUMI-G (MI250X GCDs, 280 W each) in Kajaani: a CPU
    socket's reference power is the reviewed 280 W (AMD EPYC 7763 TDP), not the 750 W reference
    accelerator, so the CPU emits what a 280 W device does there (it was 84.5 g/h)."""
    cpu = carbon_basis(Pool("lumi-c", "hpc", "cpu", 1024, "fi-kajaani"), TABLES)
    gcd = carbon_basis(Pool("lumi-g", "hpc", "amd", 512, "fi-kajaani", model="mi250x"), TABLES)
    assert TABLES.reference_power("cpu") == 280.0 and TABLES.reference_power("amd") == 750.0
    assert (cpu.per_hour, cpu.method, cpu.grounded) == (round(0.28 * 1.56 * KAJAANI, 1), "reference", None) == (31.6, "reference", None)
    assert (gcd.per_hour, gcd.method) == (31.559, "power")
    # An accelerator without power still uses the reviewed reference accelerator (the EU-27 default).
    assert carbon_basis(Pool("mi", "hpc", "amd", 4, "eu"), TABLES).per_hour == 250.0
    assert carbon_basis(Pool("cpu-eu", "hpc", "cpu", 4, "eu"), TABLES).per_hour == round(0.28 * 1.56 * TABLES.grid_intensity("eu"), 1)


@pytest.mark.parametrize(
    ("pool", "method"),
    [
        (Pool("a", "hpc", "amd", 1, "eu", carbon_factor=100), "pool"),
        (Pool("b", "hpc", "nvidia", 1, "eu", power_w=700), "power"),
        (Pool("c", "hpc", "nvidia", 1, "eu", model="h100"), "power"),
        (Pool("d", "hpc", "cpu", 1, "eu"), "reference"),
        (Pool("e", "hpc", "tpu", 1, "nowhere-known"), "fallback"),
    ],
    ids=["own-factor", "own-power", "model-power", "cpu-reference", "no-grid-intensity"],
)
def test_every_figure_says_which_method_gave_it(pool: Pool, method: str) -> None:
    assert carbon_basis(pool, TABLES).method == method and method in CARBON_METHODS


def test_the_pools_list_shows_each_figures_method_and_a_legend(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "lumi-c", "--target", "hpc", "--accelerator", "cpu", "--count", "8", "--region", "fi-kajaani", check=True)
    run_exa(exa_home, "hardware", "add-pool", "lumi-g", "--target", "hpc", "--accelerator", "amd", "--model", "mi250x", "--count", "8",
            "--region", "fi-kajaani", check=True)  # fmt: skip
    out = run_exa(exa_home, "hardware", "pools", check=True).stdout.splitlines()
    assert out[1].split()[-4:] == ["gCO2e/h", "carbon", "from", "capabilities"]
    rows = {line.split()[0]: line.split() for line in out[2:4]}
    assert rows["lumi-c"][-3:] == ["31.6", "reference", "-"] and rows["lumi-g"][-3:] == ["31.559", "power", "-"]
    assert "carbon from power: board power x PUE x grid intensity" in out
    assert "carbon from reference: a reference device's power (no power known: 750 W accelerator, 280 W CPU socket) x PUE x grid intensity" in out
    views = json.loads(run_exa(exa_home, "hardware", "pools", "--json", check=True).stdout)
    assert {v["name"]: v["carbon_method"] for v in views} == {"lumi-c": "reference", "lumi-g": "power"}


def test_the_reports_carbon_says_the_methods_of_the_placements_it_sums(backend: Backend, opa_home: Path) -> None:
    """On SQLite and PostgreSQL: each placement's method from the fleet it was decided on."""
    hardware = open_hardware(backend, opa_home)
    try:
        _report_methods(hardware)
    finally:
        hardware.close()


def _report_methods(hardware: Hardware) -> None:
    hardware.add_pool(Pool("lumi-c", "hpc", "cpu", 8, "fi-kajaani"))
    hardware.add_pool(Pool("lumi-g", "hpc", "amd", 8, "fi-kajaani", model="mi250x"))
    for accelerator in ("cpu", "amd", "amd"):
        assert isinstance(hardware.place(Workload(f"w-{accelerator}", accelerator)).decision, Placement)
    data = hardware.finops_report()
    assert [m for m, _ in data.carbon_methods] and {m for m, _ in data.carbon_methods} == {"reference", "power"}
    assert sum(g for _, g in data.carbon_methods) == pytest.approx(data.totals.carbon_g, abs=1e-5)

"""The regions table: every region has a grid intensity with its year and source, and the
jurisdiction facts residency depends on are what they were.

Figures are checked against the sources named in the table's header (Google's per-region 2024
figures for GCP regions, Ember's 2024 country averages via co2.js for the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from examlops_policy.tables import load_tables

TABLE = Path(__file__).resolve().parents[1] / "policies" / "examlops" / "tables" / "regions.yaml"
DOC: dict[str, Any] = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
REGIONS: dict[str, dict[str, Any]] = DOC["regions"]

EU_27 = ["AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE"]
GOOGLE, EMBER = "Google region-carbon-info 2024", "Ember via co2.js, "

# Where each region is (country, or area for the coarse ones) and who runs it: the facts data
# residency reads. The grid figures may be updated; these must not move with them.
JURISDICTION = {
    "eu": ("area", "EU", None), "us": ("area", "US", None), "ch": ("country", "CH", None), "uk": ("country", "GB", None),
    "fi-kajaani": ("country", "FI", None), "it-bologna": ("country", "IT", None), "es-barcelona": ("country", "ES", None),
    "de-juelich": ("country", "DE", None), "ch-lugano": ("country", "CH", None), "uk-bristol": ("country", "GB", None),
    "us-east-1": ("country", "US", "aws"), "us-west-2": ("country", "US", "aws"), "eu-central-1": ("country", "DE", "aws"),
    "eu-central-2": ("country", "CH", "aws"), "eu-west-1": ("country", "IE", "aws"), "eu-west-2": ("country", "GB", "aws"),
    "eu-west-3": ("country", "FR", "aws"), "eu-south-1": ("country", "IT", "aws"), "eu-south-2": ("country", "ES", "aws"),
    "eu-north-1": ("country", "SE", "aws"),
    "us-central1": ("country", "US", "gcp"), "europe-west1": ("country", "BE", "gcp"), "europe-west2": ("country", "GB", "gcp"),
    "europe-west3": ("country", "DE", "gcp"), "europe-west4": ("country", "NL", "gcp"), "europe-west6": ("country", "CH", "gcp"),
    "europe-west8": ("country", "IT", "gcp"), "europe-west9": ("country", "FR", "gcp"), "europe-west10": ("country", "DE", "gcp"),
    "europe-west12": ("country", "IT", "gcp"), "europe-southwest1": ("country", "ES", "gcp"), "europe-central2": ("country", "PL", "gcp"),
    "europe-north1": ("country", "FI", "gcp"), "europe-north2": ("country", "SE", "gcp"),
    "northeurope": ("country", "IE", "azure"), "westeurope": ("country", "NL", "azure"), "francecentral": ("country", "FR", "azure"),
    "francesouth": ("country", "FR", "azure"), "germanywestcentral": ("country", "DE", "azure"), "germanynorth": ("country", "DE", "azure"),
    "swedencentral": ("country", "SE", "azure"), "italynorth": ("country", "IT", "azure"), "polandcentral": ("country", "PL", "azure"),
    "spaincentral": ("country", "ES", "azure"), "austriaeast": ("country", "AT", "azure"), "belgiumcentral": ("country", "BE", "azure"),
    "norwayeast": ("country", "NO", "azure"), "uksouth": ("country", "GB", "azure"), "switzerlandnorth": ("country", "CH", "azure"),
    "eu-north1": ("country", "FI", "nebius"), "eu-west1": ("country", "FR", "nebius"),
    "it-fr2": ("country", "IT", "seeweb"), "it-mi2": ("country", "IT", "seeweb"), "bg-sof1": ("country", "BG", "seeweb"),
    "ch-lug1": ("country", "CH", "seeweb"),
}  # fmt: skip


@pytest.mark.parametrize("region", sorted(REGIONS))
def test_every_region_has_a_plausible_grid_figure_with_year_and_source(region: str) -> None:
    entry = REGIONS[region]
    value, year, source = entry["grid_gco2_per_kwh"], entry["grid_year"], entry["grid_source"]
    assert isinstance(value, (int, float)) and not isinstance(value, bool)
    # The cleanest grids (hydro, nuclear) are a few g/kWh; the dirtiest national averages ~1,300.
    assert 1 <= value <= 1300
    assert isinstance(year, int) and 2019 <= year <= 2025
    # One source per region: Google's own figure for its regions, Ember's country average elsewhere.
    assert source == GOOGLE if entry.get("provider") == "gcp" else source.startswith(EMBER)
    assert 1 <= entry["pue"] <= 3


def test_the_sources_are_named_with_commits_and_licences_in_the_header() -> None:
    header = TABLE.read_text(encoding="utf-8").split("eu_member_states:")[0]
    for needle in (
        "GoogleCloudPlatform/region-carbon-info data/yearly/2024.csv",
        "df9271436a28ea128a34e111f58de5b03e4dc757",
        "thegreenwebfoundation/co2.js data/output/average-intensities.json",
        "6628f83f24c2d836fb7ac0dd80eaf5012b27bae4",
        "CC BY-SA",
    ):
        assert needle in header


@pytest.mark.parametrize(
    ("region", "value"),
    [
        # Spot checks against the sources (GCP 2024 csv; Ember 2024 in co2.js).
        ("europe-west4", 208.81), ("europe-north2", 2.73), ("us-central1", 412.72),
        ("eu", 213.31), ("us", 383.55), ("eu-north-1", 35.82), ("de-juelich", 344.14), ("polandcentral", 614.98),
    ],
)  # fmt: skip
def test_figures_match_their_sources(region: str, value: float) -> None:
    assert REGIONS[region]["grid_gco2_per_kwh"] == value


def test_jurisdiction_facts_are_untouched() -> None:
    assert DOC["eu_member_states"] == EU_27
    assert set(REGIONS) == set(JURISDICTION)
    for region, (key, where, provider) in JURISDICTION.items():
        entry = REGIONS[region]
        assert entry[key] == where, region
        assert entry.get("provider") == provider, region
        assert set(entry) <= {"area", "country", "provider", "label", "grid_gco2_per_kwh", "grid_year", "grid_source", "pue"}


def test_the_specification_figures_do_not_move() -> None:
    """hpc-mi300 (amd, eu, no price, no carbon factor, no model) over 10 hours: cost 18.0, carbon 2500.0."""
    tables = load_tables()
    assert tables.default_cost("amd") * 10 == 18.0
    assert tables.default_carbon_factor("eu") * 10 == tables.default_carbon_factor("eu", "amd") * 10 == 2500.0


def test_a_region_without_its_own_default_derives_one_from_its_grid() -> None:
    # accounting.yaml: reference 750 W x PUE 1.56 x grid intensity, for regions other than eu/us.
    assert load_tables().default_carbon_factor("eu-north-1") == round(0.75 * 1.56 * 35.82, 1)

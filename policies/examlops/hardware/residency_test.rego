package examlops.hardware.residency_test

import data.examlops.hardware.residency

pool(target, region) := {"name": sprintf("%s-%s", [target, region]), "target": target, "region": region}

eu_regions := ["eu", "eu-central-1", "europe-west4", "fi-kajaani", "westeurope"]

# Named like the EU, but outside it: London, Zurich, Zurich, Oslo (EEA), the US.
non_eu_regions := ["eu-west-2", "eu-central-2", "europe-west6", "norwayeast", "us", "uk", "ch-lugano"]

known_regions := array.concat(eu_regions, non_eu_regions)

targets := ["hpc", "cloud"]

test_open_allows_any_known_region_on_any_target if {
	every region in known_regions {
		every target in targets {
			residency.check(pool(target, region), "open") == null
		}
	}
}

test_eu_only_allows_eu_regions_on_any_target if {
	every region in eu_regions {
		every target in targets {
			residency.check(pool(target, region), "eu-only") == null
		}
	}
}

test_eu_only_forbids_non_eu_regions_on_any_target if {
	every region in non_eu_regions {
		every target in targets {
			residency.check(pool(target, region), "eu-only").code == "residency_forbids"
		}
	}
}

test_no_egress_and_restricted_allow_hpc_only if {
	every residency_class in ["no-egress", "restricted"] {
		every region in known_regions {
			residency.check(pool("hpc", region), residency_class) == null
			residency.check(pool("cloud", region), residency_class).code == "residency_forbids"
		}
	}
}

test_eu_only_to_us_is_the_spec_message if {
	r := residency.check(pool("cloud", "us"), "eu-only")
	r.message == "data-residency eu-only forbids egress to region 'us'"
	r.kind == "never"
	r.details == {"residency": "eu-only", "region": "us", "jurisdiction": "US", "eu": false}
}

test_london_named_eu_is_not_eu if {
	r := residency.check(pool("cloud", "eu-west-2"), "eu-only")
	r.message == "data-residency eu-only forbids egress to region 'eu-west-2'"
	r.details.jurisdiction == "GB"
	r.details.eu == false
}

test_zurich_regions_are_not_eu if {
	residency.check(pool("cloud", "eu-central-2"), "eu-only").details.jurisdiction == "CH"
	residency.check(pool("cloud", "europe-west6"), "eu-only").details.jurisdiction == "CH"
	not residency.in_eu("eu-central-2")
	not residency.in_eu("europe-west6")
}

test_norway_is_eea_not_eu if {
	not residency.in_eu("norwayeast")
	residency.check(pool("cloud", "norwayeast"), "eu-only").details.jurisdiction == "NO"
}

test_eu_by_area_and_by_member_state if {
	residency.in_eu("eu")
	residency.in_eu("eu-central-1")
	residency.in_eu("europe-west4")
	residency.is_eu("eu") == true
	residency.is_eu("us") == false
}

test_no_egress_to_eu_cloud_is_still_forbidden if {
	r := residency.check(pool("cloud", "eu-central-1"), "no-egress")
	r.message == "data-residency no-egress forbids egress to region 'eu-central-1'"
	r.details == {"residency": "no-egress", "region": "eu-central-1", "jurisdiction": "DE", "eu": true}
}

test_restricted_to_coarse_eu_cloud_names_area if {
	residency.check(pool("cloud", "eu"), "restricted").details.jurisdiction == "EU"
}

test_unknown_region_denied_for_every_residency_class if {
	every residency_class in ["open", "eu-only", "no-egress", "restricted"] {
		every target in targets {
			residency.check(pool(target, "mars-1"), residency_class).code == "region_unknown"
		}
	}
}

test_unknown_region_message if {
	residency.check(pool("hpc", "eu-mars-1"), "open") == {
		"code": "region_unknown",
		"kind": "never",
		"message": "region 'eu-mars-1' has no known jurisdiction (not in the regions table)",
		"details": {"region": "eu-mars-1", "residency": "open"},
	}
}

# EU membership comes from the tables only.
test_member_state_table_decides_eu if {
	residency.check(pool("cloud", "norwayeast"), "eu-only") == null with data.examlops.tables.eu_member_states as ["NO"]
	residency.check(pool("cloud", "eu-central-1"), "eu-only").code == "residency_forbids" with data.examlops.tables.eu_member_states as ["NO"]
}

test_regions_table_decides_known_regions if {
	regions := {"eu-new-1": {"country": "DE"}}
	residency.check(pool("cloud", "eu-new-1"), "eu-only") == null with data.examlops.tables.regions as regions
	residency.check(pool("cloud", "us"), "open").code == "region_unknown" with data.examlops.tables.regions as regions
}

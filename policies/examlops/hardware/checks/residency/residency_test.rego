package examlops.hardware.checks.residency_test

import data.examlops.hardware.checks.residency
import data.examlops.tables.eu_member_states
import data.examlops.tables.regions

# The check sees only the fields it declares: the shape's region and target, the workload's
# residency and data_region.
deny(region, target, res, data_region) := d if {
	d := residency.deny with input as {
		"shape": {"region": region, "target": target},
		"workload": {"residency": res, "data_region": data_region},
	}
}

# true or false (never undefined), so that tests can compare it.
admits(region, target, res, data_region) if {
	count(deny(region, target, res, data_region)) == 0
} else := false

codes(region, target, res, data_region) := [r.code | some r in deny(region, target, res, data_region)]

rules(region, target, res, data_region) := [r.details.rule | some r in deny(region, target, res, data_region)]

# --- the E8 specification's words -----------------------------------------------------------------

test_e8_eu_only_to_us_message_exactly if {
	deny("us", "cloud", "eu-only", null) == {{
		"code": "residency_forbids",
		"kind": "never",
		"message": "data-residency eu-only forbids egress to region 'us'",
		"details": {
			"residency": "eu-only",
			"rule": "eu",
			"region": "us",
			"jurisdiction": "US",
			"eu": false,
			"data_region": null,
			"data_jurisdiction": null,
		},
	}}
}

# --- one case per situation: [region, target, residency, data_region] -> the rule that denies ------
# rule null: admitted.

cases := {
	# open: any region the table knows, HPC or cloud.
	"open, us cloud": {"region": "us", "target": "cloud", "res": "open", "data": null, "rule": null},
	"open, london cloud": {"region": "eu-west-2", "target": "cloud", "res": "open", "data": null, "rule": null},
	"open, lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "open", "data": null, "rule": null},
	"open, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "open", "data": null, "rule": null},
	"open ignores data_region": {"region": "us-east-1", "target": "cloud", "res": "open", "data": "de-juelich", "rule": null},
	# eu-only: the EU-27 table decides, never the name.
	"eu-only, us cloud": {"region": "us", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, us-east-1 cloud": {"region": "us-east-1", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, eu-west-2 is London": {"region": "eu-west-2", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, eu-central-2 is Zurich": {"region": "eu-central-2", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, europe-west2 is London": {"region": "europe-west2", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, europe-west6 is Zurich": {"region": "europe-west6", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, norwayeast is EEA not EU": {"region": "norwayeast", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, uksouth": {"region": "uksouth", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, switzerlandnorth": {"region": "switzerlandnorth", "target": "cloud", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, uk hpc": {"region": "uk", "target": "hpc", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, uk-bristol hpc": {"region": "uk-bristol", "target": "hpc", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, ch hpc": {"region": "ch", "target": "hpc", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, ch-lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "eu-only", "data": null, "rule": "eu"},
	"eu-only, coarse eu hpc": {"region": "eu", "target": "hpc", "res": "eu-only", "data": null, "rule": null},
	"eu-only, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "eu-only", "data": null, "rule": null},
	"eu-only, kajaani hpc": {"region": "fi-kajaani", "target": "hpc", "res": "eu-only", "data": null, "rule": null},
	"eu-only, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "eu-only", "data": null, "rule": null},
	"eu-only, europe-west4 cloud": {"region": "europe-west4", "target": "cloud", "res": "eu-only", "data": null, "rule": null},
	"eu-only, swedencentral cloud": {"region": "swedencentral", "target": "cloud", "res": "eu-only", "data": null, "rule": null},
	"eu-only ignores data_region": {"region": "it-bologna", "target": "hpc", "res": "eu-only", "data": "de-juelich", "rule": null},
	# no-egress without data_region: EU HPC pools only.
	"no-egress, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "no-egress", "data": null, "rule": null},
	"no-egress, coarse eu hpc": {"region": "eu", "target": "hpc", "res": "no-egress", "data": null, "rule": null},
	"no-egress, bologna hpc": {"region": "it-bologna", "target": "hpc", "res": "no-egress", "data": null, "rule": null},
	"no-egress, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "no-egress", "data": null, "rule": "hpc"},
	"no-egress, coarse eu cloud": {"region": "eu", "target": "cloud", "res": "no-egress", "data": null, "rule": "hpc"},
	"no-egress, us cloud": {"region": "us", "target": "cloud", "res": "no-egress", "data": null, "rule": "eu"},
	"no-egress, lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "no-egress", "data": null, "rule": "eu"},
	"no-egress, bristol hpc": {"region": "uk-bristol", "target": "hpc", "res": "no-egress", "data": null, "rule": "eu"},
	"no-egress, eu-west-2 hpc": {"region": "eu-west-2", "target": "hpc", "res": "no-egress", "data": null, "rule": "eu"},
	# no-egress with data_region: only HPC pools in the data's jurisdiction (country).
	"no-egress, data juelich, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "no-egress", "data": "de-juelich", "rule": null},
	"no-egress, data frankfurt, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "no-egress", "data": "eu-central-1", "rule": null},
	"no-egress, data frankfurt, germanynorth hpc": {"region": "germanynorth", "target": "hpc", "res": "no-egress", "data": "eu-central-1", "rule": null},
	"no-egress, data juelich, bologna hpc": {"region": "it-bologna", "target": "hpc", "res": "no-egress", "data": "de-juelich", "rule": "jurisdiction"},
	"no-egress, data juelich, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "no-egress", "data": "de-juelich", "rule": "hpc"},
	"no-egress, data frankfurt, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "no-egress", "data": "eu-central-1", "rule": "hpc"},
	"no-egress, data juelich, lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "no-egress", "data": "de-juelich", "rule": "eu"},
	# The coarse region eu has the area EU as its jurisdiction, which matches only itself.
	"no-egress, data juelich, coarse eu hpc": {"region": "eu", "target": "hpc", "res": "no-egress", "data": "de-juelich", "rule": "jurisdiction"},
	"no-egress, data coarse eu, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "no-egress", "data": "eu", "rule": "jurisdiction"},
	"no-egress, data coarse eu, coarse eu hpc": {"region": "eu", "target": "hpc", "res": "no-egress", "data": "eu", "rule": null},
	# Data outside the EU: no-egress applies eu-only's rule too, so nothing admits it.
	"no-egress, data lugano, lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "no-egress", "data": "ch-lugano", "rule": "eu"},
	"no-egress, data london, bristol hpc": {"region": "uk-bristol", "target": "hpc", "res": "no-egress", "data": "eu-west-2", "rule": "eu"},
	# restricted without data_region: EU HPC pools only.
	"restricted, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "restricted", "data": null, "rule": null},
	"restricted, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "restricted", "data": null, "rule": "hpc"},
	"restricted, lugano hpc": {"region": "ch-lugano", "target": "hpc", "res": "restricted", "data": null, "rule": "eu"},
	"restricted, us cloud": {"region": "us", "target": "cloud", "res": "restricted", "data": null, "rule": "eu"},
	# restricted with data_region: only the data's own region, HPC.
	"restricted, data juelich, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "restricted", "data": "de-juelich", "rule": null},
	"restricted, data frankfurt, juelich hpc": {"region": "de-juelich", "target": "hpc", "res": "restricted", "data": "eu-central-1", "rule": "region"},
	"restricted, data juelich, germanynorth hpc": {"region": "germanynorth", "target": "hpc", "res": "restricted", "data": "de-juelich", "rule": "region"},
	"restricted, data juelich, bologna hpc": {"region": "it-bologna", "target": "hpc", "res": "restricted", "data": "de-juelich", "rule": "jurisdiction"},
	"restricted, data frankfurt, frankfurt cloud": {"region": "eu-central-1", "target": "cloud", "res": "restricted", "data": "eu-central-1", "rule": "hpc"},
	"restricted, data coarse eu, coarse eu hpc": {"region": "eu", "target": "hpc", "res": "restricted", "data": "eu", "rule": null},
}

# The rules a case expects to deny it: none, or one.
expected_rules(tc) := [] if tc.rule == null

else := [tc.rule]

test_residency[name] if {
	some name, tc in cases
	d := deny(tc.region, tc.target, tc.res, tc.data)
	[r.details.rule | some r in d] == expected_rules(tc)
	every r in d {
		r.code == "residency_forbids"
		r.kind == "never"
	}
}

# --- messages -------------------------------------------------------------------------------------

message_cases := {
	"eu-only names the region only": {
		"args": ["eu-west-2", "cloud", "eu-only", null],
		"message": "data-residency eu-only forbids egress to region 'eu-west-2'",
	},
	"no-egress to a cloud region outside the EU": {
		"args": ["us", "cloud", "no-egress", null],
		"message": "data-residency no-egress forbids egress to cloud region 'us' (US): outside the EU; no data_region given, so EU HPC pools only",
	},
	"no-egress to an EU cloud region": {
		"args": ["eu-central-1", "cloud", "no-egress", null],
		"message": "data-residency no-egress forbids egress to cloud region 'eu-central-1' (DE): only HPC pools; no data_region given, so EU HPC pools only",
	},
	"no-egress to an HPC site outside the EU": {
		"args": ["ch-lugano", "hpc", "no-egress", "de-juelich"],
		"message": "data-residency no-egress forbids egress to region 'ch-lugano' (CH): outside the EU; data in DE (region de-juelich)",
	},
	"no-egress outside the data's jurisdiction": {
		"args": ["it-bologna", "hpc", "no-egress", "de-juelich"],
		"message": "data-residency no-egress forbids egress to region 'it-bologna' (IT): outside the data's jurisdiction; data in DE (region de-juelich)",
	},
	"restricted outside the data's own region": {
		"args": ["de-juelich", "hpc", "restricted", "eu-central-1"],
		"message": "data-residency restricted forbids egress to region 'de-juelich' (DE): outside the data's own region; data in DE (region eu-central-1)",
	},
	"coarse data region": {
		"args": ["de-juelich", "hpc", "restricted", "eu"],
		"message": "data-residency restricted forbids egress to region 'de-juelich' (DE): outside the data's jurisdiction; data in EU (region eu)",
	},
}

test_message[name] if {
	some name, tc in message_cases
	[region, target, res, data_region] := tc.args
	[r.message | some r in deny(region, target, res, data_region)] == [tc.message]
}

test_details_of_a_jurisdiction_denial if {
	[r.details | some r in deny("it-bologna", "hpc", "no-egress", "de-juelich")] == [{
		"residency": "no-egress",
		"rule": "jurisdiction",
		"region": "it-bologna",
		"jurisdiction": "IT",
		"eu": true,
		"data_region": "de-juelich",
		"data_jurisdiction": "DE",
	}]
}

# --- a region the table does not know: denied with that reason, whatever the class ---------------

unknown_region_cases := {
	"mars-1, open": {"region": "mars-1", "res": "open", "shown": "mars-1"},
	"named like the EU, open": {"region": "eu-west-9", "res": "open", "shown": "eu-west-9"},
	"named like the EU, eu-only": {"region": "europe-west99", "res": "eu-only", "shown": "europe-west99"},
	"upper case, restricted": {"region": "EU", "res": "restricted", "shown": "EU"},
	"no region": {"region": null, "res": "open", "shown": "null"},
}

test_unknown_region[name] if {
	some name, tc in unknown_region_cases
	some target in ["hpc", "cloud"]
	deny(tc.region, target, tc.res, null) == {{
		"code": "region_unknown",
		"kind": "never",
		"message": sprintf("region '%s' has no known jurisdiction (not in the regions table)", [tc.shown]),
		"details": {"region": tc.region, "residency": tc.res},
	}}
}

# --- over the whole regions table -----------------------------------------------------------------
# OPA's test runner traces every evaluation, so these properties call the rule under the deny
# (forbids) directly and keep the number of calls per test rule small; test_deny_agrees_with_forbids
# ties the two together.

# EU membership as the reviewed table says it: the area EU or an EU-27 country.
eu_in_table(region) if {
	regions[region].area == "EU"
} else if {
	regions[region].country in eu_member_states
} else := false

# Whether the class admits a pool in a region of the table.
ok(region, target, res, data_region) if {
	regions[region]
	not residency.forbids({"region": region, "target": target}, {"residency": res, "data_region": data_region})
} else := false

test_deny_agrees_with_forbids[res] if {
	some res in ["eu-only", "restricted"]
	every region, _ in regions {
		every target in ["hpc", "cloud"] {
			admits(region, target, res, "de-juelich") == ok(region, target, res, "de-juelich")
		}
	}
}

test_eu_only_follows_the_eu_27_table[region] if {
	some region, _ in regions
	every target in ["hpc", "cloud"] {
		ok(region, target, "eu-only", null) == eu_in_table(region)
	}
}

# Names that look European but are not in the EU: the table must keep them out.
not_eu := {
	"eu-west-2", "eu-central-2", "europe-west2", "europe-west6", "norwayeast", "uk", "uksouth",
	"ch", "ch-lugano", "uk-bristol", "switzerlandnorth",
}

test_look_alikes_are_not_eu[region] if {
	some region in not_eu
	regions[region]
	admits(region, "hpc", "eu-only", null) == false
	eu_in_table(region) == false
}

# The EU cloud regions of the shared reference, each in the table and in the EU.
eu_cloud := {
	"eu-central-1", "eu-west-1", "eu-west-3", "eu-south-1", "eu-south-2", "eu-north-1",
	"europe-west1", "europe-west3", "europe-west4", "europe-west8", "europe-west9", "europe-west10",
	"europe-west12", "europe-southwest1", "europe-central2", "europe-north1", "europe-north2",
	"northeurope", "westeurope", "francecentral", "francesouth", "germanywestcentral", "germanynorth",
	"swedencentral", "italynorth", "polandcentral", "spaincentral", "austriaeast", "belgiumcentral",
}

test_eu_cloud_regions_are_eu[region] if {
	some region in eu_cloud
	eu_in_table(region) == true
	ok(region, "cloud", "eu-only", null) == true
}

test_every_region_admitted_when_open[region] if {
	some region, _ in regions
	ok(region, "hpc", "open", null) == true
	ok(region, "cloud", "open", null) == true
}

test_strict_classes_never_admit_cloud[name] if {
	some res in ["no-egress", "restricted"]
	some data_region in [null, "de-juelich"]
	name := sprintf("%s, data %v", [res, data_region])
	every region, _ in regions {
		ok(region, "cloud", res, data_region) == false
	}
}

test_without_data_region_strict_classes_admit_eu_hpc_only[res] if {
	some res in ["no-egress", "restricted"]
	every region, _ in regions {
		ok(region, "hpc", res, null) == eu_in_table(region)
	}
}

test_no_egress_admits_the_data_country_only[data_region] if {
	some data_region in ["de-juelich", "europe-west4"]
	every region, r in regions {
		same := object.get(r, "country", null) == regions[data_region].country
		ok(region, "hpc", "no-egress", data_region) == same
	}
}

test_restricted_admits_the_data_region_only[data_region] if {
	some data_region in ["eu-central-1", "eu"]
	every region, _ in regions {
		same := region == data_region
		ok(region, "hpc", "restricted", data_region) == same
	}
}

# Ordering: over every (region, target) pair of the table and a few data regions, each stricter
# class admits a subset of what the laxer one admits. One test rule per data region, so that each
# stays well inside the test runner's time limit.
classes := ["open", "eu-only", "no-egress", "restricted"]

# Per (region, target): the classes that admit it, in order.
admitting(data_region) := {[region, target]: [ok(region, target, res, data_region) | some res in classes] |
	some region, _ in regions
	some target in ["hpc", "cloud"]
}

# The (region, target) pairs a stricter class admits and the laxer one before it does not.
violations(data_region) := {[region, target, classes[i]] |
	some [region, target], admitted in admitting(data_region)
	some i in numbers.range(1, count(classes) - 1)
	admitted[i]
	not admitted[i - 1]
}

# How many (region, target) pairs each class admits.
sizes(data_region) := [n |
	a := admitting(data_region)
	some i in numbers.range(0, count(classes) - 1)
	n := count([1 | some row in a; row[i]])
]

test_order_without_data_region if {
	violations(null) == set()
}

test_order_with_data_in_juelich if {
	violations("de-juelich") == set()
}

# ... and the classes really differ: with data in Frankfurt each admits strictly fewer pairs.
test_order_with_data_in_frankfurt if {
	s := sizes("eu-central-1")
	s[0] > s[1]
	s[1] > s[2]
	s[2] > s[3]
	s[0] == 2 * count(regions)
	s[1] == 2 * count([r | some r, _ in regions; eu_in_table(r)])
	s[3] == 1
	violations("eu-central-1") == set()
}

test_order_with_data_in_coarse_eu if {
	violations("eu") == set()
}

test_order_with_data_outside_the_eu if {
	violations("ch-lugano") == set()
	sizes("ch-lugano")[2] == 0
}

test_class_levels_follow_the_workload_order if {
	[l | some c in data.examlops.hardware.workload.residencies; l := residency.level[c]] == [0, 1, 2, 3]
	residency.level == {"open": 0, "eu-only": 1, "no-egress": 2, "restricted": 3}
}

# --- helpers --------------------------------------------------------------------------------------

test_jurisdiction if {
	residency.jurisdiction("de-juelich") == "DE"
	residency.jurisdiction("eu") == "EU"
	residency.jurisdiction("us") == "US"
	residency.jurisdiction("eu-central-2") == "CH"
}

test_is_eu if {
	residency.is_eu("eu") == true
	residency.is_eu("eu-west-1") == true
	residency.is_eu("eu-west-2") == false
	residency.is_eu("mars-1") == false
}

test_member_state_override if {
	admits("norwayeast", "cloud", "eu-only", null) == true with eu_member_states as ["NO"]
	admits("de-juelich", "hpc", "eu-only", null) == false with eu_member_states as ["NO"]
}

test_about if {
	a := residency.about
	a.title == "Residency"
	a.custom.order == 40
	a.custom.blocks_burst == true
	a.custom.reads == {"shape": ["region", "target"], "workload": ["residency", "data_region"]}
	object.keys(a.custom.codes) == {"residency_forbids", "region_unknown"}
}

# Regression (residency.rego, forbids, rule "hpc"): the HPC-only rule of no-egress and restricted denies
# only `shape.target == "cloud"`, so a shape whose target is missing (null once projected), or
# anything but "hpc"/"cloud" (e.g. "Cloud"), passes as if it were HPC: a missing field turns the
# deny off (fail open). The tiers (tier 0) and the target check (no burst_not_allowed) treat such
# a shape as HPC too, so the decision places a no-egress workload there.
# Input: shape {"region": "de-juelich", "target": null} (and "Cloud"), workload {"residency":
# "no-egress", "data_region": null}. Expected: residency_forbids (not known to be an HPC pool).
# It once passed (fail open).
test_strict_classes_deny_a_pool_not_known_to_be_hpc[name] if {
	some name, target in {"target missing": null, "target in upper case": "Cloud"}
	[r.code | some r in deny("de-juelich", target, "no-egress", null)] == ["residency_forbids"]
}

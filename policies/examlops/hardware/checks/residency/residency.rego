# METADATA
# title: Residency
# description: >-
#   Data residency: where a workload's data may go, for every pool, HPC or cloud. The classes are
#   ordered, each at least as strict as the one before: open (any known region); eu-only (only a
#   region in the EU, from the explicit EU-27 table, never from a region's name); no-egress (also
#   only HPC pools, in the data's jurisdiction); restricted (also only the data's own region).
#   Without a data_region, no-egress and restricted hold data to EU HPC pools. A region missing
#   from the table has no known jurisdiction and is denied with that reason.
# custom:
#   order: 40
#   blocks_burst: true
#   reads:
#     shape: [region, target]
#     workload: [residency, data_region]
#   codes:
#     residency_forbids:
#       kind: never
#       meaning: "the workload's data residency forbids the pool's region (or a cloud pool)"
#     region_unknown: {kind: never, meaning: the pool's region is not in the regions table}
package examlops.hardware.checks.residency

import data.examlops.hardware.reason
import data.examlops.tables.eu_member_states
import data.examlops.tables.regions
import data.examlops.tables.vocabulary

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# How strict each class is: a class applies every rule of the classes before it (the reviewed
# vocabulary lists them laxest first).
level := {r: i | some i, r in vocabulary.residencies}

deny contains reason.make(
	"region_unknown",
	"never",
	sprintf("region '%s' has no known jurisdiction (not in the regions table)", [input.shape.region]),
	{"region": input.shape.region, "residency": input.workload.residency},
) if {
	not regions[input.shape.region]
}

deny contains r if {
	regions[input.shape.region]
	r := forbids(input.shape, input.workload)
}

in_eu(region) if regions[region].area == "EU"

in_eu(region) if regions[region].country in eu_member_states

is_eu(region) if in_eu(region)

else := false

# The country where the table gives one, else the area (the coarse regions "eu", "us").
jurisdiction(region) := object.get(regions[region], ["country"], object.get(regions[region], ["area"], null))

# The first rule of the workload's class that the pool breaks; undefined when none.
forbids(shape, w) := denial(shape, w, "eu", "") if {
	w.residency == "eu-only"
	not in_eu(shape.region)
} else := denial(shape, w, "eu", "outside the EU") if {
	level[w.residency] >= 2
	not in_eu(shape.region)
} else := denial(shape, w, "hpc", "only HPC pools") if {
	level[w.residency] >= 2
	shape.target != "hpc"
} else := denial(shape, w, "jurisdiction", "outside the data's jurisdiction") if {
	level[w.residency] >= 2
	w.data_region != null
	jurisdiction(shape.region) != jurisdiction(w.data_region)
} else := denial(shape, w, "region", "outside the data's own region") if {
	level[w.residency] >= 3
	w.data_region != null
	shape.region != w.data_region
}

denial(shape, w, rule, why) := reason.make(
	"residency_forbids",
	"never",
	message(shape, w, why),
	{
		"residency": w.residency,
		"rule": rule,
		"region": shape.region,
		"jurisdiction": jurisdiction(shape.region),
		"eu": is_eu(shape.region),
		"data_region": w.data_region,
		"data_jurisdiction": data_jurisdiction(w.data_region),
	},
)

# eu-only keeps the E8 specification's words; the stricter classes say where the data lives.
message(shape, w, "") := sprintf("data-residency %s forbids egress to region '%s'", [w.residency, shape.region])

message(shape, w, why) := sprintf(
	"data-residency %s forbids egress to %sregion '%s' (%s): %s; %s",
	[w.residency, cloud_word(shape), shape.region, jurisdiction(shape.region), why, data_text(w.data_region)],
) if {
	why != ""
}

cloud_word(shape) := "cloud " if shape.target != "hpc"

else := ""

data_text(null) := "no data_region given, so EU HPC pools only"

data_text(r) := sprintf("data in %s (region %s)", [jurisdiction(r), r]) if r != null

data_jurisdiction(null) := null

data_jurisdiction(r) := jurisdiction(r) if r != null

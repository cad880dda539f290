# Data residency: where a workload's data may go. Evaluated for every candidate pool from the
# jurisdiction of its region, taken from data.examlops.tables.regions, never from a region's name.
#   open                   any known region
#   eu-only                only a region in the EU (explicit EU-27 table)
#   no-egress, restricted  no cloud pool at all; HPC pools only
# A region missing from the table has no known jurisdiction and is denied with that reason.
package examlops.hardware.residency

import data.examlops.hardware.reason
import data.examlops.tables.eu_member_states
import data.examlops.tables.regions

no_egress := {"no-egress", "restricted"}

in_eu(region) if regions[region].area == "EU"

in_eu(region) if regions[region].country in eu_member_states

is_eu(region) if in_eu(region)

else := false

check(pool, residency) := reason.make(
	"region_unknown",
	"never",
	sprintf("region '%s' has no known jurisdiction (not in the regions table)", [pool.region]),
	{"region": pool.region, "residency": residency},
) if {
	not regions[pool.region]
} else := forbids(pool, residency) if {
	pool.target == "cloud"
	residency in no_egress
} else := forbids(pool, residency) if {
	residency == "eu-only"
	not in_eu(pool.region)
} else := null

forbids(pool, residency) := reason.make(
	"residency_forbids",
	"never",
	sprintf("data-residency %s forbids egress to region '%s'", [residency, pool.region]),
	{
		"residency": residency,
		"region": pool.region,
		"jurisdiction": object.get(regions[pool.region], ["country"], object.get(regions[pool.region], ["area"], null)),
		"eu": is_eu(pool.region),
	},
)

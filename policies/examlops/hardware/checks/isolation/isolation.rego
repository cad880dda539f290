# METADATA
# title: Isolation
# description: >-
#   A workload whose fraction must be isolated (isolation: required) is never given a share of a
#   device shared without partitioning (time-slicing isolates neither memory nor faults, MPS not
#   faults): on such a pool its fraction is not honored, and the pool is not eligible. An isolated
#   slice (MIG, an AMD partition, a fixed slice) or a whole device is.
# custom:
#   order: 62
#   reads:
#     shape: [accelerator, model, supports_fractions, fixed_profile, sharing, shares_per_device]
#     workload: [fraction, count, nodes, cpu, memory, topology, topology_mode, isolation]
#   codes:
#     isolation_unavailable:
#       kind: never
#       meaning: "the pool would share a device without isolation, and the workload requires an isolated fraction"
package examlops.hardware.checks.isolation

import data.examlops.hardware.fractions
import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"isolation_unavailable",
	"never",
	sprintf(
		concat("", [
			"the pool shares devices without isolation (%s), and the workload requires its fraction %v isolated ",
			"(isolation: required)",
		]),
		[g.scheme, input.workload.fraction],
	),
	{"sharing": g.scheme, "fraction": input.workload.fraction},
) if {
	input.workload.isolation == "required"
	g := fractions.grant(input.shape, input.workload)
	g.shares != null
}

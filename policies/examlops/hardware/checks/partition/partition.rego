# METADATA
# title: Partition
# description: >-
#   A pool of fixed slices (a scheduler that exposes e.g. MIG 1g.10gb instances as their own
#   resource) can only give those slices: it is admissible when one of its slices covers the share
#   of a device the workload asks for, and when its profile is one the partitioning table knows.
# custom:
#   order: 60
#   reads:
#     shape: [accelerator, model, fixed_profile]
#     workload: [fraction, count]
#   codes:
#     slice_too_small: {kind: never, meaning: "the pool's fixed slices are smaller than the share asked for"}
#     slice_unknown: {kind: never, meaning: "the pool's fixed slice profile is not in the partitioning table"}
package examlops.hardware.checks.partition

import data.examlops.hardware.fractions
import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"slice_unknown",
	"never",
	sprintf("fixed slice profile '%s' is not in the partitioning table for %s", [profile, device(input.shape)]),
	{"profile": profile},
) if {
	profile := object.get(input.shape, "fixed_profile", null)
	profile != null
	not fractions.fixed(input.shape, input.workload)
}

deny contains reason.make(
	"slice_too_small",
	"never",
	sprintf(
		"the pool's fixed %s slices are smaller than the %v of a device asked for",
		[g.profile, input.workload.fraction],
	),
	{"profile": g.profile, "share": g.share, "requested": input.workload.fraction},
) if {
	g := fractions.fixed(input.shape, input.workload)
	g.share < input.workload.fraction
}

device(shape) := upper(shape.model) if object.get(shape, "model", null) != null

else := shape.accelerator

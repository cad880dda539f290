# METADATA
# title: Target
# description: >-
#   HPC or cloud. Cloud pools are reached only by bursting: a cloud target, or an explicit
#   allow_burst; a workload that targets one side never lands on the other (except an HPC workload
#   with allow_burst spilling to cloud).
# custom:
#   order: 20
#   reads:
#     shape: [target]
#     workload: [target, allow_burst]
#   codes:
#     burst_not_allowed:
#       kind: never
#       meaning: "a cloud pool, and the workload neither targets cloud nor allows bursting"
#     target_mismatch: {kind: never, meaning: the pool is HPC and the workload targets cloud (or the reverse)}
package examlops.hardware.checks.target

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains r if {
	r := check(input.shape, input.workload)
	r != null
}

check(shape, w) := reason.make(
	"burst_not_allowed",
	"never",
	sprintf("cloud pool needs an explicit burst (allow_burst or target cloud); workload target is %s", [w.target]),
	{"pool_target": shape.target, "target": w.target, "allow_burst": w.allow_burst},
) if {
	shape.target == "cloud"
	w.target != "cloud"
	not w.allow_burst
} else := reason.make(
	"target_mismatch",
	"never",
	sprintf("workload asks for target %s; pool is %s", [w.target, shape.target]),
	{"pool_target": shape.target, "target": w.target},
) if {
	w.target in {"hpc", "cloud"}
	shape.target != w.target
	not hpc_burst(shape, w)
} else := null

# An HPC workload with allow_burst may spill to a cloud pool.
hpc_burst(shape, w) if {
	w.target == "hpc"
	shape.target == "cloud"
	w.allow_burst
}

# METADATA
# title: Capacity
# description: >-
#   The pool has room for the grant right now: as many devices with nothing on them as whole
#   devices are asked for, or a device with room for the granted slice beside the slices it holds
#   (a MIG instance whose run of memory slices overlaps none held, or a partition of the mode the
#   device already runs). The store says what is placeable per pool (empty devices, and how many of
#   each slice profile could still be placed); this check compares.
# custom:
#   order: 90
#   stage: pool
#   reads:
#     shape: [accelerator, model, fixed_profile]
#     workload: []
#   codes:
#     capacity_exhausted: {kind: not_now, meaning: too few free devices (or fixed slices) right now}
#     slice_unavailable:
#       kind: not_now
#       meaning: no device of the pool has room for the granted slice beside the slices it holds
package examlops.hardware.checks.capacity

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# input: {shape, workload, grant, capacity: {"whole": empty devices, "slices": {profile: n}}}
deny contains shortfall(input.shape, input.grant) if not fits(input.grant, input.capacity)

# true when the grant fits, else false (never undefined: a pool short of room keeps its verdict).
room(grant, capacity) if fits(grant, capacity)

else := false

# A pool that does not state its capacity has none: fail closed.
fits(grant, capacity) if {
	grant.profile == null
	object.get(capacity, "whole", 0) >= grant.units
}

fits(grant, capacity) if {
	grant.profile != null
	object.get(object.get(capacity, "slices", {}), grant.profile, 0) >= grant.units
}

# The reason a pool short of capacity gets; the same for every pool of a shape.
shortfall(shape, grant) := reason.make(
	"capacity_exhausted",
	"not_now",
	sprintf("needs %d whole %s device(s) with nothing on them, more than are free", [grant.units, device(shape)]),
	{"units": grant.units, "profile": null},
) if {
	grant.profile == null
} else := reason.make(
	"capacity_exhausted",
	"not_now",
	sprintf("needs %d free %s slice(s), more than are free", [grant.units, grant.profile]),
	{"units": grant.units, "profile": grant.profile},
) if {
	object.get(shape, "fixed_profile", null) != null
} else := reason.make(
	"slice_unavailable",
	"not_now",
	sprintf("no %s in the pool has room for a %s beside the slices it holds", [device(shape), grant.profile]),
	{"units": grant.units, "profile": grant.profile},
)

# The reason a pool short of capacity gets when larger shares also cover the request (``larger``:
# their profiles, smallest first) and none of them the budget allows has room either.
shortfall_of(shape, grant, []) := shortfall(shape, grant)

shortfall_of(shape, grant, larger) := reason.make(
	"slice_unavailable",
	"not_now",
	sprintf(
		concat("", [
			"no %s in the pool has room for a %s beside the slices it holds, ",
			"nor for a larger one the budget allows (%s)",
		]),
		[device(shape), grant.profile, concat(", ", larger)],
	),
	{"units": grant.units, "profile": grant.profile, "larger": larger},
) if {
	count(larger) > 0
}

device(shape) := upper(shape.model) if object.get(shape, "model", null) != null

else := shape.accelerator

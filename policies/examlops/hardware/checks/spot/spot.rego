# METADATA
# title: Spot
# description: >-
#   Spot (preemptible) capacity only by consent, as every cloud API and SkyPilot's use_spot have
#   it: a spot pool's devices may be reclaimed by the provider at short notice, so it is used only
#   when the workload accepts it (spot: allow) or asks for it alone (spot: require); by default
#   (spot: never) it is not. The vocabulary of spot is data.examlops.tables.vocabulary.spot.
# custom:
#   order: 55
#   reads:
#     shape: [spot]
#     workload: [spot]
#   codes:
#     spot_not_accepted:
#       kind: never
#       meaning: "the pool is spot (preemptible) capacity and the workload does not accept it (spot: never)"
#     spot_required:
#       kind: never
#       meaning: "the pool is on-demand capacity and the workload requires spot (spot: require)"
package examlops.hardware.checks.spot

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"spot_not_accepted",
	"never",
	concat("", [
		"spot (preemptible) capacity: the provider may reclaim its devices at short notice, and the workload ",
		"does not accept that (spot: never; --spot allow accepts it)",
	]),
	{"spot": true, "workload_spot": input.workload.spot},
) if {
	is_spot(input.shape)
	input.workload.spot == "never"
}

deny contains reason.make(
	"spot_required",
	"never",
	"on-demand capacity, and the workload asks for spot capacity only (spot: require)",
	{"spot": false, "workload_spot": input.workload.spot},
) if {
	not is_spot(input.shape)
	input.workload.spot == "require"
}

# A shape without the field (a pool registered before spot existed) is on-demand capacity.
is_spot(shape) if shape.spot == true

# METADATA
# title: Drain
# description: >-
#   A drained pool takes no new grants; the grants it holds keep running (exa hardware drain NAME,
#   undone by exa hardware undrain NAME), as a drained Slurm node or a cordoned Kubernetes node
#   takes no new work while its running work goes on. The denial is not_now: draining is an
#   operator's pause, and the same workload is placeable there again once the pool is undrained,
#   so a workload that only a drained pool could run is short of capacity for now (it may wait
#   for it), not ineligible. A pool that is to be removed stays drained until its last grant ends.
# custom:
#   order: 85
#   reads:
#     shape: [drained]
#     workload: []
#   codes:
#     pool_drained:
#       kind: not_now
#       meaning: "the pool is drained: it takes no new grants until it is undrained (its live grants are kept)"
package examlops.hardware.checks.drain

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"pool_drained",
	"not_now",
	"the pool is drained: it takes no new grants until it is undrained (exa hardware undrain); its live grants are kept",
	{"drained": true},
) if {
	is_drained(input.shape)
}

# A shape without the field (a pool registered before pools could be drained) is not drained.
is_drained(shape) if shape.drained == true

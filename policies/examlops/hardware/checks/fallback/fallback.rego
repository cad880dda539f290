# METADATA
# title: Fallback
# description: >-
#   A pool of another accelerator than the one asked for is a stand-in, admissible only where the
#   reviewed fallback table (data.examlops.tables.fallback) lists it for the requested accelerator.
#   A CPU stands in for an accelerator only where the table says so or the workload sets
#   allow_cpu_fallback.
# custom:
#   order: 50
#   reads:
#     shape: [accelerator]
#     workload: [accelerator, allow_cpu_fallback]
#   codes:
#     fallback_not_allowed: {kind: never, meaning: the pool's accelerator may not stand in for the requested one}
package examlops.hardware.checks.fallback

import data.examlops.hardware.reason
import data.examlops.tables.fallback

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"fallback_not_allowed",
	"never",
	message(input.shape.accelerator, input.workload),
	{
		"requested": input.workload.accelerator,
		"accelerator": input.shape.accelerator,
		"stand_ins": object.get(fallback.stand_ins, input.workload.accelerator, []),
		"allow_cpu_fallback": input.workload.allow_cpu_fallback,
	},
) if {
	input.shape.accelerator != input.workload.accelerator
	not allowed(input.workload.accelerator, input.shape.accelerator, input.workload.allow_cpu_fallback)
}

allowed(requested, accelerator, _) if accelerator in object.get(fallback.stand_ins, requested, [])

allowed(_, "cpu", true)

message("cpu", w) := sprintf(
	"cpu may not stand in for %s (not in the fallback table, and allow_cpu_fallback is off)",
	[w.accelerator],
)

message(accelerator, w) := sprintf(
	"%s may not stand in for %s (not in the fallback table)",
	[accelerator, w.accelerator],
) if {
	accelerator != "cpu"
}

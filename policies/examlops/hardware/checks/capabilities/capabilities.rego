# METADATA
# title: Capabilities
# description: >-
#   The pool advertises every capability tag the workload asks for: its own tags plus those the
#   hardware table (data.examlops.tables.models) gives its model.
# custom:
#   order: 30
#   reads:
#     shape: [capabilities, model]
#     workload: [capabilities]
#   codes:
#     capability_missing: {kind: never, meaning: the pool does not advertise a requested tag}
package examlops.hardware.checks.capabilities

import data.examlops.hardware.reason
import data.examlops.tables.models

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"capability_missing",
	"never",
	sprintf("pool lacks capabilities %v", [sort(missing)]),
	{"missing": sort(missing), "advertised": sort(advertised(input.shape))},
) if {
	missing := {t | some t in input.workload.capabilities} - advertised(input.shape)
	count(missing) > 0
}

advertised(shape) := {t | some t in shape.capabilities} | of_model(object.get(shape, "model", null))

of_model(model) := {t | some t in models[model].capabilities} if model != null

else := set()

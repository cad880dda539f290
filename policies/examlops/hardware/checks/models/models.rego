# METADATA
# title: Models
# description: >-
#   A workload that names the device models that will do (models: [v100, t4]: any of them) runs only
#   on a pool of one of them; a pool that names no model is not known to be one. Models are matched
#   case-insensitively; a model the models table does not know is the workload's error
#   (model_unknown), never a silent mismatch.
# custom:
#   order: 48
#   reads:
#     shape: [model]
#     workload: [models]
#   codes:
#     model_not_accepted:
#       kind: never
#       meaning: "the pool's device model is not one of the models the workload accepts"
package examlops.hardware.checks.models

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains reason.make(
	"model_not_accepted",
	"never",
	sprintf("%s; the workload accepts only %s", [what(model), concat(", ", accepted)]),
	{"model": model, "models": accepted},
) if {
	accepted := sort({lower(m) | some m in object.get(input.workload, "models", [])})
	count(accepted) > 0
	model := pool_model(input.shape)
	not model in accepted
}

pool_model(shape) := lower(shape.model) if {
	is_string(object.get(shape, "model", null))
} else := null

what(null) := "the pool names no device model"

what(m) := sprintf("the pool's devices are %s", [upper(m)]) if m != null

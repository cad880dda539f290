# METADATA
# title: Portability
# description: >-
#   An engine runs only on accelerators whose backend it supports: never schedule what cannot
#   run. Tables: data.examlops.tables.accelerators (accelerator -> backend) and
#   data.examlops.tables.engines (engine -> backends).
# custom:
#   order: 10
#   reads:
#     shape: [accelerator]
#     workload: [engine]
#   codes:
#     backend_unsupported: {kind: never, meaning: "the engine cannot run on the pool's (or requested) accelerator"}
package examlops.hardware.checks.portability

import data.examlops.hardware.reason
import data.examlops.tables.accelerators
import data.examlops.tables.engines

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

deny contains r if {
	r := check(input.workload.engine, input.shape.accelerator)
	r != null
}

# An accelerator the table does not know has no backend any engine supports: denied, never passed.
backend(accelerator) := object.get(accelerators, [accelerator, "backend"], "unknown")

portable(engine, accelerator) if backend(accelerator) in engines[engine].backends

# The engine's backends written as the E8 specification shows them: ('cuda',) or ('cuda', 'rocm').
supports_text(engine) := sprintf("('%s',)", [bs[0]]) if {
	bs := engines[engine].backends
	count(bs) == 1
} else := sprintf("('%s')", [concat("', '", object.get(engines, [engine, "backends"], []))])

# null when the engine can run on the accelerator, else the reason it cannot. Also what rejects a
# request outright (the placement package asks it about the requested accelerator).
check(engine, accelerator) := null if {
	portable(engine, accelerator)
} else := reason.make(
	"backend_unsupported",
	"never",
	sprintf(
		"engine '%s' cannot run on %s (needs backend %s; supports %s)",
		[engine, accelerator, backend(accelerator), supports_text(engine)],
	),
	{
		"engine": engine,
		"accelerator": accelerator,
		"needs": backend(accelerator),
		"supports": object.get(engines, [engine, "backends"], []),
	},
)

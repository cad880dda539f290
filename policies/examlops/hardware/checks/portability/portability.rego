# METADATA
# title: Portability
# description: >-
#   An engine runs only on accelerators whose backend it supports: never schedule what cannot
#   run. Tables: data.examlops.tables.accelerators (accelerator -> backend) and
#   data.examlops.tables.engines (engine -> backends). The rejection of a workload as asked is
#   worded exactly as the E8 specification shows it, backends as a Python tuple ("supports
#   ('cuda',)"); a pool's denial names the backends in words ("supports cuda").
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

# A pool's denial: null when the engine can run on the pool's accelerator.
check(engine, accelerator) := unsupported(engine, accelerator, supports_words(engine))

# The rejection of the workload as asked (the placement package asks it about the requested
# accelerator): the E8 specification's transcript shows this message, tuple and all, and it stays
# so byte for byte.
rejection(engine, accelerator) := unsupported(engine, accelerator, supports_text(engine))

# An accelerator the table does not know has no backend any engine supports: denied, never passed.
backend(accelerator) := object.get(accelerators, [accelerator, "backend"], "unknown")

portable(engine, accelerator) if backend(accelerator) in engines[engine].backends

# The engine's backends in words, in the table's order: "cuda", "cuda and rocm", "ipex, xla and cpu".
supports_words(engine) := words if {
	bs := object.get(engines, [engine, "backends"], [])
	count(bs) > 1
	words := sprintf("%s and %s", [concat(", ", array.slice(bs, 0, count(bs) - 1)), bs[count(bs) - 1]])
} else := concat("", object.get(engines, [engine, "backends"], ["no backend"]))

# The engine's backends written as the E8 specification shows them: ('cuda',) or ('cuda', 'rocm').
supports_text(engine) := sprintf("('%s',)", [bs[0]]) if {
	bs := engines[engine].backends
	count(bs) == 1
} else := sprintf("('%s')", [concat("', '", object.get(engines, [engine, "backends"], []))])

# null when the engine can run on the accelerator, else the reason it cannot.
unsupported(engine, accelerator, supports) := null if {
	portable(engine, accelerator)
} else := reason.make(
	"backend_unsupported",
	"never",
	sprintf(
		"engine '%s' cannot run on %s (needs backend %s; supports %s)",
		[engine, accelerator, backend(accelerator), supports],
	),
	{
		"engine": engine,
		"accelerator": accelerator,
		"needs": backend(accelerator),
		"supports": object.get(engines, [engine, "backends"], []),
	},
)

# Portability: an engine runs only on accelerators whose backend it supports. Never schedule what
# cannot run. Tables: data.examlops.tables.accelerators (accelerator -> backend) and
# data.examlops.tables.engines (engine -> backends).
package examlops.hardware.portability

import data.examlops.hardware.reason
import data.examlops.tables.accelerators
import data.examlops.tables.engines

backend(accelerator) := accelerators[accelerator].backend

portable(engine, accelerator) if backend(accelerator) in engines[engine].backends

# The engine's backends written as the E8 specification shows them: ('cuda',) or ('cuda', 'rocm').
supports_text(engine) := sprintf("('%s',)", [bs[0]]) if {
	bs := engines[engine].backends
	count(bs) == 1
} else := sprintf("('%s')", [concat("', '", engines[engine].backends)])

# null when the engine can run on the accelerator, else the reason it cannot.
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
		"supports": engines[engine].backends,
	},
)

# Accelerators the engine can run on, for fallback and for explanations.
compatible(engine) := {a | some a, _ in accelerators; portable(engine, a)}

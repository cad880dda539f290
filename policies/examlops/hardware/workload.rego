# Validation of the workload itself, against the reviewed tables. Python validates with JSON
# Schema first; this package makes the policy fail closed on its own when given bad input.
package examlops.hardware.workload

import data.examlops.hardware.reason
import data.examlops.tables.accelerators
import data.examlops.tables.engines

targets := {"hpc", "cloud", "any"}

residencies := {"open", "eu-only", "no-egress", "restricted"}

defaults := {
	"capabilities": [],
	"target": "any",
	"fraction": 1,
	"count": 1,
	"residency": "open",
	"allow_burst": false,
}

# The workload with defaults filled in for absent fields.
normalize(w) := object.union(defaults, w)

errors(w) := [e |
	some e in [
		# Required fields without a default: an absent one is invalid, not silently skipped.
		unknown("accelerator", object.get(w, "accelerator", null), object.keys(accelerators)),
		unknown("engine", object.get(w, "engine", null), object.keys(engines)),
		unknown("target", w.target, targets),
		unknown("residency", w.residency, residencies),
		fraction_error(w.fraction),
		count_error(w.count, w.fraction),
	]
	e != null
]

unknown(field, value, known) := null if {
	value in known
} else := reason.make(
	sprintf("%s_unknown", [field]),
	"never",
	sprintf("unknown %s '%v' (expected one of %v)", [field, value, sort(known)]),
	{"field": field, "value": value},
)

fraction_error(f) := null if {
	is_number(f)
	f > 0
	f <= 1
} else := reason.make(
	"fraction_invalid",
	"never",
	sprintf("fraction %v must be a number greater than 0 and at most 1", [f]),
	{"field": "fraction", "value": f},
)

count_error(n, f) := null if {
	is_number(n)
	n >= 1
	n == floor(n)
	fraction_fits_count(n, f)
} else := reason.make(
	"count_invalid",
	"never",
	sprintf("count %v must be a whole number of at least 1 (and exactly 1 with a fraction below 1)", [n]),
	{"field": "count", "value": n},
)

fraction_fits_count(_, f) if f == 1

# An invalid fraction is reported once, as fraction_invalid, not again as a count error.
fraction_fits_count(_, f) if fraction_error(f) != null

fraction_fits_count(n, f) if {
	f < 1
	n == 1
}

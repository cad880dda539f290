# METADATA
# title: Tiers
# description: >-
#   Honest fallback and HPC-first bursting. Admissible pools fall into four tiers, best first:
#   0 HPC pool of the requested accelerator; 1 HPC pool of a stand-in accelerator (fallback);
#   2 cloud pool of the requested accelerator (burst); 3 cloud pool of a stand-in (burst and
#   fallback). Only the best tier that has an admissible pool is eligible; the others are told why.
# custom:
#   reads:
#     shape: [target, accelerator]
#     workload: [accelerator]
#   codes:
#     fallback_not_needed: {kind: preference, meaning: a pool of the requested accelerator is available}
#     burst_not_needed: {kind: preference, meaning: an HPC pool can take the workload}
#     request_rejected: {kind: preference, meaning: "the workload as asked is rejected (e.g. not portable)"}
package examlops.hardware.tiers

import data.examlops.hardware.reason

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

tier(shape, w) := (2 * to_number(shape.target == "cloud")) + to_number(shape.accelerator != w.accelerator)

is_fallback(t) := t in {1, 3}

is_burst(t) if t >= 2

else := false

# null when the pool's tier is the selected one, else why a better tier won.
preference(w, t, selected) := null if {
	t == selected
} else := reason.make(
	"burst_not_needed",
	"preference",
	"an HPC pool can take this workload; bursting to cloud is not needed",
	{"tier": t, "selected_tier": selected},
) if {
	is_burst(t)
	not is_burst(selected)
} else := reason.make(
	"fallback_not_needed",
	"preference",
	sprintf("a pool of the requested accelerator %s is available", [w.accelerator]),
	{"tier": t, "selected_tier": selected},
)

# Why an admissible pool was not used when the workload as asked is rejected.
rejected(rejection) := reason.make(
	"request_rejected",
	"preference",
	sprintf("the workload as asked is rejected: %s", [rejection.message]),
	{"rejection": rejection.code},
)

note(shape, w, t) := sprintf(
	"requested %s unavailable — fell back to %s",
	[w.accelerator, shape.accelerator],
) if {
	is_fallback(t)
} else := null

# The note when pools of the requested accelerator pass every check but are full right now.
note_full(shape, w, t) := sprintf(
	"requested %s pools are full — fell back to %s",
	[w.accelerator, shape.accelerator],
) if {
	is_fallback(t)
} else := null

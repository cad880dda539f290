# METADATA
# title: Tiers
# description: >-
#   Honest fallback and HPC-first bursting. Admissible pools fall into four tiers, best first:
#   0 HPC pool of the requested accelerator; 1 HPC pool of a stand-in accelerator (fallback);
#   2 cloud pool of the requested accelerator (burst); 3 cloud pool of a stand-in (burst and
#   fallback). Only the best tier that has an admissible pool is eligible; the others are told why.
#   The note of a pool says how it was reached (a stand-in: whether the requested accelerator was
#   unavailable, full or over the budget) and what kind of capacity it is (spot: preemptible).
# custom:
#   reads:
#     shape: [target, accelerator, spot]
#     workload: [accelerator, spot, max_cost_per_hour, max_carbon_per_hour, project]
#   codes:
#     fallback_not_needed: {kind: preference, meaning: a pool of the requested accelerator is available}
#     burst_not_needed: {kind: preference, meaning: an HPC pool can take the workload}
#     request_rejected: {kind: preference, meaning: "the workload as asked is rejected (e.g. not portable)"}
package examlops.hardware.tiers

import data.examlops.hardware.checks.budget
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

note(shape, w, t) := joined([fell_back(shape, w, t, "unavailable"), spot_note(shape, w)])

# The note when pools of the requested accelerator pass every check but are full right now.
note_full(shape, w, t) := joined([fell_back(shape, w, t, "pools are full"), spot_note(shape, w)])

# The note when pools of the requested accelerator pass every other check but are over the
# workload's (or its project's) budget; null for a workload without a cap.
note_budget(shape, w, t) := joined([
	fell_back(shape, w, t, sprintf("pools are over the budget (%s)", [budget.caps_text(w)])),
	spot_note(shape, w),
]) if {
	budget.caps_text(w) != ""
} else := null

fell_back(shape, w, t, why) := sprintf(
	"requested %s %s — fell back to %s",
	[w.accelerator, why, shape.accelerator],
) if {
	is_fallback(t)
} else := null

# Spot capacity is said in every placement on it: the workload accepted it (checks/spot).
spot_note(shape, w) := sprintf(
	"spot capacity: the provider may reclaim these devices at short notice (the workload accepts it: spot %s)",
	[w.spot],
) if {
	shape.spot == true
} else := null

# The parts that are said, joined; null when none is.
joined(parts) := concat("; ", said) if {
	said := [p | some p in parts; p != null]
	count(said) > 0
} else := null

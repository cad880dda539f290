# Honest fallback and HPC-first bursting. Admissible pools fall into four tiers, best first:
#   0  HPC pool of the requested accelerator
#   1  HPC pool of another accelerator the engine can run on (fallback)
#   2  cloud pool of the requested accelerator (burst)
#   3  cloud pool of another accelerator the engine can run on (burst + fallback)
# Only the best tier that has an admissible pool is eligible; the others are told why not.
package examlops.hardware.fallback

import data.examlops.hardware.reason

tier(pool, w) := (2 * to_number(pool.target == "cloud")) + to_number(pool.accelerator != w.accelerator)

is_fallback(t) := t in {1, 3}

is_burst(t) := t >= 2

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

note(pool, w, t) := sprintf("requested %s unavailable — fell back to %s", [w.accelerator, pool.accelerator]) if {
	is_fallback(t)
} else := null

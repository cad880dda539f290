# The placement decision: one query evaluates every pool and returns each pool's verdict with all
# its reasons, the tier that is eligible, and the burst verdict. Choosing the cheapest eligible pool
# is left to the caller, which has the prices.
#
# input.workload: {name, accelerator, engine, capabilities, target, fraction, count, residency,
#                  allow_burst}
# input.pools:    [{name, target, accelerator, model, region, capabilities, supports_fractions,
#                   count, free, cost_per_hour}]
package examlops.hardware.placement

import data.examlops.hardware.eligibility
import data.examlops.hardware.fallback
import data.examlops.hardware.fractions
import data.examlops.hardware.portability
import data.examlops.hardware.reason
import data.examlops.hardware.residency
import data.examlops.hardware.workload

w := workload.normalize(input.workload)

errors := workload.errors(w)

# Why the workload as asked cannot be placed anywhere: invalid input, or an engine that cannot run
# on the requested accelerator (never silently placed on another device).
rejection := errors[0] if {
	count(errors) > 0
} else := portability.check(w.engine, w.accelerator)

valid if count(errors) == 0

base[pool.name] := v if {
	valid
	some pool in input.pools
	g := fractions.grant(pool, w)
	t := fallback.tier(pool, w)
	denials := [r |
		some r in [
			portability.check(w.engine, pool.accelerator),
			eligibility.target(pool, w),
			eligibility.capability(pool, w),
			residency.check(pool, w.residency),
			eligibility.capacity(pool, g.devices),
		]
		r != null
	]
	v := {
		"pool": pool.name,
		"tier": t,
		"admissible": count(denials) == 0,
		"denials": denials,
		"grant": g,
	}
}

selected_tier := min({v.tier | some v in base; v.admissible}) if rejection == null

eligible := sort([name | some name, v in base; v.admissible; v.tier == selected_tier])

verdicts[name] := object.union(v, {
	"eligible": name in eligible,
	"reasons": array.concat(v.denials, [p | p := preference(v); p != null]),
	"fallback": fallback.is_fallback(v.tier),
	"burst": fallback.is_burst(v.tier),
	"note": fallback.note(pool_by_name[name], w, v.tier),
}) if some name, v in base

pool_by_name[pool.name] := pool if some pool in input.pools

preference(v) := p if {
	v.admissible
	p := fallback.preference(w, v.tier, selected_tier)
} else := reason.make(
	"request_rejected",
	"preference",
	sprintf("the workload as asked is rejected: %s", [rejection.message]),
	{"rejection": rejection.code},
) if {
	v.admissible
	rejection != null
} else := null

# Bursting: cloud pools are considered when the workload asks for cloud, or allows bursting and no
# HPC pool can take it. Every such attempt is recorded, allowed or not.
hpc_admissible if {
	some v in base
	v.tier < 2
	v.admissible
}

burst_attempted if {
	rejection == null
	w.target == "cloud"
}

burst_attempted if {
	rejection == null
	w.allow_burst
	not hpc_admissible
}

# Cloud pools stopped by residency alone, cheapest first: the one a blocked burst names.
residency_blocked := [[p.cost_per_hour, p.name] |
	some p in input.pools
	p.target == "cloud"
	denials := base[p.name].denials
	count(denials) > 0
	every d in denials {
		d.code in {"residency_forbids", "region_unknown"}
	}
]

burst := {"attempted": false} if {
	not burst_attempted
} else := {
	"attempted": true,
	"verdict": "allowed",
	"reason": null,
} if {
	selected_tier >= 2
} else := {
	"attempted": true,
	"verdict": "blocked",
	"pool": blocked[1],
	"reason": base[blocked[1]].denials[0],
} if {
	blocked := sort(residency_blocked)[0]
} else := {
	"attempted": true,
	"verdict": "unavailable",
	"reason": null,
}

default selected := null

selected := selected_tier

decision := {
	"workload": w,
	"rejection": rejection,
	"verdicts": verdicts,
	"selected_tier": selected,
	"eligible": eligible,
	"burst": burst,
	"provenance": provenance,
}

# Provenance: which OPA evaluated the decision, and which policy revision it had loaded (the
# launcher loads data.examlops_runtime.revision beside the policies).
default revision := null

revision := data.examlops_runtime.revision

provenance := {
	"opa_version": opa.runtime().version,
	"policy_revision": revision,
}

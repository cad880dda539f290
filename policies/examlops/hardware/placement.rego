# The placement decision: one query judges every pool and returns the verdicts with all their
# reasons, the tier that is eligible, and the burst verdict. Choosing the cheapest eligible pool is
# left to the caller, which has the prices.
#
# Everything but free capacity depends only on a pool's shape (target, accelerator, model, region,
# capabilities, supports_fractions), so each distinct shape is judged once and each pool adds only a
# capacity comparison: cost grows with the number of shapes, and linearly with pools.
#
# input.workload: {name, accelerator, engine, capabilities, target, fraction, count, residency,
#                  allow_burst}
# input.shapes:   [{target, accelerator, model, region, capabilities, supports_fractions,
#                   pools: [{name, count, free, cost_per_hour}]}]
# Or input.pools: [{name, count, free, cost_per_hour, and the shape fields}], each its own shape.
#
# Two entry points with one meaning: `decision_by_shape` (what the orchestrator asks for: verdicts
# per shape plus the pools short of capacity) and `decision` (the same, expanded pool by pool).
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

pool_fields := ["name", "count", "free", "cost_per_hour"]

shapes := input.shapes if {
	input.shapes
} else := [object.union(object.remove(p, pool_fields), {"pools": [object.filter(p, pool_fields)]}) |
	some p in input.pools
]

# Keyed by shape index: a shape whose verdict were undefined would leave its pools without one,
# which the caller refuses (never a silently shorter list).
shape_verdicts := {i: v |
	valid
	some i, s in shapes
	v := shape_verdict(s)
}

shape_verdict(s) := object.union(tiering[[s.target, s.accelerator]], {
	"denials": [r |
		some r in [
			portable[s.accelerator],
			on_target[s.target],
			capable[[s.model, s.capabilities]],
			resident[[s.region, s.target]],
		]
		r != null
	],
	"grant": grants[[s.accelerator, s.model, s.supports_fractions]],
})

# Each check depends on only some of a shape's fields, and a fleet repeats them (a few
# accelerators, targets and regions): each check runs once per distinct value it depends on.
tiering := {k: {
	"tier": t,
	"fallback": fallback.is_fallback(t),
	"burst": fallback.is_burst(t),
	"note": fallback.note(pool, w, t),
} |
	some k in {[s.target, s.accelerator] | some s in shapes}
	pool := {"target": k[0], "accelerator": k[1]}
	t := fallback.tier(pool, w)
}

portable := {a: portability.check(w.engine, a) | some a in {s.accelerator | some s in shapes}}

on_target := {t: eligibility.target({"target": t}, w) | some t in {s.target | some s in shapes}}

capable := {k: eligibility.capability({"model": k[0], "capabilities": k[1]}, w) |
	some k in {[s.model, s.capabilities] | some s in shapes}
}

resident := {k: residency.check({"region": k[0], "target": k[1]}, w.residency) |
	some k in {[s.region, s.target] | some s in shapes}
}

grants := {k: fractions.grant({"accelerator": k[0], "model": k[1], "supports_fractions": k[2]}, w) |
	some k in {[s.accelerator, s.model, s.supports_fractions] | some s in shapes}
}

# Per shape, once: [index, tier, no check denies it, the least free capacity its grant needs,
# its pools]. Pools are then iterated under their shape, so the work per pool is one comparison.
capacity_rows := [[i, v.tier, count(v.denials) == 0, v.grant.devices - 0.000001, s.pools] |
	some i, s in shapes
	v := shape_verdicts[i]
]

# Names of the pools without the free capacity their shape's grant needs (a pool that does not
# state its free capacity has none). The tolerance: MIG shares are sevenths, inexact in floats.
short := {p.name |
	some [_, _, _, least, ps] in capacity_rows
	some p in ps
	object.get(p, "free", 0) < least
}

# [tier, name] of every pool that passes every check, computed once.
admissible := [[t, p.name] |
	some [_, t, clear, least, ps] in capacity_rows
	clear
	some p in ps
	p.free >= least
]

selected_tier := min({t | some [t, _] in admissible}) if rejection == null

eligible := sort([name | some [t, name] in admissible; t == selected_tier])

# Why an admissible pool was passed over depends only on its tier: worded once per distinct tier.
preferences := {t: preference({"tier": t}) | some t in {v.tier | some v in shape_verdicts}}

# The shortfall reason depends only on what the grant takes: worded once per distinct need.
shortfalls := {d: eligibility.shortfall(d) | some d in {v.grant.devices | some v in shape_verdicts}}

# Why an admissible pool of tier v.tier was passed over (a better tier won, or the request itself
# is rejected); null when that tier is the selected one.
preference(v) := fallback.preference(w, v.tier, selected_tier) if {
	selected_tier
} else := reason.make(
	"request_rejected",
	"preference",
	sprintf("the workload as asked is rejected: %s", [rejection.message]),
	{"rejection": rejection.code},
) if {
	rejection != null
} else := null

# Bursting: cloud pools are considered when the workload asks for cloud, or allows bursting and no
# HPC pool can take it. Every such attempt is recorded, allowed or not.
hpc_admissible if {
	some [t, _] in admissible
	t < 2
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
residency_blocked := [[p.cost_per_hour, p.name, i] |
	some i, v in shape_verdicts
	v.burst
	count(v.denials) > 0
	every d in v.denials {
		d.code in {"residency_forbids", "region_unknown"}
	}
	some p in shapes[i].pools
	not short[p.name]
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
	"reason": shape_verdicts[blocked[2]].denials[0],
} if {
	blocked := sort(residency_blocked)[0]
} else := {
	"attempted": true,
	"verdict": "unavailable",
	"reason": null,
}

default selected := null

selected := selected_tier

common := {
	"workload": w,
	"rejection": rejection,
	"selected_tier": selected,
	"eligible": eligible,
	"burst": burst,
	"provenance": provenance,
}

decision_by_shape := object.union(common, {
	"shapes": {i: object.union(v, {"preference": preferences[v.tier], "capacity": shortfalls[v.grant.devices]}) |
		some i, v in shape_verdicts
	},
	"short": short,
})

# Pool by pool, for people and tests: the orchestrator expands decision_by_shape the same way.
decision := object.union(common, {"verdicts": {p.name: pool_verdict(p, v, eligible_set) |
	some i, v in shape_verdicts
	some p in shapes[i].pools
}})

eligible_set := {name | some name in eligible}

pool_verdict(p, v, eligible_names) := {
	"pool": p.name,
	"tier": v.tier,
	"admissible": ok,
	"eligible": p.name in eligible_names,
	"denials": denials,
	"reasons": array.concat(denials, [r | ok; r := preferences[v.tier]; r != null]),
	"grant": v.grant,
	"fallback": v.fallback,
	"burst": v.burst,
	"note": v.note,
} if {
	denials := array.concat(v.denials, [r | short[p.name]; r := eligibility.capacity(p, v.grant.devices)])
	ok := count(denials) == 0
}

# Provenance: which OPA evaluated the decision, and which policy revision it had loaded (the
# launcher loads data.examlops_runtime.revision beside the policies).
default revision := null

revision := data.examlops_runtime.revision

provenance := {
	"opa_version": opa.runtime().version,
	"policy_revision": revision,
}

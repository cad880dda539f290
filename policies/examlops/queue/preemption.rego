# METADATA
# title: Preemption
# description: >-
#   Which live grants a queued workload may take. A grant is a candidate when the workload's class
#   may preempt (priorities.yaml), the grant's class is of a lower rank and may be preempted, its
#   pool is one the workload could use and may be preempted (spot capacity, or a pool marked
#   preemptible), and, across projects, only as Kueue reclaims quota within a cohort: the
#   workload's project stays within its nominal quota of the class and the grant's project holds
#   more than its own (it borrows). Never across projects beyond their quota. Candidates come in
#   Kueue's order of preference (grants of borrowing projects, then the lowest class, then the
#   most recently placed, then id); the plan is the fewest of them, on one pool, that free what the
#   workload needs there. Every grant passed over says why.
#
#   Input (preemption-input.schema.json): workload {id, project, priority}, pools [{name, spot,
#   preemptible, free, devices}] (the pools that deny the workload only for not_now reasons, their
#   devices free and what the workload's grant would hold there), grants [{id, project, priority,
#   pool, accelerator, devices, placed_at}] (the live grants), quota_use {devices: {project:
#   {class: devices held}}}.
# schemas:
#   - input: schema["preemption-input.schema"]
# custom:
#   codes:
#     preemption_not_allowed: {kind: never, meaning: "the workload's priority class may not preempt"}
#     pool_not_eligible: {kind: never, meaning: "the grant's pool is not one the workload could use"}
#     pool_not_preemptible: {kind: never, meaning: "the grant's pool is neither spot capacity nor marked preemptible"}
#     victim_priority_not_lower: {kind: never, meaning: "the grant's priority class is not below the workload's"}
#     victim_not_preemptible: {kind: never, meaning: "the grant's priority class may not be preempted"}
#     preemptor_over_quota:
#       kind: not_now
#       meaning: "taking another project's grant would put the workload's project above its nominal quota (or none)"
#     victim_within_quota:
#       kind: not_now
#       meaning: "the grant's project holds no more than its nominal quota: it borrows nothing to reclaim"
package examlops.queue.preemption

import data.examlops.hardware.checks.quota
import data.examlops.hardware.reason
import data.examlops.hardware.workload
import data.examlops.queue.order
import data.examlops.tables.budgets
import data.examlops.tables.priorities

# The annotations above.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# METADATA
# title: victims
# description: >-
#   The grants the workload may take, in order of preference, each with why; the grants passed
#   over with their reasons; and the plan: the fewest candidates on one pool that free what the
#   workload needs there (null when none do). Nothing when the workload itself is invalid (errors)
#   or its class may not preempt (reason).
# entrypoint: true
victims := judge(input.workload, input.pools, input.grants, object.get(input, "quota_use", {}))

judge(w, pools, grants, use) := answer(w, null, [], [], null) if {
	count(workload_errors(w)) > 0
} else := answer(w, not_allowed(w), [], [], null) if {
	not priorities.classes[class_of(w)].may_preempt
} else := answer(w, null, cands, spared, plan(w, pools, cands, use)) if {
	by_pool := {p.name: p | some p in pools}
	judged := [[g, grant_reasons(w, g, by_pool, use)] | some g in grants]
	cands := candidates(w, [g | some [g, rs] in judged; count(rs) == 0], use)
	spared := [{"grant": g.id, "reasons": rs} | some [g, rs] in sort_by_id(judged); count(rs) > 0]
}

answer(w, why, cands, spared, the_plan) := {
	"errors": workload_errors(w),
	"may_preempt": count([1 | why == null; count(workload_errors(w)) == 0]) == 1,
	"reason": why,
	"candidates": cands,
	"spared": spared,
	"plan": the_plan,
}

sort_by_id(judged) := [pair | some [_, pair] in sort([[g.id, [g, rs]] | some [g, rs] in judged])]

# --- the workload and the grants ---------------------------------------------------------------------

project_of(x) := p if {
	p := object.get(x, "project", null)
	p != null
} else := budgets.unassigned

class_of(x) := c if {
	c := object.get(x, "priority", null)
	c != null
} else := priorities.default

rank(x) := priorities.classes[class_of(x)].rank

workload_errors(w) := [e |
	some e in [
		workload.project_error(object.get(w, "project", null)),
		order.priority_error(object.get(w, "priority", null)),
	]
	e != null
]

not_allowed(w) := reason.make(
	"preemption_not_allowed",
	"never",
	sprintf("priority class %s may not preempt (policies/examlops/tables/priorities.yaml)", [class_of(w)]),
	{"priority": class_of(w)},
)

# A pool may be preempted when it is spot capacity or marked preemptible.
preemptible_pool(p) if p.spot == true

preemptible_pool(p) if p.preemptible == true

# Why the workload may not take the grant: [] when it may. A grant this policy cannot judge (its
# project or class unknown now) is never taken.
grant_reasons(w, g, by_pool, use) := rs if {
	invalid := [e |
		some e in [
			workload.project_error(object.get(g, "project", null)),
			order.priority_error(object.get(g, "priority", null)),
		]
		e != null
	]
	rs := array.concat(invalid, judged_reasons(w, g, by_pool, use, count(invalid) == 0))
}

judged_reasons(_, _, _, _, false) := []

judged_reasons(w, g, by_pool, use, true) := [r |
	some r in [
		pool_reason(g, by_pool),
		priority_reason(w, g),
		class_reason(g),
		own_quota_reason(w, g, by_pool, use),
		their_quota_reason(w, g, use),
	]
	r != null
]

pool_reason(g, by_pool) := reason.make(
	"pool_not_eligible",
	"never",
	sprintf("grant %s is on pool %s, which the workload could not use", [g.id, g.pool]),
	{"grant": g.id, "pool": g.pool},
) if {
	not by_pool[g.pool]
} else := reason.make(
	"pool_not_preemptible",
	"never",
	sprintf("grant %s is on pool %s, which is neither spot capacity nor marked preemptible", [g.id, g.pool]),
	{"grant": g.id, "pool": g.pool},
) if {
	not preemptible_pool(by_pool[g.pool])
} else := null

priority_reason(w, g) := null if {
	rank(g) > rank(w)
} else := reason.make(
	"victim_priority_not_lower",
	"never",
	sprintf("grant %s is of priority %s, not below %s", [g.id, class_of(g), class_of(w)]),
	{"grant": g.id, "priority": class_of(g), "workload_priority": class_of(w)},
)

class_reason(g) := null if {
	priorities.classes[class_of(g)].preemptible
} else := reason.make(
	"victim_not_preemptible",
	"never",
	sprintf("grant %s is of priority %s, which may not be preempted", [g.id, class_of(g)]),
	{"grant": g.id, "priority": class_of(g)},
)

# --- quotas: never across projects beyond them ------------------------------------------------------

nominal(p, c) := quota.entry(p, c).devices

held(use, p, c) := object.get(use, ["devices", p, c], 0)

# What the workload's grant would hold on the grant's pool (what that pool's entry says).
needs(g, by_pool) := by_pool[g.pool].devices

borrowing(use, p, c) if held(use, p, c) > nominal(p, c) + quota.epsilon

# Another project's grant only while the workload's project, with the workload, stays within its
# nominal quota of the class: preemption reclaims quota, it never borrows.
own_quota_reason(w, g, by_pool, use) := null if {
	project_of(g) == project_of(w)
} else := null if {
	not by_pool[g.pool]
} else := null if {
	held(use, project_of(w), g.accelerator) + needs(g, by_pool) <= nominal(project_of(w), g.accelerator) + quota.epsilon
} else := reason.make(
	"preemptor_over_quota",
	"not_now",
	sprintf(
		"grant %s is project %s's: project %s may take another project's grant only within its nominal quota of %s (%s)",
		[g.id, project_of(g), project_of(w), g.accelerator, nominal_words(project_of(w), g.accelerator)],
	),
	{"grant": g.id, "project": project_of(w), "accelerator": g.accelerator},
)

their_quota_reason(w, g, use) := null if {
	project_of(g) == project_of(w)
} else := null if {
	borrowing(use, project_of(g), g.accelerator)
} else := reason.make(
	"victim_within_quota",
	"not_now",
	sprintf(
		"grant %s is project %s's, which holds %s %s device(s), within its nominal quota (%s)",
		[
			g.id, project_of(g), quota.number(held(use, project_of(g), g.accelerator)),
			g.accelerator, nominal_words(project_of(g), g.accelerator),
		],
	),
	{"grant": g.id, "project": project_of(g), "accelerator": g.accelerator},
)

nominal_words(p, c) := sprintf("%s device(s)", [quota.number(nominal(p, c))]) if {
	is_number(nominal(p, c))
} else := "none"

# --- the candidates, and the plan --------------------------------------------------------------------

# Kueue's preference: grants of projects that borrow, then the lowest class, then the most
# recently placed (the least work lost), then id.
candidates(w, gs, use) := [candidate(w, g, use) |
	some [_, _, _, _, g] in sort([[
		0 - to_number(borrowing_grant(g, use)),
		0 - rank(g),
		0 - time.parse_rfc3339_ns(g.placed_at),
		g.id,
		g,
	] |
		some g in gs
	])
]

borrowing_grant(g, use) if borrowing(use, project_of(g), g.accelerator)

else := false

candidate(w, g, use) := {
	"grant": g.id,
	"pool": g.pool,
	"project": project_of(g),
	"priority": class_of(g),
	"accelerator": g.accelerator,
	"devices": g.devices,
	"borrowing": borrowing_grant(g, use),
	"why": concat("; ", [
		sprintf("priority %s below %s, and %s may be preempted", [class_of(g), class_of(w), class_of(g)]),
		sprintf("pool %s may be preempted", [g.pool]),
		project_words(w, g, use),
	]),
}

project_words(w, g, use) := sprintf("project %s's own grant", [project_of(g)]) if {
	project_of(g) == project_of(w)
} else := sprintf(
	"project %s holds %s %s device(s), above its nominal quota of %s: project %s reclaims within its own",
	[
		project_of(g), quota.number(held(use, project_of(g), g.accelerator)), g.accelerator,
		quota.number(nominal(project_of(g), g.accelerator)), project_of(w),
	],
)

# Per pool, the fewest candidates (in order of preference) that free what the workload needs there
# beside what is free; the plan is the pool that needs the fewest, then frees the fewest devices,
# then by name. Another project's grants are taken only while that project still borrows: once the
# grants taken before bring it down to its nominal quota, its later grants on the pool are not
# taken (as Kueue re-checks each candidate against what is left).
plan(w, pools, cands, use) := null if {
	count(options(w, pools, cands, use)) == 0
} else := p if {
	[_, _, _, p] := sort(options(w, pools, cands, use))[0]
}

options(w, pools, cands, use) := [[k, freed, pool.name, {
	"pool": pool.name,
	"victims": [c.grant | some c in taken],
	"frees": freed,
	"why": plan_words(pool, taken, freed),
}] |
	some pool in pools
	on_pool := [c | some c in cands; c.pool == pool.name]
	mine := [c | some i, c in on_pool; still_borrowing(w, c, on_pool, i, use)]
	ks := [k | some k in numbers.range(0, count(mine)); enough(pool, mine, k)]
	count(ks) > 0
	k := min(ks)
	taken := array.slice(mine, 0, k)
	freed := sum([c.devices | some c in taken])
]

still_borrowing(w, c, _, _, _) if c.project == project_of(w)

still_borrowing(w, c, on_pool, i, use) if {
	c.project != project_of(w)
	before := sum([b.devices | some j, b in on_pool; j < i; b.project == c.project])
	held(use, c.project, c.accelerator) - before > nominal(c.project, c.accelerator) + quota.epsilon
}

# The first k candidates on the pool free, beside what is free, what the workload needs there.
enough(pool, mine, k) if {
	pool.free + sum([c.devices | some c in array.slice(mine, 0, k)]) >= pool.devices - quota.epsilon
}

plan_words(pool, [], _) := sprintf(
	"pool %s has %s device(s) free, enough: nothing to preempt",
	[pool.name, quota.number(pool.free)],
)

plan_words(pool, taken, freed) := sprintf(
	"preempting %s grant(s) on pool %s frees %s device(s) beside the %s free, for the %s needed",
	[format_int(count(taken), 10), pool.name, quota.number(freed), quota.number(pool.free), quota.number(pool.devices)],
) if {
	count(taken) > 0
}

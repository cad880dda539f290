# METADATA
# title: Reference decision
# description: >-
#   The complete reference decision over input.pools with their capacity, prices, carbon and start
#   estimates, at the decision's time (input.now, whole epoch seconds): every pool's verdict with
#   its reasons (its shape's verdict, its budget, its start against the workload's max_wait and
#   deadline, its room for the grant), the tier selected, the pool chosen under the workload's
#   objective and its note, the burst verdict, and why nothing was placed. The caller selects
#   among the compact verdicts in Python; a property test through the real OPA holds the two
#   equal, and `exa hardware explain --replay` asks this rule again for a recorded decision.
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
# custom:
#   codes:
#     shape_unknown: {kind: never, meaning: "(reference decision) a pool whose shape the policy was not given"}
#     price_unknown: {kind: never, meaning: "(reference decision) a pool without a price per device-hour"}
#     carbon_unknown: {kind: never, meaning: "(reference decision) a pool without a carbon figure per device-hour"}
package examlops.hardware.reference

import data.examlops.hardware.checks.budget
import data.examlops.hardware.checks.capacity
import data.examlops.hardware.checks.quota
import data.examlops.hardware.checks.wait
import data.examlops.hardware.composer
import data.examlops.hardware.reason
import data.examlops.hardware.tiers
import data.examlops.hardware.verdicts
import data.examlops.tables.throughput

# This package's own annotations (its codes).
own_about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

w := composer.w

rejection := composer.rejection

texts := composer.texts

# The compact rows' notes by index; null for none.
note_text := object.union({i: n | some i, n in verdicts.note_list}, {null: null})

# Every judged shape's verdict in full, from the compact rows.
shape_verdicts := {k: v |
	some k, row in verdicts.shape_rows
	[_, g] := verdicts.grant_rows[row.grant]
	v := {
		"tier": row.tier,
		"fallback": tiers.is_fallback(row.tier),
		"burst": tiers.is_burst(row.tier),
		"note": note_text[row.note],
		"note_full": note_text[row.note_full],
		"note_budget": note_text[row.note_budget],
		"denials": [r | some i in row.denials; r := verdicts.reason_list[i]],
		"grant": g.grant,
		"shortfall": g.shortfall,
		"limits": g.limits,
		"quota": g.quota,
		"alternatives": g.alternatives,
		"too_small": g.too_small,
		"blocks_burst": row.blocks_burst,
	}
}

base_verdicts := {p.name: pv |
	composer.valid
	some p in input.pools
	pv := pool_verdict(p)
}

# Every pool's verdict: its own, for a stand-in reached because the requested accelerator's pools
# are over the budget the workload's refusal of that fallback (checks/budget), and for a pool
# nothing else denies (it may lack room) its start against the workload's limits (checks/wait).
pool_verdicts := {name: judged_by_start(refuse_budget_fallback(pv)) | some name, pv in base_verdicts}

refuse_budget_fallback(pv) := object.union(pv, {
	# Before the capacity shortfall, which comes last (as for every other pool).
	"denials": array.flatten([
		array.slice(pv.denials, 0, before),
		[composer.budget_fallback_forbidden],
		array.slice(pv.denials, before, count(pv.denials)),
	]),
	"shape_denied": true,
	"blocks_burst": false,
}) if {
	composer.budget_fallback_forbidden != null
	over_budget_fallback(pv)
	before := count(pv.denials) - count([1 | not pv.fits])
} else := pv

# Only a pool no check but capacity denies is judged by its start (the candidates, whose estimates
# the caller asks for): the wait's reasons before the shortfall.
judged_by_start(pv) := object.union(pv, {"denials": array.concat(late, pv.denials), "late": late}) if {
	count(pv.denials) == count([1 | not pv.fits])
	late := wait.exceeded(wait_limits, pv.estimate, object.get(input, "now", null))
	count(late) > 0
} else := pv

# A stand-in where a pool of the requested accelerator in a better tier passes every check but is
# full (the fallback is for capacity).
full_fallback(pv) if {
	pv.fallback
	some other in base_verdicts
	other.requested
	other.tier < pv.tier
	not other.shape_denied
}

# A stand-in where pools of the requested accelerator in a better tier pass every check but the
# budget, and none is merely full (the fallback is for budget).
over_budget_fallback(pv) if {
	pv.fallback
	not full_fallback(pv)
	some other in base_verdicts
	other.requested
	other.tier < pv.tier
	other.over_budget_only
}

# Every pool gets a verdict: one whose shape or price the policy was not given is denied for it.
pool_verdict(p) := priced_verdict(p, v, p.carbon_per_hour) if {
	is_number(p.cost_per_hour)
	is_number(p.carbon_per_hour)
	v := shape_verdicts[p.shape]
} else := unknown_verdict(p)

# When the workload must start (checks/wait), for every pool.
wait_limits := wait.limits(w)

# A pool's start estimate ({at, source, observed_at} in whole epoch seconds; null: none given).
estimate_of(p) := object.get(p, "estimate", null)

# When a pool would start the workload: its estimate, or now when that is past or within the
# wait check's slack of now (estimates are whole seconds: a free partition answers the next one);
# null without one.
start_of(p) := input.now if {
	is_number(estimate_of(p).at)
	is_number(input.now)
	estimate_of(p).at <= input.now + wait.slack
} else := estimate_of(p).at if {
	is_number(estimate_of(p).at)
} else := null

# A pool of a known shape with a price: the shape's verdict, its budget, its project's quota (what
# the projects hold: input.quota_use, as the caller reads it from its store), its start and its
# capacity. The pool gives the first of its grants (the smallest share that covers the request,
# then the larger ones the budget allows, when the smallest is within it) with room now in
# capacity and quota; with none, the first with room in capacity (and its quota's reasons); with
# none, the smallest (its quota's reasons and its shortfall). The quota's reasons whatever the use
# (quota_unknown, quota_too_small) deny the pool as its shape does, and so does a capacity that
# could never hold the grant (small: a pool counted as one node with fewer devices in all than the
# grant asks of one node, checks/capacity).
priced_verdict(p, v, carbon) := pv if {
	price := {"cost_per_hour": p.cost_per_hour, "carbon_per_hour": carbon}
	o := offer(v, price, object.get(p, "capacity", {}), object.get(input, "quota_use", {}))
	over := budget.exceeded(o.given.limits, price)
	pv := {
		"pool": p.name,
		"tier": v.tier,
		"denials": array.flatten([v.denials, over, o.small, o.quota_over, [v.shortfall | not o.fits]]),
		"late": [],
		"estimate": estimate_of(p),
		"start": start_of(p),
		"shape_denied": (((count(v.denials) + count(over)) + count(o.small)) + count(v.quota.always)) > 0,
		"fits": o.fits,
		# Room for one of its grants now: its capacity, and its project's quota.
		"room": o.room,
		"grant": o.given.grant,
		"grant_cost_per_hour": nine(p.cost_per_hour * o.given.grant.devices),
		"grant_carbon_per_hour": nine(carbon * o.given.grant.devices),
		# Units of the workload's work its grant does per second (throughput.yaml; null: no row).
		"work_rate": work_rate(work_rows, object.get(p, "model", null), o.given.grant),
		"cost_per_hour": p.cost_per_hour,
		"fallback": v.fallback,
		"burst": v.burst,
		"note": v.note,
		"note_full": v.note_full,
		"note_budget": v.note_budget,
		"requested": v.tier in {0, 2},
		# Passes every check but the budget (the quota's reasons whatever the use among them).
		"over_budget_only": over_budget_only(v, o.small, over),
		# Stopped by data governance alone: not also over its budget, nor refused by its quota.
		"blocks_burst": count([1 | v.blocks_burst; count(over) == 0; count(v.quota.always) == 0]) > 0,
	}
}

# Whether a pool passes every check but the budget: its shape's, its capacity's for ever (small)
# and its quota's whatever the use.
over_budget_only(v, small, over) if {
	count(v.denials) == 0
	count(small) == 0
	count(v.quota.always) == 0
	count(over) > 0
} else := false

# The grants a pool of verdict v may give at this price, in order: the smallest share that covers
# the request, then (when the budget allows that one) each larger share the budget allows and its
# quota does not refuse whatever the projects hold.
candidates(v, price) := array.concat([{"grant": v.grant, "limits": v.limits, "quota": v.quota}], [a |
	count(budget.exceeded(v.limits, price)) == 0
	some a in v.alternatives
	count(budget.exceeded(a.limits, price)) == 0
	count(a.quota.always) == 0
])

# What a pool of verdict v offers at this price, with this capacity, while the projects hold use:
# whether one of its grants has room in capacity (fits) and in capacity and quota (room), the grant
# it gives (granted) and that grant's quota reasons, and whether its capacity could never hold the
# grant (small: the capacity check's pool_too_small, for a pool counted as one node).
offer(v, price, cap, use) := o if {
	spacious := [c | some c in candidates(v, price); capacity.room(c.grant, cap)]
	roomy := [c | some c in spacious; count(quota_reasons(c, use)) == 0]
	given := granted(roomy, spacious, v)
	o := {
		"fits": count(spacious) > 0,
		"room": count(roomy) > 0,
		"given": given,
		"quota_over": quota_reasons(given, use),
		"small": capacity.too_small(object.get(v, "too_small", null), cap),
	}
}

# A grant's quota reasons given what the projects hold.
quota_reasons(c, use) := quota.exceeded(c.quota, quota.use_of(c.quota, use))

# What a pool gives: the first grant with room in capacity and quota, else the first with room in
# capacity, else the smallest.
granted(roomy, _, _) := roomy[0] if count(roomy) > 0

granted(roomy, spacious, _) := spacious[0] if {
	count(roomy) == 0
	count(spacious) > 0
}

granted(_, spacious, v) := {"grant": v.grant, "limits": v.limits, "quota": v.quota} if count(spacious) == 0

unknown_verdict(p) := {
	"pool": p.name,
	"tier": 4,
	"denials": [unknown_pool(p)],
	"late": [],
	"estimate": null,
	"start": null,
	"shape_denied": true,
	"fits": false,
	"room": false,
	"grant": null,
	"grant_cost_per_hour": 0,
	"grant_carbon_per_hour": 0,
	"work_rate": null,
	"cost_per_hour": object.get(p, "cost_per_hour", 0),
	"fallback": false,
	"burst": false,
	"note": null,
	"note_full": null,
	"note_budget": null,
	"requested": false,
	"over_budget_only": false,
	"blocks_burst": false,
}

# Costs and carbon compare at nine decimals, as the caller compares them.
nine(x) := round(x * 1000000000) / 1000000000

unknown_pool(p) := reason.make(
	"shape_unknown",
	"never",
	sprintf("pool '%s' names shape '%v', which the policy was not given", [p.name, object.get(p, "shape", null)]),
	{"pool": p.name},
) if {
	not shape_verdicts[object.get(p, "shape", null)]
} else := reason.make(
	"price_unknown",
	"never",
	sprintf("pool '%s' has no price per device-hour", [p.name]),
	{"pool": p.name},
) if {
	not is_number(object.get(p, "cost_per_hour", null))
} else := reason.make(
	"carbon_unknown",
	"never",
	sprintf("pool '%s' has no carbon figure per device-hour: it cannot be held to a carbon cap or objective", [p.name]),
	{"pool": p.name},
)

admissible := [name |
	rejection == null
	some name, pv in pool_verdicts
	count(pv.denials) == 0
]

default selected_tier := null

selected_tier := min({pool_verdicts[n].tier | some n in admissible}) if count(admissible) > 0

eligible := sort([n | some n in admissible; pool_verdicts[n].tier == selected_tier])

# Within the best tier: the cheapest grant (then the name); or the lowest carbon of the grant (then
# cost, name); or the earliest start (a pool without an estimate last; then cost, name); or,
# balanced, both normalised by the highest among the eligible and weighted by carbon_weight (then
# cost, name).
selection_key(pv, n, wl, most_cost, most_carbon) := [pv.grant_cost_per_hour, n] if {
	wl.optimize == "cost"
} else := [pv.grant_carbon_per_hour, pv.grant_cost_per_hour, n] if {
	wl.optimize == "carbon"
} else := [start_rank(pv.start), pv.grant_cost_per_hour, n] if {
	wl.optimize == "earliest"
} else := array.concat(work_key(pv, wl), [pv.grant_cost_per_hour, n]) if {
	startswith(wl.optimize, "work-")
} else := [balanced_score(pv, wl.carbon_weight, most_cost, most_carbon), pv.grant_cost_per_hour, n]

# By the workload's work: the pools whose throughput is known first, by the cost (work-cost) or
# carbon (work-carbon) of the whole job there, or its completion (work-time: its start, relative
# to now, plus its run time; a pool without a start estimate after those with one); then the
# pools with no throughput known, as they rank without it (by cost, by carbon, by start).
work_key(pv, wl) := [0, nine((pv.grant_cost_per_hour * wl.work) / (pv.work_rate * 3600))] if {
	wl.optimize == "work-cost"
	pv.work_rate != null
} else := [1, pv.grant_cost_per_hour] if {
	wl.optimize == "work-cost"
} else := [0, nine((pv.grant_carbon_per_hour * wl.work) / (pv.work_rate * 3600))] if {
	wl.optimize == "work-carbon"
	pv.work_rate != null
} else := [1, pv.grant_carbon_per_hour] if {
	wl.optimize == "work-carbon"
} else := [0, waited[0], nine(waited[1] + (wl.work / pv.work_rate))] if {
	pv.work_rate != null
	waited := wait_of(pv.start)
} else := array.concat([1], wait_of(pv.start))

# A start as [known, seconds from now]: [0, s] with an estimate, [1, 0] without one.
wait_of(s) := [0, s - input.now] if {
	s != null
	is_number(input.now)
} else := [1, 0]

# The rows of the workload's class of work (empty: it names none).
default work_rows := {}

work_rows := throughput.classes[w.work_class] if w.work_class != null

# What the grant g of a pool of this model does per second of the class with these rows: a whole
# device's row x its devices, a partition profile's own row x its slices; null where the table
# has no row (no class, no model, a shared device, a profile without its row).
work_rate(rows, model, g) := rate if {
	is_string(model)
	object.get(g, "shares", null) == null
	g.profile == null
	rate := rows.models[lower(model)].per_second * g.devices
} else := rate if {
	is_string(model)
	object.get(g, "shares", null) == null
	g.profile != null
	rate := rows.profiles[lower(model)][g.profile].per_second * (g.units * object.get(g, "nodes", 1))
} else := null

# Known starts first, soonest first; then the pools without an estimate.
start_rank(null) := [1, 0]

start_rank(s) := [0, s] if s != null

balanced_score(pv, weight, most_cost, most_carbon) := nine(cost_part + carbon_part) if {
	cost_part := (1 - weight) * share_of(pv.grant_cost_per_hour, most_cost)
	carbon_part := weight * share_of(pv.grant_carbon_per_hour, most_carbon)
}

max_cost := max({pool_verdicts[n].grant_cost_per_hour | some n in eligible})

max_carbon := max({pool_verdicts[n].grant_carbon_per_hour | some n in eligible})

share_of(_, 0) := 0

share_of(x, m) := x / m if m != 0

default chosen_pool := null

chosen_pool := last(sort([selection_key(pool_verdicts[n], n, w, max_cost, max_carbon) | some n in eligible])[0]) if {
	count(eligible) > 0
}

last(row) := row[count(row) - 1]

# The eligible pools that tie with the chosen one: the same key but for the name (the same tier and
# the same figures under the objective), by name. Which of them takes the work is the node packer's
# choice (its best node among all of theirs); the chosen pool above is the first by name.
default tied := []

tied := [n |
	some n in eligible
	but_name(selection_key(pool_verdicts[n], n, w, max_cost, max_carbon)) == but_name(best_key)
] if {
	count(eligible) > 0
	best_key := sort([selection_key(pool_verdicts[n], n, w, max_cost, max_carbon) | some n in eligible])[0]
}

but_name(row) := array.slice(row, 0, count(row) - 1)

chosen if chosen_pool != null

default chosen_note := null

# The chosen pool's note: a fallback says whether the requested accelerator's pools are full (they
# pass every check but have no room), over the budget (they pass every other check) or
# unavailable; spot capacity and a fraction not honored say so.
chosen_note := concat("; ", notes) if {
	chosen
	notes := [n | some n in [fallback_note(pool_verdicts[chosen_pool]), pool_verdicts[chosen_pool].grant.note]; n != null]
	count(notes) > 0
}

fallback_note(pv) := pv.note_full if {
	full_fallback(pv)
} else := pv.note_budget if {
	over_budget_fallback(pv)
} else := pv.note

hpc_admissible if {
	some n in admissible
	pool_verdicts[n].tier < 2
}

burst_attempted if {
	rejection == null
	composer.burst_mode == "cloud"
}

burst_attempted if {
	rejection == null
	composer.burst_mode == "spill"
	not hpc_admissible
}

# Cloud pools with room (capacity and quota) that data governance alone stops (the checks that
# declare blocks_burst: residency, export control), cheapest first: the one a blocked burst names.
residency_blocked := sort([[pv.cost_per_hour, name] |
	some name, pv in pool_verdicts
	pv.blocks_burst
	pv.room
])

default burst := {"attempted": true, "verdict": "unavailable", "pool": null, "reason": null}

burst := {"attempted": false} if {
	not burst_attempted
} else := {"attempted": true, "verdict": "allowed", "pool": null, "reason": null} if {
	selected_tier >= 2
} else := {
	"attempted": true,
	"verdict": "blocked",
	"pool": blocked_pool,
	"reason": pool_verdicts[blocked_pool].denials[0],
} if {
	count(residency_blocked) > 0
}

# The pool a blocked burst names.
blocked_pool := residency_blocked[0][1]

# Why a pool of tier t was passed over when tier sel won (null: it is of that tier).
preference_for(t, sel) := null if {
	t == sel
} else := tiers.preference(w, t, sel) if {
	sel != null
} else := composer.request_rejected

reasons_of(pv) := array.concat(pv.denials, [r |
	count(pv.denials) == 0
	r := preference_for(pv.tier, selected_tier)
	r != null
])

default outcome := "rejected"

outcome := "placed" if {
	chosen
} else := "blocked" if {
	burst.verdict == "blocked"
}

# Why nothing was placed, when the workload itself was fine: counts of each reason code over the
# pools, in the composer's words (texts), as the caller fills them in.
summary := {"code": "no_pools", "message": texts.no_pools} if {
	count(input.pools) == 0
} else := {"code": shortfall_code, "message": message} if {
	counts := {c: n |
		some c in {r.code | some pv in pool_verdicts; some r in pv.denials}
		n := count([1 | some pv in pool_verdicts; some r in pv.denials; r.code == c])
	}
	parts := [counted(c, counts[c]) | some c in sort(object.keys(counts))]
	message := strings.replace_n(
		{
			"{workload}": object.get(w, "name", "the workload"),
			"{checked}": format_int(count(pool_verdicts), 10),
			"{reasons}": concat(texts.separator, parts),
		},
		texts[shortfall_text],
	)
}

# The headline: a workload that could run later is told what stops the pools that could take it.
shortfall_text := composer.headline(waiting_causes) if {
	shortfall_code == "no_capacity"
} else := shortfall_code

waiting_causes := {composer.cause({r.code | some r in pv.denials}) |
	some pv in pool_verdicts
	count(pv.denials) > 0
	every r in pv.denials {
		r.kind == "not_now"
	}
}

# Some pool is stopped by capacity alone: the workload could run once capacity frees.
default shortfall_code := "no_eligible_pool"

shortfall_code := "no_capacity" if {
	some pv in pool_verdicts
	count(pv.denials) > 0
	every r in pv.denials {
		r.kind == "not_now"
	}
}

counted(c, 1) := strings.replace_n({"{code}": c}, texts.reason_on_one)

counted(c, n) := strings.replace_n({"{code}": c, "{count}": format_int(n, 10)}, texts.reason_on_many) if n != 1

default result_reason := null

result_reason := {"code": rejection.code, "message": rejection.message} if {
	rejection != null
} else := {"code": burst.reason.code, "message": burst.reason.message} if {
	outcome == "blocked"
} else := summary if {
	outcome == "rejected"
}

decision := {
	"workload": w,
	"outcome": outcome,
	"pool": chosen_pool,
	"note": chosen_note,
	"selected_tier": selected_tier,
	"eligible": eligible,
	"tied": tied,
	"burst": burst,
	"reason": result_reason,
	"rejection": rejection,
	"verdicts": {name: object.union(pv, {
		"reasons": reasons_of(pv),
		"admissible": count(pv.denials) == 0,
		"eligible": name in eligible,
	}) |
		some name, pv in pool_verdicts
	},
	"confirm": composer.confirm,
}

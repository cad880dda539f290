# METADATA
# title: Placement
# description: >-
#   Composes the checks under examlops.hardware.checks (one package per check, each with
#   `deny contains reason if ...` over input.shape and input.workload and a METADATA block naming
#   its reason codes and the shape and workload fields it reads) into per-shape verdicts, and the
#   verdicts into a decision.
#
#   A shape is everything the policy judges a pool by except its capacity and price; a pool's
#   verdict depends only on its shape, the workload's signature fields and the policy revision, so
#   the caller keeps verdicts per (revision, workload signature, shape key) and asks again only for
#   shapes it has none for.
#
#   Entry points:
#     confirm    the loaded bundle revision and the OPA version: one cheap call per decision
#     about      the revision, the signature (the shape and workload fields verdicts depend on) and
#                the checks with their reason codes, from the checks' own metadata
#     verdicts   compact per-shape verdicts (codes and small vectors) for input.keys, shapes from
#                data.examlops_fleet.shapes (or input.shapes)
#     decision   the complete reference decision over input.pools with their capacity and prices:
#                the pool chosen, the burst verdict and every pool's verdict with its reasons
#
#   Its input is typed for `opa check --strict -s schemas/`: placement-input.schema.json, and the
#   workload as workload.schema.json.
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
# custom:
#   codes:
#     shape_unknown: {kind: never, meaning: "(reference decision) a pool whose shape the policy was not given"}
#     price_unknown: {kind: never, meaning: "(reference decision) a pool without a price per device-hour"}
#     carbon_unknown: {kind: never, meaning: "(reference decision) a pool without a carbon figure per device-hour"}
#     check_unsupported: {kind: never, meaning: "a check declares a stage this composer cannot run: nothing is placed"}
package examlops.hardware.placement

import data.examlops.hardware.checks
import data.examlops.hardware.checks.budget
import data.examlops.hardware.checks.capacity
import data.examlops.hardware.checks.portability
import data.examlops.hardware.fractions
import data.examlops.hardware.reason
import data.examlops.hardware.tiers
import data.examlops.hardware.workload

import data.examlops.fleet

# --- the checks, read from their own metadata -------------------------------------------------

check_about := {name: a |
	some name
	a := checks[name].about
}

stage(a) := object.get(a, ["custom", "stage"], "shape")

reads(a, kind) := object.get(a, ["custom", "reads", kind], [])

# The pool-stage checks this composer runs: each compares a pool's own capacity or price with what
# its shape's verdict granted (the caller makes the same comparisons from the compact answer). A
# check declaring any other stage, or another pool-stage check, cannot be run: fail closed.
pool_stage_checks := {"capacity", "budget"}

unsupported_checks := sort([name |
	some name, a in check_about
	not runnable(name, stage(a))
])

runnable(_, "shape")

runnable(name, "pool") if name in pool_stage_checks

# Per-shape checks, in their declared order (then by name).
shape_checks := [name |
	some [_, name] in sort([[a.custom.order, n] | some n, a in check_about; stage(a) == "shape"])
]

# Everything a shape verdict may depend on: the fields the checks, the grant and the tiers read.
core_about := [fractions.about, tiers.about]

# This package's own annotations (the reference decision's codes).
own_about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

signature := {
	"shape": sort({f |
		some a in array.flatten([[a | some a in check_about], core_about])
		some f in reads(a, "shape")
	}),
	"workload": sort({f |
		some a in array.flatten([[a | some a in check_about], core_about, [workload.about]])
		some f in reads(a, "workload")
	}),
}

codes_of(a) := [{"code": code, "kind": c.kind, "meaning": c.meaning} |
	some code, c in object.get(a, ["custom", "codes"], {})
]

# The checks for people (explanations, the README's reason-code table), in order.
check_list := [{
	"name": name,
	"title": check_about[name].title,
	"stage": stage(check_about[name]),
	"order": check_about[name].custom.order,
	"codes": codes_of(check_about[name]),
} |
	some [_, name] in sort([[a.custom.order, n] | some n, a in check_about])
]

# --- provenance ----------------------------------------------------------------------------------

# The revision of the bundle that owns examlops (what was reviewed); null when the policy was not
# loaded from a bundle, which the caller refuses.
default revision := null

revision := r if {
	some b in data.system.bundles
	"examlops" in b.manifest.roots
	r := b.manifest.revision
}

# METADATA
# title: confirm
# description: The loaded bundle revision and the OPA version; one cheap call per decision.
# entrypoint: true
confirm := {"revision": revision, "opa_version": opa.runtime().version}

# METADATA
# title: about
# description: >-
#   The revision, the signature (the shape and workload fields verdicts depend on), the checks
#   with their reason codes (from their own metadata) and the other codes.
# entrypoint: true
about := {
	"revision": revision,
	"opa_version": opa.runtime().version,
	"signature": signature,
	"checks": check_list,
	"other_codes": array.flatten([codes_of(workload.about), codes_of(tiers.about), codes_of(own_about)]),
	"unsupported_checks": unsupported_checks,
}

# --- the workload --------------------------------------------------------------------------------

w := workload.normalize(input.workload)

errors := workload.errors(w)

valid if count(errors) == 0

# Why the workload as asked cannot be placed anywhere: invalid input, or an engine that cannot run
# on the requested accelerator (never silently placed on another device).
rejection := reason.make(
	"check_unsupported",
	"never",
	sprintf(
		"the policy declares check(s) %s at a stage this composer cannot run; nothing is placed",
		[concat(", ", unsupported_checks)],
	),
	{"checks": unsupported_checks},
) if {
	count(unsupported_checks) > 0
} else := errors[0] if {
	count(errors) > 0
} else := portability.check(w.engine, w.accelerator)

# How cloud pools come in: "cloud" (the workload targets cloud), "spill" (allow_burst: only when no
# HPC pool can take it), or null (never).
default burst_mode := null

burst_mode := "cloud" if {
	w.target == "cloud"
} else := "spill" if {
	w.allow_burst == true
}

# --- shape verdicts ------------------------------------------------------------------------------

# (Not object.keys below: it would make the keys of an input.shapes that is not an object
# undefined, where they are its indexes today.)
keys := {k | some k in input.keys} if {
	input.keys
} else := {k | some k, _ in input.shapes} if { # regal ignore:use-object-keys
	input.shapes
} else := {p.shape | some p in input.pools}

shape_of(k) := s if {
	s := input.shapes[k]
} else := s if {
	s := fleet.shape(k) # only a stored shape that hashes to its key (examlops.fleet)
}

judged := {k: s |
	some k in keys
	s := shape_of(k)
}

# Keys the caller asked about that have no shape here (the caller uploads them and asks again).
missing := sort([k | some k in keys; not judged[k]])

# Each check runs once per distinct projection of the shapes onto the fields it declares, and sees
# only those fields (and the workload's fields it declares): a fleet repeats a few accelerators,
# targets and regions, and a check cannot depend on a field its metadata does not name.
shape_fields_of := {name: reads(check_about[name], "shape") | some name in shape_checks}

# A shape's values for the fields a check reads, in the declared order.
projection(s, fields) := [object.get(s, f, null) | some f in fields]

# The shape a check sees: only the fields it declares.
projected(p, fields) := {f: p[i] | some i, f in fields}

# Each check runs once per distinct projection of the shapes onto the fields it declares, and sees
# only those fields (and the workload's fields it declares): a fleet repeats a few accelerators,
# targets and regions, and a check cannot depend on a field its metadata does not name.
# check_results[name] lists [projection, denials] in a fixed order; check_index[name] finds a
# projection's position in it.
check_results := {name: results |
	valid
	some name in shape_checks
	fields := shape_fields_of[name]
	wproj := object.filter(w, reads(check_about[name], "workload"))
	results := [[p, ds] |
		some p in sort({projection(s, fields) | some s in judged})

		# Each check sees only its projection of the shape: with input is the point here.
		# regal ignore:with-outside-test-context
		d := checks[name].deny with input as {"shape": projected(p, fields), "workload": wproj}
		ds := sort([r | some r in d])
	]
}

check_index := {name: {p: i | some i, [p, _] in rows} | some name, rows in check_results}

# The tier and the grant depend on a few fields too: each is worked out once per distinct value.
tier_fields := reads(tiers.about, "shape")

grant_fields := reads(fractions.about, "shape")

tier_results := {p: [t, tiers.note(sh, w, t), tiers.note_full(sh, w, t)] |
	valid
	some p in {projection(s, tier_fields) | some s in judged}
	sh := projected(p, tier_fields)
	t := tiers.tier(sh, w)
}

note_list := sort({n | some row in tier_results; some n in array.slice(row, 1, 3); n != null})

note_index := {n: i | some i, n in note_list}

# Per distinct grant: [projection, grant, the shortfall reason, the budget's limits per device-hour].
grant_rows := [[p, g, capacity.shortfall(sh, g), budget.limits(w, g)] |
	valid
	some p in sort({projection(s, grant_fields) | some s in judged})
	sh := projected(p, grant_fields)
	g := fractions.grant(sh, w)
]

grant_index := {p: i | some i, [p, _, _, _] in grant_rows}

# [check name, projection index] of each check that denies the shape, in check order.
denying(s) := [[name, i] |
	some name in shape_checks
	i := check_index[name][projection(s, shape_fields_of[name])]
	check_results[name][i][1] != []
]

# A cloud pool stopped only by data governance (residency): what a blocked burst names.
blocks_burst(t, denied) if {
	count(denied) > 0
	tiers.is_burst(t)
	every row in denied {
		check_about[row[0]].custom.blocks_burst == true
	}
}

else := false

# Per shape: [tier, note index or -1, index of the note when the requested accelerator's pools are
# full or -1, [[check, projection index] of each denying check], grant index, blocks_burst]. The
# tier says fallback (odd) and burst (2 or more).
shape_rows := {k: [t, note_at(note), note_at(full), denied, grant_at(s), blocks_burst(t, denied)] |
	valid
	some k, s in judged
	[t, note, full] := tier_results[projection(s, tier_fields)]
	denied := denying(s)
}

grant_at(s) := grant_index[projection(s, grant_fields)]

note_at(n) := object.get(note_index, [n], -1)

# Why a pool of tier t is passed over when tier sel won: for every pair, so that the answer does not
# depend on which shapes a query happened to judge (the caller keeps it for later queries).
all_tiers := [0, 1, 2, 3]

default request_rejected := null

request_rejected := tiers.rejected(rejection) if {
	valid
	rejection != null
}

# METADATA
# title: verdicts
# description: >-
#   Compact per-shape verdicts for input.keys (shapes from input.shapes or
#   data.examlops_fleet.shapes): codes and small vectors the caller decodes and keeps.
# entrypoint: true
verdicts := {
	"confirm": confirm,
	# false for an invalid workload: it is judged against no pool at all.
	"judged": count(errors) == 0,
	"rejection": rejection,
	"burst_mode": burst_mode,
	"missing": missing,
	"checks": {name: [ds | some [_, ds] in rows] | some name, rows in check_results},
	"grants": [[g, sf, lim] | some [_, g, sf, lim] in grant_rows],
	"notes": note_list,
	"shapes": shape_rows,
	"preferences": [[t, sel, tiers.preference(w, t, sel)] |
		valid
		some t in all_tiers
		some sel in all_tiers
		t > sel
	],
	"request_rejected": request_rejected,
}

# --- the reference decision -----------------------------------------------------------------------

note_text(-1) := null

note_text(i) := note_list[i] if i >= 0

# A shape's verdict in full, from the rows above.
shape_verdict(k) := verdict_of_row(shape_rows[k], grant_rows[shape_rows[k][4]])

verdict_of_row(row, grant_row) := {
	"tier": row[0],
	"fallback": tiers.is_fallback(row[0]),
	"burst": tiers.is_burst(row[0]),
	"note": note_text(row[1]),
	"note_full": note_text(row[2]),
	"denials": [r | some [name, i] in row[3]; some r in check_results[name][i][1]],
	"grant": grant_row[1],
	"shortfall": grant_row[2],
	"limits": grant_row[3],
	"blocks_burst": row[5],
}

pool_verdicts := {p.name: pv |
	valid
	some p in input.pools
	pv := pool_verdict(p)
}

# Every pool gets a verdict: one whose shape or price the policy was not given is denied for it.
pool_verdict(p) := priced_verdict(p, v, p.carbon_per_hour) if {
	is_number(p.cost_per_hour)
	is_number(p.carbon_per_hour)
	v := shape_verdict(p.shape)
} else := unknown_verdict(p)

# A pool of a known shape with a price: the shape's verdict, its budget and its capacity.
priced_verdict(p, v, carbon) := pv if {
	fits := capacity.room(v.grant, object.get(p, "capacity", {}))
	over := budget.exceeded(v.limits, {"cost_per_hour": p.cost_per_hour, "carbon_per_hour": carbon})
	pv := {
		"pool": p.name,
		"tier": v.tier,
		"denials": array.flatten([v.denials, over, [v.shortfall | not fits]]),
		"shape_denied": (count(v.denials) + count(over)) > 0,
		"fits": fits,
		"grant": v.grant,
		"grant_cost_per_hour": nine(p.cost_per_hour * v.grant.devices),
		"grant_carbon_per_hour": nine(carbon * v.grant.devices),
		"cost_per_hour": p.cost_per_hour,
		"fallback": v.fallback,
		"burst": v.burst,
		"note": v.note,
		"note_full": v.note_full,
		"requested": v.tier in {0, 2},
		# Stopped by data governance alone: not also over its budget.
		"blocks_burst": count([1 | v.blocks_burst; count(over) == 0]) > 0,
	}
}

unknown_verdict(p) := {
	"pool": p.name,
	"tier": 4,
	"denials": [unknown_pool(p)],
	"shape_denied": true,
	"fits": false,
	"grant": null,
	"grant_cost_per_hour": 0,
	"grant_carbon_per_hour": 0,
	"cost_per_hour": object.get(p, "cost_per_hour", 0),
	"fallback": false,
	"burst": false,
	"note": null,
	"note_full": null,
	"requested": false,
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
	not shape_verdict(object.get(p, "shape", null))
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
# cost, name); or, balanced, both normalised by the highest among the eligible and weighted by
# carbon_weight (then cost, name).
selection_key(pv, n, wl, most_cost, most_carbon) := [pv.grant_cost_per_hour, n] if {
	wl.optimize == "cost"
} else := [pv.grant_carbon_per_hour, pv.grant_cost_per_hour, n] if {
	wl.optimize == "carbon"
} else := [balanced_score(pv, wl.carbon_weight, most_cost, most_carbon), pv.grant_cost_per_hour, n]

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

chosen if chosen_pool != null

default chosen_note := null

# The chosen pool's note: a fallback says whether the requested accelerator's pools are full (they
# pass every check but have no room) or unavailable; a fraction not honored says so.
chosen_note := concat("; ", notes) if {
	chosen
	notes := [n | some n in [fallback_note(pool_verdicts[chosen_pool]), pool_verdicts[chosen_pool].grant.note]; n != null]
	count(notes) > 0
}

fallback_note(pv) := pv.note_full if {
	pv.fallback
	some other in pool_verdicts
	other.requested
	other.tier < pv.tier
	not other.shape_denied
} else := pv.note

hpc_admissible if {
	some n in admissible
	pool_verdicts[n].tier < 2
}

burst_attempted if {
	rejection == null
	burst_mode == "cloud"
}

burst_attempted if {
	rejection == null
	burst_mode == "spill"
	not hpc_admissible
}

# Cloud pools with room that data governance alone stops (the checks that declare blocks_burst:
# residency, export control), cheapest first: the one a blocked burst names.
residency_blocked := sort([[pv.cost_per_hour, name] |
	some name, pv in pool_verdicts
	pv.blocks_burst
	pv.fits
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
} else := request_rejected

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
# pools, worded as the caller words it.
summary := {"code": "no_pools", "message": "no pools are registered"} if {
	count(input.pools) == 0
} else := {"code": code, "message": message} if {
	[code, what] := shortfall_kind
	counts := {c: n |
		some c in {r.code | some pv in pool_verdicts; some r in pv.denials}
		n := count([1 | some pv in pool_verdicts; some r in pv.denials; r.code == c])
	}
	parts := [sprintf("%s on %s", [c, plural(counts[c], "pool", "pools")]) | some c in sort(object.keys(counts))]
	message := sprintf(
		"no pool %s for %s (%d checked: %s)",
		[what, object.get(w, "name", "the workload"), count(pool_verdicts), concat(", ", parts)],
	)
}

# Some pool is stopped by capacity alone: the workload could run once capacity frees.
default shortfall_kind := ["no_eligible_pool", "is eligible"]

shortfall_kind := ["no_capacity", "has free capacity"] if {
	some pv in pool_verdicts
	count(pv.denials) > 0
	every r in pv.denials {
		r.kind == "not_now"
	}
}

plural(1, one, _) := sprintf("1 %s", [one])

plural(n, _, many) := sprintf("%d %s", [n, many]) if n != 1

default result_reason := null

result_reason := {"code": rejection.code, "message": rejection.message} if {
	rejection != null
} else := {"code": burst.reason.code, "message": burst.reason.message} if {
	outcome == "blocked"
} else := summary if {
	outcome == "rejected"
}

# METADATA
# title: decision
# description: >-
#   The complete reference decision over input.pools with their capacity, prices and carbon: the
#   pool chosen and its note, the burst verdict and every pool's verdict with its reasons.
# entrypoint: true
decision := {
	"workload": w,
	"outcome": outcome,
	"pool": chosen_pool,
	"note": chosen_note,
	"selected_tier": selected_tier,
	"eligible": eligible,
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
	"confirm": confirm,
}

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
# custom:
#   codes:
#     shape_unknown: {kind: never, meaning: "(reference decision) a pool whose shape the policy was not given"}
#     price_unknown: {kind: never, meaning: "(reference decision) a pool without a price per device-hour"}
package examlops.hardware.placement

import data.examlops.hardware.checks
import data.examlops.hardware.checks.capacity
import data.examlops.hardware.checks.portability
import data.examlops.hardware.fractions
import data.examlops.hardware.reason
import data.examlops.hardware.tiers
import data.examlops.hardware.workload

# --- the checks, read from their own metadata -------------------------------------------------

check_about := {name: a |
	some name
	a := checks[name].about
}

stage(a) := object.get(a, ["custom", "stage"], "shape")

reads(a, kind) := object.get(a, ["custom", "reads", kind], [])

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
		some a in array.concat([a | some a in check_about], core_about)
		some f in reads(a, "shape")
	}),
	"workload": sort({f |
		some a in array.concat([a | some a in check_about], array.concat(core_about, [workload.about]))
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

confirm := {"revision": revision, "opa_version": opa.runtime().version}

about := {
	"revision": revision,
	"opa_version": opa.runtime().version,
	"signature": signature,
	"checks": check_list,
	"other_codes": array.concat(array.concat(codes_of(workload.about), codes_of(tiers.about)), codes_of(own_about)),
}

# --- the workload --------------------------------------------------------------------------------

w := workload.normalize(input.workload)

errors := workload.errors(w)

valid if count(errors) == 0

# Why the workload as asked cannot be placed anywhere: invalid input, or an engine that cannot run
# on the requested accelerator (never silently placed on another device).
rejection := errors[0] if {
	count(errors) > 0
} else := portability.check(w.engine, w.accelerator)

# How cloud pools come in: "cloud" (the workload targets cloud), "spill" (allow_burst: only when no
# HPC pool can take it), or null (never).
burst_mode := "cloud" if {
	w.target == "cloud"
} else := "spill" if {
	w.allow_burst == true
} else := null

# --- shape verdicts ------------------------------------------------------------------------------

keys := {k | some k in input.keys} if {
	input.keys
} else := {k | some k, _ in input.shapes} if {
	input.shapes
} else := {p.shape | some p in input.pools}

shape_of(k) := s if {
	s := input.shapes[k]
} else := s if {
	s := data.examlops_fleet.shapes[k]
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
		d := checks[name].deny with input as {"shape": projected(p, fields), "workload": wproj}
		ds := sort([r | some r in d])
	]
}

check_index := {name: {p: i | some i, [p, _] in rows} | some name, rows in check_results}

# The tier and the grant depend on a few fields too: each is worked out once per distinct value.
tier_fields := reads(tiers.about, "shape")

grant_fields := reads(fractions.about, "shape")

tier_results := {p: [t, tiers.note(sh, w, t)] |
	valid
	some p in {projection(s, tier_fields) | some s in judged}
	sh := projected(p, tier_fields)
	t := tiers.tier(sh, w)
}

note_list := sort({n | some [_, n] in tier_results; n != null})

note_index := {n: i | some i, n in note_list}

grant_rows := [[p, g, capacity.shortfall(sh, g)] |
	valid
	some p in sort({projection(s, grant_fields) | some s in judged})
	sh := projected(p, grant_fields)
	g := fractions.grant(sh, w)
]

grant_index := {p: i | some i, [p, _, _] in grant_rows}

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
		object.get(check_about[row[0]], ["custom", "blocks_burst"], false) == true
	}
}

else := false

# Per shape: [tier, note index or -1, [[check, projection index] of each denying check], grant
# index, blocks_burst]. The tier says fallback (odd) and burst (2 or more).
shape_rows := {k: [t, object.get(note_index, [note], -1), denied, grant_index[projection(s, grant_fields)], blocks_burst(t, denied)] |
	valid
	some k, s in judged
	[t, note] := tier_results[projection(s, tier_fields)]
	denied := denying(s)
}

# Why a pool of tier t is passed over when tier sel won: for every pair, so that the answer does not
# depend on which shapes a query happened to judge (the caller keeps it for later queries).
all_tiers := [0, 1, 2, 3]

request_rejected := tiers.rejected(rejection) if {
	valid
	rejection != null
} else := null

verdicts := {
	"confirm": confirm,
	# false for an invalid workload: it is judged against no pool at all.
	"judged": count(errors) == 0,
	"rejection": rejection,
	"burst_mode": burst_mode,
	"missing": missing,
	"checks": {name: [ds | some [_, ds] in rows] | some name, rows in check_results},
	"grants": [[g, sf] | some [_, g, sf] in grant_rows],
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
shape_verdict(k) := {
	"tier": row[0],
	"fallback": tiers.is_fallback(row[0]),
	"burst": tiers.is_burst(row[0]),
	"note": note_text(row[1]),
	"denials": [r | some [name, i] in row[2]; some r in check_results[name][i][1]],
	"grant": grant_rows[row[3]][1],
	"shortfall": grant_rows[row[3]][2],
	"blocks_burst": row[4],
} if {
	row := shape_rows[k]
}

pool_verdicts := {p.name: pv |
	valid
	some p in input.pools
	pv := pool_verdict(p)
}

# Every pool gets a verdict: one whose shape or price the policy was not given is denied for it.
pool_verdict(p) := pv if {
	v := shape_verdict(p.shape)
	is_number(p.cost_per_hour)
	fits := capacity.room(v.grant, object.get(p, "capacity", {}))
	pv := {
		"pool": p.name,
		"tier": v.tier,
		"denials": array.concat(v.denials, [v.shortfall | not fits]),
		"fits": fits,
		"grant": v.grant,
		"grant_cost_per_hour": round((p.cost_per_hour * v.grant.devices) * 1000000000) / 1000000000,
		"cost_per_hour": p.cost_per_hour,
		"fallback": v.fallback,
		"burst": v.burst,
		"note": v.note,
		"blocks_burst": v.blocks_burst,
	}
} else := {
	"pool": p.name,
	"tier": 4,
	"denials": [unknown_pool(p)],
	"fits": false,
	"grant": null,
	"grant_cost_per_hour": 0,
	"cost_per_hour": object.get(p, "cost_per_hour", 0),
	"fallback": false,
	"burst": false,
	"note": null,
	"blocks_burst": false,
}

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
)

admissible := [[pv.tier, pv.grant_cost_per_hour, name] |
	some name, pv in pool_verdicts
	count(pv.denials) == 0
]

chosen := sort(admissible)[0] if {
	rejection == null
	count(admissible) > 0
}

default selected_tier := null

selected_tier := chosen[0]

eligible := sort([name | some [t, _, name] in admissible; t == selected_tier])

hpc_admissible if {
	some [t, _, _] in admissible
	t < 2
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

# Cloud pools with room that residency alone stops, cheapest first: the one a blocked burst names.
residency_blocked := sort([[pv.cost_per_hour, name] |
	some name, pv in pool_verdicts
	pv.blocks_burst
	pv.fits
])

burst := {"attempted": false} if {
	not burst_attempted
} else := {"attempted": true, "verdict": "allowed", "pool": null, "reason": null} if {
	selected_tier >= 2
} else := {"attempted": true, "verdict": "blocked", "pool": name, "reason": pool_verdicts[name].denials[0]} if {
	[_, name] := residency_blocked[0]
} else := {"attempted": true, "verdict": "unavailable", "pool": null, "reason": null}

default chosen_pool := null

chosen_pool := chosen[2]

preference_for(t) := null if {
	t == selected_tier
} else := tiers.preference(w, t, selected_tier) if {
	selected_tier != null
} else := request_rejected

reasons_of(pv) := array.concat(pv.denials, [r | count(pv.denials) == 0; r := preference_for(pv.tier); r != null])

outcome := "placed" if {
	chosen
} else := "blocked" if {
	burst.verdict == "blocked"
} else := "rejected"

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
shortfall_kind := ["no_capacity", "has free capacity"] if {
	some pv in pool_verdicts
	count(pv.denials) > 0
	every r in pv.denials {
		r.kind == "not_now"
	}
} else := ["no_eligible_pool", "is eligible"]

plural(1, one, _) := sprintf("1 %s", [one])

plural(n, _, many) := sprintf("%d %s", [n, many]) if n != 1

result_reason := {"code": rejection.code, "message": rejection.message} if {
	rejection != null
} else := {"code": burst.reason.code, "message": burst.reason.message} if {
	outcome == "blocked"
} else := summary if {
	outcome == "rejected"
} else := null

decision := {
	"workload": w,
	"outcome": outcome,
	"pool": chosen_pool,
	"selected_tier": selected_tier,
	"eligible": eligible,
	"burst": burst,
	"reason": result_reason,
	"rejection": rejection,
	"verdicts": {name: object.union(pv, {"reasons": reasons_of(pv), "admissible": count(pv.denials) == 0, "eligible": name in eligible}) |
		some name, pv in pool_verdicts
	},
	"confirm": confirm,
}

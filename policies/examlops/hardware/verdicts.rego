# METADATA
# title: Verdicts
# description: >-
#   Per-shape verdicts, compact: the answer a caller decodes and keeps per (policy revision,
#   workload signature, shape key). A pool's verdict depends only on its shape, the workload's
#   signature fields and the policy revision, so the caller asks again only for shapes it has none
#   for (keys in input.keys; shapes from input.shapes, else data.examlops_fleet.shapes, read only
#   when a stored shape hashes to its key: examlops.fleet).
#
#   Each check runs once per distinct projection of the shapes onto the fields it declares, and sees
#   only those (and the workload's fields it declares): a fleet repeats a few accelerators, targets
#   and regions, and a check cannot depend on a field its metadata does not name. The tier and the
#   grant are worked out once per distinct value of the fields they read. The answer names every
#   field (schemas/verdicts-answer.schema.json); what repeats across shapes (reasons, notes,
#   grants) is listed once and referred to by index. The wait check's limits come once per
#   workload: a pool's start estimate is the caller's, compared with them per decision.
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
package examlops.hardware.verdicts

import data.examlops.fleet
import data.examlops.hardware.checks
import data.examlops.hardware.checks.budget
import data.examlops.hardware.checks.capacity
import data.examlops.hardware.checks.quota
import data.examlops.hardware.checks.wait
import data.examlops.hardware.composer
import data.examlops.hardware.fractions
import data.examlops.hardware.tiers

w := composer.w

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

# Keys the caller asked about that have no shape here (the caller uploads them and asks again):
# none when the stored views for exactly these keys are read (views_used), which no shape is.
missing := [] if {
	stored_views
} else := sort([k | some k in keys; not shape_of(k)])

# --- the fleet's views: what each check, the tier and the grant see of each shape -----------------

# Every signature field present (null where a shape lacks it), so that a view is the same whether a
# field was given as null or left out.
blank := {f: null | some f in composer.signature.shape}

judged := {k: object.union(blank, s) |
	some k in keys
	s := shape_of(k)
}

shape_fields_of := {name: composer.reads(composer.check_about[name], "shape") | some name in composer.shape_checks}

# The tier and the grant depend on a few fields too: each is worked out once per distinct value.
tier_fields := composer.reads(tiers.about, "shape")

grant_fields := composer.reads(fractions.about, "shape")

# A check that reads no workload field judges a shape the same for every workload.
fleet_only(name) if composer.reads(composer.check_about[name], "workload") == []

# The views of the judged shapes: per check (and for the tier and the grant) the distinct values of
# the fields it declares, sorted ("values": each in the fields' order), and each shape key's index
# among them ("of"); a check sees a view as an object of only its fields ("views"). The checks that
# read no workload field are judged here once ("fixed": their sorted denials per view). A function
# of the policy revision and the shapes alone: the caller may store it for its fleet under
# data.examlops_fleet.views[key] and every verdict query for exactly these keys reads it from there.
views := {
	"revision": composer.revision,
	"key": key_of(object.keys(judged)),
	"checks": {name: object.union(view_sets[name], {"views": seen[name]}) | some name in composer.shape_checks},
	"fixed": {name: [sort(d) |
		some view in seen[name]

		# Each check sees only its view of the shape: with input is the point here.
		# regal ignore:with-outside-test-context
		d := checks[name].deny with input as {"shape": view, "workload": {}}
	] |
		some name in composer.shape_checks
		fleet_only(name)
	},
	"tier": indexed(judged, tier_fields),
	"grant": indexed(judged, grant_fields),
}

view_sets := {name: indexed(judged, fields) | some name, fields in shape_fields_of}

# What a check sees of each of its views: an object of only its fields.
seen := {name: views |
	some name, fields in shape_fields_of
	views := [fields_of(v, fields) | some v in view_sets[name].values]
}

# The key the views of exactly these shape keys are stored under.
key_of(shape_keys) := crypto.sha256(concat("\n", sort(shape_keys)))

# Each shape's values of some fields, in their order: distinct, sorted, and each shape's index.
values_of(shapes, fields) := sort({[s[f] | some f in fields] | some s in shapes})

indexed(shapes, fields) := {"values": values, "of": {k: at[[s[f] | some f in fields]] | some k, s in shapes}} if {
	values := values_of(shapes, fields)
	at := {v: i | some i, v in values}
}

# The shape a check sees: only the fields it declares.
fields_of(v, fields) := {f: v[i] | some i, f in fields}

# The views this query is judged over: the stored ones for exactly these keys under this revision
# when the shapes are the fleet's (not given inline) and the stored views hash to the digest the
# caller had with them (input.views; examlops.fleet), else worked out here. Stored views were worked
# out from every one of these shapes (a key is its shape's hash, so the shapes behind a key set never
# change): reading them, the query reads no shape at all.
stored_views := stored if {
	not input.shapes
	composer.revision != null
	k := key_of(keys)
	stored := fleet.views(k, input.views)
	stored.revision == composer.revision
	stored.key == k
}

views_used := stored_views if {
	stored_views
} else := views

# --- the verdicts --------------------------------------------------------------------------------

# check_results[name][i]: the check's denials, sorted, of its i-th view (as stored for a check
# that reads no workload field).
check_results := object.union(fixed_results, judged_results)

fixed_results := {name: {i: ds | some i, ds in results} |
	composer.valid
	some name, results in views_used.fixed
}

judged_results := {name: results |
	composer.valid
	some name in composer.shape_checks
	not fleet_only(name)
	wproj := object.filter(w, composer.reads(composer.check_about[name], "workload"))
	results := {i: ds |
		some i, view in views_used.checks[name].views

		# Each check sees only its view of the shape: with input is the point here.
		# regal ignore:with-outside-test-context
		d := checks[name].deny with input as {"shape": view, "workload": wproj}
		ds := sort(d)
	}
}

# The checks that deny any of the shapes, in check order: only these are looked up per shape.
denying_checks := [name | some name in composer.shape_checks; denies_any(name)]

denies_any(name) if {
	some ds in check_results[name]
	ds != []
}

# Every distinct denial, listed once (shapes refer to them by index).
reason_list := sort({r |
	some rows in check_results
	some ds in rows
	some r in ds
})

reason_index := {r: i | some i, r in reason_list}

tier_results := {i: [t, tiers.note(p, w, t), tiers.note_full(p, w, t), tiers.note_budget(p, w, t)] |
	composer.valid
	some i, v in views_used.tier.values
	p := fields_of(v, tier_fields)
	t := tiers.tier(p, w)
}

note_list := sort({n | some row in tier_results; some n in array.slice(row, 1, 4); n != null})

note_index := {n: i | some i, n in note_list}

# Per distinct grant, in the order of its values: [values, {grant, the shortfall reason, the
# budget's limits per device-hour, the quota's figures for the grant (what the caller compares with
# what the projects hold), the larger shares that also cover the request (each with its limits and
# quota figures), smallest first, and what a pool counted as one node must have in all for the
# grant with the reason it gets with fewer (too_small: the caller compares each such pool's count
# with it; null where one device does)}]. A shape's grant is its grant view's index. The quota
# reads the pool's accelerator class, one of the fields the grant reads.
grant_rows := [[v, row] |
	composer.valid
	some v in views_used.grant.values
	p := fields_of(v, grant_fields)
	g := fractions.grant(p, w)
	larger := fractions.alternatives(p, w)
	row := {
		"grant": g,
		"shortfall": capacity.shortfall_of(p, g, [a.profile | some a in larger]),
		"limits": budget.limits(w, g),
		"quota": quota.limits(w, p, g),
		"alternatives": [{"grant": a, "limits": budget.limits(w, a), "quota": quota.limits(w, p, a)} | some a in larger],
		"too_small": capacity.smallness(p, g),
	}
]

# Per denying check, the views it denies, each with its denials by index into reason_list (the views
# it does not deny are left out: a shape's denials are one look-up per denying check).
denied_views := {name: denied |
	some name in denying_checks
	denied := {i: [reason_index[r] | some r in ds] |
		some i, ds in check_results[name]
		ds != []
	}
}

# Per tier view: the tier and its notes by index (null: none).
tier_rows := {i: {"tier": t, "note": note_at(note), "note_full": note_at(full), "note_budget": note_at(over)} |
	some i, [t, note, full, over] in tier_results
}

note_at(null) := null

note_at(n) := note_index[n] if n != null

# A cloud pool stopped only by data governance (checks declaring blocks_burst, e.g. residency):
# what a blocked burst names. hits: [check, denials] of the checks that deny the shape.
blocks_burst(t, hits, blocking) if {
	count(hits) > 0
	tiers.is_burst(t)
	every hit in hits {
		hit[0] in blocking
	}
}

else := false

# Per shape: the tier (fallback when odd, burst from 2), the notes by index (null: none; the note,
# the note when the requested accelerator's pools are full, the note when they are over the
# budget), the denials by index, the grant by index, and whether the shape's denials alone block a
# burst. (What every shape looks up is bound once, before the shapes are gone through.)
shape_rows := {k: row |
	composer.valid

	# What every row looks up, bound once here rather than looked up again per shape (a rule
	# referenced per shape costs a look-up of the rule each time; hence the reassignments Regal
	# would call pointless).
	views := views_used # regal ignore:pointless-reassignment
	tiered := tier_rows # regal ignore:pointless-reassignment
	in_order := denying_checks # regal ignore:pointless-reassignment
	denied := denied_views # regal ignore:pointless-reassignment
	blocking := composer.burst_blocking
	some k, g in views.grant.of
	tr := tiered[views.tier.of[k]]
	hits := [[name, ids] | some name in in_order; ids := denied[name][views.checks[name].of[k]]]
	row := {
		"tier": tr.tier,
		"note": tr.note,
		"note_full": tr.note_full,
		"note_budget": tr.note_budget,
		"denials": [i | some [_, ids] in hits; some i in ids],
		"grant": g,
		"blocks_burst": blocks_burst(tr.tier, hits, blocking),
	}
}

# Why a pool of tier t is passed over when tier sel won: for every pair, so that the answer does not
# depend on which shapes a query happened to judge (the caller keeps it for later queries).
all_tiers := [0, 1, 2, 3]

preferences := [{"tier": t, "selected": sel, "reason": tiers.preference(w, t, sel)} |
	composer.valid
	some t in all_tiers
	some sel in all_tiers
	t > sel
]

answer := {
	"confirm": composer.confirm,
	# false for an invalid workload: it is judged against no pool at all.
	"judged": count(composer.errors) == 0,
	"rejection": composer.rejection,
	"burst_mode": composer.burst_mode,
	"missing": missing,
	"reasons": reason_list,
	"notes": note_list,
	"grants": [row | some [_, row] in grant_rows],
	"shapes": shape_rows,
	"preferences": preferences,
	"request_rejected": composer.request_rejected,
	# The reason a stand-in gets when the requested accelerator's pools are over the budget and the
	# workload does not fall back for that (null: it does).
	"budget_fallback": composer.budget_fallback_forbidden,
	# When the workload must start (checks/wait): the caller compares each pool's start estimate
	# with these at the decision's time. One per workload: it depends on the workload alone.
	"wait": wait.limits(w),
}

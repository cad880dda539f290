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
#   grants) is listed once and referred to by index.
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
package examlops.hardware.verdicts

import data.examlops.fleet
import data.examlops.hardware.checks
import data.examlops.hardware.checks.budget
import data.examlops.hardware.checks.capacity
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

# Every signature field present (null where a shape lacks it), so that a projection is the same
# object whether a field was given as null or left out.
blank := {f: null | some f in composer.signature.shape}

judged := {k: object.union(blank, s) |
	some k in keys
	s := shape_of(k)
}

# Keys the caller asked about that have no shape here (the caller uploads them and asks again).
missing := sort([k | some k in keys; not judged[k]])

shape_fields_of := {name: composer.reads(composer.check_about[name], "shape") | some name in composer.shape_checks}

# The tier and the grant depend on a few fields too: each is worked out once per distinct value.
tier_fields := composer.reads(tiers.about, "shape")

grant_fields := composer.reads(fractions.about, "shape")

# Each shape's values of some fields, in their order, by shape key: what a check (or the tier, or
# the grant) is worked out once for. Each is cut once per shape.
cut(fields) := {k: [s[f] | some f in fields] | some k, s in judged}

shape_values := {name: cut(fields) | some name, fields in shape_fields_of}

tier_values := cut(tier_fields)

grant_values := cut(grant_fields)

# The shape a check sees: only the fields it declares.
fields_of(v, fields) := {f: v[i] | some i, f in fields}

# check_results[name][values]: the check's denials, sorted, of one projection of the shapes.
check_results := {name: results |
	composer.valid
	some name in composer.shape_checks
	fields := shape_fields_of[name]
	wproj := object.filter(w, composer.reads(composer.check_about[name], "workload"))
	results := {v: ds |
		some v in {v | some v in shape_values[name]}

		# Each check sees only its projection of the shape: with input is the point here.
		# regal ignore:with-outside-test-context
		d := checks[name].deny with input as {"shape": fields_of(v, fields), "workload": wproj}
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

tier_results := {v: [t, tiers.note(p, w, t), tiers.note_full(p, w, t), tiers.note_budget(p, w, t)] |
	composer.valid
	some v in {v | some v in tier_values}
	p := fields_of(v, tier_fields)
	t := tiers.tier(p, w)
}

note_list := sort({n | some row in tier_results; some n in array.slice(row, 1, 4); n != null})

note_index := {n: i | some i, n in note_list}

# Per distinct grant: [projection, {grant, the shortfall reason, the budget's limits per device-hour,
# the larger shares that also cover the request (each with its limits), smallest first}].
grant_rows := [[v, row] |
	composer.valid
	some v in sort({v | some v in grant_values})
	p := fields_of(v, grant_fields)
	g := fractions.grant(p, w)
	larger := fractions.alternatives(p, w)
	row := {
		"grant": g,
		"shortfall": capacity.shortfall_of(p, g, [a.profile | some a in larger]),
		"limits": budget.limits(w, g),
		"alternatives": [{"grant": a, "limits": budget.limits(w, a)} | some a in larger],
	}
]

grant_index := {p: i | some i, [p, _] in grant_rows}

# A cloud pool stopped only by data governance (checks declaring blocks_burst, e.g. residency):
# what a blocked burst names.
blocks_burst(t, denied) if {
	count(denied) > 0
	tiers.is_burst(t)
	every row in denied {
		row[0] in composer.burst_blocking
	}
}

else := false

note_at(null) := null

note_at(n) := note_index[n] if n != null

# Per shape: the tier (fallback when odd, burst from 2), the notes by index (null: none; the note,
# the note when the requested accelerator's pools are full, the note when they are over the
# budget), the denials by index, the grant by index, and whether the shape's denials alone block a
# burst.
shape_rows := {k: row |
	composer.valid
	some k in object.keys(judged)
	[t, note, full, over] := tier_results[tier_values[k]]
	denied := [[name, ds] |
		some name in denying_checks
		ds := check_results[name][shape_values[name][k]]
		ds != []
	]
	row := {
		"tier": t,
		"note": note_at(note),
		"note_full": note_at(full),
		"note_budget": note_at(over),
		"denials": [reason_index[r] | some [_, ds] in denied; some r in ds],
		"grant": grant_index[grant_values[k]],
		"blocks_burst": blocks_burst(t, denied),
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
}

# METADATA
# title: Composer
# description: >-
#   Composes the checks under examlops.hardware.checks (one package per check, each with
#   `deny contains reason if ...` over input.shape and input.workload and a METADATA block naming
#   its order, stage, reason codes and the shape and workload fields it reads) from their own
#   metadata: the checks in order, the signature (every field a verdict may depend on), the
#   policy's revision, the workload as the checks see it and why it may be rejected outright, and
#   every message text the caller words a result with (it fills in counts only).
#
#   Stages are a closed set. A shape-stage check judges a pool by its shape (everything but its
#   capacity and price): any number of them, discovered from metadata. The pool stage is exactly
#   budget (a pool's own price and carbon against the limits its grant allows), capacity (its
#   room for the grant), quota (the grant against what its project holds of the class) and wait
#   (its start estimate against the workload's max_wait and deadline at the decision's time):
#   the caller makes those comparisons itself from the compact answer, as the reference decision
#   does. A check declaring any other stage, or another pool-stage check, cannot be run: nothing
#   is placed (check_unsupported).
# schemas:
#   - input: schema["placement-input.schema"]
#   - input.workload: schema["workload.schema"]
# custom:
#   codes:
#     check_unsupported: {kind: never, meaning: "a check declares a stage this composer cannot run: nothing is placed"}
package examlops.hardware.composer

import data.examlops.hardware.checks
import data.examlops.hardware.checks.budget
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

# The pool stage: closed (see the package description).
pool_stage_checks := {"budget", "capacity", "quota", "wait"}

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

# This package's own annotations (its codes).
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

# The codes of the checks that declare they block a burst by themselves (data governance).
burst_blocking := {name | some name, a in check_about; a.custom.blocks_burst == true}

# --- message texts --------------------------------------------------------------------------------

# Why nothing was placed when the workload itself was fine: the caller fills in the workload's
# name, how many pools were checked and, per reason code, on how many pools it was found
# ({code}, {count}), joined with the separator. The reference decision words it the same way.
# A workload that could run later (no_capacity) is told what stops the pools that could take it
# (headline_causes): capacity alone, the wait (no estimate, or one too late: the scheduler may not
# have been asked), the quota, or several or other reasons.
texts := {
	"no_pools": "no pools are registered",
	"no_eligible_pool": "no pool is eligible for {workload} ({checked} checked: {reasons})",
	"no_capacity": "no pool has free capacity for {workload} ({checked} checked: {reasons})",
	"no_capacity_wait": "no pool is expected to start {workload} within its waiting limits ({checked} checked: {reasons})",
	"no_capacity_quota": "no pool is within the quota {workload} may use ({checked} checked: {reasons})",
	"no_capacity_other": "no pool can take {workload} now ({checked} checked: {reasons})",
	"reason_on_one": "{code} on 1 pool",
	"reason_on_many": "{code} on {count} pools",
	"separator": ", ",
}

# Which headline a no_capacity summary takes, by what stops each pool stopped only by not_now
# reasons (each pool's cause: other when a check beside these gives one of its reasons, else quota,
# else wait, else capacity): the text when every such pool has that cause, else no_capacity_other.
headline_causes := {"capacity": "no_capacity", "wait": "no_capacity_wait", "quota": "no_capacity_quota"}

# The check that declares each reason code.
check_of_code := {code: name |
	some name, a in check_about
	some code, _ in object.get(a, ["custom", "codes"], {})
}

# What stops a pool, from the codes of its reasons (all not_now).
cause(codes) := "other" if {
	some c in codes
	not object.get(check_of_code, c, null) in object.keys(headline_causes)
} else := "quota" if {
	some c in codes
	check_of_code[c] == "quota"
} else := "wait" if {
	some c in codes
	check_of_code[c] == "wait"
} else := "capacity"

# The text of a no_capacity summary whose pools have these causes.
headline(causes) := headline_causes[c] if {
	count(causes) == 1
	some c in causes
} else := "no_capacity_other"

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
} else := portability.rejection(w.engine, w.accelerator)

# How cloud pools come in: "cloud" (the workload targets cloud), "spill" (allow_burst: only when no
# HPC pool can take it), or null (never).
default burst_mode := null

burst_mode := "cloud" if {
	w.target == "cloud"
} else := "spill" if {
	w.allow_burst == true
}

default request_rejected := null

request_rejected := tiers.rejected(rejection) if {
	valid
	rejection != null
}

# The reason a stand-in gets when the requested accelerator's pools are over the budget and the
# workload does not fall back for that (null: it does; checks/budget).
default budget_fallback_forbidden := null

budget_fallback_forbidden := budget.fallback_forbidden(w) if valid

# METADATA
# title: Quota
# description: >-
#   What a project may hold of an accelerator class (data.examlops.tables.quotas): devices at once,
#   up to its nominal quota, or above it by borrowing from the unused quota of its cohort (Kueue's
#   ClusterQueue and cohort model), and device-hours per period (Slurm's GrpTRESMins). The figures
#   depend on the workload's project, the pool's accelerator class and the grant; what the projects
#   hold changes with every placement and release, so the check judges pools, not shapes: the
#   policy answers the figures per grant (limits) and the caller compares them with what the
#   projects hold (exceeded), as for the budget.
# custom:
#   order: 86
#   stage: pool
#   reads:
#     shape: [accelerator, model, supports_fractions, fixed_profile]
#     workload: [project, fraction, count]
#   codes:
#     quota_exceeded:
#       kind: not_now
#       meaning: "the project's quota of the accelerator class, with what it may borrow, has no room for the grant now"
#     quota_too_small:
#       kind: never
#       meaning: "the grant is more than the project's quota of the accelerator class could ever hold, borrowing too"
#     quota_unknown:
#       kind: never
#       meaning: "the project has quotas, but none for the pool's accelerator class"
package examlops.hardware.checks.quota

import data.examlops.hardware.reason
import data.examlops.tables.budgets
import data.examlops.tables.quotas

# The annotations above, as the composer reads every check's: quota is one of its pool-stage checks
# (composer.pool_stage_checks), its figures answered per grant and compared by the caller.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# input: {shape, workload, grant, quota_use}; quota_use as in use_of below.
deny contains r if {
	lim := limits(input.workload, input.shape, input.grant)
	some r in exceeded(lim, use_of(lim, input.quota_use))
}

# The project a workload is counted under: its own, or the unassigned project (budgets.yaml).
project_of(w) := p if {
	p := object.get(w, "project", null)
	p != null
} else := budgets.unassigned

# A project's quota of a class (possibly {}: no limit); undefined when the class is not listed.
entry(p, c) := quotas.projects[p].accelerators[c]

cohort_of(p) := object.get(quotas.projects, [p, "cohort"], null)

# The projects of a cohort with a nominal quota of a class (the quota the cohort lends is theirs,
# and so is the use that takes from it), and the sum of those quotas.
members(null, _) := []

members(name, c) := sort([p | some p, q in quotas.projects; lends(q, name, c)]) if name != null

lends(q, name, c) if {
	q.cohort == name
	is_number(q.accelerators[c].devices)
}

cohort_nominal(name, c) := sum([entry(p, c).devices | some p in members(name, c)])

# Per grant, what the caller compares with the projects' use, and the reasons a pool over it gets:
#   project, accelerator   the quota they are of
#   devices                what the grant holds (shares summed)
#   nominal                devices the project may hold at once (null: no device quota)
#   ceiling                at most this many with borrowing (null: as many as the cohort has unused)
#   cohort, members        the cohort, and its projects with a nominal quota of the class (whose
#                          use of the class the caller sums)
#   cohort_nominal         the sum of the members' nominal quotas of the class
#   device_hours, period_days   the device-hours the project may use per period (null: none)
#   always                 reasons whatever the use (quota_unknown, quota_too_small)
#   reasons                the reasons when over: {"devices": r or null, "device_hours": r or null}
limits(w, shape, grant) := limits_of(project_of(w), shape.accelerator, grant.devices)

# A project without quotas: nothing applies; one without a quota of the class: refused.
limits_of(p, c, devices) := object.union(no_limits(p, c, devices), {"always": []}) if {
	not quotas.projects[p]
} else := object.union(no_limits(p, c, devices), {"always": [unknown(p, c)]}) if {
	not entry(p, c)
} else := lim if {
	e := entry(p, c)
	cohort := cohort_of(p)
	nominal := object.get(e, "devices", null)
	lim := {
		"project": p,
		"accelerator": c,
		"devices": devices,
		"nominal": nominal,
		"ceiling": ceiling(nominal, cohort, object.get(e, "borrowing_limit", null)),
		"cohort": cohort,
		"members": members(cohort, c),
		"cohort_nominal": cohort_total(nominal, cohort, c),
		"device_hours": object.get(e, "device_hours", null),
		"period_days": object.get(e, "period_days", null),
		"always": too_small(p, c, nominal, cohort, e, devices),
		"reasons": {
			"devices": devices_reason(p, c, nominal, cohort, e, devices),
			"device_hours": hours_reason(p, c, e),
		},
	}
}

no_limits(p, c, devices) := {
	"project": p,
	"accelerator": c,
	"devices": devices,
	"nominal": null,
	"ceiling": null,
	"cohort": null,
	"members": [],
	"cohort_nominal": null,
	"device_hours": null,
	"period_days": null,
	"reasons": {"devices": null, "device_hours": null},
}

# Without a cohort nothing can be borrowed; with one, at most borrowing_limit above the nominal
# quota, or (no limit) whatever the cohort has unused.
ceiling(null, _, _) := null

ceiling(nominal, null, _) := nominal if nominal != null

ceiling(nominal, cohort, limit) := nominal + limit if {
	nominal != null
	cohort != null
	limit != null
}

ceiling(nominal, cohort, null) := null if {
	nominal != null
	cohort != null
}

cohort_total(null, _, _) := null

cohort_total(nominal, null, _) := null if nominal != null

cohort_total(nominal, cohort, c) := cohort_nominal(cohort, c) if {
	nominal != null
	cohort != null
}

# The most the project could ever hold of the class: its ceiling, and never more than its cohort's
# nominal quotas together.
most(nominal, null, _, _) := nominal

most(nominal, cohort, e, c) := min([nominal + object.get(e, "borrowing_limit", total), total]) if {
	cohort != null
	total := cohort_nominal(cohort, c)
}

# What the projects hold now, as the caller gives it (quota_use) for one grant's limits:
#   quota_use.devices[project][class]        devices the project's live grants hold (shares summed)
#   quota_use.device_hours[project][class]   device-hours its grants used in the last period_days
# Absent entries are 0.
use_of(lim, quota_use) := {
	"devices": held(quota_use, lim.project, lim.accelerator),
	"cohort_devices": sum([held(quota_use, m, lim.accelerator) | some m in lim.members]),
	"device_hours": object.get(quota_use, ["device_hours", lim.project, lim.accelerator], 0),
}

held(quota_use, p, c) := object.get(quota_use, ["devices", p, c], 0)

# The reasons of a grant with these limits given what the projects hold (use: {devices,
# cohort_devices, device_hours}); the caller makes the same comparison from the compact answer.
exceeded(lim, use) := array.concat(lim.always, [r |
	count(lim.always) == 0
	some r in [devices_over(lim, use), hours_over(lim, use)]
	r != null
])

devices_over(lim, use) := null if {
	lim.nominal == null
} else := null if {
	fits(lim, use)
} else := lim.reasons.devices

# Within the nominal quota; or borrowing: within the ceiling and the cohort's unused quota.
fits(lim, use) if use.devices + lim.devices <= lim.nominal + epsilon

fits(lim, use) if {
	lim.cohort != null
	within_ceiling(lim.ceiling, use.devices + lim.devices)
	use.cohort_devices + lim.devices <= lim.cohort_nominal + epsilon
}

within_ceiling(null, _)

within_ceiling(c, need) if need <= c + epsilon

hours_over(lim, use) := lim.reasons.device_hours if {
	lim.device_hours != null
	use.device_hours >= lim.device_hours - epsilon
} else := null

# Devices are compared as the caller compares them (shares of a device are sevenths and such).
epsilon := 0.000000001

# --- the reasons, worded once ------------------------------------------------------------------------

unknown(p, c) := reason.make(
	"quota_unknown",
	"never",
	sprintf("project %s has quotas, but none for %s (policies/examlops/tables/quotas.yaml)", [p, c]),
	{"project": p, "accelerator": c},
)

too_small(p, c, nominal, cohort, e, devices) := [reason.make(
	"quota_too_small",
	"never",
	sprintf(
		"project %s may never hold %s %s device(s) at once: at most %s%s",
		[p, number(devices), c, number(most(nominal, cohort, e, c)), borrowing_words(cohort, e)],
	),
	{"project": p, "accelerator": c, "devices": devices, "most": most(nominal, cohort, e, c)},
)] if {
	nominal != null
	devices > most(nominal, cohort, e, c) + epsilon
} else := []

devices_reason(_, _, null, _, _, _) := null

devices_reason(p, c, nominal, cohort, e, devices) := reason.make(
	"quota_exceeded",
	"not_now",
	sprintf(
		"project %s may hold %s %s device(s) at once%s: no room now for %s more",
		[p, number(nominal), c, borrowing_words(cohort, e), number(devices)],
	),
	{
		"quota": "devices",
		"project": p,
		"accelerator": c,
		"devices": devices,
		"nominal": nominal,
		"borrowing_limit": object.get(e, "borrowing_limit", null),
		"cohort": cohort,
	},
) if {
	nominal != null
}

hours_reason(p, c, e) := reason.make(
	"quota_exceeded",
	"not_now",
	sprintf(
		"project %s has used its %s %s device-hours of the last %s days",
		[p, number(e.device_hours), c, number(e.period_days)],
	),
	{
		"quota": "device_hours",
		"project": p,
		"accelerator": c,
		"device_hours": e.device_hours,
		"period_days": e.period_days,
	},
) if {
	e.device_hours
} else := null

borrowing_words(null, _) := ""

borrowing_words(cohort, e) := sprintf(
	", and borrow up to %s more from cohort %s's unused quota",
	[number(e.borrowing_limit), cohort],
) if {
	cohort != null
	object.get(e, "borrowing_limit", null) != null
} else := sprintf(", and borrow from cohort %s's unused quota", [cohort]) if {
	cohort != null
}

# Whole numbers without decimals, others to three (OPA hands sprintf a whole number as an integer
# or a float depending on how it arrived).
number(n) := format_int(n, 10) if n == floor(n)

else := sprintf("%.3f", [n])

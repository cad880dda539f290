# METADATA
# title: Budget
# description: >-
#   What the workload may spend: its own max_cost_per_hour and max_carbon_per_hour and its
#   project's caps (data.examlops.tables.budgets; the lower cap wins), per hour of what it would
#   hold (price per device-hour x devices granted, gCO2e per device-hour x devices granted). The
#   limits depend on the workload and the grant; each pool's price and carbon are compared with
#   them, so the check judges pools, not shapes. A workload that sets allow_budget_fallback to false
#   does not fall back to a stand-in accelerator when the requested accelerator's pools are over
#   the budget (and none of them is merely full): the composer denies the stand-ins
#   budget_fallback_forbidden (fallback_forbidden below).
# custom:
#   order: 80
#   stage: pool
#   reads:
#     shape: [accelerator, model, supports_fractions, fixed_profile]
#     workload: [max_cost_per_hour, max_carbon_per_hour, project, fraction, count, accelerator, allow_budget_fallback]
#   codes:
#     budget_exceeded:
#       kind: never
#       meaning: "the grant would cost (or emit) more per hour than the workload's or its project's cap"
#     budget_fallback_forbidden:
#       kind: never
#       meaning: >-
#         a stand-in, while the requested accelerator's pools are over the budget and the workload does
#         not fall back for budget
package examlops.hardware.checks.budget

import data.examlops.hardware.reason
import data.examlops.tables.budgets

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# input: {shape, workload, grant, pool: {cost_per_hour, carbon_per_hour}}
deny contains r if {
	some r in exceeded(limits(input.workload, input.grant), input.pool)
}

# The caps that apply: the lower of the workload's and its project's, or null.
cap(w, name) := lowest([c | some c in [object.get(w, name, null), project_cap(w, name)]; c != null])

project_cap(w, name) := object.get(budgets.projects, [object.get(w, "project", ""), name], null)

lowest([]) := null

lowest(caps) := min(caps) if count(caps) > 0

# Per device-hour, what a pool may cost and emit for this grant: {"cost_per_hour": max or null,
# "carbon_per_hour": max or null} with the caps they come from, and the reasons a pool over them gets.
limits(w, grant) := {
	"cost_per_hour": per_device(cap(w, "max_cost_per_hour"), grant),
	"carbon_per_hour": per_device(cap(w, "max_carbon_per_hour"), grant),
	"reasons": {
		"cost_per_hour": over(w, grant, "max_cost_per_hour", "cost more", "USD"),
		"carbon_per_hour": over(w, grant, "max_carbon_per_hour", "emit more", "gCO2e"),
	},
}

per_device(null, _) := null

per_device(c, grant) := c / grant.devices if c != null

over(w, grant, name, what, currency) := null if {
	cap(w, name) == null
} else := reason.make(
	"budget_exceeded",
	"never",
	sprintf(
		"the grant would %s than %s %s/h%s: at most %s per device-hour for %s device(s)",
		[
			what, name, amount(currency, cap(w, name)), of_project(w, name),
			amount(currency, cap(w, name) / grant.devices), format_number(grant.devices),
		],
	),
	{
		"cap": name,
		"limit": cap(w, name),
		"unit": currency,
		"devices": grant.devices,
		"per_device_hour": cap(w, name) / grant.devices,
		"project": object.get(w, "project", null),
	},
)

# Where the cap comes from, when it is the project's.
of_project(w, name) := sprintf(" (project %s)", [w.project]) if {
	project_cap(w, name) != null
	project_cap(w, name) == cap(w, name)
} else := ""

# Money to the cent, carbon to the gram. Formatted from whole numbers: OPA hands sprintf a whole
# number as an integer or as a float depending on how it arrived, and %d or %f refuses the other.
amount("USD", x) := sprintf("$%s.%s", [format_int(c / 100, 10), substring(format_int(100 + (c % 100), 10), 1, 2)]) if {
	c := round(x * 100)
}

amount("gCO2e", x) := sprintf("%s gCO2e", [format_int(round(x), 10)])

format_number(n) := format_int(n, 10) if n == floor(n)

else := sprintf("%.3f", [n])

# The pool's price and carbon per device-hour against the limits.
exceeded(lim, pool) := [r |
	some k in ["cost_per_hour", "carbon_per_hour"]
	lim[k] != null
	object.get(pool, k, 0) > lim[k] + 0.000000001
	r := lim.reasons[k]
]

# The caps in force, for people: "max_cost_per_hour $1.00/h" (and the carbon cap), each saying when
# it is the project's.
caps_text(w) := concat(" and ", [sprintf("%s %s/h%s", [name, amount(unit, cap(w, name)), of_project(w, name)]) |
	some [name, unit] in [["max_cost_per_hour", "USD"], ["max_carbon_per_hour", "gCO2e"]]
	cap(w, name) != null
])

# The reason a stand-in gets when the requested accelerator's pools are over the budget and the
# workload does not fall back for that (null: it does, or it has no cap to be over).
fallback_forbidden(w) := reason.make(
	"budget_fallback_forbidden",
	"never",
	sprintf(
		concat("", [
			"the requested %s pools are over the budget (%s), and the workload does not fall back to another ",
			"accelerator for budget (allow_budget_fallback is false)",
		]),
		[w.accelerator, caps_text(w)],
	),
	{"requested": w.accelerator, "allow_budget_fallback": false},
) if {
	w.allow_budget_fallback == false
	caps_text(w) != ""
} else := null

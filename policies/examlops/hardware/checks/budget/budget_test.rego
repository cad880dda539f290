package examlops.hardware.checks.budget_test

import data.examlops.hardware.checks.budget
import data.examlops.hardware.fractions

# The workload as the placement package gives it (normalised: every budget field present).
work(overrides) := object.union(
	{"max_cost_per_hour": null, "max_carbon_per_hour": null, "project": null, "fraction": 1, "count": 1},
	overrides,
)

# Grants as fractions.grant makes them: whole devices, and a 2g MIG share of a vendor-level pool.
whole(n) := fractions.grant({"accelerator": "nvidia", "model": null, "supports_fractions": false, "fixed_profile": null}, {"fraction": 1, "count": n})

two_g := fractions.grant({"accelerator": "nvidia", "model": null, "supports_fractions": true, "fixed_profile": null}, {"fraction": 0.25, "count": 1})

pool(cost, carbon) := {"cost_per_hour": cost, "carbon_per_hour": carbon}

# input: {shape, workload, grant, pool}
deny(w, grant, p) := d if {
	d := budget.deny with input as {"shape": {}, "workload": w, "grant": grant, "pool": p}
}

denied_caps(w, grant, p) := {r.details.cap | some r in deny(w, grant, p)}

# Per device-hour limits: [max cost, max carbon] (null: no cap).
limit_cases := {
	"no caps": {"w": work({}), "grant": whole(1), "cost": null, "carbon": null},
	"no caps, a project without caps": {"w": work({"project": "default"}), "grant": whole(1), "cost": null, "carbon": null},
	"workload cost cap": {"w": work({"max_cost_per_hour": 3.5}), "grant": whole(1), "cost": 3.5, "carbon": null},
	"workload carbon cap": {"w": work({"max_carbon_per_hour": 300}), "grant": whole(1), "cost": null, "carbon": 300},
	"workload caps of 0": {"w": work({"max_cost_per_hour": 0, "max_carbon_per_hour": 0}), "grant": whole(1), "cost": 0, "carbon": 0},
	"project cost cap": {"w": work({"project": "llm-pretraining"}), "grant": whole(1), "cost": 40, "carbon": null},
	"project carbon cap": {"w": work({"project": "green-research"}), "grant": whole(1), "cost": null, "carbon": 400},
	"project cost and carbon caps": {"w": work({"project": "inference-eu"}), "grant": whole(1), "cost": 6, "carbon": 1500},
	"workload lower than project": {"w": work({"project": "llm-pretraining", "max_cost_per_hour": 30}), "grant": whole(1), "cost": 30, "carbon": null},
	"project lower than workload": {"w": work({"project": "llm-pretraining", "max_cost_per_hour": 50}), "grant": whole(1), "cost": 40, "carbon": null},
	"the lower of each kind": {
		"w": work({"project": "inference-eu", "max_cost_per_hour": 10, "max_carbon_per_hour": 1000}),
		"grant": whole(1), "cost": 6, "carbon": 1000,
	},
	"workload carbon, project cost": {"w": work({"project": "llm-pretraining", "max_carbon_per_hour": 800}), "grant": whole(1), "cost": 40, "carbon": 800},
	"four devices share the cap": {"w": work({"max_cost_per_hour": 10, "max_carbon_per_hour": 1000}), "grant": whole(4), "cost": 2.5, "carbon": 250},
	# A 2g share is 2/7 of a device: it may cost 7/2 x the cap per device-hour.
	"a 2g share": {"w": work({"max_cost_per_hour": 1, "max_carbon_per_hour": 100}), "grant": two_g, "cost": 3.5, "carbon": 350},
}

close(null, null)

close(a, b) if abs(a - b) < 0.000000001

test_limits[name] if {
	some name, tc in limit_cases
	lim := budget.limits(tc.w, tc.grant)
	close(lim.cost_per_hour, tc.cost)
	close(lim.carbon_per_hour, tc.carbon)

	# A reason exactly where there is a cap.
	is_null(lim.reasons.cost_per_hour) == is_null(tc.cost)
	is_null(lim.reasons.carbon_per_hour) == is_null(tc.carbon)
}

test_two_g_is_two_sevenths if {
	two_g.profile == "2g"
	two_g.devices == 2 / 7
}

# Pools against the limits: which caps each breaks.
exceed_cases := {
	"no caps, any price": {"w": work({}), "grant": whole(1), "pool": pool(1000, 100000), "over": set()},
	"at the cost cap": {"w": work({"max_cost_per_hour": 3.5}), "grant": whole(1), "pool": pool(3.5, 0), "over": set()},
	"within a rounding error of the cap": {"w": work({"max_cost_per_hour": 3.5}), "grant": whole(1), "pool": pool(3.5000000001, 0), "over": set()},
	"over the cost cap": {"w": work({"max_cost_per_hour": 3.5}), "grant": whole(1), "pool": pool(3.51, 0), "over": {"max_cost_per_hour"}},
	"over the carbon cap": {"w": work({"max_carbon_per_hour": 300}), "grant": whole(1), "pool": pool(1, 301), "over": {"max_carbon_per_hour"}},
	"over both": {"w": work({"project": "inference-eu"}), "grant": whole(1), "pool": pool(7, 1600), "over": {"max_cost_per_hour", "max_carbon_per_hour"}},
	"under the project's caps": {"w": work({"project": "inference-eu"}), "grant": whole(1), "pool": pool(6, 1500), "over": set()},
	"the workload's lower cap denies": {
		"w": work({"project": "llm-pretraining", "max_cost_per_hour": 30}),
		"grant": whole(1), "pool": pool(35, 0), "over": {"max_cost_per_hour"},
	},
	"the project's lower cap denies": {
		"w": work({"project": "llm-pretraining", "max_cost_per_hour": 50}),
		"grant": whole(1), "pool": pool(45, 0), "over": {"max_cost_per_hour"},
	},
	"four devices: 2.5 each is the cap": {"w": work({"max_cost_per_hour": 10}), "grant": whole(4), "pool": pool(2.5, 0), "over": set()},
	"four devices: 2.6 each is over": {"w": work({"max_cost_per_hour": 10}), "grant": whole(4), "pool": pool(2.6, 0), "over": {"max_cost_per_hour"}},
	"a 2g share at 3.5/h fits a cap of 1/h": {"w": work({"max_cost_per_hour": 1}), "grant": two_g, "pool": pool(3.5, 0), "over": set()},
	"a 2g share at 3.6/h is over a cap of 1/h": {"w": work({"max_cost_per_hour": 1}), "grant": two_g, "pool": pool(3.6, 0), "over": {"max_cost_per_hour"}},
	"a pool that states no carbon is not over a cost cap": {"w": work({"max_cost_per_hour": 5}), "grant": whole(1), "pool": {"cost_per_hour": 4}, "over": set()},
}

test_exceeded[name] if {
	some name, tc in exceed_cases
	denied_caps(tc.w, tc.grant, tc.pool) == tc.over
	{r.details.cap | some r in budget.exceeded(budget.limits(tc.w, tc.grant), tc.pool)} == tc.over
}

# Cost is judged before carbon.
test_exceeded_lists_cost_then_carbon if {
	over := budget.exceeded(budget.limits(work({"project": "inference-eu"}), whole(1)), pool(7, 1600))
	[r.details.cap | some r in over] == ["max_cost_per_hour", "max_carbon_per_hour"]
}

# --- the exact reasons ----------------------------------------------------------------------------

test_cost_reason_message_and_details if {
	[r] := budget.exceeded(budget.limits(work({"max_cost_per_hour": 5.5}), whole(2)), pool(3, 0))
	r == {
		"code": "budget_exceeded",
		"kind": "never",
		"message": "the grant would cost more than max_cost_per_hour $5.50/h: at most $2.75 per device-hour for 2 device(s)",
		"details": {
			"cap": "max_cost_per_hour",
			"limit": 5.5,
			"unit": "USD",
			"devices": 2,
			"per_device_hour": 2.75,
			"project": null,
		},
	}
}

test_carbon_reason_message_and_details if {
	[r] := budget.exceeded(budget.limits(work({"max_carbon_per_hour": 400.4}), whole(2)), pool(0, 250))
	r == {
		"code": "budget_exceeded",
		"kind": "never",
		"message": "the grant would emit more than max_carbon_per_hour 400 gCO2e/h: at most 200 gCO2e per device-hour for 2 device(s)",
		"details": {
			"cap": "max_carbon_per_hour",
			"limit": 400.4,
			"unit": "gCO2e",
			"devices": 2,
			"per_device_hour": 200.2,
			"project": null,
		},
	}
}

# A share of a device is written with three decimals; the project is named when its cap binds.
test_slice_reason_names_the_share_and_the_project if {
	w := work({"project": "lab", "max_cost_per_hour": 50, "fraction": 0.25})
	[r] := budget.exceeded(budget.limits(w, two_g), pool(150, 0)) with data.examlops.tables.budgets.projects as {"lab": {"max_cost_per_hour": 12.5}}
	r.message == "the grant would cost more than max_cost_per_hour $12.50/h (project lab): at most $43.75 per device-hour for 0.286 device(s)"
	r.details.project == "lab"
	r.details.limit == 12.5
	abs(r.details.per_device_hour - 43.75) < 0.000000001
}

# The workload's own cap binds: the project is in the details but not in the message.
test_workload_cap_binding_does_not_name_the_project if {
	w := work({"project": "llm-pretraining", "max_cost_per_hour": 30.5})
	[r] := budget.exceeded(budget.limits(w, whole(1)), pool(35, 0))
	r.message == "the grant would cost more than max_cost_per_hour $30.50/h: at most $30.50 per device-hour for 1 device(s)"
	r.details.project == "llm-pretraining"
}

test_every_reason_is_the_declared_code if {
	every r in deny(work({"project": "inference-eu"}), whole(1), pool(7, 1600)) {
		r.code in object.keys(budget.about.custom.codes)
		r.kind == budget.about.custom.codes[r.code].kind
	}
}

test_about if {
	budget.about.title == "Budget"
	budget.about.custom.stage == "pool"
	budget.about.custom.order == 80
	"max_cost_per_hour" in budget.about.custom.reads.workload
	"project" in budget.about.custom.reads.workload
}

# A table override changes the project's caps: the table is the only source.
test_project_caps_come_from_the_table if {
	lim := budget.limits(work({"project": "p"}), whole(1)) with data.examlops.tables.budgets.projects as {"p": {"max_cost_per_hour": 1.25}}
	lim.cost_per_hour == 1.25
	lim.carbon_per_hour == null
}

# --- policy bugs found while writing these tests ----------------------------------------------------

# Regression (budget.rego, over): the caps were formatted with sprintf("$%.2f") and sprintf("%.0f
# gCO2e"), but OPA hands sprintf a whole number as an integer, and Go's %f printed an integer as
# "%!f(int64=6)". Every whole cap is a whole number here: the budgets table's (6.0, 40.0 and 1500
# load as 6, 40 and 1500) and a whole per device-hour limit (a workload's 3.0 over 1 device).
# Input: project inference-eu (cost cap 6.0, carbon cap 1500), 1 device, a pool at 7/h and 1600
# gCO2e/h. It once gave "$%!f(int64=06)/h" and "%!f(int64=1500) gCO2e/h".
test_whole_caps_are_formatted_as_numbers if {
	over := budget.exceeded(budget.limits(work({"project": "inference-eu"}), whole(1)), pool(7, 1600))
	[r.message | some r in over] == [
		"the grant would cost more than max_cost_per_hour $6.00/h (project inference-eu): at most $6.00 per device-hour for 1 device(s)",
		"the grant would emit more than max_carbon_per_hour 1500 gCO2e/h (project inference-eu): at most 1500 gCO2e per device-hour for 1 device(s)",
	]
}

# A whole number of devices that arrived as a float (a workload's count 2.0) reads as a number.
test_a_whole_float_device_count_is_formatted_as_a_number if {
	w := work({"max_cost_per_hour": 5.5, "count": 2.0})
	g := fractions.grant({"accelerator": "nvidia", "model": null, "supports_fractions": false, "fixed_profile": null}, w)
	[r] := budget.exceeded(budget.limits(w, g), pool(3, 0))
	r.message == "the grant would cost more than max_cost_per_hour $5.50/h: at most $2.75 per device-hour for 2 device(s)"
}

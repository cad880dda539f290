# METADATA
# title: Workload
# description: >-
#   Validation of the workload itself, against the reviewed tables. Python validates with JSON
#   Schema first; this package makes the policy fail closed on its own when given bad input.
# custom:
#   reads:
#     workload: [accelerator, engine, capabilities, target, fraction, count, residency, allow_burst,
#       data_region, allow_cpu_fallback, optimize, carbon_weight, max_cost_per_hour, max_carbon_per_hour,
#       project, spot, allow_budget_fallback, cpu, memory, nodes, topology, topology_mode, models, isolation,
#       work_class, work]
#   codes:
#     accelerator_unknown: {kind: never, meaning: invalid workload (unknown accelerator)}
#     engine_unknown: {kind: never, meaning: invalid workload (unknown engine)}
#     target_unknown: {kind: never, meaning: invalid workload (unknown target)}
#     residency_unknown: {kind: never, meaning: invalid workload (unknown residency class)}
#     data_region_unknown: {kind: never, meaning: "the workload's data_region is not in the regions table"}
#     fraction_invalid: {kind: never, meaning: "invalid workload (fraction outside (0, 1])"}
#     count_invalid:
#       kind: never
#       meaning: "invalid workload (count not a whole number of at least 1, or not 1 with a fraction)"
#     field_invalid: {kind: never, meaning: invalid workload (a field of the wrong type)}
#     optimize_unknown:
#       kind: never
#       meaning: "invalid workload (optimize is not one of the objectives in vocabulary.yaml)"
#     project_unknown: {kind: never, meaning: the workload's project is not in the budgets table}
#     spot_unknown: {kind: never, meaning: "invalid workload (spot is not never, allow or require)"}
#     model_unknown: {kind: never, meaning: "the workload names a device model that is not in the models table"}
#     nodes_invalid:
#       kind: never
#       meaning: "invalid workload (nodes not a whole number of at least 1, or not 1 with a fraction below 1)"
#     topology_unknown: {kind: never, meaning: "invalid workload (topology is not same-block or same-switch)"}
#     topology_mode_unknown: {kind: never, meaning: "invalid workload (topology_mode is not required or preferred)"}
#     isolation_unknown: {kind: never, meaning: "invalid workload (isolation is not required or any)"}
#     work_class_unknown: {kind: never, meaning: "the workload's work_class is not a class of the throughput table"}
#     work_invalid:
#       kind: never
#       meaning: "invalid workload (work not a number above 0, or work and work_class not given together)"
package examlops.hardware.workload

import data.examlops.hardware.reason
import data.examlops.tables.accelerators
import data.examlops.tables.budgets
import data.examlops.tables.engines
import data.examlops.tables.models
import data.examlops.tables.regions
import data.examlops.tables.throughput
import data.examlops.tables.vocabulary

# The annotations above, for the placement package.
about := [e.annotations | some e in rego.metadata.chain(); e.annotations.scope == "package"][0]

# The vocabulary comes from the reviewed tables (vocabulary.yaml), never from literals here.
targets := {t | some t in vocabulary.workload_targets}

# What selection minimises among the admissible pools of the best tier.
objectives := {o | some o in vocabulary.objectives}

# Ordered, each at least as strict as the one before.
residencies := vocabulary.residencies

defaults := {
	"capabilities": [],
	"target": "any",
	"fraction": 1,
	"count": 1,
	"residency": "open",
	"allow_burst": false,
	"data_region": null,
	"allow_cpu_fallback": false,
	"optimize": "cost",
	"carbon_weight": 0.5,
	"max_cost_per_hour": null,
	"max_carbon_per_hour": null,
	"project": null,
	"spot": "never",
	"allow_budget_fallback": true,
	# What a workload asks of each node it runs on, and of its gang.
	"cpu": null,
	"memory": null,
	"nodes": 1,
	"topology": null,
	"topology_mode": null,
	"models": [],
	"isolation": "any",
	# What the workload does: units of a class of throughput.yaml (both, or neither).
	"work_class": null,
	"work": null,
}

# The workload with defaults filled in for absent fields.
normalize(w) := object.union(defaults, w)

# The values each enumerated field may take, from the reviewed tables.
known := {
	"accelerator": object.keys(accelerators),
	"engine": object.keys(engines),
	"target": targets,
	"residency": residencies,
	"optimize": objectives,
	"spot": {s | some s in vocabulary.spot},
	"topology": {t | some t in vocabulary.topologies},
	"topology_mode": {m | some m in vocabulary.topology_modes},
	"isolation": {i | some i in vocabulary.isolations},
}

errors(w) := [e |
	some e in array.concat(
		[
			# Required fields without a default: an absent one is invalid, not silently skipped.
			unknown("accelerator", object.get(w, "accelerator", null), known.accelerator),
			unknown("engine", object.get(w, "engine", null), known.engine),
			unknown("target", w.target, known.target),
			unknown("residency", w.residency, known.residency),
			data_region_error(w.data_region),
			fraction_error(w.fraction),
			count_error(w.count, w.fraction),
			type_error("capabilities", w.capabilities, is_tags(w.capabilities)),
			type_error("allow_burst", w.allow_burst, is_boolean(w.allow_burst)),
			type_error("allow_cpu_fallback", w.allow_cpu_fallback, is_boolean(w.allow_cpu_fallback)),
			unknown("optimize", w.optimize, known.optimize),
			type_error("carbon_weight", w.carbon_weight, is_share(w.carbon_weight)),
			type_error("max_cost_per_hour", w.max_cost_per_hour, is_cap(w.max_cost_per_hour)),
			type_error("max_carbon_per_hour", w.max_carbon_per_hour, is_cap(w.max_carbon_per_hour)),
			project_error(w.project),
			unknown("spot", w.spot, known.spot),
			type_error("allow_budget_fallback", w.allow_budget_fallback, is_boolean(w.allow_budget_fallback)),
			work_class_error(w.work_class),
			work_error(w.work_class, w.work),
		],
		node_errors(w),
	)
	e != null
]

# What a workload asks of nodes: checked only when it asks anything (most workloads do not).
node_fields := ["cpu", "memory", "nodes", "topology", "topology_mode", "models", "isolation"]

node_defaults := object.filter(defaults, node_fields)

node_errors(w) := [] if {
	object.filter(w, node_fields) == node_defaults
} else := [
	type_error("cpu", w.cpu, is_amount(w.cpu)),
	type_error("memory", w.memory, is_amount(w.memory)),
	nodes_error(w.nodes, w.fraction),
	optional("topology", w.topology),
	optional("topology_mode", w.topology_mode),
	unknown("isolation", w.isolation, known.isolation),
	type_error("models", w.models, is_tags(w.models)),
	model_error(w.models),
]

unknown(field, value, known) := null if {
	value in known
} else := reason.make(
	sprintf("%s_unknown", [field]),
	"never",
	sprintf("unknown %s '%v' (expected one of %v)", [field, value, sort(known)]),
	{"field": field, "value": value},
)

data_region_error(r) := null if {
	r == null
} else := null if {
	is_string(r)
	regions[r]
} else := reason.make(
	"data_region_unknown",
	"never",
	sprintf("data_region '%v' is not in the regions table; its jurisdiction would be unknown", [r]),
	{"field": "data_region", "value": r},
)

fraction_error(f) := null if {
	is_number(f)
	f > 0
	f <= 1
} else := reason.make(
	"fraction_invalid",
	"never",
	sprintf("fraction %v must be a number greater than 0 and at most 1", [f]),
	{"field": "fraction", "value": f},
)

count_error(n, f) := null if {
	is_number(n)
	n >= 1
	n == floor(n)
	fraction_fits_count(n, f)
} else := reason.make(
	"count_invalid",
	"never",
	sprintf("count %v must be a whole number of at least 1 (and exactly 1 with a fraction below 1)", [n]),
	{"field": "count", "value": n},
)

fraction_fits_count(_, 1)

# An invalid fraction is reported once, as fraction_invalid, not again as a count error.
fraction_fits_count(_, f) if fraction_error(f) != null

fraction_fits_count(n, f) if {
	f < 1
	n == 1
}

is_tags(v) if {
	is_array(v)
	every t in v {
		is_string(t)
	}
}

else := false

# A weight from 0 to 1.
is_share(v) if {
	is_number(v)
	v >= 0
	v <= 1
}

else := false

# A cap: absent, or a number of at least 0.
is_cap(v) if {
	v == null
} else if {
	is_number(v)
	v >= 0
} else := false

project_error(null) := null

project_error(p) := null if {
	is_string(p)
	budgets.projects[p]
} else := reason.make(
	"project_unknown",
	"never",
	sprintf("project '%v' is not in the budgets table (policies/examlops/tables/budgets.yaml)", [p]),
	{"field": "project", "value": p},
) if {
	p != null
}

type_error(_, _, true) := null

type_error(field, value, false) := reason.make(
	"field_invalid",
	"never",
	sprintf("%s has the wrong type (got %v)", [field, value]),
	{"field": field, "value": value},
)

# An optional enumerated field: absent (null), or one of the known values.
optional(_, null) := null

optional(field, value) := unknown(field, value, known[field]) if value != null

# CPU cores and memory MiB per node: absent, or a number above 0.
is_amount(v) if {
	v == null
} else if {
	is_number(v)
	v > 0
} else := false

nodes_error(n, f) := null if {
	is_number(n)
	n >= 1
	n == floor(n)
	one_node_with_a_fraction(n, f)
} else := reason.make(
	"nodes_invalid",
	"never",
	sprintf("nodes %v must be a whole number of at least 1 (and exactly 1 with a fraction below 1)", [n]),
	{"field": "nodes", "value": n},
)

one_node_with_a_fraction(_, f) if not is_number(f)

one_node_with_a_fraction(_, f) if f >= 1

one_node_with_a_fraction(1, f) if f < 1

# A model the table does not know is refused, never matched by accident.
model_error(ms) := null if {
	not is_tags(ms)
} else := null if {
	every m in ms {
		models[lower(m)]
	}
} else := reason.make(
	"model_unknown",
	"never",
	sprintf("model(s) %v are not in the models table (policies/examlops/tables/models.yaml)", [unknown_models(ms)]),
	{"field": "models", "value": unknown_models(ms)},
)

unknown_models(ms) := sort([m | some m in ms; not models[lower(m)]])

# A class of work the throughput table does not know is refused, never ranked as if unknown.
work_class_error(null) := null

work_class_error(c) := null if {
	is_string(c)
	throughput.classes[c]
} else := reason.make(
	"work_class_unknown",
	"never",
	sprintf("work_class '%v' is not in the throughput table (policies/examlops/tables/throughput.yaml)", [c]),
	{"field": "work_class", "value": c},
) if {
	c != null
}

# Work is a number above 0, given with its class (and a class with its work).
work_error(null, null) := null

work_error(c, n) := null if {
	c != null
	is_number(n)
	n > 0
} else := reason.make(
	"work_invalid",
	"never",
	sprintf("work %v must be a number above 0, given with work_class (got work_class %v)", [n, c]),
	{"field": "work", "value": n},
) if {
	[c, n] != [null, null]
}

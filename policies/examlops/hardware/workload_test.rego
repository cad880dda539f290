package examlops.hardware.workload_test

import data.examlops.hardware.workload

# A valid workload; each case overrides a few fields.
train(overrides) := object.union({"name": "train", "accelerator": "nvidia", "engine": "vllm"}, overrides)

errors_of(w) := workload.errors(workload.normalize(w))

codes(w) := [e.code | some e in errors_of(w)]

# --- normalize ------------------------------------------------------------------------------------

test_normalize_fills_every_default if {
	workload.normalize({"name": "train", "accelerator": "amd", "engine": "vllm"}) == {
		"name": "train",
		"accelerator": "amd",
		"engine": "vllm",
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
		"cpu": null,
		"memory": null,
		"nodes": 1,
		"topology": null,
		"topology_mode": null,
		"models": [],
		"isolation": "any",
		"work_class": null,
		"work": null,
	}
}

test_normalize_keeps_given_values[name] if {
	some name, value in {
		"capabilities": ["fp8"],
		"target": "hpc",
		"fraction": 0.5,
		"count": 4,
		"residency": "eu-only",
		"allow_burst": true,
		"data_region": "de-juelich",
		"allow_cpu_fallback": true,
		"optimize": "carbon",
		"carbon_weight": 0.8,
		"max_cost_per_hour": 12.5,
		"max_carbon_per_hour": 900,
		"project": "inference-eu",
	}
	workload.normalize(train({name: value}))[name] == value
}

# An explicit null stays null: only an absent field takes the default.
test_normalize_keeps_explicit_null if {
	workload.normalize(train({"data_region": null})).data_region == null
	workload.normalize(train({"target": null})).target == null
}

test_normalize_keeps_fields_it_does_not_know if {
	workload.normalize(train({"priority": 3})).priority == 3
}

# --- valid workloads ------------------------------------------------------------------------------

valid_cases := {
	"defaults": train({}),
	"cloud restricted four devices": train({"target": "cloud", "residency": "restricted", "count": 4}),
	"quarter": train({"fraction": 0.25}),
	"fraction exactly 1": train({"fraction": 1}),
	"fraction 1.0 with count 3": train({"fraction": 1.0, "count": 3}),
	"tiny fraction": train({"fraction": 0.001}),
	"count 2.0 is whole": train({"count": 2.0}),
	"data_region null": train({"data_region": null}),
	"data_region from the table": train({"residency": "no-egress", "data_region": "de-juelich"}),
	"data_region coarse eu": train({"data_region": "eu"}),
	"capabilities list of strings": train({"capabilities": ["fp8", "bf16"]}),
	"empty capabilities": train({"capabilities": []}),
	"allow_burst true": train({"allow_burst": true}),
	"allow_cpu_fallback true": train({"allow_cpu_fallback": true}),
	"optimize balanced with a weight": train({"optimize": "balanced", "carbon_weight": 0.3}),
	"carbon_weight 0": train({"carbon_weight": 0}),
	"carbon_weight 1": train({"carbon_weight": 1}),
	"caps of 0": train({"max_cost_per_hour": 0, "max_carbon_per_hour": 0}),
	"caps null": train({"max_cost_per_hour": null, "max_carbon_per_hour": null}),
	"fractional caps": train({"max_cost_per_hour": 2.75, "max_carbon_per_hour": 0.5}),
	"project null": train({"project": null}),
	"project from the table": train({"project": "llm-pretraining"}),
	"project without caps": train({"project": "default"}),
}

test_valid_workload_has_no_errors[name] if {
	some name, w in valid_cases
	errors_of(w) == []
}

test_every_known_value_is_valid[name] if {
	some name, w in known_value_cases
	codes(w) == []
}

known_value_cases[sprintf("accelerator %s", [a])] := train({"accelerator": a, "engine": "generic"}) if {
	some a, _ in data.examlops.tables.accelerators
}

known_value_cases[sprintf("engine %s", [e])] := train({"engine": e}) if {
	some e, _ in data.examlops.tables.engines
}

known_value_cases[sprintf("target %s", [t])] := train({"target": t}) if {
	some t in data.examlops.tables.vocabulary.workload_targets
}

known_value_cases[sprintf("residency %s", [r])] := train({"residency": r}) if {
	some r in data.examlops.tables.vocabulary.residencies
}

known_value_cases[sprintf("optimize %s", [o])] := train({"optimize": o}) if {
	some o in data.examlops.tables.vocabulary.objectives
}

known_value_cases[sprintf("project %s", [p])] := train({"project": p}) if {
	some p, _ in data.examlops.tables.budgets.projects
}

known_value_cases[sprintf("data_region %s", [r])] := train({"data_region": r}) if {
	some r, _ in data.examlops.tables.regions
}

# The reviewed vocabulary, as the tables state it.
test_vocabulary_table if {
	data.examlops.tables.vocabulary == {
		"pool_targets": ["hpc", "cloud"],
		"workload_targets": ["hpc", "cloud", "any"],
		"residencies": ["open", "eu-only", "no-egress", "restricted"],
		"objectives": ["cost", "carbon", "balanced", "earliest", "work-cost", "work-carbon", "work-time"],
		"sharing": ["time-slice", "mps"],
		"isolations": ["required", "any"],
		"topologies": ["same-block", "same-switch"],
		"topology_modes": ["required", "preferred"],
		"node_states": ["up", "drained", "down"],
		"spot": ["never", "allow", "require"],
	}
	workload.known.spot == {"never", "allow", "require"}
	workload.targets == {"hpc", "cloud", "any"}
	workload.objectives == {"cost", "carbon", "balanced", "earliest", "work-cost", "work-carbon", "work-time"}
}

# --- invalid workloads: each case the one error it gives -----------------------------------------

invalid_cases := {
	"unknown model": {
		"w": train({"models": ["x9000"]}),
		"code": "model_unknown",
		"details": {"field": "models", "value": ["x9000"]},
	},
	"gang with a fraction": {
		"w": train({"nodes": 2, "fraction": 0.5}),
		"code": "nodes_invalid",
		"details": {"field": "nodes", "value": 2},
	},
	"unknown topology": {
		"w": train({"topology": "same-rack"}),
		"code": "topology_unknown",
		"details": {"field": "topology", "value": "same-rack"},
	},
	"unknown topology mode": {
		"w": train({"topology": "same-block", "topology_mode": "often"}),
		"code": "topology_mode_unknown",
		"details": {"field": "topology_mode", "value": "often"},
	},
	"unknown isolation": {
		"w": train({"isolation": "strict"}),
		"code": "isolation_unknown",
		"details": {"field": "isolation", "value": "strict"},
	},
	"unknown accelerator": {
		"w": train({"accelerator": "gpu"}),
		"code": "accelerator_unknown",
		"message": `unknown accelerator 'gpu' (expected one of ["amd", "cpu", "intel-gaudi", "nvidia", "tpu"])`,
		"details": {"field": "accelerator", "value": "gpu"},
	},
	"accelerator absent": {
		"w": {"name": "train", "engine": "vllm"},
		"code": "accelerator_unknown",
		"message": `unknown accelerator 'null' (expected one of ["amd", "cpu", "intel-gaudi", "nvidia", "tpu"])`,
		"details": {"field": "accelerator", "value": null},
	},
	"accelerator in upper case": {
		"w": train({"accelerator": "NVIDIA"}),
		"code": "accelerator_unknown",
		"details": {"field": "accelerator", "value": "NVIDIA"},
	},
	"unknown engine": {
		"w": train({"engine": "tensorrt"}),
		"code": "engine_unknown",
		"message": `unknown engine 'tensorrt' (expected one of ["cpu", "generic", "ipex", "sglang", "vllm"])`,
		"details": {"field": "engine", "value": "tensorrt"},
	},
	"engine absent": {
		"w": {"name": "train", "accelerator": "nvidia"},
		"code": "engine_unknown",
		"details": {"field": "engine", "value": null},
	},
	"unknown target": {
		"w": train({"target": "edge"}),
		"code": "target_unknown",
		"message": `unknown target 'edge' (expected one of ["any", "cloud", "hpc"])`,
		"details": {"field": "target", "value": "edge"},
	},
	"target null": {
		"w": train({"target": null}),
		"code": "target_unknown",
		"details": {"field": "target", "value": null},
	},
	"unknown residency": {
		"w": train({"residency": "eu"}),
		"code": "residency_unknown",
		"message": `unknown residency 'eu' (expected one of ["eu-only", "no-egress", "open", "restricted"])`,
		"details": {"field": "residency", "value": "eu"},
	},
	"unknown data_region": {
		"w": train({"data_region": "mars-1"}),
		"code": "data_region_unknown",
		"message": "data_region 'mars-1' is not in the regions table; its jurisdiction would be unknown",
		"details": {"field": "data_region", "value": "mars-1"},
	},
	"data_region named like the EU but absent": {
		"w": train({"data_region": "eu-west-9"}),
		"code": "data_region_unknown",
		"details": {"field": "data_region", "value": "eu-west-9"},
	},
	"data_region not a string": {
		"w": train({"data_region": 5}),
		"code": "data_region_unknown",
		"details": {"field": "data_region", "value": 5},
	},
	"data_region empty": {
		"w": train({"data_region": ""}),
		"code": "data_region_unknown",
		"details": {"field": "data_region", "value": ""},
	},
	"fraction zero": {
		"w": train({"fraction": 0}),
		"code": "fraction_invalid",
		"message": "fraction 0 must be a number greater than 0 and at most 1",
		"details": {"field": "fraction", "value": 0},
	},
	"fraction negative": {
		"w": train({"fraction": -0.5}),
		"code": "fraction_invalid",
		"details": {"field": "fraction", "value": -0.5},
	},
	"fraction above one": {
		"w": train({"fraction": 1.5}),
		"code": "fraction_invalid",
		"message": "fraction 1.5 must be a number greater than 0 and at most 1",
		"details": {"field": "fraction", "value": 1.5},
	},
	"fraction a string": {
		"w": train({"fraction": "0.5"}),
		"code": "fraction_invalid",
		"details": {"field": "fraction", "value": "0.5"},
	},
	"fraction null": {
		"w": train({"fraction": null}),
		"code": "fraction_invalid",
		"details": {"field": "fraction", "value": null},
	},
	"fraction a boolean": {
		"w": train({"fraction": true}),
		"code": "fraction_invalid",
		"details": {"field": "fraction", "value": true},
	},
	# An invalid fraction is reported once, never again as a count error.
	"fraction invalid with count 2": {
		"w": train({"fraction": 1.5, "count": 2}),
		"code": "fraction_invalid",
		"details": {"field": "fraction", "value": 1.5},
	},
	"count zero": {
		"w": train({"count": 0}),
		"code": "count_invalid",
		"message": "count 0 must be a whole number of at least 1 (and exactly 1 with a fraction below 1)",
		"details": {"field": "count", "value": 0},
	},
	"count negative": {
		"w": train({"count": -2}),
		"code": "count_invalid",
		"details": {"field": "count", "value": -2},
	},
	"count not whole": {
		"w": train({"count": 1.5}),
		"code": "count_invalid",
		"message": "count 1.5 must be a whole number of at least 1 (and exactly 1 with a fraction below 1)",
		"details": {"field": "count", "value": 1.5},
	},
	"count a string": {
		"w": train({"count": "2"}),
		"code": "count_invalid",
		"details": {"field": "count", "value": "2"},
	},
	"count null": {
		"w": train({"count": null}),
		"code": "count_invalid",
		"details": {"field": "count", "value": null},
	},
	"count 2 with a fraction": {
		"w": train({"count": 2, "fraction": 0.5}),
		"code": "count_invalid",
		"message": "count 2 must be a whole number of at least 1 (and exactly 1 with a fraction below 1)",
		"details": {"field": "count", "value": 2},
	},
	"capabilities a bare string": {
		"w": train({"capabilities": "fp8"}),
		"code": "field_invalid",
		"message": "capabilities has the wrong type (got fp8)",
		"details": {"field": "capabilities", "value": "fp8"},
	},
	"capabilities with a number": {
		"w": train({"capabilities": ["fp8", 8]}),
		"code": "field_invalid",
		"details": {"field": "capabilities", "value": ["fp8", 8]},
	},
	"capabilities null": {
		"w": train({"capabilities": null}),
		"code": "field_invalid",
		"details": {"field": "capabilities", "value": null},
	},
	"capabilities an object": {
		"w": train({"capabilities": {"fp8": true}}),
		"code": "field_invalid",
		"details": {"field": "capabilities", "value": {"fp8": true}},
	},
	"allow_burst a string": {
		"w": train({"allow_burst": "true"}),
		"code": "field_invalid",
		"message": "allow_burst has the wrong type (got true)",
		"details": {"field": "allow_burst", "value": "true"},
	},
	"allow_burst a number": {
		"w": train({"allow_burst": 1}),
		"code": "field_invalid",
		"details": {"field": "allow_burst", "value": 1},
	},
	"allow_cpu_fallback a string": {
		"w": train({"allow_cpu_fallback": "yes"}),
		"code": "field_invalid",
		"message": "allow_cpu_fallback has the wrong type (got yes)",
		"details": {"field": "allow_cpu_fallback", "value": "yes"},
	},
	"allow_cpu_fallback null": {
		"w": train({"allow_cpu_fallback": null}),
		"code": "field_invalid",
		"details": {"field": "allow_cpu_fallback", "value": null},
	},
	"unknown optimize": {
		"w": train({"optimize": "speed"}),
		"code": "optimize_unknown",
		"message": `unknown optimize 'speed' (expected one of ["balanced", "carbon", "cost", "earliest", "work-carbon", "work-cost", "work-time"])`,
		"details": {"field": "optimize", "value": "speed"},
	},
	"optimize null": {
		"w": train({"optimize": null}),
		"code": "optimize_unknown",
		"details": {"field": "optimize", "value": null},
	},
	"optimize in upper case": {
		"w": train({"optimize": "COST"}),
		"code": "optimize_unknown",
		"details": {"field": "optimize", "value": "COST"},
	},
	"carbon_weight above 1": {
		"w": train({"carbon_weight": 1.5}),
		"code": "field_invalid",
		"message": "carbon_weight has the wrong type (got 1.5)",
		"details": {"field": "carbon_weight", "value": 1.5},
	},
	"carbon_weight negative": {
		"w": train({"carbon_weight": -0.1}),
		"code": "field_invalid",
		"details": {"field": "carbon_weight", "value": -0.1},
	},
	"carbon_weight a string": {
		"w": train({"carbon_weight": "high"}),
		"code": "field_invalid",
		"details": {"field": "carbon_weight", "value": "high"},
	},
	"carbon_weight null": {
		"w": train({"carbon_weight": null}),
		"code": "field_invalid",
		"details": {"field": "carbon_weight", "value": null},
	},
	"max_cost_per_hour negative": {
		"w": train({"max_cost_per_hour": -1}),
		"code": "field_invalid",
		"message": "max_cost_per_hour has the wrong type (got -1)",
		"details": {"field": "max_cost_per_hour", "value": -1},
	},
	"max_cost_per_hour a boolean": {
		"w": train({"max_cost_per_hour": true}),
		"code": "field_invalid",
		"details": {"field": "max_cost_per_hour", "value": true},
	},
	"max_carbon_per_hour a string": {
		"w": train({"max_carbon_per_hour": "x"}),
		"code": "field_invalid",
		"message": "max_carbon_per_hour has the wrong type (got x)",
		"details": {"field": "max_carbon_per_hour", "value": "x"},
	},
	"max_carbon_per_hour negative": {
		"w": train({"max_carbon_per_hour": -0.5}),
		"code": "field_invalid",
		"details": {"field": "max_carbon_per_hour", "value": -0.5},
	},
	"unknown project": {
		"w": train({"project": "nope"}),
		"code": "project_unknown",
		"message": "project 'nope' is not in the budgets table (policies/examlops/tables/budgets.yaml)",
		"details": {"field": "project", "value": "nope"},
	},
	"project empty": {
		"w": train({"project": ""}),
		"code": "project_unknown",
		"details": {"field": "project", "value": ""},
	},
	"project not a string": {
		"w": train({"project": 5}),
		"code": "project_unknown",
		"message": "project '5' is not in the budgets table (policies/examlops/tables/budgets.yaml)",
		"details": {"field": "project", "value": 5},
	},
	"project a table key's inner name": {
		"w": train({"project": "projects"}),
		"code": "project_unknown",
		"details": {"field": "project", "value": "projects"},
	},
	"spot a yes": {
		"w": train({"spot": "yes"}),
		"code": "spot_unknown",
		"message": "unknown spot 'yes' (expected one of [\"allow\", \"never\", \"require\"])",
		"details": {"field": "spot", "value": "yes"},
	},
	"spot a boolean (SkyPilot's use_spot)": {
		"w": train({"spot": true}),
		"code": "spot_unknown",
		"details": {"field": "spot", "value": true},
	},
	"allow_budget_fallback a string": {
		"w": train({"allow_budget_fallback": "no"}),
		"code": "field_invalid",
		"message": "allow_budget_fallback has the wrong type (got no)",
		"details": {"field": "allow_budget_fallback", "value": "no"},
	},
	"work_class not in the throughput table": {
		"w": train({"work_class": "GPT-9", "work": 5}),
		"code": "work_class_unknown",
		"details": {"field": "work_class", "value": "GPT-9"},
	},
	"work without its class": {
		"w": train({"work": 5}),
		"code": "work_invalid",
		"details": {"field": "work", "value": 5},
	},
}

test_invalid_workload_gives_one_error[name] if {
	some name, tc in invalid_cases
	errs := errors_of(tc.w)
	count(errs) == 1
	errs[0].code == tc.code
	errs[0].kind == "never"
	errs[0].details == tc.details
	object.get(tc, "message", errs[0].message) == errs[0].message
}

# Every code the package declares is produced by some case above, and no other.
test_declared_codes_are_the_codes_produced if {
	object.keys(workload.about.custom.codes) == {tc.code | some tc in invalid_cases}
}

test_every_declared_code_is_never if {
	every _, c in workload.about.custom.codes {
		c.kind == "never"
	}
}

# --- several errors: all reported, in field order; the first one wins ------------------------------

test_all_errors_are_reported_in_field_order if {
	codes({
		"name": "train",
		"accelerator": "foo",
		"engine": "bar",
		"target": "x",
		"residency": "y",
		"data_region": "mars",
		"fraction": 0,
		"count": 0,
		"capabilities": "fp8",
		"allow_burst": "yes",
		"allow_cpu_fallback": "no",
		"optimize": "speed",
		"carbon_weight": 2,
		"max_cost_per_hour": -1,
		"max_carbon_per_hour": "lots",
		"project": "nope",
	}) == [
		"accelerator_unknown", "engine_unknown", "target_unknown", "residency_unknown",
		"data_region_unknown", "fraction_invalid", "count_invalid",
		"field_invalid", "field_invalid", "field_invalid",
		"optimize_unknown", "field_invalid", "field_invalid", "field_invalid", "project_unknown",
	]
}

test_field_invalid_order_of_the_budget_fields if {
	errs := errors_of(train({"carbon_weight": 2, "max_cost_per_hour": -1, "max_carbon_per_hour": "lots"}))
	[e.details.field | some e in errs] == ["carbon_weight", "max_cost_per_hour", "max_carbon_per_hour"]
}

first_error_cases := {
	"accelerator before residency": {"w": train({"accelerator": "gpu", "residency": "eu"}), "first": "accelerator_unknown"},
	"engine before target": {"w": train({"engine": "x", "target": "edge"}), "first": "engine_unknown"},
	"data_region before fraction": {"w": train({"data_region": "mars", "fraction": 2}), "first": "data_region_unknown"},
	"count before capabilities": {"w": train({"count": 0, "capabilities": "fp8"}), "first": "count_invalid"},
	"capabilities before allow_burst": {"w": train({"allow_burst": "yes", "capabilities": 1}), "first": "field_invalid"},
}

test_first_error_comes_first[name] if {
	some name, tc in first_error_cases
	errs := errors_of(tc.w)
	count(errs) == 2
	errs[0].code == tc.first
}

test_first_field_invalid_is_capabilities if {
	errs := errors_of(train({"allow_burst": "yes", "capabilities": 1}))
	[e.details.field | some e in errs] == ["capabilities", "allow_burst"]
}

# --- the known values come from the reviewed tables -------------------------------------------------

test_table_override_adds_an_accelerator if {
	codes(train({"accelerator": "npu", "engine": "generic"})) == [] with data.examlops.tables.accelerators as {"npu": {"backend": "npu"}}
	codes(train({})) == ["accelerator_unknown"] with data.examlops.tables.accelerators as {"npu": {"backend": "npu"}}
}

test_table_override_removes_an_engine if {
	codes(train({"engine": "sglang"})) == ["engine_unknown"] with data.examlops.tables.engines as {"vllm": {"backends": ["cuda"]}}
}

test_table_override_adds_a_target_and_an_objective if {
	vocabulary := object.union(data.examlops.tables.vocabulary, {"workload_targets": ["edge"], "objectives": ["speed"]})
	codes(train({"target": "edge", "optimize": "speed"})) == [] with data.examlops.tables.vocabulary as vocabulary
	codes(train({})) == ["target_unknown", "optimize_unknown"] with data.examlops.tables.vocabulary as vocabulary
}

test_table_override_removes_a_residency if {
	vocabulary := object.union(data.examlops.tables.vocabulary, {"residencies": ["open"]})
	codes(train({"residency": "eu-only"})) == ["residency_unknown"] with data.examlops.tables.vocabulary as vocabulary
}

test_table_override_adds_a_region if {
	codes(train({"data_region": "mars-1"})) == [] with data.examlops.tables.regions as {"mars-1": {"country": "MA"}}
}

# --- what a workload asks of nodes ---------------------------------------------------------------

test_node_asks_that_are_well_formed_are_valid if {
	codes(train({
		"cpu": 1.5, "memory": 65536, "nodes": 4, "count": 8, "topology": "same-switch", "topology_mode": "preferred",
		"models": ["h100", "A100"], "isolation": "required",
	})) == []
}

test_a_gang_is_a_whole_number_of_nodes_and_one_with_a_fraction[name] if {
	some name, [w, want] in {
		"zero": [{"nodes": 0}, ["nodes_invalid"]],
		"part": [{"nodes": 1.5}, ["nodes_invalid"]],
		"text": [{"nodes": "2"}, ["nodes_invalid"]],
		"fraction": [{"nodes": 2, "fraction": 0.5}, ["nodes_invalid"]],
		"one with a fraction": [{"nodes": 1, "fraction": 0.5}, []],
	}
	codes(train(w)) == want
}

test_cpu_and_memory_are_amounts_above_zero[name] if {
	some name, w in {"no cpu": {"cpu": 0}, "text cpu": {"cpu": "8"}, "negative memory": {"memory": -1}}
	codes(train(w)) == ["field_invalid"]
}

test_topology_words_come_from_the_vocabulary if {
	codes(train({"topology": "same-rack", "topology_mode": "sometimes", "isolation": "strict"})) == [
		"topology_unknown", "topology_mode_unknown", "isolation_unknown",
	]
}

test_a_model_the_table_does_not_know_is_refused if {
	[e] := errors_of(train({"models": ["h100", "x9000", "b-1"]}))
	e.code == "model_unknown"
	e.details.value == ["b-1", "x9000"]
	contains(e.message, "are not in the models table")
}

test_models_must_be_a_list_of_names if {
	codes(train({"models": "h100"})) == ["field_invalid"]
}

# --- metadata -------------------------------------------------------------------------------------

test_about_reads_every_workload_field if {
	workload.about.title == "Workload"
	workload.about.custom.reads.workload == [
		"accelerator", "engine", "capabilities", "target", "fraction", "count", "residency", "allow_burst",
		"data_region", "allow_cpu_fallback", "optimize", "carbon_weight", "max_cost_per_hour", "max_carbon_per_hour",
		"project", "spot", "allow_budget_fallback", "cpu", "memory", "nodes", "topology", "topology_mode", "models",
		"isolation", "work_class", "work",
	]
}

test_every_defaulted_field_is_read if {
	every f, _ in workload.defaults {
		f in workload.about.custom.reads.workload
	}
}

test_residencies_are_ordered_laxest_first if {
	workload.residencies == ["open", "eu-only", "no-egress", "restricted"]
}

# Regression (workload.rego, METADATA custom.codes.count_invalid): the meaning is an unquoted YAML flow
# scalar with a comma in it, so YAML cuts it at the comma: the meaning reads "invalid workload
# (count not a whole number of at least 1" and the rest becomes a stray key
# "or not 1 with a fraction)": null. The same truncated meaning reaches placement.about.other_codes
# (the README's reason-code table). Fix: quote the meaning, as the other packages do.
test_count_invalid_metadata_is_well_formed if {
	c := workload.about.custom.codes.count_invalid
	c.meaning == "invalid workload (count not a whole number of at least 1, or not 1 with a fraction)"
	object.keys(c) == {"kind", "meaning"}
}

test_other_codes_metadata_is_well_formed[code] if {
	# count_invalid: see the regression test above.
	some code, c in object.remove(workload.about.custom.codes, ["count_invalid"])
	object.keys(c) == {"kind", "meaning"}
	is_string(c.meaning)
}

# --- work ----------------------------------------------------------------------------------------

test_work_of_a_known_class_is_valid if {
	codes(train({"work_class": "ResNet-50", "work": 20000, "optimize": "work-cost"})) == []
}

test_a_work_class_the_throughput_table_lacks_is_refused if {
	e := workload.errors(workload.normalize({"name": "t", "accelerator": "nvidia", "engine": "vllm", "work_class": "GPT-9", "work": 1}))[0]
	e.code == "work_class_unknown"
	contains(e.message, "not in the throughput table")
}

test_work_must_be_above_zero_and_come_with_its_class if {
	codes(train({"work_class": "LM", "work": 0})) == ["work_invalid"]
	codes(train({"work_class": "LM", "work": "many"})) == ["work_invalid"]
	codes(train({"work": 10})) == ["work_invalid"]
	codes(train({"work_class": "LM"})) == ["work_invalid"]
}

test_every_work_objective_is_known if {
	every o in ["work-cost", "work-carbon", "work-time"] {
		codes(train({"optimize": o})) == []
	}
}

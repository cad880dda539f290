package examlops.hardware.checks.models_test

import data.examlops.hardware.checks.models

deny(model, accepted) := d if {
	d := models.deny with input as {"shape": {"model": model}, "workload": {"models": accepted}}
}

test_any_named_model_will_do[name] if {
	some name, [model, accepted] in {
		"one of two": ["v100-32gb", ["v100-16gb", "v100-32gb"]],
		"case-insensitive": ["H100", ["h100"]],
		"none named: any model": ["t4", []],
		"none named, no model": [null, []],
	}
	deny(model, accepted) == set()
}

test_another_model_is_never if {
	[r] := [r | some r in deny("a100", ["v100", "t4"])]
	r.code == "model_not_accepted"
	r.kind == "never"
	r.message == "the pool's devices are A100; the workload accepts only t4, v100"
}

test_a_pool_without_a_model_is_not_known_to_be_one if {
	[r] := [r | some r in deny(null, ["t4"])]
	r.message == "the pool names no device model; the workload accepts only t4"
}

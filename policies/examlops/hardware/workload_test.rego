package examlops.hardware.workload_test

import data.examlops.hardware.workload

# A valid workload; tests override one field at a time.
train(overrides) := object.union({"name": "train", "accelerator": "nvidia", "engine": "vllm"}, overrides)

codes(w) := [e.code | some e in workload.errors(workload.normalize(w))]

test_normalize_fills_defaults if {
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
	}
}

test_normalize_keeps_given_values if {
	w := workload.normalize(train({
		"capabilities": ["fp8"],
		"target": "hpc",
		"fraction": 0.5,
		"residency": "eu-only",
		"allow_burst": true,
	}))
	w.capabilities == ["fp8"]
	w.target == "hpc"
	w.fraction == 0.5
	w.count == 1
	w.residency == "eu-only"
	w.allow_burst == true
}

test_valid_workload_has_no_errors if {
	codes(train({})) == []
	codes(train({"target": "cloud", "residency": "restricted", "count": 4})) == []
	codes(train({"fraction": 0.25})) == []
}

test_every_known_value_is_valid if {
	every a in ["nvidia", "amd", "intel-gaudi", "tpu", "cpu"] {
		codes(train({"accelerator": a, "engine": "generic"})) == []
	}
	every e in ["vllm", "sglang", "ipex", "cpu", "generic"] {
		codes(train({"engine": e})) == []
	}
	every t in ["hpc", "cloud", "any"] {
		codes(train({"target": t})) == []
	}
	every r in ["open", "eu-only", "no-egress", "restricted"] {
		codes(train({"residency": r})) == []
	}
}

test_accelerator_unknown if {
	errors := workload.errors(workload.normalize(train({"accelerator": "gaudi"})))
	errors == [{
		"code": "accelerator_unknown",
		"kind": "never",
		"message": `unknown accelerator 'gaudi' (expected one of ["amd", "cpu", "intel-gaudi", "nvidia", "tpu"])`,
		"details": {"field": "accelerator", "value": "gaudi"},
	}]
}

test_engine_unknown if {
	errors := workload.errors(workload.normalize(train({"engine": "tensorrt"})))
	[e.code | some e in errors] == ["engine_unknown"]
	errors[0].message == `unknown engine 'tensorrt' (expected one of ["cpu", "generic", "ipex", "sglang", "vllm"])`
}

test_target_unknown if {
	errors := workload.errors(workload.normalize(train({"target": "edge"})))
	[e.code | some e in errors] == ["target_unknown"]
	errors[0].message == `unknown target 'edge' (expected one of ["any", "cloud", "hpc"])`
}

test_residency_unknown if {
	errors := workload.errors(workload.normalize(train({"residency": "eu"})))
	[e.code | some e in errors] == ["residency_unknown"]
	errors[0].details == {"field": "residency", "value": "eu"}
}

# Fail closed: a workload that names no accelerator or engine is invalid, not silently valid.
test_missing_accelerator_is_unknown if {
	codes({"name": "train", "engine": "vllm"}) == ["accelerator_unknown"]
}

test_missing_engine_is_unknown if {
	codes({"name": "train", "accelerator": "nvidia"}) == ["engine_unknown"]
}

test_fraction_zero_invalid if {
	codes(train({"fraction": 0})) == ["fraction_invalid"]
}

test_fraction_negative_invalid if {
	codes(train({"fraction": -1})) == ["fraction_invalid"]
}

test_fraction_above_one_invalid if {
	codes(train({"fraction": 1.5})) == ["fraction_invalid"]
	workload.errors(workload.normalize(train({"fraction": 1.5})))[0].message == "fraction 1.5 must be a number greater than 0 and at most 1"
}

test_fraction_string_invalid if {
	codes(train({"fraction": "x"})) == ["fraction_invalid"]
	workload.errors(workload.normalize(train({"fraction": "x"})))[0].details == {"field": "fraction", "value": "x"}
}

test_fraction_null_invalid if {
	codes(train({"fraction": null})) == ["fraction_invalid"]
}

test_fraction_bounds_valid if {
	codes(train({"fraction": 1})) == []
	codes(train({"fraction": 0.001})) == []
}

test_count_zero_invalid if {
	codes(train({"count": 0})) == ["count_invalid"]
}

test_count_not_whole_invalid if {
	codes(train({"count": 1.5})) == ["count_invalid"]
	workload.errors(workload.normalize(train({"count": 1.5})))[0].message == "count 1.5 must be a whole number of at least 1 (and exactly 1 with a fraction below 1)"
}

test_count_string_invalid if {
	codes(train({"count": "2"})) == ["count_invalid"]
}

test_count_two_with_fraction_invalid if {
	codes(train({"count": 2, "fraction": 0.5})) == ["count_invalid"]
}

test_count_two_whole_devices_valid if {
	codes(train({"count": 2, "fraction": 1})) == []
	codes(train({"count": 2})) == []
}

test_all_errors_reported_in_field_order if {
	codes({
		"name": "train",
		"accelerator": "foo",
		"engine": "bar",
		"target": "x",
		"residency": "y",
		"fraction": 0.5,
		"count": 2,
	}) == ["accelerator_unknown", "engine_unknown", "target_unknown", "residency_unknown", "count_invalid"]
}

# The known accelerators and engines come from the reviewed tables.
test_table_override_adds_an_accelerator if {
	codes(train({"accelerator": "npu", "engine": "generic"})) == [] with data.examlops.tables.accelerators as {"npu": {"backend": "npu"}}
	codes(train({})) == ["accelerator_unknown"] with data.examlops.tables.accelerators as {"npu": {"backend": "npu"}}
}

test_table_override_removes_an_engine if {
	codes(train({"engine": "sglang"})) == ["engine_unknown"] with data.examlops.tables.engines as {"vllm": {"backends": ["cuda"]}}
}

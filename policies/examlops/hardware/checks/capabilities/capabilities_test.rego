package examlops.hardware.checks.capabilities_test

import data.examlops.hardware.checks.capabilities

# The check sees only the fields it declares.
deny(tags, model, wanted) := d if {
	d := capabilities.deny with input as {"shape": {"capabilities": tags, "model": model}, "workload": {"capabilities": wanted}}
}

missing(tags, model, wanted) := m if {
	some r in deny(tags, model, wanted)
	m := r.details.missing
} else := []

cases := {
	"nothing asked": {"tags": [], "model": null, "wanted": [], "missing": []},
	"pool tag": {"tags": ["infiniband"], "model": null, "wanted": ["infiniband"], "missing": []},
	"pool lacks the tag": {"tags": [], "model": null, "wanted": ["infiniband"], "missing": ["infiniband"]},
	"model tag from the table": {"tags": [], "model": "h100", "wanted": ["fp8"], "missing": []},
	"model tag and pool tag": {"tags": ["infiniband"], "model": "h100", "wanted": ["fp8", "infiniband"], "missing": []},
	"model without the tag": {"tags": [], "model": "a100", "wanted": ["fp8"], "missing": ["fp8"]},
	"b200 has fp4": {"tags": [], "model": "b200", "wanted": ["fp4", "fp8"], "missing": []},
	"tpu-v6e has bf16 not fp8": {"tags": [], "model": "tpu-v6e", "wanted": ["bf16", "fp8"], "missing": ["fp8"]},
	"model unknown to the table gives nothing": {"tags": [], "model": "x100", "wanted": ["fp8"], "missing": ["fp8"]},
	"missing tags sorted": {"tags": ["b"], "model": null, "wanted": ["zz", "b", "aa", "mm"], "missing": ["aa", "mm", "zz"]},
	"tags absent on the pool": {"tags": null, "model": "h100", "wanted": ["fp8", "nvlink"], "missing": ["nvlink"]},
	"duplicate asks count once": {"tags": [], "model": null, "wanted": ["x", "x"], "missing": ["x"]},
}

test_capabilities[name] if {
	some name, tc in cases
	missing(tc.tags, tc.model, tc.wanted) == tc.missing
	count(deny(tc.tags, tc.model, tc.wanted)) == min([count(tc.missing), 1])
}

test_reason if {
	deny(["nvlink"], "a100", ["infiniband", "fp8"]) == {{
		"code": "capability_missing",
		"kind": "never",
		"message": `pool lacks capabilities ["fp8", "infiniband"]`,
		"details": {"missing": ["fp8", "infiniband"], "advertised": ["nvlink"]},
	}}
}

test_advertised_joins_pool_and_model_tags if {
	capabilities.advertised({"capabilities": ["nvlink"], "model": "b200"}) == {"nvlink", "fp8", "fp4"}
	capabilities.advertised({"capabilities": ["nvlink"], "model": null}) == {"nvlink"}
	capabilities.advertised({"capabilities": [], "model": "t4"}) == set()
}

test_models_table_override if {
	missing([], "a100", ["fp8"]) == [] with data.examlops.tables.models.a100 as {"capabilities": ["fp8"]}
}

test_about if {
	a := capabilities.about
	a.title == "Capabilities"
	a.custom.order == 30
	a.custom.reads == {"shape": ["capabilities", "model"], "workload": ["capabilities"]}
	object.keys(a.custom.codes) == {"capability_missing"}
}

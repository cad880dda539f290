package examlops.hardware.placement_test

import data.examlops.hardware.placement

# The E8 specification's pools.
hpc_nvidia := {
	"name": "hpc-nvidia",
	"target": "hpc",
	"accelerator": "nvidia",
	"model": null,
	"region": "eu",
	"capabilities": [],
	"supports_fractions": true,
	"count": 8,
	"free": 8,
	"cost_per_hour": 2.5,
}

hpc_mi300 := {
	"name": "hpc-mi300",
	"target": "hpc",
	"accelerator": "amd",
	"model": null,
	"region": "eu",
	"capabilities": [],
	"supports_fractions": false,
	"count": 4,
	"free": 4,
	"cost_per_hour": 1.8,
}

cloud_a100 := {
	"name": "cloud-a100",
	"target": "cloud",
	"accelerator": "nvidia",
	"model": null,
	"region": "us",
	"capabilities": [],
	"supports_fractions": false,
	"count": 100,
	"free": 100,
	"cost_per_hour": 2.75,
}

spec_pools := [hpc_nvidia, hpc_mi300, cloud_a100]

full(pool) := object.union(pool, {"free": 0})

# HPC saturated: both HPC pools have no free device.
hpc_full_pools := [full(hpc_nvidia), full(hpc_mi300), cloud_a100]

train(overrides) := object.union({"name": "train", "accelerator": "nvidia", "engine": "generic"}, overrides)

scenario(workload, pools) := {"workload": workload, "pools": pools}

codes(verdict) := [r.code | some r in verdict.reasons]

# The cheapest eligible pool, as the caller picks it.
cheapest(d, pools) := [p.name | some p in pools; p.cost_per_hour == min({q.cost_per_hour | some q in pools; q.name in d.eligible})][0]

# --- the specification's scenario ------------------------------------------------------------

test_amd_vllm_hpc_places_on_mi300_tier_0 if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "vllm", "target": "hpc"}), spec_pools)
	d.rejection == null
	d.selected_tier == 0
	d.eligible == ["hpc-mi300"]
	v := d.verdicts["hpc-mi300"]
	v.eligible == true
	v.admissible == true
	v.tier == 0
	v.fallback == false
	v.burst == false
	v.note == null
	v.reasons == []
	d.burst == {"attempted": false}
}

test_amd_vllm_hpc_other_pools_are_told_why if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "vllm", "target": "hpc"}), spec_pools)
	d.verdicts["hpc-nvidia"].admissible == true
	d.verdicts["hpc-nvidia"].eligible == false
	codes(d.verdicts["hpc-nvidia"]) == ["fallback_not_needed"]
	d.verdicts["cloud-a100"].admissible == false
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
}

test_tpu_generic_hpc_falls_back_to_both_hpc_pools if {
	d := placement.decision with input as scenario(train({"accelerator": "tpu", "target": "hpc"}), spec_pools)
	d.rejection == null
	d.selected_tier == 1
	d.eligible == ["hpc-mi300", "hpc-nvidia"]
	d.verdicts["hpc-mi300"].fallback == true
	d.verdicts["hpc-mi300"].note == "requested tpu unavailable — fell back to amd"
	d.verdicts["hpc-nvidia"].note == "requested tpu unavailable — fell back to nvidia"
	d.verdicts["cloud-a100"].eligible == false
	d.burst.attempted == false
	cheapest(d, spec_pools) == "hpc-mi300"
}

test_sglang_on_amd_is_rejected_with_spec_message if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
	d.rejection.code == "backend_unsupported"
	d.rejection.message == "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"
	d.eligible == []
	d.selected_tier == null
	d.burst == {"attempted": false}
}

test_every_pool_gets_a_verdict_even_on_rejection if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
	object.keys(d.verdicts) == {"hpc-nvidia", "hpc-mi300", "cloud-a100"}
	codes(d.verdicts["hpc-mi300"]) == ["backend_unsupported"]
	every _, v in d.verdicts {
		v.eligible == false
	}
}

test_pools_that_could_run_a_rejected_request_say_why_they_were_not_used if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
	d.verdicts["hpc-nvidia"].admissible == true
	codes(d.verdicts["hpc-nvidia"]) == ["request_rejected"]
	d.verdicts["hpc-nvidia"].reasons[0].message == "the workload as asked is rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"
}

test_burst_eu_only_to_us_is_blocked if {
	w := train({"target": "cloud", "residency": "eu-only", "allow_burst": true})
	d := placement.decision with input as scenario(w, spec_pools)
	d.rejection == null
	d.eligible == []
	d.selected_tier == null
	d.burst.attempted == true
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-a100"
	d.burst.reason.code == "residency_forbids"
	d.burst.reason.message == "data-residency eu-only forbids egress to region 'us'"
	codes(d.verdicts["hpc-nvidia"]) == ["target_mismatch"]
}

test_burst_open_residency_is_allowed if {
	d := placement.decision with input as scenario(train({"target": "cloud", "allow_burst": true}), spec_pools)
	d.burst == {"attempted": true, "verdict": "allowed", "reason": null}
	d.selected_tier == 2
	d.eligible == ["cloud-a100"]
	d.verdicts["cloud-a100"].burst == true
	d.verdicts["cloud-a100"].fallback == false
}

test_burst_eu_only_to_eu_cloud_is_allowed if {
	eu_cloud := object.union(cloud_a100, {"name": "cloud-frankfurt", "region": "eu-central-1"})
	d := placement.decision with input as scenario(train({"target": "cloud", "residency": "eu-only"}), [hpc_nvidia, cloud_a100, eu_cloud])
	d.burst.verdict == "allowed"
	d.eligible == ["cloud-frankfurt"]
	codes(d.verdicts["cloud-a100"]) == ["residency_forbids"]
}

test_hpc_full_with_allow_burst_bursts if {
	d := placement.decision with input as scenario(train({"allow_burst": true}), hpc_full_pools)
	d.burst.attempted == true
	d.burst.verdict == "allowed"
	d.eligible == ["cloud-a100"]
	d.selected_tier == 2
	codes(d.verdicts["hpc-nvidia"]) == ["capacity_exhausted"]
	d.verdicts["hpc-nvidia"].reasons[0].kind == "not_now"
}

test_hpc_target_full_with_allow_burst_bursts if {
	d := placement.decision with input as scenario(train({"target": "hpc", "allow_burst": true}), hpc_full_pools)
	d.burst.verdict == "allowed"
	d.eligible == ["cloud-a100"]
}

test_hpc_full_with_allow_burst_eu_only_is_blocked if {
	d := placement.decision with input as scenario(train({"allow_burst": true, "residency": "eu-only"}), hpc_full_pools)
	d.burst.attempted == true
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-a100"
	d.burst.reason.message == "data-residency eu-only forbids egress to region 'us'"
	d.eligible == []
}

test_hpc_full_with_no_egress_is_blocked if {
	d := placement.decision with input as scenario(train({"allow_burst": true, "residency": "no-egress"}), hpc_full_pools)
	d.burst.verdict == "blocked"
	d.burst.reason.message == "data-residency no-egress forbids egress to region 'us'"
}

test_hpc_full_without_allow_burst_does_not_burst if {
	d := placement.decision with input as scenario(train({}), hpc_full_pools)
	d.burst == {"attempted": false}
	d.eligible == []
	d.selected_tier == null
	d.rejection == null
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
}

test_hpc_available_with_allow_burst_does_not_burst if {
	d := placement.decision with input as scenario(train({"allow_burst": true}), spec_pools)
	d.burst == {"attempted": false}
	d.eligible == ["hpc-nvidia"]
}

test_burst_unavailable_when_cloud_is_full_too if {
	d := placement.decision with input as scenario(train({"target": "cloud"}), [hpc_nvidia, full(cloud_a100)])
	d.burst == {"attempted": true, "verdict": "unavailable", "reason": null}
	codes(d.verdicts["cloud-a100"]) == ["capacity_exhausted"]
}

test_blocked_burst_names_cheapest_blocked_cloud_pool if {
	cheap := object.union(cloud_a100, {"name": "cloud-cheap", "region": "us-east-1", "cost_per_hour": 1})
	london := object.union(cloud_a100, {"name": "cloud-london", "region": "eu-west-2", "cost_per_hour": 2})
	d := placement.decision with input as scenario(train({"target": "cloud", "residency": "eu-only"}), [cloud_a100, london, cheap])
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-cheap"
	d.burst.reason.message == "data-residency eu-only forbids egress to region 'us-east-1'"
}

test_blocked_burst_to_unknown_region if {
	mars := object.union(cloud_a100, {"region": "mars-1"})
	d := placement.decision with input as scenario(train({"target": "cloud"}), [mars])
	d.burst.verdict == "blocked"
	d.burst.reason.code == "region_unknown"
}

test_preference_reasons_fallback_and_burst_not_needed if {
	d := placement.decision with input as scenario(train({"allow_burst": true}), spec_pools)
	d.selected_tier == 0
	codes(d.verdicts["hpc-mi300"]) == ["fallback_not_needed"]
	d.verdicts["hpc-mi300"].reasons[0].message == "a pool of the requested accelerator nvidia is available"
	codes(d.verdicts["cloud-a100"]) == ["burst_not_needed"]
	d.verdicts["cloud-a100"].admissible == true
	d.verdicts["cloud-a100"].eligible == false
}

test_invalid_workload_is_rejected_with_no_verdicts if {
	d := placement.decision with input as scenario(train({"fraction": 0}), spec_pools)
	d.rejection.code == "fraction_invalid"
	d.verdicts == {}
	d.eligible == []
	d.selected_tier == null
	d.burst == {"attempted": false}
}

test_first_error_is_the_rejection if {
	d := placement.decision with input as scenario(train({"accelerator": "gpu", "residency": "eu"}), spec_pools)
	d.rejection.code == "accelerator_unknown"
	[e.code | some e in placement.errors] == ["accelerator_unknown", "residency_unknown"] with input as scenario(train({"accelerator": "gpu", "residency": "eu"}), spec_pools)
}

test_missing_accelerator_is_rejected if {
	d := placement.decision with input as scenario({"name": "train", "engine": "vllm"}, spec_pools)
	d.rejection.code == "accelerator_unknown"
	d.verdicts == {}
}

test_decision_carries_normalized_workload if {
	d := placement.decision with input as scenario(train({}), spec_pools)
	d.workload == {
		"name": "train",
		"accelerator": "nvidia",
		"engine": "generic",
		"capabilities": [],
		"target": "any",
		"fraction": 1,
		"count": 1,
		"residency": "open",
		"allow_burst": false,
	}
}

test_capability_from_model_selects_pool if {
	h100 := object.union(hpc_nvidia, {"name": "hpc-h100", "model": "h100"})
	d := placement.decision with input as scenario(train({"capabilities": ["fp8"]}), [hpc_nvidia, h100])
	d.eligible == ["hpc-h100"]
	codes(d.verdicts["hpc-nvidia"]) == ["capability_missing"]
}

test_fraction_grant_is_what_capacity_checks if {
	half := train({"fraction": 0.5})
	d := placement.decision with input as scenario(half, [object.union(hpc_nvidia, {"free": 0.5})])
	d.verdicts["hpc-nvidia"].grant.profile == "4g"
	codes(d.verdicts["hpc-nvidia"]) == ["capacity_exhausted"]
	d2 := placement.decision with input as scenario(half, [object.union(hpc_nvidia, {"free": 4 / 7})])
	d2.eligible == ["hpc-nvidia"]
}

test_fraction_not_honored_needs_a_whole_device if {
	d := placement.decision with input as scenario(train({"fraction": 0.5, "accelerator": "amd"}), [object.union(hpc_mi300, {"free": 0.5})])
	d.verdicts["hpc-mi300"].grant.honored == false
	d.verdicts["hpc-mi300"].grant.why == "amd has no isolated partitioning"
	codes(d.verdicts["hpc-mi300"]) == ["capacity_exhausted"]
}

test_all_denials_are_listed if {
	bad := object.union(cloud_a100, {"accelerator": "amd", "free": 0})
	d := placement.decision with input as scenario(train({"engine": "sglang", "capabilities": ["fp8"], "residency": "eu-only"}), [bad])
	codes(d.verdicts["cloud-a100"]) == ["backend_unsupported", "burst_not_allowed", "capability_missing", "residency_forbids", "capacity_exhausted"]
}

test_no_pools_gives_empty_decision if {
	d := placement.decision with input as scenario(train({}), [])
	d.rejection == null
	d.verdicts == {}
	d.eligible == []
	d.selected_tier == null
}

# With overridden tables the same scenario changes: sglang learns ROCm, so AMD is no longer rejected.
test_engine_table_override_lifts_rejection if {
	engines := {"sglang": {"backends": ["cuda", "rocm"]}, "generic": {"backends": ["cuda", "rocm"]}}
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
		with data.examlops.tables.engines as engines
	d.rejection == null
	d.eligible == ["hpc-mi300"]
}

test_member_state_override_allows_burst_to_us if {
	d := placement.decision with input as scenario(train({"target": "cloud", "residency": "eu-only"}), spec_pools)
		with data.examlops.tables.regions.us as {"country": "US"}
		with data.examlops.tables.eu_member_states as ["US"]
	d.burst.verdict == "allowed"
	d.eligible == ["cloud-a100"]
}

# --- provenance -------------------------------------------------------------------------------

test_provenance_without_loaded_revision if {
	d := placement.decision with input as scenario(train({}), spec_pools)
	d.provenance == {"opa_version": opa.runtime().version, "policy_revision": null}
	is_string(d.provenance.opa_version)
	d.provenance.opa_version != ""
}

test_provenance_names_loaded_revision if {
	d := placement.decision with input as scenario(train({}), spec_pools)
		with data.examlops_runtime.revision as "3f2c9e1"
	d.provenance.policy_revision == "3f2c9e1"
}

test_provenance_present_on_rejection if {
	d := placement.decision with input as scenario(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
		with data.examlops_runtime.revision as "3f2c9e1"
	d.provenance.policy_revision == "3f2c9e1"
}

# --- pools sent with their shapes factored out, as the orchestrator sends them -----------------

pool_fields := ["name", "count", "free", "cost_per_hour"]

# Pools of the same shape grouped under it, as the orchestrator sends them.
shaped(workload, pools) := {
	"workload": workload,
	"shapes": [object.union(shape, {"pools": [object.filter(p, pool_fields) | some p in pools; object.remove(p, pool_fields) == shape]}) |
		some shape in {object.remove(p, pool_fields) | some p in pools}
	],
}

test_shaped_input_decides_exactly_as_pool_by_pool_input if {
	every w in [
		train({"accelerator": "amd", "engine": "vllm", "target": "hpc"}),
		train({"accelerator": "tpu", "target": "hpc"}),
		train({"accelerator": "amd", "engine": "sglang"}),
		train({"target": "cloud", "residency": "eu-only", "allow_burst": true}),
		train({"allow_burst": true, "fraction": 0.5}),
	] {
		every pools in [spec_pools, hpc_full_pools] {
			by_pool := placement.decision with input as scenario(w, pools)
			by_shape := placement.decision with input as shaped(w, pools)
			by_pool == by_shape
		}
	}
}

test_a_pool_that_does_not_state_its_free_capacity_has_none if {
	input_doc := {
		"workload": train({"accelerator": "amd", "engine": "vllm"}),
		"shapes": [object.union(object.remove(hpc_mi300, pool_fields), {"pools": [{"name": "hpc-mi300", "count": 4, "cost_per_hour": 1.8}]})],
	}
	d := placement.decision_by_shape with input as input_doc
	d.eligible == []
	d.short == {"hpc-mi300"}
}

test_two_pools_of_one_shape_share_its_verdict_and_differ_only_in_capacity if {
	input_doc := {
		"workload": train({"accelerator": "amd", "engine": "vllm"}),
		"shapes": [object.union(object.remove(hpc_mi300, pool_fields), {"pools": [
			{"name": "hpc-mi300", "count": 4, "free": 4, "cost_per_hour": 1.8},
			{"name": "hpc-mi300-b", "count": 4, "free": 0, "cost_per_hour": 1.0},
		]})],
	}
	d := placement.decision_by_shape with input as input_doc
	d.eligible == ["hpc-mi300"]
	d.short == {"hpc-mi300-b"}
	d.shapes[0].capacity.code == "capacity_exhausted"
	d.shapes[0].denials == []
	d.shapes[0].preference == null
}

package examlops.hardware.eligibility_test

import data.examlops.hardware.eligibility

hpc_pool(overrides) := object.union(
	{
		"name": "hpc-nvidia",
		"target": "hpc",
		"accelerator": "nvidia",
		"model": null,
		"region": "eu",
		"capabilities": [],
		"supports_fractions": false,
		"count": 8,
		"free": 8,
		"cost_per_hour": 2.5,
	},
	overrides,
)

cloud_pool(overrides) := hpc_pool(object.union({"name": "cloud-a100", "target": "cloud", "region": "us"}, overrides))

# A normalized workload (the eligibility functions take it after workload.normalize).
train(overrides) := object.union(
	{
		"name": "train",
		"accelerator": "nvidia",
		"engine": "vllm",
		"capabilities": [],
		"target": "any",
		"fraction": 1,
		"count": 1,
		"residency": "open",
		"allow_burst": false,
	},
	overrides,
)

# --- target ---------------------------------------------------------------------------------

test_target_hpc_on_hpc_pool_allowed if {
	eligibility.target(hpc_pool({}), train({"target": "hpc"})) == null
}

test_target_any_on_hpc_pool_allowed if {
	eligibility.target(hpc_pool({}), train({"target": "any"})) == null
}

test_target_cloud_on_cloud_pool_allowed if {
	eligibility.target(cloud_pool({}), train({"target": "cloud"})) == null
}

test_target_any_on_cloud_pool_needs_burst if {
	r := eligibility.target(cloud_pool({}), train({"target": "any"}))
	r.code == "burst_not_allowed"
	r.kind == "never"
	r.message == "cloud pool needs an explicit burst (allow_burst or target cloud); workload target is any"
	r.details == {"pool_target": "cloud", "target": "any", "allow_burst": false}
}

test_target_hpc_on_cloud_pool_without_burst_not_allowed if {
	eligibility.target(cloud_pool({}), train({"target": "hpc"})).code == "burst_not_allowed"
}

test_target_cloud_on_hpc_pool_mismatch if {
	r := eligibility.target(hpc_pool({}), train({"target": "cloud"}))
	r.code == "target_mismatch"
	r.message == "workload asks for target cloud; pool is hpc"
	r.details == {"pool_target": "hpc", "target": "cloud"}
}

test_target_cloud_on_hpc_pool_mismatch_even_with_burst if {
	eligibility.target(hpc_pool({}), train({"target": "cloud", "allow_burst": true})).code == "target_mismatch"
}

test_hpc_target_with_allow_burst_reaches_cloud if {
	eligibility.hpc_burst(cloud_pool({}), train({"target": "hpc", "allow_burst": true}))
	eligibility.target(cloud_pool({}), train({"target": "hpc", "allow_burst": true})) == null
}

test_any_target_with_allow_burst_reaches_cloud if {
	eligibility.target(cloud_pool({}), train({"target": "any", "allow_burst": true})) == null
}

test_hpc_burst_only_for_hpc_target_and_cloud_pool if {
	not eligibility.hpc_burst(cloud_pool({}), train({"target": "hpc"}))
	not eligibility.hpc_burst(hpc_pool({}), train({"target": "hpc", "allow_burst": true}))
	not eligibility.hpc_burst(cloud_pool({}), train({"target": "any", "allow_burst": true}))
}

# --- capabilities -----------------------------------------------------------------------------

test_no_capabilities_needed if {
	eligibility.capability(hpc_pool({}), train({})) == null
}

test_pool_tags_satisfy_capabilities if {
	eligibility.capability(hpc_pool({"capabilities": ["bf16", "infiniband"]}), train({"capabilities": ["infiniband"]})) == null
}

test_fp8_from_h100_model_table if {
	eligibility.capabilities(hpc_pool({"model": "h100"})) == {"fp8"}
	eligibility.capability(hpc_pool({"model": "h100"}), train({"capabilities": ["fp8"]})) == null
}

test_fp8_from_mi300x_model_table if {
	pool := hpc_pool({"accelerator": "amd", "model": "mi300x", "capabilities": ["rdma"]})
	eligibility.capabilities(pool) == {"fp8", "rdma"}
	eligibility.capability(pool, train({"accelerator": "amd", "capabilities": ["fp8", "rdma"]})) == null
}

test_a100_has_no_fp8 if {
	r := eligibility.capability(hpc_pool({"model": "a100"}), train({"capabilities": ["fp8"]}))
	r.code == "capability_missing"
	r.kind == "never"
	r.message == `pool lacks capabilities ["fp8"]`
}

test_missing_tags_listed_sorted if {
	pool := hpc_pool({"model": "a100", "capabilities": ["int8", "ib"]})
	r := eligibility.capability(pool, train({"capabilities": ["int8", "fp8", "bf16"]}))
	r.message == `pool lacks capabilities ["bf16", "fp8"]`
	r.details == {"missing": ["bf16", "fp8"], "advertised": ["ib", "int8"]}
}

test_model_without_tags_adds_nothing if {
	eligibility.model_capabilities(hpc_pool({"model": "t4"})) == set()
}

test_no_model_adds_nothing if {
	eligibility.model_capabilities(hpc_pool({})) == set()
	eligibility.model_capabilities(object.remove(hpc_pool({}), ["model"])) == set()
}

test_model_not_in_table_adds_nothing if {
	eligibility.capabilities(hpc_pool({"model": "x9000", "capabilities": ["a"]})) == {"a"}
}

test_model_tags_follow_models_table if {
	eligibility.capabilities(hpc_pool({"model": "h100"})) == {"fp4"} with data.examlops.tables.models as {"h100": {"capabilities": ["fp4"]}}
}

# --- capacity ---------------------------------------------------------------------------------

test_capacity_exact_fit if {
	eligibility.capacity(hpc_pool({"free": 2}), 2) == null
}

test_capacity_room_to_spare if {
	eligibility.capacity(hpc_pool({"free": 8}), 1) == null
}

test_capacity_exhausted_is_not_now if {
	r := eligibility.capacity(hpc_pool({"free": 1}), 2)
	r.code == "capacity_exhausted"
	r.kind == "not_now"
	r.message == "needs 2 device(s), more than are free"
	r.details == {"needed": 2, "free": 1, "count": 8}
}

test_capacity_pool_full if {
	eligibility.capacity(hpc_pool({"free": 0}), 1 / 7).code == "capacity_exhausted"
}

# Granted MIG shares are sevenths: free capacity computed from them does not add up exactly.
test_capacity_tolerates_sevenths if {
	eligibility.capacity(hpc_pool({"free": 0.5714285}), 4 / 7) == null
	eligibility.capacity(hpc_pool({"free": (1 - (1 / 7)) - (2 / 7)}), 4 / 7) == null
	eligibility.capacity(hpc_pool({"free": ((1 / 7) + (1 / 7)) + (1 / 7)}), 3 / 7) == null
}

test_capacity_tolerance_is_small if {
	eligibility.capacity(hpc_pool({"free": 0.571}), 4 / 7).code == "capacity_exhausted"
	eligibility.capacity(hpc_pool({"free": 1.99}), 2).code == "capacity_exhausted"
}

package examlops.hardware.reference_test

import data.examlops.fleet
import data.examlops.hardware.checks
import data.examlops.hardware.composer
import data.examlops.hardware.placement
import data.examlops.hardware.reference
import data.examlops.hardware.verdicts

# --- fixtures -------------------------------------------------------------------------------------

# A shape: everything the policy judges a pool by except its capacity and price.
shape(overrides) := object.union(
	{
		"target": "hpc",
		"accelerator": "nvidia",
		"model": null,
		"region": "eu",
		"capabilities": [],
		"supports_fractions": false,
		"fixed_profile": null,
	},
	overrides,
)

# The shapes of every pool below, keyed as the caller keys them.
shapes := {
	# The E8 specification's pools.
	"hpc-nvidia": shape({"supports_fractions": true}),
	"hpc-mi300": shape({"accelerator": "amd"}),
	"cloud-a100": shape({"target": "cloud", "region": "us"}),
	# More.
	"hpc-h100": shape({"model": "h100", "supports_fractions": true}),
	"hpc-h100-1g": shape({"model": "h100", "fixed_profile": "1g.10gb"}),
	"hpc-t4": shape({"model": "t4", "supports_fractions": true}),
	"hpc-cpu": shape({"accelerator": "cpu"}),
	"hpc-lugano": shape({"region": "ch-lugano"}),
	"cloud-frankfurt": shape({"target": "cloud", "region": "eu-central-1"}),
	"cloud-london": shape({"target": "cloud", "region": "eu-west-2"}),
	"cloud-virginia": shape({"target": "cloud", "region": "us-east-1"}),
	"cloud-mars": shape({"target": "cloud", "region": "mars-1"}),
	"cloud-amd": shape({"target": "cloud", "accelerator": "amd", "region": "us"}),
	"hpc-mi300x": shape({"accelerator": "amd", "model": "mi300x", "supports_fractions": true}),
}

pool(name, key, cost, whole) := {
	"name": name,
	"shape": key,
	"cost_per_hour": cost,
	"carbon_per_hour": 250,
	"capacity": {"whole": whole, "slices": {}},
}

hpc_nvidia := pool("hpc-nvidia", "hpc-nvidia", 2.5, 8)

hpc_mi300 := pool("hpc-mi300", "hpc-mi300", 1.8, 4)

cloud_a100 := pool("cloud-a100", "cloud-a100", 2.75, 100)

spec_pools := [hpc_nvidia, hpc_mi300, cloud_a100]

full(p) := object.union(p, {"capacity": {"whole": 0, "slices": {}}})

# HPC saturated: both HPC pools have no free device.
hpc_full_pools := [full(hpc_nvidia), full(hpc_mi300), cloud_a100]

train(overrides) := object.union({"name": "train", "accelerator": "nvidia", "engine": "generic"}, overrides)

# The decision over pools, with the shapes they name (and only those) in input.shapes.
decide(w, pools) := d if {
	d := placement.decision with input as {
		"workload": w,
		"shapes": {p.shape: shapes[p.shape] | some p in pools},
		"pools": pools,
	}
}

codes(v) := [r.code | some r in v.reasons]

# --- the reference decision: the E8 specification's scenarios -------------------------------------

test_e8_amd_vllm_hpc_places_on_mi300_tier_0 if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "target": "hpc"}), spec_pools)
	d.outcome == "placed"
	d.pool == "hpc-mi300"
	d.rejection == null
	d.reason == null
	d.selected_tier == 0
	d.eligible == ["hpc-mi300"]
	d.burst == {"attempted": false}
	v := d.verdicts["hpc-mi300"]
	v.eligible == true
	v.admissible == true
	v.tier == 0
	v.fallback == false
	v.burst == false
	v.note == null
	v.reasons == []
	v.grant_cost_per_hour == 1.8
}

test_e8_amd_vllm_hpc_other_pools_are_told_why if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "target": "hpc"}), spec_pools)
	d.verdicts["hpc-nvidia"].admissible == true
	d.verdicts["hpc-nvidia"].eligible == false
	codes(d.verdicts["hpc-nvidia"]) == ["fallback_not_needed"]
	d.verdicts["hpc-nvidia"].reasons[0].message == "a pool of the requested accelerator amd is available"
	d.verdicts["cloud-a100"].admissible == false
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
}

sglang_on_amd := "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))"

test_e8_sglang_on_amd_is_rejected if {
	d := decide(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
	d.outcome == "rejected"
	d.pool == null
	d.rejection.code == "backend_unsupported"
	d.rejection.message == sglang_on_amd
	d.reason == {"code": "backend_unsupported", "message": sglang_on_amd}
	d.eligible == []
	d.selected_tier == null
	d.burst == {"attempted": false}
	object.keys(d.verdicts) == {"hpc-nvidia", "hpc-mi300", "cloud-a100"}
	every _, v in d.verdicts {
		v.eligible == false
	}
}

# Every pool is told: what denies it, or, where it is admissible, that the request was rejected.
test_e8_sglang_on_amd_every_pool_told if {
	d := decide(train({"accelerator": "amd", "engine": "sglang"}), spec_pools)
	codes(d.verdicts["hpc-mi300"]) == ["backend_unsupported"]
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
	d.verdicts["hpc-nvidia"].admissible == true
	codes(d.verdicts["hpc-nvidia"]) == ["request_rejected"]
	d.verdicts["hpc-nvidia"].reasons[0].message == sprintf("the workload as asked is rejected: %s", [sglang_on_amd])
}

test_e8_tpu_generic_hpc_falls_back_to_the_cheapest_grant if {
	d := decide(train({"accelerator": "tpu", "target": "hpc"}), spec_pools)
	d.outcome == "placed"
	d.pool == "hpc-mi300"
	d.selected_tier == 1
	d.eligible == ["hpc-mi300", "hpc-nvidia"]
	d.verdicts["hpc-mi300"].fallback == true
	d.verdicts["hpc-mi300"].grant_cost_per_hour == 1.8
	d.verdicts["hpc-nvidia"].grant_cost_per_hour == 2.5
	d.verdicts["hpc-mi300"].note == "requested tpu unavailable — fell back to amd"
	d.verdicts["hpc-nvidia"].note == "requested tpu unavailable — fell back to nvidia"
	d.verdicts["hpc-nvidia"].reasons == []
	d.verdicts["cloud-a100"].eligible == false
	d.verdicts["cloud-a100"].tier == 3
	d.burst == {"attempted": false}
}

eu_only_to_us := "data-residency eu-only forbids egress to region 'us'"

test_e8_burst_eu_only_is_blocked if {
	d := decide(train({"target": "cloud", "residency": "eu-only", "allow_burst": true}), spec_pools)
	d.outcome == "blocked"
	d.pool == null
	d.rejection == null
	d.eligible == []
	d.selected_tier == null
	d.burst.attempted == true
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-a100"
	d.burst.reason.code == "residency_forbids"
	d.burst.reason.message == eu_only_to_us
	d.reason == {"code": "residency_forbids", "message": eu_only_to_us}
	codes(d.verdicts["hpc-nvidia"]) == ["target_mismatch"]
	codes(d.verdicts["cloud-a100"]) == ["residency_forbids"]
	d.verdicts["cloud-a100"].blocks_burst == true
}

test_e8_open_burst_is_allowed if {
	d := decide(train({"target": "cloud", "allow_burst": true}), spec_pools)
	d.outcome == "placed"
	d.pool == "cloud-a100"
	d.burst == {"attempted": true, "verdict": "allowed", "pool": null, "reason": null}
	d.selected_tier == 2
	d.eligible == ["cloud-a100"]
	d.verdicts["cloud-a100"].burst == true
	d.verdicts["cloud-a100"].fallback == false
	codes(d.verdicts["hpc-nvidia"]) == ["target_mismatch"]
}

test_e8_hpc_full_with_allow_burst_bursts if {
	d := decide(train({"allow_burst": true}), hpc_full_pools)
	d.outcome == "placed"
	d.pool == "cloud-a100"
	d.burst.attempted == true
	d.burst.verdict == "allowed"
	d.selected_tier == 2
	codes(d.verdicts["hpc-nvidia"]) == ["capacity_exhausted"]
	d.verdicts["hpc-nvidia"].reasons[0].kind == "not_now"
	d.verdicts["hpc-nvidia"].fits == false
	codes(d.verdicts["hpc-mi300"]) == ["capacity_exhausted"]
}

test_e8_hpc_target_full_with_allow_burst_spills_to_cloud if {
	d := decide(train({"target": "hpc", "allow_burst": true}), hpc_full_pools)
	d.burst.verdict == "allowed"
	d.pool == "cloud-a100"
}

test_e8_hpc_full_with_allow_burst_eu_only_is_blocked if {
	d := decide(train({"allow_burst": true, "residency": "eu-only"}), hpc_full_pools)
	d.outcome == "blocked"
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-a100"
	d.burst.reason.message == eu_only_to_us
}

test_e8_no_egress_with_hpc_full_is_blocked if {
	d := decide(train({"allow_burst": true, "residency": "no-egress"}), hpc_full_pools)
	d.outcome == "blocked"
	d.burst.attempted == true
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-a100"
	d.burst.reason.code == "residency_forbids"
	d.burst.reason.message == "data-residency no-egress forbids egress to cloud region 'us' (US): outside the EU; no data_region given, so EU HPC pools only"
}

# no-egress never goes to cloud, even an EU one.
test_no_egress_with_hpc_full_is_blocked_by_an_eu_cloud_too if {
	d := decide(train({"allow_burst": true, "residency": "no-egress"}), [full(hpc_nvidia), pool("cloud-frankfurt", "cloud-frankfurt", 3, 10)])
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-frankfurt"
	d.burst.reason.details.rule == "hpc"
}

test_e8_capacity_shortfall_is_no_capacity if {
	d := decide(train({}), hpc_full_pools)
	d.outcome == "rejected"
	d.rejection == null
	d.burst == {"attempted": false}
	d.eligible == []
	d.selected_tier == null
	d.reason == {
		"code": "no_capacity",
		"message": "no pool has free capacity for train (3 checked: burst_not_allowed on 1 pool, capacity_exhausted on 2 pools)",
	}
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
}

# A pool counted as one node (capacity.devices: all its devices) with fewer devices in all than the
# grant asks of one node could never hold it: never, so the workload is not eligible anywhere and
# may not wait (no_eligible_pool); a pool that only lacks free devices now is not_now.
counted(p, devices) := object.union(p, {"capacity": object.union(p.capacity, {"devices": devices})})

test_a_pool_too_small_for_ever_is_never if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "count": 5}), [counted(hpc_mi300, 4)])
	d.outcome == "rejected"
	codes(d.verdicts["hpc-mi300"]) == ["pool_too_small", "capacity_exhausted"]
	d.verdicts["hpc-mi300"].reasons[0].kind == "never"
	d.verdicts["hpc-mi300"].reasons[0].message == concat("", [
		"needs 5 whole amd device(s) on one node, more than the pool has in all: ",
		"it lists no nodes, so all its devices are one node",
	])
	d.reason == {
		"code": "no_eligible_pool",
		"message": "no pool is eligible for train (1 checked: capacity_exhausted on 1 pool, pool_too_small on 1 pool)",
	}
}

test_a_pool_big_enough_but_busy_is_not_now if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "count": 4}), [counted(full(hpc_mi300), 4)])
	codes(d.verdicts["hpc-mi300"]) == ["capacity_exhausted"]
	d.reason.code == "no_capacity"
}

# One pool too small for ever, another only full: the workload waits for the full one.
test_a_full_pool_beside_one_too_small_is_waited_for if {
	small := counted(pool("small", "hpc-mi300", 1, 2), 2)
	big := counted(full(pool("big", "hpc-mi300", 2, 8)), 8)
	d := decide(train({"accelerator": "amd", "engine": "vllm", "count": 3}), [small, big])
	codes(d.verdicts.small) == ["pool_too_small", "capacity_exhausted"]
	codes(d.verdicts.big) == ["capacity_exhausted"]
	d.reason.code == "no_capacity"
}

# Too small is a denial like any other: the pool is not a requested pool that is only full (a
# stand-in is no fallback for capacity), and a cloud pool too small blocks no burst.
test_a_pool_too_small_is_not_merely_full if {
	d := decide(
		train({"accelerator": "amd", "engine": "vllm", "count": 3, "target": "hpc"}),
		[counted(pool("hpc-mi300", "hpc-mi300", 1.8, 2), 2), counted(pool("hpc-nvidia", "hpc-nvidia", 2.5, 8), 8)],
	)
	d.pool == "hpc-nvidia"
	d.verdicts["hpc-nvidia"].fallback == true
	d.note == "requested amd unavailable — fell back to nvidia"
}

# A requested pool too small for ever and over the budget is not stopped by the budget alone: a
# workload that does not fall back for budget still falls back to a stand-in that could take it.
test_a_pool_too_small_and_over_budget_does_not_forbid_a_fallback if {
	w := train({"accelerator": "amd", "engine": "vllm", "count": 3, "max_cost_per_hour": 5, "allow_budget_fallback": false})
	d := decide(w, [counted(pool("hpc-mi300", "hpc-mi300", 1.8, 2), 2), counted(pool("hpc-nvidia", "hpc-nvidia", 1, 8), 8)])
	codes(d.verdicts["hpc-mi300"]) == ["budget_exceeded", "pool_too_small", "capacity_exhausted"]
	d.pool == "hpc-nvidia"
}

test_a_cloud_pool_too_small_blocks_no_burst if {
	d := decide(train({"target": "cloud", "residency": "eu-only", "count": 3}), [counted(pool("cloud-cheap", "cloud-virginia", 1, 2), 2)])
	d.burst.verdict == "unavailable"
	codes(d.verdicts["cloud-cheap"]) == ["residency_forbids", "pool_too_small", "capacity_exhausted"]
}

# A pool of nodes says no devices in all: the nodes check judges it by its nodes.
test_a_capacity_without_devices_is_never_too_small if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "count": 5}), [hpc_mi300])
	codes(d.verdicts["hpc-mi300"]) == ["capacity_exhausted"]
}

# --- cheapest grant, ties ----------------------------------------------------------------------------

# A 0.25 request: a 2g slice of an H100 at 2.0/h (2/7 x 2.0 = 0.571) beats a whole T4 at 1.50/h.
test_cheapest_grant_wins_not_cheapest_pool if {
	h100 := {"name": "hpc-h100", "shape": "hpc-h100", "cost_per_hour": 2.0, "carbon_per_hour": 250, "capacity": {"whole": 0, "slices": {"2g.20gb": 1}}}
	t4 := pool("hpc-t4", "hpc-t4", 1.5, 1)
	d := decide(train({"fraction": 0.25}), [t4, h100])
	d.pool == "hpc-h100"
	d.eligible == ["hpc-h100", "hpc-t4"]
	d.verdicts["hpc-h100"].grant.profile == "2g.20gb"
	abs(d.verdicts["hpc-h100"].grant_cost_per_hour - ((2 / 7) * 2.0)) < 0.000000001
	d.verdicts["hpc-h100"].grant_cost_per_hour < 0.572
	d.verdicts["hpc-t4"].grant.honored == false
	d.verdicts["hpc-t4"].grant.note == "fraction 0.25 not honored (nvidia model 't4' has no isolated partitioning) — whole device allocated"
	d.verdicts["hpc-t4"].grant_cost_per_hour == 1.5
}

test_ties_broken_by_name if {
	d := decide(train({}), [pool("b-pool", "hpc-nvidia", 2, 1), pool("a-pool", "hpc-nvidia", 2, 1), pool("c-pool", "hpc-nvidia", 2, 1)])
	d.pool == "a-pool"
	d.eligible == ["a-pool", "b-pool", "c-pool"]
	d.tied == ["a-pool", "b-pool", "c-pool"]
}

# The pools that tie are those with the chosen one's key but for the name: a dearer pool of the
# same tier, a full one and a stand-in's tier do not tie.
test_tied_pools_share_the_key_but_the_name if {
	pools := [
		pool("b-pool", "hpc-nvidia", 2, 1), pool("a-pool", "hpc-nvidia", 2, 1), pool("dear", "hpc-nvidia", 3, 1),
		pool("full", "hpc-nvidia", 2, 0), pool("amd", "hpc-mi300", 2, 1),
	]
	d := decide(train({}), pools)
	d.pool == "a-pool"
	d.tied == ["a-pool", "b-pool"]
}

test_nothing_ties_without_a_choice if {
	d := decide(train({}), [pool("full", "hpc-nvidia", 2, 0)])
	d.pool == null
	d.tied == []
}

test_better_tier_beats_cheaper_price if {
	d := decide(train({"allow_burst": true}), [pool("hpc", "hpc-nvidia", 9, 1), pool("hpc-amd", "hpc-mi300", 1, 1), pool("cloud", "cloud-a100", 0.5, 1)])
	d.pool == "hpc"
	d.selected_tier == 0
	codes(d.verdicts["hpc-amd"]) == ["fallback_not_needed"]
	codes(d.verdicts.cloud) == ["burst_not_needed"]
}

# Two pools of one shape share its verdict and differ only in capacity and price.
test_pools_of_one_shape_differ_in_capacity_only if {
	d := decide(train({"accelerator": "amd", "engine": "vllm"}), [pool("mi300-a", "hpc-mi300", 1.8, 4), pool("mi300-b", "hpc-mi300", 1.0, 0)])
	d.pool == "mi300-a"
	codes(d.verdicts["mi300-b"]) == ["capacity_exhausted"]
	d.verdicts["mi300-b"].tier == d.verdicts["mi300-a"].tier
}

# --- more decisions ------------------------------------------------------------------------------------

test_eu_only_burst_to_an_eu_cloud_is_allowed if {
	d := decide(train({"target": "cloud", "residency": "eu-only"}), [hpc_nvidia, cloud_a100, pool("cloud-frankfurt", "cloud-frankfurt", 3, 10)])
	d.burst.verdict == "allowed"
	d.pool == "cloud-frankfurt"
	d.eligible == ["cloud-frankfurt"]
	codes(d.verdicts["cloud-a100"]) == ["residency_forbids"]
}

test_blocked_burst_names_the_cheapest_blocked_cloud_pool if {
	pools := [cloud_a100, pool("cloud-london", "cloud-london", 2, 10), pool("cloud-cheap", "cloud-virginia", 1, 10)]
	d := decide(train({"target": "cloud", "residency": "eu-only"}), pools)
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-cheap"
	d.burst.reason.message == "data-residency eu-only forbids egress to region 'us-east-1'"
	codes(d.verdicts["cloud-london"]) == ["residency_forbids"]
}

# A cloud pool with no room does not block a burst: it could not have taken it anyway.
test_burst_unavailable_when_the_blocked_cloud_is_full if {
	d := decide(train({"target": "cloud", "residency": "eu-only"}), [hpc_nvidia, full(cloud_a100)])
	d.burst == {"attempted": true, "verdict": "unavailable", "pool": null, "reason": null}
	d.outcome == "rejected"
	codes(d.verdicts["cloud-a100"]) == ["residency_forbids", "capacity_exhausted"]
}

test_burst_unavailable_when_cloud_is_full if {
	d := decide(train({"target": "cloud"}), [hpc_nvidia, full(cloud_a100)])
	d.burst == {"attempted": true, "verdict": "unavailable", "pool": null, "reason": null}
	d.outcome == "rejected"
	d.reason.code == "no_capacity"
	d.reason.message == "no pool has free capacity for train (2 checked: capacity_exhausted on 1 pool, target_mismatch on 1 pool)"
}

test_blocked_burst_to_an_unknown_region if {
	d := decide(train({"target": "cloud"}), [pool("cloud-mars", "cloud-mars", 1, 10)])
	d.outcome == "blocked"
	d.burst.verdict == "blocked"
	d.burst.pool == "cloud-mars"
	d.burst.reason.code == "region_unknown"
	d.reason.message == "region 'mars-1' has no known jurisdiction (not in the regions table)"
}

test_hpc_full_without_allow_burst_does_not_burst if {
	d := decide(train({}), hpc_full_pools)
	d.burst == {"attempted": false}
	codes(d.verdicts["cloud-a100"]) == ["burst_not_allowed"]
}

test_hpc_available_with_allow_burst_does_not_burst if {
	d := decide(train({"allow_burst": true}), spec_pools)
	d.burst == {"attempted": false}
	d.pool == "hpc-nvidia"
	codes(d.verdicts["hpc-mi300"]) == ["fallback_not_needed"]
	d.verdicts["hpc-mi300"].reasons[0].message == "a pool of the requested accelerator nvidia is available"
	codes(d.verdicts["cloud-a100"]) == ["burst_not_needed"]
	d.verdicts["cloud-a100"].admissible == true
	d.verdicts["cloud-a100"].eligible == false
}

# An HPC stand-in wins over the requested accelerator in cloud (HPC first).
test_hpc_fallback_beats_cloud_of_the_requested_accelerator if {
	d := decide(train({"accelerator": "amd", "engine": "vllm", "allow_burst": true}), [hpc_nvidia, pool("cloud-amd", "cloud-amd", 1, 10)])
	d.pool == "hpc-nvidia"
	d.selected_tier == 1
	d.burst == {"attempted": false}
	codes(d.verdicts["cloud-amd"]) == ["burst_not_needed"]
}

test_data_region_keeps_no_egress_in_its_country if {
	w := train({"residency": "no-egress", "data_region": "it-bologna"})
	d := decide(w, [pool("hpc-eu", "hpc-nvidia", 1, 1), pool("hpc-lugano", "hpc-lugano", 0.5, 1)])
	d.outcome == "rejected"
	d.reason.code == "no_eligible_pool"
	d.reason.message == "no pool is eligible for train (2 checked: residency_forbids on 2 pools)"
	d.verdicts["hpc-eu"].reasons[0].details.rule == "jurisdiction"
	d.verdicts["hpc-lugano"].reasons[0].details.rule == "eu"
}

test_cpu_stands_in_only_when_allowed if {
	pools := [pool("hpc-cpu", "hpc-cpu", 0.1, 10)]
	d := decide(train({}), pools)
	codes(d.verdicts["hpc-cpu"]) == ["fallback_not_allowed"]
	d2 := decide(train({"allow_cpu_fallback": true}), pools)
	d2.pool == "hpc-cpu"
	d2.verdicts["hpc-cpu"].note == "requested nvidia unavailable — fell back to cpu"
}

test_invalid_workload_is_rejected_with_no_verdicts if {
	d := decide(train({"fraction": 0}), spec_pools)
	d.outcome == "rejected"
	d.rejection.code == "fraction_invalid"
	d.reason == {"code": "fraction_invalid", "message": "fraction 0 must be a number greater than 0 and at most 1"}
	d.verdicts == {}
	d.eligible == []
	d.selected_tier == null
	d.pool == null
	d.burst == {"attempted": false}
}

test_first_error_is_the_rejection if {
	d := decide(train({"accelerator": "gpu", "residency": "eu"}), spec_pools)
	d.rejection.code == "accelerator_unknown"
}

test_decision_carries_the_normalized_workload if {
	d := decide(train({}), spec_pools)
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

test_capability_from_model_selects_pool if {
	d := decide(train({"capabilities": ["fp8"]}), [hpc_nvidia, pool("hpc-h100", "hpc-h100", 3, 1)])
	d.pool == "hpc-h100"
	codes(d.verdicts["hpc-nvidia"]) == ["capability_missing"]
}

# The grant is what capacity checks: a half of a vendor-level MIG pool is a 4g slice.
test_fraction_grant_is_what_capacity_checks if {
	half := train({"fraction": 0.5})
	no_room := {"name": "hpc-nvidia", "shape": "hpc-nvidia", "cost_per_hour": 2.5, "carbon_per_hour": 250, "capacity": {"whole": 8, "slices": {"4g": 0, "3g": 2}}}
	d := decide(half, [no_room])
	d.verdicts["hpc-nvidia"].grant.profile == "4g"
	codes(d.verdicts["hpc-nvidia"]) == ["slice_unavailable"]
	d.verdicts["hpc-nvidia"].reasons[0].message == "no nvidia in the pool has room for a 4g beside the slices it holds, nor for a larger one the budget allows (7g)"
	d.reason.code == "no_capacity"
	room := object.union(no_room, {"capacity": {"whole": 0, "slices": {"4g": 1}}})
	d2 := decide(half, [room])
	d2.pool == "hpc-nvidia"
	abs(d2.verdicts["hpc-nvidia"].grant_cost_per_hour - ((4 / 7) * 2.5)) < 0.000000001
}

test_fraction_not_honored_needs_a_whole_device if {
	d := decide(train({"fraction": 0.5, "accelerator": "amd"}), [full(hpc_mi300)])
	d.verdicts["hpc-mi300"].grant.honored == false
	d.verdicts["hpc-mi300"].grant.why == "amd has no isolated partitioning"
	codes(d.verdicts["hpc-mi300"]) == ["capacity_exhausted"]
}

test_fixed_slices_through_the_decision if {
	slices := {"name": "hpc-h100-1g", "shape": "hpc-h100-1g", "cost_per_hour": 7, "carbon_per_hour": 250, "capacity": {"slices": {"1g.10gb": 2}}}
	d := decide(train({"fraction": 0.1}), [slices])
	d.pool == "hpc-h100-1g"
	d.verdicts["hpc-h100-1g"].grant.profile == "1g.10gb"
	d.verdicts["hpc-h100-1g"].grant_cost_per_hour == 1
	d2 := decide(train({"fraction": 0.1}), [object.union(slices, {"capacity": {"slices": {"1g.10gb": 0}}})])
	[r.message | some r in d2.verdicts["hpc-h100-1g"].reasons] == ["needs 1 free 1g.10gb slice(s), more than are free"]
	d3 := decide(train({"fraction": 0.5}), [slices])
	codes(d3.verdicts["hpc-h100-1g"]) == ["slice_too_small"]
}

test_a_pool_without_capacity_has_none if {
	d := decide(train({}), [object.remove(hpc_nvidia, ["capacity"])])
	codes(d.verdicts["hpc-nvidia"]) == ["capacity_exhausted"]
	d.verdicts["hpc-nvidia"].fits == false
}

test_all_denials_are_listed_in_check_order if {
	bad := {"name": "bad", "shape": "cloud-amd", "cost_per_hour": 1, "carbon_per_hour": 250, "capacity": {"whole": 0}}
	d := decide(train({"engine": "sglang", "capabilities": ["fp8"], "residency": "eu-only"}), [bad])
	codes(d.verdicts.bad) == ["backend_unsupported", "burst_not_allowed", "capability_missing", "residency_forbids", "capacity_exhausted"]
	d.verdicts.bad.admissible == false
	d.reason.code == "no_eligible_pool"
}

test_no_pools if {
	d := decide(train({}), [])
	d.outcome == "rejected"
	d.rejection == null
	d.verdicts == {}
	d.eligible == []
	d.selected_tier == null
	d.reason == {"code": "no_pools", "message": "no pools are registered"}
}

test_no_eligible_pool_summary if {
	d := decide(train({"capabilities": ["nvlink"]}), spec_pools)
	d.reason == {
		"code": "no_eligible_pool",
		"message": "no pool is eligible for train (3 checked: burst_not_allowed on 1 pool, capability_missing on 3 pools)",
	}
}

# Without input.shapes the decision reads the pools' shapes from the fleet's data.
test_decision_reads_shapes_from_fleet_data if {
	pools := [object.union(p, {"shape": fleet.key(shapes[p.shape])}) | some p in spec_pools]
	d := placement.decision with input as {"workload": train({"accelerator": "tpu"}), "pools": pools}
		with data.examlops_fleet.shapes as {fleet.key(s): s | some s in shapes}
	d.pool == "hpc-mi300"
	object.keys(d.verdicts) == {"hpc-nvidia", "hpc-mi300", "cloud-a100"}
	verdicts.keys == {p.shape | some p in pools} with input as {"workload": train({}), "pools": pools}
}

test_verdict_fields if {
	d := decide(train({}), [hpc_nvidia])
	object.keys(d.verdicts["hpc-nvidia"]) == {
		"pool", "tier", "denials", "shape_denied", "fits", "room", "grant", "grant_cost_per_hour", "grant_carbon_per_hour",
		"cost_per_hour", "fallback", "burst", "note", "note_full", "note_budget", "requested", "over_budget_only",
		"blocks_burst", "reasons", "admissible", "eligible", "late", "estimate", "start", "work_rate",
	}
	object.keys(d) == {
		"workload", "outcome", "pool", "note", "selected_tier", "eligible", "tied", "burst", "reason", "rejection",
		"verdicts", "confirm",
	}
}

# With overridden tables the same scenario changes: sglang learns ROCm, so AMD is no longer rejected.
test_engine_table_override_lifts_the_rejection if {
	d := decide(train({"accelerator": "amd", "engine": "sglang"}), spec_pools) with data.examlops.tables.engines.sglang as {"backends": ["cuda", "rocm"]}
	d.rejection == null
	d.pool == "hpc-mi300"
}

test_member_state_override_allows_burst_to_us if {
	d := decide(train({"target": "cloud", "residency": "eu-only"}), spec_pools)
		with data.examlops.tables.regions.us as {"country": "US"}
		with data.examlops.tables.eu_member_states as ["US"]
	d.burst.verdict == "allowed"
	d.pool == "cloud-a100"
}

test_counted_in_the_composers_words if {
	reference.counted("capacity_exhausted", 1) == "capacity_exhausted on 1 pool"
	reference.counted("capacity_exhausted", 0) == "capacity_exhausted on 0 pools"
	reference.counted("capacity_exhausted", 3) == "capacity_exhausted on 3 pools"
}

# --- policy bugs found while writing these tests --------------------------------------------------

# Regression (placement.rego, pool_verdicts / decision): a pool whose shape key has no shape (neither in
# input.shapes nor in data.examlops_fleet.shapes) gets no verdict at all: it is dropped from
# decision.verdicts and from the "N checked" count, silently, and the decision is made as if the
# pool did not exist (the verdicts entry point reports such keys in `missing`; decision does not).
# Input: pools [hpc-nvidia (shape known, 2.5/h), ghost (shape "no-such-shape", 0.1/h)].
# Expected: every pool of input.pools has a verdict (e.g. denied as having no shape), or the
# decision reports the missing shapes. It once dropped the pool.
test_decision_gives_every_pool_a_verdict if {
	ghost := pool("ghost", "no-such-shape", 0.1, 10)
	d := placement.decision with input as {
		"workload": train({}),
		"shapes": {"hpc-nvidia": shapes["hpc-nvidia"]},
		"pools": [hpc_nvidia, ghost],
	}
	object.keys(d.verdicts) == {"hpc-nvidia", "ghost"}
}

# Regression (placement.rego, summary / result_reason): the no-capacity / no-eligible-pool summary is
# worded with w.name, but the workload package does not require a name. Without one, summary is
# undefined and a rejected decision carries reason null.
# Input: workload {"accelerator": "nvidia", "engine": "generic"} (no name), HPC pools full.
# Expected: outcome "rejected" with reason {code: "no_capacity", ...} (or the workload rejected
# for lacking a name). It once had reason null.
test_rejected_decision_without_workload_name_has_a_reason if {
	d := decide({"accelerator": "nvidia", "engine": "generic"}, hpc_full_pools)
	d.outcome == "rejected"
	d.reason != null
}

# --- objectives: what selection minimises within the best tier ---------------------------------------

# A pool with its carbon per device-hour (gCO2e).
green(name, key, cost, carbon) := object.union(pool(name, key, cost, 10), {"carbon_per_hour": carbon})

# Three HPC nvidia pools: cheap and dirty, middling, dear and clean.
trio := [
	green("cheap", "hpc-nvidia", 1, 300),
	green("middle", "hpc-nvidia", 2, 100),
	green("clean", "hpc-nvidia", 3, 50),
]

objective_cases := {
	"cost by default": {"w": train({}), "pool": "cheap"},
	"cost": {"w": train({"optimize": "cost"}), "pool": "cheap"},
	"carbon": {"w": train({"optimize": "carbon"}), "pool": "clean"},
	# cheap: 0.5 x 1/3 + 0.5 x 300/300 = 0.667; middle: 0.5 x 2/3 + 0.5 x 100/300 = 0.5;
	# clean: 0.5 x 3/3 + 0.5 x 50/300 = 0.583.
	"balanced at the default weight": {"w": train({"optimize": "balanced"}), "pool": "middle"},
	"balanced, weight 0 is cost": {"w": train({"optimize": "balanced", "carbon_weight": 0}), "pool": "cheap"},
	"balanced, weight 1 is carbon": {"w": train({"optimize": "balanced", "carbon_weight": 1}), "pool": "clean"},
	# cheap: 0.1 x 1/3 + 0.9 x 1 = 0.933; middle: 0.1 x 2/3 + 0.9 x 1/3 = 0.367; clean: 0.1 + 0.15 = 0.25.
	"balanced, weight 0.9": {"w": train({"optimize": "balanced", "carbon_weight": 0.9}), "pool": "clean"},
}

test_objective_selects[name] if {
	some name, tc in objective_cases
	d := decide(tc.w, trio)
	d.pool == tc.pool
	d.eligible == ["cheap", "clean", "middle"]
	d.selected_tier == 0
}

test_grant_carbon_is_carbon_per_device_hour_times_devices if {
	d := decide(train({"count": 3}), trio)
	d.verdicts.middle.grant_carbon_per_hour == 300
	d.verdicts.middle.grant_cost_per_hour == 6
	d.verdicts.middle.cost_per_hour == 2
}

# The carbon of the grant, not of the pool: a 2g slice of a dirtier H100 beats a whole cleaner T4.
test_carbon_objective_compares_grants if {
	h100 := {"name": "hpc-h100", "shape": "hpc-h100", "cost_per_hour": 2.0, "carbon_per_hour": 350, "capacity": {"whole": 0, "slices": {"2g.20gb": 1}}}
	t4 := green("hpc-t4", "hpc-t4", 1.5, 150)
	d := decide(train({"fraction": 0.25, "optimize": "carbon"}), [t4, h100])
	d.pool == "hpc-h100"
	d.verdicts["hpc-h100"].grant_carbon_per_hour == 100
	d.verdicts["hpc-t4"].grant_carbon_per_hour == 150
}

tie_cases := {
	"carbon ties: the cheaper": {
		"w": train({"optimize": "carbon"}),
		"pools": [green("b", "hpc-nvidia", 2, 100), green("a", "hpc-nvidia", 3, 100)],
		"pool": "b",
	},
	"carbon and cost tie: the name": {
		"w": train({"optimize": "carbon"}),
		"pools": [green("b", "hpc-nvidia", 2, 100), green("a", "hpc-nvidia", 2, 100)],
		"pool": "a",
	},
	# a: 0.5 x 1/2 + 0.5 x 2/2 = 0.75; b: 0.5 x 2/2 + 0.5 x 1/2 = 0.75: the cheaper.
	"balanced ties: the cheaper": {
		"w": train({"optimize": "balanced"}),
		"pools": [green("a", "hpc-nvidia", 2, 100), green("b", "hpc-nvidia", 1, 200)],
		"pool": "b",
	},
	# Scores equal at nine decimals (0.1 + 0.2 against 0.3 in floating point) are equal.
	"balanced: nine decimals": {
		"w": train({"optimize": "balanced", "carbon_weight": 0.3}),
		"pools": [green("a", "hpc-nvidia", 1, 1), green("b", "hpc-nvidia", 1, 1)],
		"pool": "a",
	},
	"balanced with no carbon anywhere is by cost": {
		"w": train({"optimize": "balanced", "carbon_weight": 0.9}),
		"pools": [green("a", "hpc-nvidia", 3, 0), green("b", "hpc-nvidia", 2, 0)],
		"pool": "b",
	},
	"balanced with nothing priced is by name": {
		"w": train({"optimize": "balanced"}),
		"pools": [green("b", "hpc-nvidia", 0, 0), green("a", "hpc-nvidia", 0, 0)],
		"pool": "a",
	},
}

test_objective_ties[name] if {
	some name, tc in tie_cases
	decide(tc.w, tc.pools).pool == tc.pool
}

test_balanced_score_is_rounded_to_nine_decimals if {
	reference.nine(0.1 + 0.2) == 0.3
	reference.nine(2 / 3) == 0.666666667
}

# An objective chooses within the best tier: a greener stand-in or cloud pool does not win.
test_objective_never_crosses_tiers if {
	pools := [green("hpc", "hpc-nvidia", 2, 400), green("amd", "hpc-mi300", 1, 10), green("cloud", "cloud-a100", 1, 5)]
	d := decide(train({"optimize": "carbon", "allow_burst": true}), pools)
	d.pool == "hpc"
	d.selected_tier == 0
	codes(d.verdicts.amd) == ["fallback_not_needed"]
	codes(d.verdicts.cloud) == ["burst_not_needed"]
}

# The normalisation is over the eligible pools only: a dearer pool of a worse tier changes nothing.
test_balanced_normalises_over_the_eligible_only if {
	pools := [green("a", "hpc-nvidia", 2, 100), green("b", "hpc-nvidia", 1, 200), green("cloud", "cloud-a100", 100, 10000)]
	w := train({"optimize": "balanced", "carbon_weight": 0.6, "allow_burst": true})
	reference.max_cost == 2 with input as {"workload": w, "shapes": shapes, "pools": pools}
	reference.max_carbon == 200 with input as {"workload": w, "shapes": shapes, "pools": pools}

	# a: 0.4 x 1 + 0.6 x 0.5 = 0.7; b: 0.4 x 0.5 + 0.6 x 1 = 0.8.
	decide(w, pools).pool == "a"
}

# --- the decision's note: full or unavailable, and the grant's --------------------------------------

note_cases := {
	"not a fallback": {"w": train({}), "pools": [hpc_nvidia, hpc_mi300], "note": null},
	"requested pools full": {
		"w": train({}), "pools": [full(hpc_nvidia), hpc_mi300],
		"note": "requested nvidia pools are full — fell back to amd",
	},
	"no pool of the requested accelerator": {
		"w": train({"accelerator": "tpu"}), "pools": [hpc_nvidia, hpc_mi300],
		"note": "requested tpu unavailable — fell back to amd",
	},
	"requested pool denied by a check, and full": {
		"w": train({"residency": "eu-only"}),
		"pools": [full(pool("hpc-lugano", "hpc-lugano", 1, 8)), hpc_mi300],
		"note": "requested nvidia unavailable — fell back to amd",
	},
	"requested pool over budget": {
		"w": train({"max_cost_per_hour": 2.25}), "pools": [hpc_nvidia, hpc_mi300],
		"note": "requested nvidia pools are over the budget (max_cost_per_hour $2.25/h) — fell back to amd",
	},
	"requested pool over budget and another full: full": {
		"w": train({"max_cost_per_hour": 2.25}), "pools": [hpc_nvidia, full(pool("hpc-cheap", "hpc-nvidia", 2, 8)), hpc_mi300],
		"note": "requested nvidia pools are full — fell back to amd",
	},
	"requested pool over the project's carbon budget": {
		"w": train({"max_carbon_per_hour": 100}), "pools": [pool("hpc-dirty", "hpc-nvidia", 1, 8), cheap_clean_mi300],
		"note": "requested nvidia pools are over the budget (max_carbon_per_hour 100 gCO2e/h) — fell back to amd",
	},
	"requested pool full and another denied: full": {
		"w": train({"allow_burst": true, "residency": "eu-only"}),
		"pools": [full(hpc_nvidia), hpc_mi300, cloud_a100],
		"note": "requested nvidia pools are full — fell back to amd",
	},
	"a fraction not honored on the stand-in": {
		"w": train({"fraction": 0.5}), "pools": [full(hpc_nvidia), hpc_mi300],
		"note": "requested nvidia pools are full — fell back to amd; fraction 0.5 not honored (amd has no isolated partitioning) — whole device allocated",
	},
	"a fraction not honored alone": {
		"w": train({"fraction": 0.5}), "pools": [pool("hpc-t4", "hpc-t4", 1, 1)],
		"note": "fraction 0.5 not honored (nvidia model 't4' has no isolated partitioning) — whole device allocated",
	},
	"nothing placed": {"w": train({}), "pools": [full(hpc_nvidia)], "note": null},
}

test_decision_note[name] if {
	some name, tc in note_cases
	decide(tc.w, tc.pools).note == tc.note
}

cheap_clean_mi300 := object.union(hpc_mi300, {"carbon_per_hour": 50})

# --- a budget fallback the workload forbids ----------------------------------------------------------

no_budget_fallback := train({"max_cost_per_hour": 2.25, "allow_budget_fallback": false})

test_a_workload_can_forbid_falling_back_for_budget if {
	d := decide(no_budget_fallback, [hpc_nvidia, hpc_mi300])
	d.outcome == "rejected"
	d.pool == null
	codes(d.verdicts["hpc-nvidia"]) == ["budget_exceeded"]
	codes(d.verdicts["hpc-mi300"]) == ["budget_fallback_forbidden"]
	d.verdicts["hpc-mi300"].reasons[0].message == "the requested nvidia pools are over the budget (max_cost_per_hour $2.25/h), and the workload does not fall back to another accelerator for budget (allow_budget_fallback is false)"
	d.reason == {
		"code": "no_eligible_pool",
		"message": "no pool is eligible for train (2 checked: budget_exceeded on 1 pool, budget_fallback_forbidden on 1 pool)",
	}
}

# The refusal comes before a stand-in's capacity shortfall, which comes last.
test_a_forbidden_budget_fallback_comes_before_the_shortfall if {
	d := decide(no_budget_fallback, [hpc_nvidia, full(hpc_mi300)])
	codes(d.verdicts["hpc-mi300"]) == ["budget_fallback_forbidden", "capacity_exhausted"]
}

test_a_forbidden_budget_fallback_still_falls_back_for_capacity if {
	d := decide(no_budget_fallback, [hpc_nvidia, full(pool("hpc-cheap", "hpc-nvidia", 2, 8)), hpc_mi300])
	d.pool == "hpc-mi300"
	d.note == "requested nvidia pools are full — fell back to amd"
}

test_a_forbidden_budget_fallback_leaves_the_requested_accelerator_in_cloud if {
	w := object.union(no_budget_fallback, {"allow_burst": true})
	d := decide(w, [hpc_nvidia, hpc_mi300, pool("cloud-cheap", "cloud-a100", 2, 100)])
	d.pool == "cloud-cheap"
	codes(d.verdicts["hpc-mi300"]) == ["budget_fallback_forbidden"]
}

test_without_a_cap_nothing_is_over_budget_to_forbid if {
	placement.verdicts.budget_fallback == null with input as {"workload": train({"allow_budget_fallback": false}), "keys": [], "shapes": {}}
	decide(train({"allow_budget_fallback": false}), [full(hpc_nvidia), hpc_mi300]).pool == "hpc-mi300"
}

# --- spot capacity is said -------------------------------------------------------------------------

test_a_placement_on_spot_capacity_says_so if {
	spot_shapes := object.union(shapes, {"spot-a100": object.union(shapes["cloud-a100"], {"spot": true})})
	spot_pool := pool("cloud-a100-spot", "spot-a100", 1, 100)
	w := train({"target": "cloud", "spot": "allow"})
	d := placement.decision with input as {"workload": w, "shapes": spot_shapes, "pools": [cloud_a100, spot_pool]}
	d.pool == "cloud-a100-spot"
	d.note == "spot capacity: the provider may reclaim these devices at short notice (the workload accepts it: spot allow)"
	never := placement.decision with input as {"workload": train({"target": "cloud"}), "shapes": spot_shapes, "pools": [cloud_a100, spot_pool]}
	never.pool == "cloud-a100"
	codes(never.verdicts["cloud-a100-spot"]) == ["spot_not_accepted"]
}

# Every pool's verdict carries both notes; the decision picks one.
test_verdicts_carry_both_notes if {
	d := decide(train({}), [full(hpc_nvidia), hpc_mi300])
	d.verdicts["hpc-mi300"].note == "requested nvidia unavailable — fell back to amd"
	d.verdicts["hpc-mi300"].note_full == "requested nvidia pools are full — fell back to amd"
	d.verdicts["hpc-nvidia"].note == null
	d.verdicts["hpc-nvidia"].note_full == null
	d.verdicts["hpc-nvidia"].requested == true
	d.verdicts["hpc-nvidia"].shape_denied == false
	d.verdicts["hpc-mi300"].requested == false
}

# --- budgets in the reference decision ----------------------------------------------------------------

test_a_pool_over_budget_is_denied if {
	d := decide(train({"max_cost_per_hour": 2.25}), [hpc_nvidia, pool("hpc-nvidia-2", "hpc-nvidia", 2, 8)])
	d.pool == "hpc-nvidia-2"
	codes(d.verdicts["hpc-nvidia"]) == ["budget_exceeded"]
	d.verdicts["hpc-nvidia"].shape_denied == true
	d.verdicts["hpc-nvidia"].admissible == false
	d.verdicts["hpc-nvidia"].reasons[0].message == "the grant would cost more than max_cost_per_hour $2.25/h: at most $2.25 per device-hour for 1 device(s)"
}

# Budget reasons come after the shape's and before capacity's.
test_budget_denials_in_check_order if {
	d := decide(train({"capabilities": ["nvlink"], "max_cost_per_hour": 1.25}), [full(hpc_nvidia)])
	codes(d.verdicts["hpc-nvidia"]) == ["capability_missing", "budget_exceeded", "capacity_exhausted"]
}

test_carbon_cap_denies_by_the_pools_carbon if {
	pools := [green("dirty", "hpc-nvidia", 1, 500), green("clean", "hpc-nvidia", 2, 100)]
	d := decide(train({"max_carbon_per_hour": 250.5}), pools)
	d.pool == "clean"
	codes(d.verdicts.dirty) == ["budget_exceeded"]
	d.verdicts.dirty.reasons[0].details.cap == "max_carbon_per_hour"
}

test_project_cap_in_the_decision if {
	pools := [green("dear", "hpc-nvidia", 7, 100), green("ok", "hpc-nvidia", 5.5, 100)]
	d := decide(train({"project": "inference-eu"}), pools)
	d.pool == "ok"
	[r.details | some r in d.verdicts.dear.reasons] == [{
		"cap": "max_cost_per_hour", "limit": 6, "unit": "USD", "devices": 1,
		"per_device_hour": 6, "project": "inference-eu",
	}]
}

# A 2g share is 2/7 of a device: a pool at 3.5/h fits a cap of 1/h; a whole device there does not.
test_budget_of_a_slice if {
	h100 := {"name": "hpc-h100", "shape": "hpc-h100", "cost_per_hour": 3.5, "carbon_per_hour": 250, "capacity": {"whole": 1, "slices": {"2g.20gb": 1}}}
	d := decide(train({"fraction": 0.25, "max_cost_per_hour": 1}), [h100])
	d.pool == "hpc-h100"
	d.verdicts["hpc-h100"].grant.profile == "2g.20gb"
	d2 := decide(train({"max_cost_per_hour": 1}), [h100])
	codes(d2.verdicts["hpc-h100"]) == ["budget_exceeded"]
}

test_every_pool_over_budget_is_no_eligible_pool if {
	d := decide(train({"max_cost_per_hour": 0.5}), spec_pools)
	d.outcome == "rejected"
	d.reason == {
		"code": "no_eligible_pool",
		"message": "no pool is eligible for train (3 checked: budget_exceeded on 3 pools, burst_not_allowed on 1 pool)",
	}
}

# Over budget is not "not now": a full pool also over budget does not make the summary no_capacity.
test_full_and_over_budget_is_not_no_capacity if {
	d := decide(train({"max_cost_per_hour": 0.5}), [full(hpc_nvidia)])
	d.reason.code == "no_eligible_pool"
}

# A cloud pool stopped by residency and by its budget does not block a burst: the budget would stop it anyway.
test_over_budget_cloud_pool_blocks_no_burst if {
	d := decide(train({"target": "cloud", "residency": "eu-only", "max_cost_per_hour": 1}), [cloud_a100])
	d.verdicts["cloud-a100"].blocks_burst == false
	codes(d.verdicts["cloud-a100"]) == ["residency_forbids", "budget_exceeded"]
	d.burst == {"attempted": true, "verdict": "unavailable", "pool": null, "reason": null}
	d.outcome == "rejected"
	d2 := decide(train({"target": "cloud", "residency": "eu-only", "max_cost_per_hour": 3.5}), [cloud_a100])
	d2.burst.verdict == "blocked"
	d2.verdicts["cloud-a100"].blocks_burst == true
}

# Every compact grant carries the budget's limits the decision applies.
test_verdicts_carry_the_limits if {
	w := train({"max_cost_per_hour": 2.25, "project": "green-research"})
	v := placement.verdicts with input as {"workload": w, "keys": ["hpc-nvidia"], "shapes": shapes}
	[g] := v.grants
	lim := g.limits
	lim.cost_per_hour == 2.25
	lim.carbon_per_hour == 400
	lim.reasons.cost_per_hour.code == "budget_exceeded"
	d := decide(w, [hpc_nvidia])
	d.verdicts["hpc-nvidia"].denials == [lim.reasons.cost_per_hour]
}

test_unknown_pool_verdict_fields if {
	d := placement.decision with input as {
		"workload": train({}),
		"shapes": {},
		"pools": [pool("ghost", "no-such-shape", 1, 1)],
	}
	v := d.verdicts.ghost
	v.tier == 4
	v.shape_denied == true
	v.requested == false
	v.grant_carbon_per_hour == 0
	v.note_full == null
	codes(v) == ["shape_unknown"]
}

# A pool without a carbon figure is denied for it, never counted as 0 g (which would pass every
# carbon cap and win the carbon objective).
test_a_pool_without_carbon_is_denied if {
	d := decide(train({"max_carbon_per_hour": 100.5}), [object.remove(hpc_nvidia, ["carbon_per_hour"])])
	codes(d.verdicts["hpc-nvidia"]) == ["carbon_unknown"]
	d.verdicts["hpc-nvidia"].admissible == false
	d.pool == null
}

# A check declaring a pool stage the composer does not run (it runs capacity, budget and quota, whose
# comparisons the caller repeats) is never silently skipped: the policy says it cannot run it and
# places nothing (fail closed).
reservation_check := {
	"about": {
		"title": "Reservation",
		"custom": {
			"order": 85,
			"stage": "pool",
			"reads": {"shape": [], "workload": []},
			"codes": {"reservation_held": {"kind": "not_now", "meaning": "a reservation holds the pool"}},
		},
	},
	"deny": [{"code": "reservation_held", "kind": "not_now", "message": "reservation holds the pool", "details": {}}],
}

test_a_pool_stage_plugin_the_composer_cannot_run_places_nothing if {
	"reservation" in [c.name | some c in composer.check_list] with checks.reservation as reservation_check

	placement.about.unsupported_checks == ["reservation"] with checks.reservation as reservation_check

	d := decide(train({}), [hpc_nvidia]) with checks.reservation as reservation_check
	d.rejection.code == "check_unsupported"
	d.pool == null
	placement.about.unsupported_checks == []
}

# A pool without a price is denied for it, never priced at 0.
test_a_pool_without_a_price_is_denied if {
	d := decide(train({}), [object.remove(hpc_nvidia, ["cost_per_hour"]), object.union(hpc_mi300, {"name": "nan", "cost_per_hour": "2.5"})])
	codes(d.verdicts["hpc-nvidia"]) == ["price_unknown"]
	d.verdicts["hpc-nvidia"].reasons[0].message == "pool 'hpc-nvidia' has no price per device-hour"
	d.verdicts["hpc-nvidia"].cost_per_hour == 0
	codes(d.verdicts.nan) == ["price_unknown"]
	d.outcome == "rejected"
}

# A carbon figure that is not a number denies the pool (fail closed).
test_a_pool_with_a_malformed_carbon_figure_is_denied if {
	d := decide(train({}), [object.union(hpc_nvidia, {"carbon_per_hour": "lots"})])
	d.verdicts["hpc-nvidia"].admissible == false
	d.pool == null
}

# --- the quota at the pool stage ------------------------------------------------------------------

# The decision with what the projects hold (input.quota_use), as the caller reads it from its store.
decide_held(w, pools, quota_use) := d if {
	d := placement.decision with input as {
		"workload": w,
		"shapes": {p.shape: shapes[p.shape] | some p in pools},
		"pools": pools,
		"quota_use": quota_use,
	}
}

# inference-eu may hold 16 nvidia devices (quotas.yaml) and no other class.
test_a_pool_over_the_projects_quota_waits_and_a_class_without_quota_is_refused if {
	w := train({"project": "inference-eu"})
	d := decide_held(w, spec_pools, {"devices": {"inference-eu": {"nvidia": 16}}})
	codes(d.verdicts["hpc-nvidia"]) == ["quota_exceeded"]
	d.verdicts["hpc-nvidia"].reasons[0].kind == "not_now"
	codes(d.verdicts["hpc-mi300"]) == ["quota_unknown"]
	d.verdicts["hpc-mi300"].reasons[0].kind == "never"
	d.outcome == "rejected"
	d.reason == {
		"code": "no_capacity",
		"message": "no pool is within the quota train may use (3 checked: burst_not_allowed on 1 pool, quota_exceeded on 2 pools, quota_unknown on 1 pool)",
	}
}

test_within_the_quota_the_pool_is_chosen if {
	d := decide_held(train({"project": "inference-eu"}), spec_pools, {"devices": {"inference-eu": {"nvidia": 15}}})
	d.pool == "hpc-nvidia"
	codes(d.verdicts["hpc-nvidia"]) == []
}

# Without quota_use nothing is held: the quota of an unused project has room.
test_without_quota_use_nothing_is_held if {
	decide(train({"project": "inference-eu"}), spec_pools).pool == "hpc-nvidia"
}

# llm-pretraining borrows from cohort research while the cohort has unused quota (64 + 16 nominal),
# up to its borrowing limit (32).
test_borrowing_within_the_cohort_and_not_beyond_it if {
	w := train({"project": "llm-pretraining"})
	decide_held(w, [hpc_nvidia], {"devices": {"llm-pretraining": {"nvidia": 70}}}).pool == "hpc-nvidia"
	over := decide_held(w, [hpc_nvidia], {"devices": {"llm-pretraining": {"nvidia": 70}, "green-research": {"nvidia": 10}}})
	codes(over.verdicts["hpc-nvidia"]) == ["quota_exceeded"]
	over.pool == null
}

# A grant no quota could ever hold is refused whatever the use (never): not a reason to wait.
# green-research may hold no amd device of its own, and borrow at most its cohort's 4.
test_a_grant_beyond_any_quota_is_never_placed if {
	d := decide(train({"project": "green-research", "accelerator": "amd", "count": 5}), [object.union(hpc_mi300, {"carbon_per_hour": 10})])
	codes(d.verdicts["hpc-mi300"]) == ["quota_too_small", "capacity_exhausted"]
	d.verdicts["hpc-mi300"].reasons[0].kind == "never"
	d.reason.code == "no_eligible_pool"
}

# The quota comes before the capacity shortfall, after the budget.
test_quota_reasons_come_before_the_capacity_shortfall if {
	d := decide_held(train({"project": "inference-eu"}), [full(hpc_nvidia)], {"devices": {"inference-eu": {"nvidia": 16}}})
	codes(d.verdicts["hpc-nvidia"]) == ["quota_exceeded", "capacity_exhausted"]
}

# --- a fraction given a larger share when the smallest that covers it has no room ---------------------

# One MI300X running DPX with one half held: a 0.25 (qpx) cannot go beside it (one mode per device),
# but the free DPX half covers it: granted, flagged larger, priced as granted; an NVIDIA stand-in is
# not needed.
mi300x_half_held := {
	"name": "hpc-mi300x", "shape": "hpc-mi300x", "cost_per_hour": 1.8, "carbon_per_hour": 250,
	"capacity": {"whole": 0, "slices": {"cpx": 0, "qpx": 0, "dpx": 1, "spx": 0}},
}

amd_quarter := train({"accelerator": "amd", "fraction": 0.25})

test_a_fraction_takes_the_smallest_free_partition_that_covers_it if {
	nvidia_room := object.union(hpc_nvidia, {"capacity": {"whole": 8, "slices": {"2g": 24}}})
	d := decide(amd_quarter, [mi300x_half_held, nvidia_room])
	d.outcome == "placed"
	d.pool == "hpc-mi300x"
	v := d.verdicts["hpc-mi300x"]
	v.grant.profile == "dpx"
	v.grant.larger == true
	v.grant_cost_per_hour == 0.9
	d.note == "no qpx had room: fraction 0.25 honored with a larger partition, dpx, priced as granted"
	codes(d.verdicts["hpc-nvidia"]) == ["fallback_not_needed"]
}

# A budget that the larger share would exceed: not given; the pool is short of room (not_now), and
# its reason names the shares tried.
test_a_larger_share_over_the_budget_is_not_given if {
	d := decide(object.union(amd_quarter, {"max_cost_per_hour": 0.5}), [mi300x_half_held])
	d.outcome == "rejected"
	d.reason.code == "no_capacity"
	v := d.verdicts["hpc-mi300x"]
	v.grant.profile == "qpx"
	codes(v) == ["slice_unavailable"]
	contains(v.reasons[0].message, "nor for a larger one the budget allows (dpx, spx)")
}

# With room for the smallest share, it is given (never a larger one).
test_the_smallest_share_with_room_is_given if {
	roomy := object.union(mi300x_half_held, {"capacity": {"whole": 1, "slices": {"cpx": 8, "qpx": 4, "dpx": 3, "spx": 1}}})
	d := decide(amd_quarter, [roomy])
	d.verdicts["hpc-mi300x"].grant.profile == "qpx"
	object.get(d.verdicts["hpc-mi300x"].grant, "larger", false) == false
	d.note == null
}

# A cheaper pool's smallest share ranks first, but a pool that can only give a larger one ranks
# where that one's cost puts it.
test_a_larger_share_is_ranked_by_what_it_costs if {
	cheap_full := object.union(mi300x_half_held, {"name": "cheap", "cost_per_hour": 1.0})
	dearer := object.union(mi300x_half_held, {"name": "dearer", "cost_per_hour": 1.5, "capacity": {"whole": 1, "slices": {"qpx": 4, "dpx": 2}}})
	d := decide(amd_quarter, [cheap_full, dearer])
	d.pool == "dearer"
	d.verdicts.dearer.grant_cost_per_hour == 0.375
	d.verdicts.cheap.grant_cost_per_hour == 0.5
}

# A larger share is given only within the project's quota (llm-pretraining may hold 4 amd devices,
# and its cohort holds no more of them): over it, the pool waits for the quota, naming the share it
# has room for.
test_a_larger_share_is_given_only_within_the_quota if {
	w := object.union(amd_quarter, {"project": "llm-pretraining"})
	within := decide_held(w, [mi300x_half_held], {"devices": {"llm-pretraining": {"amd": 3}}})
	within.pool == "hpc-mi300x"
	within.verdicts["hpc-mi300x"].grant.profile == "dpx"
	over := decide_held(w, [mi300x_half_held], {"devices": {"llm-pretraining": {"amd": 3.75}}})
	over.outcome == "rejected"
	over.reason.code == "no_capacity"
	over.verdicts["hpc-mi300x"].grant.profile == "dpx"
	codes(over.verdicts["hpc-mi300x"]) == ["quota_exceeded"]
}

# --- when pools start: the wait check and the earliest start ----------------------------------------

# 2026-12-01T12:00:00Z, the decision's time below.
noon := 1796126400

# A pool with a start estimate (whole epoch seconds; null at: none).
starting(p, at) := object.union(p, {"estimate": {"at": at, "source": "slurm", "observed_at": noon}})

# The cheaper pool busy for two hours, a dearer one free now, a third without an estimate.
busy := starting(pool("busy", "hpc-nvidia", 1.5, 8), noon + 7200)

free := starting(pool("free", "hpc-nvidia", 2.5, 8), noon)

unknown := starting(pool("unknown", "hpc-nvidia", 0.5, 8), null)

decide_at(w, pools, now) := d if {
	d := placement.decision with input as {
		"workload": w,
		"shapes": {p.shape: shapes[p.shape] | some p in pools},
		"pools": pools,
		"now": now,
	}
}

test_earliest_takes_the_soonest_start if {
	d := decide_at(train({"optimize": "earliest"}), [busy, free, unknown], noon)
	d.pool == "free"
	d.eligible == ["busy", "free", "unknown"]
	d.verdicts.busy.start == noon + 7200
	d.verdicts.unknown.start == null
}

test_cost_alone_takes_the_cheapest_whenever_it_starts if {
	d := decide_at(train({}), [busy, free], noon)
	d.pool == "busy"
}

test_earliest_puts_a_pool_without_an_estimate_last if {
	d := decide_at(train({"optimize": "earliest"}), [busy, unknown], noon)
	d.pool == "busy"
	only := decide_at(train({"optimize": "earliest"}), [unknown], noon)
	only.pool == "unknown"
}

test_earliest_breaks_a_tie_in_start_by_cost if {
	cheap := starting(pool("cheap", "hpc-nvidia", 1, 8), noon - 600)
	d := decide_at(train({"optimize": "earliest"}), [free, cheap], noon)

	# An estimate in the past means now: both start now; the cheaper wins.
	d.verdicts.cheap.start == noon
	d.pool == "cheap"
}

# Estimates are whole seconds: a start within the slack of now is now (a free Slurm partition
# answers the second after it is asked), so cost decides between such pools.
test_a_start_within_a_second_of_now_is_now if {
	next_second := starting(pool("next-second", "hpc-nvidia", 1, 8), noon + 1)
	d := decide_at(train({"optimize": "earliest"}), [free, next_second], noon)
	d.verdicts["next-second"].start == noon
	d.pool == "next-second"
	two := starting(pool("two-seconds", "hpc-nvidia", 1, 8), noon + 2)
	later := decide_at(train({"optimize": "earliest"}), [free, two], noon)
	later.pool == "free"
}

test_earliest_stays_within_the_best_tier if {
	stand_in := starting(pool("stand-in", "hpc-mi300", 1, 4), noon)
	d := decide_at(train({"optimize": "earliest"}), [busy, stand_in], noon)
	d.pool == "busy"
	codes(d.verdicts["stand-in"]) == ["fallback_not_needed"]
}

test_max_wait_denies_a_pool_that_starts_later if {
	d := decide_at(train({"max_wait": 1800}), [busy, free], noon)
	d.pool == "free"
	codes(d.verdicts.busy) == ["wait_exceeded"]
	d.verdicts.busy.reasons[0].kind == "not_now"
	d.verdicts.busy.admissible == false
}

test_a_deadline_denies_a_pool_that_starts_after_it if {
	d := decide_at(train({"deadline": "2026-12-01T13:00:00Z"}), [busy, free], noon)
	d.pool == "free"
	codes(d.verdicts.busy) == ["deadline_missed"]
}

test_under_a_limit_a_pool_without_an_estimate_is_not_taken if {
	d := decide_at(train({"max_wait": 86400}), [unknown, free], noon)
	d.pool == "free"
	codes(d.verdicts.unknown) == ["estimate_unknown"]
}

test_without_limits_no_pool_is_judged_by_its_start if {
	d := decide_at(train({}), [unknown, busy], noon)
	d.pool == "unknown"
	every v in d.verdicts {
		v.late == []
	}
}

test_past_the_deadline_no_pool_is_taken if {
	d := decide_at(train({"deadline": "2026-12-01T11:00:00Z"}), [busy, free], noon)
	d.pool == null
	codes(d.verdicts.free) == ["deadline_passed"]
	d.reason.code == "no_eligible_pool"
}

test_only_late_pools_is_no_capacity if {
	d := decide_at(train({"max_wait": 600}), [busy, unknown], noon)
	d.pool == null
	d.reason == {
		"code": "no_capacity",
		"message": "no pool is expected to start train within its waiting limits (2 checked: estimate_unknown on 1 pool, wait_exceeded on 1 pool)",
	}
}

# A full pool under a waiting limit is told by the wait as well: it could start were it asked when.
test_a_full_pool_under_a_limit_is_told_by_the_wait if {
	d := decide_at(train({"max_wait": 600}), [full(unknown)], noon)
	d.reason == {
		"code": "no_capacity",
		"message": "no pool is expected to start train within its waiting limits (1 checked: capacity_exhausted on 1 pool, estimate_unknown on 1 pool)",
	}
}

test_a_limit_without_the_decisions_time_fails_closed if {
	d := decide(train({"max_wait": 600}), [free])
	codes(d.verdicts.free) == ["wait_invalid"]
	d.verdicts.free.reasons[0].kind == "never"
	d.pool == null
}

test_the_wait_comes_before_the_shortfall if {
	d := decide_at(train({"max_wait": 600}), [full(busy)], noon)
	codes(d.verdicts.busy) == ["wait_exceeded", "capacity_exhausted"]
}

# Only the candidates (pools no other check denies) are judged by their start: a pool over the
# budget, or a stand-in the workload refuses for budget, says that alone.
test_a_pool_denied_otherwise_is_not_judged_by_its_start if {
	d := decide_at(train({"max_wait": 600, "max_cost_per_hour": 1}), [full(busy)], noon)
	codes(d.verdicts.busy) == ["budget_exceeded", "capacity_exhausted"]
	d.verdicts.busy.late == []
	stand_in := full(starting(pool("stand-in", "hpc-mi300", 1, 4), noon + 7200))
	refused := decide_at(object.union(no_budget_fallback, {"max_wait": 600}), [hpc_nvidia, stand_in], noon)
	codes(refused.verdicts["stand-in"]) == ["budget_fallback_forbidden", "capacity_exhausted"]
	no_time := decide(train({"max_wait": 600, "capabilities": ["nvlink"]}), [free])
	codes(no_time.verdicts.free) == ["capability_missing"]
}

test_the_verdicts_answer_carries_the_wait_limits if {
	answer := placement.verdicts with input as {"workload": train({"max_wait": 600}), "shapes": {}, "keys": []}
	answer.wait.start_within_s == 600
	answer.wait.reasons.max_wait.code == "wait_exceeded"
	none := placement.verdicts with input as {"workload": train({}), "shapes": {}, "keys": []}
	none.wait == {"start_within_s": null, "start_by_s": null, "invalid": null, "reasons": {"max_wait": null, "deadline": null, "deadline_passed": null, "unknown": null}}
}

# A pool its project's quota denies now is no candidate: it is not judged by its start, the quota
# alone says why (inference-eu may hold 16 nvidia devices); within the quota, its late start denies
# it.
test_a_pool_over_its_quota_is_not_judged_by_its_start if {
	w := train({"project": "inference-eu", "max_wait": 600})
	late := starting(pool("late", "hpc-nvidia", 1.5, 8), noon + 7200)
	held := {"devices": {"inference-eu": {"nvidia": 16}}}
	over := placement.decision with input as {"workload": w, "shapes": {"hpc-nvidia": shapes["hpc-nvidia"]}, "pools": [late], "now": noon, "quota_use": held}
	codes(over.verdicts.late) == ["quota_exceeded"]
	within := decide_at(w, [late], noon)
	codes(within.verdicts.late) == ["wait_exceeded"]
}

# --- ranking by work (throughput.yaml) -------------------------------------------------------------

# Gavel's three GPUs at GCP's prices, and a pool that names no model (no throughput known).
gavel := [
	object.union(green("k80", "hpc-nvidia", 0.45, 150), {"model": "k80"}),
	object.union(green("p100", "hpc-nvidia", 1.46, 250), {"model": "P100"}),
	object.union(green("v100", "hpc-nvidia", 2.48, 300), {"model": "v100"}),
	green("plain", "hpc-nvidia", 0.3, 100),
]

work(optimize, class, amount) := train({"optimize": optimize, "work_class": class, "work": amount})

work_cases := {
	# LM: 96.2 it/s on a V100 for $2.48/h against 1.58 it/s on a K80 for $0.45/h.
	"work-cost: LM goes to the V100": {"w": work("work-cost", "LM", 100000), "pool": "v100"},
	# ResNet-50: K80 $0.45 / 0.58 it/s = $0.22 per 1000 iterations; V100 $0.50; P100 $0.47.
	"work-cost: ResNet-50 stays on the K80": {"w": work("work-cost", "ResNet-50", 100000), "pool": "k80"},
	# Recommendation: 150 g / 0.2395 it/s against 300 g / 0.4302 and 250 g / 0.39.
	"work-carbon: Recommendation on the K80": {"w": work("work-carbon", "Recommendation", 1000), "pool": "k80"},
	"work-carbon: CycleGAN on the V100": {"w": work("work-carbon", "CycleGAN", 1000), "pool": "v100"},
	"work-time: the fastest device": {"w": work("work-time", "Recommendation", 1000), "pool": "v100"},
	# Without work the pools rank as by cost: no throughput is known for any of them.
	"work-cost without work: by cost": {"w": train({"optimize": "work-cost"}), "pool": "plain"},
	"work-carbon without work: by carbon": {"w": train({"optimize": "work-carbon"}), "pool": "plain"},
	"work-time without work: by start, then cost": {"w": train({"optimize": "work-time"}), "pool": "plain"},
}

test_work_objective_selects[name] if {
	some name, tc in work_cases
	d := decide(tc.w, gavel)
	d.pool == tc.pool
}

test_work_rate_is_the_rows_per_second_times_devices if {
	d := decide(object.union(work("work-cost", "LM", 10), {"count": 2}), gavel)
	d.verdicts.v100.work_rate == 2 * data.examlops.tables.throughput.classes.LM.models.v100.per_second
	d.verdicts.plain.work_rate == null
}

# A pool with no throughput known ranks after every pool whose throughput is known, even cheaper.
test_no_throughput_known_ranks_last if {
	d := decide(work("work-cost", "LM", 10), [gavel[3], gavel[0]])
	d.pool == "k80"
}

# A slice has no throughput unless its profile has its own row.
test_a_slice_without_its_own_row_has_no_throughput if {
	h100 := {
		"name": "hpc-h100", "shape": "hpc-h100", "model": "h100", "cost_per_hour": 2.0, "carbon_per_hour": 350,
		"capacity": {"whole": 0, "slices": {"2g.20gb": 1}},
	}
	d := decide(object.union(work("work-cost", "LM", 10), {"fraction": 0.25}), [h100])
	d.verdicts["hpc-h100"].work_rate == null
}

# work-time: an earlier start with a slower device against a later start with a faster one.
test_work_time_adds_the_start_to_the_run_time if {
	k80 := object.union(gavel[0], {"estimate": {"at": 1000, "source": "now", "observed_at": 1000}})
	v100 := object.union(gavel[2], {"estimate": {"at": 1600, "source": "table", "observed_at": 1000}})

	# LM, 1000 iterations: K80 634 s from now; V100 600 + 10.4 s.
	lm := decide_at(work("work-time", "LM", 1000), [k80, v100], 1000)
	lm.pool == "v100"

	# Recommendation, 100 iterations: K80 417 s; V100 600 + 232 s.
	rec := decide_at(work("work-time", "Recommendation", 100), [k80, v100], 1000)
	rec.pool == "k80"
}

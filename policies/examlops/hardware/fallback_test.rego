package examlops.hardware.fallback_test

import data.examlops.hardware.fallback

pool(target, accelerator) := {"name": sprintf("%s-%s", [target, accelerator]), "target": target, "accelerator": accelerator}

train(accelerator) := {"name": "train", "accelerator": accelerator, "engine": "generic"}

test_tier_hpc_requested_is_0 if {
	fallback.tier(pool("hpc", "amd"), train("amd")) == 0
}

test_tier_hpc_other_is_1 if {
	fallback.tier(pool("hpc", "amd"), train("tpu")) == 1
}

test_tier_cloud_requested_is_2 if {
	fallback.tier(pool("cloud", "nvidia"), train("nvidia")) == 2
}

test_tier_cloud_other_is_3 if {
	fallback.tier(pool("cloud", "nvidia"), train("amd")) == 3
}

test_fallback_and_burst_tiers if {
	[t | some t in [0, 1, 2, 3]; fallback.is_fallback(t)] == [1, 3]
	[t | some t in [0, 1, 2, 3]; fallback.is_burst(t)] == [2, 3]
}

test_preference_null_for_selected_tier if {
	fallback.preference(train("nvidia"), 1, 1) == null
}

test_burst_not_needed_when_hpc_tier_selected if {
	r := fallback.preference(train("nvidia"), 2, 0)
	r == {
		"code": "burst_not_needed",
		"kind": "preference",
		"message": "an HPC pool can take this workload; bursting to cloud is not needed",
		"details": {"tier": 2, "selected_tier": 0},
	}
	fallback.preference(train("nvidia"), 3, 1).code == "burst_not_needed"
}

test_fallback_not_needed_when_requested_accelerator_selected if {
	r := fallback.preference(train("nvidia"), 1, 0)
	r.code == "fallback_not_needed"
	r.kind == "preference"
	r.message == "a pool of the requested accelerator nvidia is available"
	r.details == {"tier": 1, "selected_tier": 0}
	fallback.preference(train("nvidia"), 3, 2).code == "fallback_not_needed"
}

test_note_on_fallback_is_the_spec_note if {
	fallback.note(pool("hpc", "amd"), train("tpu"), 1) == "requested tpu unavailable — fell back to amd"
	fallback.note(pool("cloud", "nvidia"), train("tpu"), 3) == "requested tpu unavailable — fell back to nvidia"
}

test_no_note_without_fallback if {
	fallback.note(pool("hpc", "amd"), train("amd"), 0) == null
	fallback.note(pool("cloud", "amd"), train("amd"), 2) == null
}

package examlops.hardware.tiers_test

import data.examlops.hardware.tiers

shape(target, accelerator) := {"target": target, "accelerator": accelerator}

tpu := {"accelerator": "tpu"}

tier_cases := {
	"hpc pool of the requested accelerator": {"shape": shape("hpc", "tpu"), "tier": 0, "fallback": false, "burst": false},
	"hpc pool of a stand-in": {"shape": shape("hpc", "amd"), "tier": 1, "fallback": true, "burst": false},
	"cloud pool of the requested accelerator": {"shape": shape("cloud", "tpu"), "tier": 2, "fallback": false, "burst": true},
	"cloud pool of a stand-in": {"shape": shape("cloud", "nvidia"), "tier": 3, "fallback": true, "burst": true},
}

test_tier[name] if {
	some name, tc in tier_cases
	t := tiers.tier(tc.shape, tpu)
	t == tc.tier
	tiers.is_fallback(t) == tc.fallback
	tiers.is_burst(t) == tc.burst
}

note_cases := {
	"tier 0 has no note": {"shape": shape("hpc", "tpu"), "note": null},
	"tier 1 says it fell back": {"shape": shape("hpc", "amd"), "note": "requested tpu unavailable — fell back to amd"},
	"tier 2 has no note": {"shape": shape("cloud", "tpu"), "note": null},
	"tier 3 says it fell back": {"shape": shape("cloud", "nvidia"), "note": "requested tpu unavailable — fell back to nvidia"},
}

test_note[name] if {
	some name, tc in note_cases
	tiers.note(tc.shape, tpu, tiers.tier(tc.shape, tpu)) == tc.note
}

burst_not_needed := "an HPC pool can take this workload; bursting to cloud is not needed"

fallback_not_needed := "a pool of the requested accelerator tpu is available"

# [tier of the pool, selected tier] -> the code (null: the pool's tier is the selected one).
preference_cases := {
	"0 selected": {"t": 0, "sel": 0, "code": null},
	"1 selected": {"t": 1, "sel": 1, "code": null},
	"2 selected": {"t": 2, "sel": 2, "code": null},
	"3 selected": {"t": 3, "sel": 3, "code": null},
	"stand-in when the requested one is there": {"t": 1, "sel": 0, "code": "fallback_not_needed"},
	"cloud when hpc is there": {"t": 2, "sel": 0, "code": "burst_not_needed"},
	"cloud stand-in when hpc is there": {"t": 3, "sel": 0, "code": "burst_not_needed"},
	"cloud when an hpc stand-in is there": {"t": 2, "sel": 1, "code": "burst_not_needed"},
	"cloud stand-in when an hpc stand-in is there": {"t": 3, "sel": 1, "code": "burst_not_needed"},
	"cloud stand-in when cloud has the requested one": {"t": 3, "sel": 2, "code": "fallback_not_needed"},
}

# The reason a case expects, built from the table's code.
expected(tc) := null if {
	tc.code == null
} else := {
	"code": tc.code,
	"kind": "preference",
	"message": {"burst_not_needed": burst_not_needed, "fallback_not_needed": fallback_not_needed}[tc.code],
	"details": {"tier": tc.t, "selected_tier": tc.sel},
}

test_preference[name] if {
	some name, tc in preference_cases
	tiers.preference(tpu, tc.t, tc.sel) == expected(tc)
}

test_request_rejected if {
	rejection := {
		"code": "backend_unsupported",
		"kind": "never",
		"message": "engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))",
		"details": {},
	}
	tiers.rejected(rejection) == {
		"code": "request_rejected",
		"kind": "preference",
		"message": "the workload as asked is rejected: engine 'sglang' cannot run on amd (needs backend rocm; supports ('cuda',))",
		"details": {"rejection": "backend_unsupported"},
	}
}

test_about if {
	tiers.about.title == "Tiers"
	tiers.about.custom.reads == {
		"shape": ["target", "accelerator", "spot"],
		"workload": ["accelerator", "spot", "max_cost_per_hour", "max_carbon_per_hour", "project"],
	}
	object.keys(tiers.about.custom.codes) == {"fallback_not_needed", "burst_not_needed", "request_rejected"}
	every _, c in tiers.about.custom.codes {
		c.kind == "preference"
	}
}

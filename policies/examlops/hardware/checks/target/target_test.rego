package examlops.hardware.checks.target_test

import data.examlops.hardware.checks.target

# The check sees only the fields it declares.
deny(pool_target, w) := d if {
	d := target.deny with input as {"shape": {"target": pool_target}, "workload": w}
}

wl(t, burst) := {"target": t, "allow_burst": burst}

codes(pool_target, w) := [r.code | some r in deny(pool_target, w)]

# [pool target, workload target, allow_burst] -> the codes denied.
cases := {
	"hpc pool, target any": {"pool": "hpc", "w": wl("any", false), "codes": []},
	"hpc pool, target any, allow_burst": {"pool": "hpc", "w": wl("any", true), "codes": []},
	"hpc pool, target hpc": {"pool": "hpc", "w": wl("hpc", false), "codes": []},
	"hpc pool, target hpc, allow_burst": {"pool": "hpc", "w": wl("hpc", true), "codes": []},
	"hpc pool, target cloud": {"pool": "hpc", "w": wl("cloud", false), "codes": ["target_mismatch"]},
	"hpc pool, target cloud, allow_burst": {"pool": "hpc", "w": wl("cloud", true), "codes": ["target_mismatch"]},
	"cloud pool, target any": {"pool": "cloud", "w": wl("any", false), "codes": ["burst_not_allowed"]},
	"cloud pool, target any, allow_burst": {"pool": "cloud", "w": wl("any", true), "codes": []},
	"cloud pool, target hpc": {"pool": "cloud", "w": wl("hpc", false), "codes": ["burst_not_allowed"]},
	# An HPC workload with allow_burst spills to cloud.
	"cloud pool, target hpc, allow_burst": {"pool": "cloud", "w": wl("hpc", true), "codes": []},
	"cloud pool, target cloud": {"pool": "cloud", "w": wl("cloud", false), "codes": []},
	"cloud pool, target cloud, allow_burst": {"pool": "cloud", "w": wl("cloud", true), "codes": []},
}

test_target[name] if {
	some name, tc in cases
	codes(tc.pool, tc.w) == tc.codes
}

test_burst_not_allowed_reason if {
	deny("cloud", wl("any", false)) == {{
		"code": "burst_not_allowed",
		"kind": "never",
		"message": "cloud pool needs an explicit burst (allow_burst or target cloud); workload target is any",
		"details": {"pool_target": "cloud", "target": "any", "allow_burst": false},
	}}
}

test_burst_not_allowed_names_hpc_target if {
	[r.message | some r in deny("cloud", wl("hpc", false))] == ["cloud pool needs an explicit burst (allow_burst or target cloud); workload target is hpc"]
}

test_target_mismatch_reason if {
	deny("hpc", wl("cloud", true)) == {{
		"code": "target_mismatch",
		"kind": "never",
		"message": "workload asks for target cloud; pool is hpc",
		"details": {"pool_target": "hpc", "target": "cloud"},
	}}
}

test_check_is_null_when_allowed if {
	target.check({"target": "cloud"}, wl("hpc", true)) == null
	target.hpc_burst({"target": "cloud"}, wl("hpc", true))
	not target.hpc_burst({"target": "cloud"}, wl("any", true))
	not target.hpc_burst({"target": "hpc"}, wl("hpc", true))
}

test_about if {
	a := target.about
	a.title == "Target"
	a.custom.order == 20
	a.custom.reads == {"shape": ["target"], "workload": ["target", "allow_burst"]}
	object.keys(a.custom.codes) == {"burst_not_allowed", "target_mismatch"}
}

package examlops.hardware.checks.spot_test

import data.examlops.hardware.checks.spot

# The check sees only the fields it declares.
codes(shape, consent) := sort([r.code | some r in spot.deny with input as {"shape": shape, "workload": {"spot": consent}}])

spot_pool := {"spot": true}

on_demand := {"spot": false}

# [pool, workload's spot] -> the codes denied.
cases := {
	"on-demand pool, spot never (the default)": {"shape": on_demand, "spot": "never", "codes": []},
	"on-demand pool, spot allow": {"shape": on_demand, "spot": "allow", "codes": []},
	"on-demand pool, spot require": {"shape": on_demand, "spot": "require", "codes": ["spot_required"]},
	"spot pool, spot never (the default)": {"shape": spot_pool, "spot": "never", "codes": ["spot_not_accepted"]},
	"spot pool, spot allow": {"shape": spot_pool, "spot": "allow", "codes": []},
	"spot pool, spot require": {"shape": spot_pool, "spot": "require", "codes": []},
	"a pool from before spot, spot never": {"shape": {}, "spot": "never", "codes": []},
	"a pool from before spot, spot require": {"shape": {}, "spot": "require", "codes": ["spot_required"]},
}

test_spot[name] if {
	some name, tc in cases
	codes(tc.shape, tc.spot) == tc.codes
}

test_spot_not_accepted_says_why_and_how_to_accept if {
	spot.deny with input as {"shape": spot_pool, "workload": {"spot": "never"}} == {{
		"code": "spot_not_accepted",
		"kind": "never",
		"message": "spot (preemptible) capacity: the provider may reclaim its devices at short notice, and the workload does not accept that (spot: never; --spot allow accepts it)",
		"details": {"spot": true, "workload_spot": "never"},
	}}
}

test_spot_required_reason if {
	[r.message | some r in spot.deny with input as {"shape": on_demand, "workload": {"spot": "require"}}] == [
		"on-demand capacity, and the workload asks for spot capacity only (spot: require)",
	]
}

package examlops.hardware.checks.drain_test

import data.examlops.hardware.checks.drain

# The check sees only the fields it declares.
codes(shape) := sort([r.code | some r in drain.deny with input as {"shape": shape, "workload": {}}])

cases := {
	"a drained pool": {"shape": {"drained": true}, "codes": ["pool_drained"]},
	"an undrained pool": {"shape": {"drained": false}, "codes": []},
	"a pool from before draining": {"shape": {}, "codes": []},
	"drained as null (a shape without the field, projected)": {"shape": {"drained": null}, "codes": []},
}

test_drain[name] if {
	some name, tc in cases
	codes(tc.shape) == tc.codes
}

test_a_drained_pool_is_denied_for_now_and_told_how_to_undo_it if {
	drain.deny with input as {"shape": {"drained": true}, "workload": {}} == {{
		"code": "pool_drained",
		"kind": "not_now",
		"message": "the pool is drained: it takes no new grants until it is undrained (exa hardware undrain); its live grants are kept",
		"details": {"drained": true},
	}}
}

test_about if {
	a := drain.about
	a.title == "Drain"
	a.custom.order == 85
	a.custom.reads == {"shape": ["drained"], "workload": []}
	object.keys(a.custom.codes) == {"pool_drained"}
	a.custom.codes.pool_drained.kind == "not_now"
}

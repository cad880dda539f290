package examlops.hardware.reason_test

import data.examlops.hardware.reason

test_make_builds_code_kind_message_details if {
	reason.make("capacity_exhausted", "not_now", "needs 2 device(s), 1 free of 8", {"needed": 2}) == {
		"code": "capacity_exhausted",
		"kind": "not_now",
		"message": "needs 2 device(s), 1 free of 8",
		"details": {"needed": 2},
	}
}

test_make_keeps_details_as_given if {
	r := reason.make("c", "never", "m", {})
	r.details == {}
	count(object.keys(r)) == 4
}

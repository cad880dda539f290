package examlops.hardware.checks.capacity_test

import data.examlops.hardware.checks.capacity

whole_grant(n) := {"units": n, "profile": null}

slice_grant(profile, n) := {"units": n, "profile": profile}

h100 := {"accelerator": "nvidia", "model": "h100", "fixed_profile": null}

vendor := {"accelerator": "nvidia", "model": null, "fixed_profile": null}

fixed_h100 := object.union(h100, {"fixed_profile": "1g.10gb"})

# input: {shape, workload, grant, capacity}
deny(shape, grant, cap) := d if {
	d := capacity.deny with input as {"shape": shape, "workload": {}, "grant": grant, "capacity": cap}
}

fits_cases := {
	"one whole of one free": {"grant": whole_grant(1), "capacity": {"whole": 1}, "fits": true},
	"two whole of eight free": {"grant": whole_grant(2), "capacity": {"whole": 8, "slices": {}}, "fits": true},
	"two whole of one free": {"grant": whole_grant(2), "capacity": {"whole": 1}, "fits": false},
	"whole with none free": {"grant": whole_grant(1), "capacity": {"whole": 0}, "fits": false},
	"whole ignores free slices": {"grant": whole_grant(1), "capacity": {"whole": 0, "slices": {"7g.80gb": 3}}, "fits": false},
	"slice placeable": {"grant": slice_grant("4g.40gb", 1), "capacity": {"whole": 0, "slices": {"4g.40gb": 1}}, "fits": true},
	"slice not placeable": {"grant": slice_grant("4g.40gb", 1), "capacity": {"whole": 0, "slices": {"4g.40gb": 0, "3g.40gb": 2}}, "fits": false},
	"slice profile not listed": {"grant": slice_grant("4g.40gb", 1), "capacity": {"whole": 2, "slices": {"1g.10gb": 7}}, "fits": false},
	"fixed slices enough": {"grant": slice_grant("1g.10gb", 3), "capacity": {"slices": {"1g.10gb": 3}}, "fits": true},
	"fixed slices too few": {"grant": slice_grant("1g.10gb", 3), "capacity": {"slices": {"1g.10gb": 2}}, "fits": false},
	# A pool that does not state its capacity has none.
	"capacity missing, whole": {"grant": whole_grant(1), "capacity": {}, "fits": false},
	"capacity missing, slice": {"grant": slice_grant("1g.10gb", 1), "capacity": {}, "fits": false},
	"whole missing": {"grant": whole_grant(1), "capacity": {"slices": {"1g.10gb": 7}}, "fits": false},
	"slices missing": {"grant": slice_grant("1g.10gb", 1), "capacity": {"whole": 8}, "fits": false},
}

test_fits[name] if {
	some name, tc in fits_cases
	fits(tc.grant, tc.capacity) == tc.fits
	denied := count(deny(h100, tc.grant, tc.capacity)) > 0
	denied != tc.fits
}

# capacity.fits as true or false.
fits(grant, cap) if {
	capacity.fits(grant, cap)
} else := false

shortfall_cases := {
	"whole devices of a model": {
		"shape": h100, "grant": whole_grant(2),
		"code": "capacity_exhausted",
		"message": "needs 2 whole H100 device(s) with nothing on them, more than are free",
		"details": {"units": 2, "profile": null},
	},
	"whole devices of a vendor": {
		"shape": vendor, "grant": whole_grant(1),
		"code": "capacity_exhausted",
		"message": "needs 1 whole nvidia device(s) with nothing on them, more than are free",
		"details": {"units": 1, "profile": null},
	},
	"whole devices, model absent": {
		"shape": {"accelerator": "amd"}, "grant": whole_grant(3),
		"code": "capacity_exhausted",
		"message": "needs 3 whole amd device(s) with nothing on them, more than are free",
		"details": {"units": 3, "profile": null},
	},
	"fixed slices": {
		"shape": fixed_h100, "grant": slice_grant("1g.10gb", 3),
		"code": "capacity_exhausted",
		"message": "needs 3 free 1g.10gb slice(s), more than are free",
		"details": {"units": 3, "profile": "1g.10gb"},
	},
	"a slice beside the ones held": {
		"shape": h100, "grant": slice_grant("4g.40gb", 1),
		"code": "slice_unavailable",
		"message": "no H100 in the pool has room for a 4g.40gb beside the slices it holds",
		"details": {"units": 1, "profile": "4g.40gb"},
	},
	"a vendor-level slice": {
		"shape": vendor, "grant": slice_grant("2g", 1),
		"code": "slice_unavailable",
		"message": "no nvidia in the pool has room for a 2g beside the slices it holds",
		"details": {"units": 1, "profile": "2g"},
	},
	"an amd partition": {
		"shape": {"accelerator": "amd", "model": "mi300x", "fixed_profile": null}, "grant": slice_grant("cpx", 1),
		"code": "slice_unavailable",
		"message": "no MI300X in the pool has room for a cpx beside the slices it holds",
		"details": {"units": 1, "profile": "cpx"},
	},
}

test_shortfall[name] if {
	some name, tc in shortfall_cases
	want := {"code": tc.code, "kind": "not_now", "message": tc.message, "details": tc.details}
	capacity.shortfall(tc.shape, tc.grant) == want
	deny(tc.shape, tc.grant, {}) == {want}
}

test_no_denial_when_it_fits if {
	deny(h100, slice_grant("4g.40gb", 1), {"whole": 0, "slices": {"4g.40gb": 1}}) == set()
}

test_every_code_is_not_now if {
	every _, c in capacity.about.custom.codes {
		c.kind == "not_now"
	}
}

test_about if {
	a := capacity.about
	a.title == "Capacity"
	a.custom.order == 90
	a.custom.stage == "pool"
	a.custom.reads == {"shape": ["accelerator", "model", "fixed_profile"], "workload": []}
	object.keys(a.custom.codes) == {"capacity_exhausted", "slice_unavailable"}
}

# With larger shares that also cover the request, the shortfall names them: none of them (within the
# budget) had room either.
test_shortfall_names_the_larger_shares_tried if {
	mi300x := {"accelerator": "amd", "model": "mi300x", "fixed_profile": null}
	capacity.shortfall_of(mi300x, slice_grant("qpx", 1), ["dpx", "spx"]) == {
		"code": "slice_unavailable",
		"kind": "not_now",
		"message": "no MI300X in the pool has room for a qpx beside the slices it holds, nor for a larger one the budget allows (dpx, spx)",
		"details": {"units": 1, "profile": "qpx", "larger": ["dpx", "spx"]},
	}
}

test_shortfall_without_larger_shares_is_the_plain_one if {
	capacity.shortfall_of(h100, slice_grant("4g.40gb", 1), []) == capacity.shortfall(h100, slice_grant("4g.40gb", 1))
	capacity.shortfall_of(h100, whole_grant(2), []) == capacity.shortfall(h100, whole_grant(2))
}

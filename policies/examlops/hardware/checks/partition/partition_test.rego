package examlops.hardware.checks.partition_test

import data.examlops.hardware.checks.partition

# The check sees only the fields it declares.
deny(shape, fraction, n) := d if {
	d := partition.deny with input as {
		"shape": object.union({"accelerator": "nvidia", "model": null, "fixed_profile": null}, shape),
		"workload": {"fraction": fraction, "count": n},
	}
}

codes(shape, fraction, n) := [r.code | some r in deny(shape, fraction, n)]

cases := {
	"no fixed slices": {"shape": {"model": "h100"}, "fraction": 0.5, "count": 1, "codes": []},
	"no fixed slices, whole devices": {"shape": {}, "fraction": 1, "count": 4, "codes": []},
	"1g.10gb covers a tenth": {"shape": {"model": "h100", "fixed_profile": "1g.10gb"}, "fraction": 0.1, "count": 1, "codes": []},
	"1g.10gb covers an exact seventh": {"shape": {"model": "h100", "fixed_profile": "1g.10gb"}, "fraction": 0.14285714285714285, "count": 1, "codes": []},
	"1g.10gb too small for a quarter": {"shape": {"model": "h100", "fixed_profile": "1g.10gb"}, "fraction": 0.25, "count": 1, "codes": ["slice_too_small"]},
	"3g.40gb too small for whole devices": {"shape": {"model": "a100", "fixed_profile": "3g.40gb"}, "fraction": 1, "count": 2, "codes": ["slice_too_small"]},
	"7g.80gb covers a whole device": {"shape": {"model": "h100", "fixed_profile": "7g.80gb"}, "fraction": 1, "count": 2, "codes": []},
	"vendor 4g covers a half": {"shape": {"fixed_profile": "4g"}, "fraction": 0.5, "count": 1, "codes": []},
	"mi300x cpx covers an eighth": {"shape": {"accelerator": "amd", "model": "mi300x", "fixed_profile": "cpx"}, "fraction": 0.125, "count": 3, "codes": []},
	"mi300x qpx too small for a half": {"shape": {"accelerator": "amd", "model": "mi300x", "fixed_profile": "qpx"}, "fraction": 0.5, "count": 1, "codes": ["slice_too_small"]},
	"h100 profile on a vendor pool": {"shape": {"fixed_profile": "1g.10gb"}, "fraction": 0.1, "count": 1, "codes": ["slice_unknown"]},
	"a100-40gb profile on an h100": {"shape": {"model": "h100", "fixed_profile": "1g.5gb"}, "fraction": 0.1, "count": 1, "codes": ["slice_unknown"]},
	"profile of a model with no partitioning": {"shape": {"model": "t4", "fixed_profile": "1g.10gb"}, "fraction": 0.1, "count": 1, "codes": ["slice_unknown"]},
	"amd without a model": {"shape": {"accelerator": "amd", "fixed_profile": "cpx"}, "fraction": 0.125, "count": 1, "codes": ["slice_unknown"]},
	"fixed_profile absent": {"shape": {"model": "h100"}, "fraction": 0.1, "count": 1, "codes": []},
}

test_partition[name] if {
	some name, tc in cases
	codes(tc.shape, tc.fraction, tc.count) == tc.codes
}

test_fixed_profile_absent_from_the_shape if {
	d := partition.deny with input as {"shape": {"accelerator": "nvidia", "model": "h100"}, "workload": {"fraction": 0.5, "count": 1}}
	d == set()
}

test_slice_too_small_reason if {
	deny({"model": "h100", "fixed_profile": "1g.10gb"}, 0.25, 1) == {{
		"code": "slice_too_small",
		"kind": "never",
		"message": "the pool's fixed 1g.10gb slices are smaller than the 0.25 of a device asked for",
		"details": {"profile": "1g.10gb", "share": 1 / 7, "requested": 0.25},
	}}
}

test_slice_unknown_reason_names_the_model if {
	deny({"model": "h100", "fixed_profile": "1g.5gb"}, 0.1, 1) == {{
		"code": "slice_unknown",
		"kind": "never",
		"message": "fixed slice profile '1g.5gb' is not in the partitioning table for H100",
		"details": {"profile": "1g.5gb"},
	}}
}

test_slice_unknown_reason_names_the_vendor if {
	[r.message | some r in deny({"accelerator": "amd", "fixed_profile": "cpx"}, 0.125, 1)] == ["fixed slice profile 'cpx' is not in the partitioning table for amd"]
}

test_about if {
	a := partition.about
	a.title == "Partition"
	a.custom.order == 60
	a.custom.reads == {"shape": ["accelerator", "model", "fixed_profile"], "workload": ["fraction", "count"]}
	object.keys(a.custom.codes) == {"slice_too_small", "slice_unknown"}
}

package examlops.hardware.fractions_test

import data.examlops.hardware.fractions

nvidia_pool(overrides) := object.union(
	{
		"name": "hpc-nvidia",
		"target": "hpc",
		"accelerator": "nvidia",
		"model": null,
		"region": "eu",
		"capabilities": [],
		"supports_fractions": true,
		"count": 8,
		"free": 8,
		"cost_per_hour": 2.5,
	},
	overrides,
)

amd_pool(overrides) := nvidia_pool(object.union({"name": "hpc-mi300", "accelerator": "amd"}, overrides))

share(fraction) := {"fraction": fraction, "count": 1}

test_whole_device_is_honored if {
	fractions.grant(nvidia_pool({}), share(1)) == {
		"requested": 1,
		"honored": true,
		"granted": 1,
		"devices": 1,
		"scheme": null,
		"profile": null,
		"why": null,
	}
}

test_whole_devices_count if {
	g := fractions.grant(amd_pool({"supports_fractions": false}), {"fraction": 1, "count": 3})
	g.devices == 3
	g.honored == true
}

test_half_on_nvidia_without_model_gets_mig_4g if {
	g := fractions.grant(nvidia_pool({}), share(0.5))
	g.honored == true
	g.scheme == "mig"
	g.profile == "4g"
	g.granted == 4 / 7
	g.devices == 4 / 7
	g.requested == 0.5
	g.why == null
}

test_half_on_nvidia_with_model_key_absent_gets_mig_4g if {
	g := fractions.grant(object.remove(nvidia_pool({}), ["model"]), share(0.5))
	g.honored == true
	g.profile == "4g"
}

test_h100_tenth_gets_1g_10gb if {
	g := fractions.grant(nvidia_pool({"model": "h100"}), share(0.1))
	g.profile == "1g.10gb"
	g.granted == 1 / 7
	g.scheme == "mig"
}

test_h200_three_tenths_gets_3g_71gb if {
	g := fractions.grant(nvidia_pool({"model": "h200"}), share(0.3))
	g.profile == "3g.71gb"
	g.granted == 3 / 7
}

test_exact_seventh_gets_that_slice if {
	fractions.grant(nvidia_pool({}), share(0.2857142857142857)).profile == "2g"
	fractions.grant(nvidia_pool({"model": "a100-40gb"}), share(0.14285714285714285)).profile == "1g.5gb"
}

test_just_above_a_slice_gets_the_next if {
	fractions.grant(nvidia_pool({"model": "a100"}), share(0.58)).profile == "7g.80gb"
	fractions.grant(nvidia_pool({"model": "a100"}), share(0.58)).granted == 1
}

test_t4_not_honored if {
	g := fractions.grant(nvidia_pool({"model": "t4"}), share(0.5))
	g.honored == false
	g.granted == 1
	g.devices == 1
	g.requested == 0.5
	g.scheme == null
	g.profile == null
	g.why == "nvidia model 't4' has no isolated partitioning"
}

test_amd_without_model_not_honored if {
	g := fractions.grant(amd_pool({}), share(0.5))
	g.honored == false
	g.granted == 1
	g.why == "amd has no isolated partitioning"
}

test_amd_with_model_key_absent_not_honored_for_the_vendor if {
	fractions.grant(object.remove(amd_pool({}), ["model"]), share(0.5)).why == "amd has no isolated partitioning"
}

test_mi300x_quarter_gets_qpx if {
	g := fractions.grant(amd_pool({"model": "mi300x"}), share(0.25))
	g.honored == true
	g.scheme == "amd-compute-partition"
	g.profile == "qpx"
	g.granted == 0.25
}

test_mi300x_eighth_gets_cpx_and_half_gets_dpx if {
	fractions.grant(amd_pool({"model": "mi300x"}), share(0.1)).profile == "cpx"
	fractions.grant(amd_pool({"model": "mi325x"}), share(0.5)).profile == "dpx"
}

test_supports_fractions_off_not_honored if {
	g := fractions.grant(nvidia_pool({"model": "h100", "supports_fractions": false}), share(0.5))
	g.honored == false
	g.granted == 1
	g.why == "the pool does not enable partitioning (supports_fractions is off)"
}

test_supports_fractions_absent_not_honored if {
	g := fractions.grant(object.remove(nvidia_pool({}), ["supports_fractions"]), share(0.5))
	g.honored == false
	g.why == "the pool does not enable partitioning (supports_fractions is off)"
}

test_scheme_name_by_model_then_vendor if {
	fractions.scheme_name(nvidia_pool({"model": "gh200"})) == "mig-gh200"
	fractions.scheme_name(nvidia_pool({})) == "mig"
	not fractions.scheme_name(amd_pool({}))
	not fractions.scheme_name(nvidia_pool({"model": "v100"}))
}

# The partitioning table decides; an override can enable AMD partitioning by vendor.
test_partitioning_table_override_by_vendor if {
	table := {
		"by_vendor": {"amd": "halves"},
		"by_model": {},
		"schemes": {"halves": {"kind": "test-split", "of": 2, "slices": [{"units": 1, "profile": "half"}, {"units": 2, "profile": "full"}]}},
	}
	g := fractions.grant(amd_pool({}), share(0.3)) with data.examlops.tables.partitioning as table
	g.honored == true
	g.scheme == "test-split"
	g.profile == "half"
	g.granted == 0.5
	fractions.grant(nvidia_pool({}), share(0.3)).why == "nvidia has no isolated partitioning" with data.examlops.tables.partitioning as table
}

# Consistency of the reviewed table, so that no pool falls into a missing scheme.
test_every_named_scheme_exists if {
	every name in array.concat([n | some n in data.examlops.tables.partitioning.by_model], [n | some n in data.examlops.tables.partitioning.by_vendor]) {
		data.examlops.tables.partitioning.schemes[name]
	}
}

test_every_partitioned_model_is_known if {
	every model, _ in data.examlops.tables.partitioning.by_model {
		data.examlops.tables.models[model]
	}
}

test_slices_smallest_first_and_end_whole if {
	every _, scheme in data.examlops.tables.partitioning.schemes {
		units := [s.units | some s in scheme.slices]
		units == sort(units)
		units[count(units) - 1] == scheme.of
	}
}

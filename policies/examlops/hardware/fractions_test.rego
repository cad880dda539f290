package examlops.hardware.fractions_test

import data.examlops.hardware.fractions

# A shape as the placement package projects it for the grant: only the fields fractions reads.
nvidia(overrides) := object.union(
	{"accelerator": "nvidia", "model": null, "supports_fractions": true, "fixed_profile": null},
	overrides,
)

amd(overrides) := nvidia(object.union({"accelerator": "amd"}, overrides))

share(fraction) := {"fraction": fraction, "count": 1}

# --- whole devices --------------------------------------------------------------------------------

test_whole_device_grant_fields if {
	fractions.grant(nvidia({}), share(1)) == {
		"requested": 1,
		"honored": true,
		"share": 1,
		"units": 1,
		"devices": 1,
		"scheme": null,
		"geometry": null,
		"profile": null,
		"why": null,
		"note": null,
		"nodes": 1,
		"cpu_milli": 0,
		"memory_mib": 0,
		"shares": null,
		"topology": null,
	}
}

whole_cases := {
	"three nvidia devices": {"shape": nvidia({}), "count": 3},
	"amd without partitioning": {"shape": amd({"supports_fractions": false}), "count": 2},
	"mi300x whole": {"shape": amd({"model": "mi300x"}), "count": 4},
	"t4 whole": {"shape": nvidia({"model": "t4"}), "count": 1},
	"cpu": {"shape": {"accelerator": "cpu", "model": null, "supports_fractions": false, "fixed_profile": null}, "count": 5},
	"model key absent": {"shape": object.remove(nvidia({}), ["model"]), "count": 2},
}

test_whole_devices_are_units_and_devices[name] if {
	some name, tc in whole_cases
	g := fractions.grant(tc.shape, {"fraction": 1, "count": tc.count})
	g.honored == true
	g.share == 1
	g.units == tc.count
	g.devices == tc.count
	g.profile == null
	g.note == null
}

# --- fractions honored: the smallest slice that covers the request ---------------------------------

slice_cases := {
	"h100 half is 4g.40gb": {"shape": nvidia({"model": "h100"}), "fraction": 0.5, "profile": "4g.40gb", "share": 4 / 7, "scheme": "mig"},
	"h100 tenth is 1g.10gb": {"shape": nvidia({"model": "h100"}), "fraction": 0.1, "profile": "1g.10gb", "share": 1 / 7, "scheme": "mig"},
	"h100 quarter is 2g.20gb": {"shape": nvidia({"model": "h100"}), "fraction": 0.25, "profile": "2g.20gb", "share": 2 / 7, "scheme": "mig"},
	"a100-40gb half is 4g.20gb": {"shape": nvidia({"model": "a100-40gb"}), "fraction": 0.5, "profile": "4g.20gb", "share": 4 / 7, "scheme": "mig"},
	"a100-40gb seventh is 1g.5gb": {"shape": nvidia({"model": "a100-40gb"}), "fraction": 0.14285714285714285, "profile": "1g.5gb", "share": 1 / 7, "scheme": "mig"},
	"a100 0.58 is 7g.80gb": {"shape": nvidia({"model": "a100"}), "fraction": 0.58, "profile": "7g.80gb", "share": 1, "scheme": "mig"},
	"h200 0.3 is 3g.71gb": {"shape": nvidia({"model": "h200"}), "fraction": 0.3, "profile": "3g.71gb", "share": 3 / 7, "scheme": "mig"},
	"gh200 0.2 is 2g.24gb": {"shape": nvidia({"model": "gh200"}), "fraction": 0.2, "profile": "2g.24gb", "share": 2 / 7, "scheme": "mig"},
	"b200 0.9 is 7g.180gb": {"shape": nvidia({"model": "b200"}), "fraction": 0.9, "profile": "7g.180gb", "share": 1, "scheme": "mig"},
	"vendor-level nvidia half is 4g": {"shape": nvidia({}), "fraction": 0.5, "profile": "4g", "share": 4 / 7, "scheme": "mig"},
	"vendor-level with model absent": {"shape": object.remove(nvidia({}), ["model"]), "fraction": 0.5, "profile": "4g", "share": 4 / 7, "scheme": "mig"},
	"exact two sevenths is 2g": {"shape": nvidia({}), "fraction": 0.2857142857142857, "profile": "2g", "share": 2 / 7, "scheme": "mig"},
	"mi300x 0.1 is cpx": {"shape": amd({"model": "mi300x"}), "fraction": 0.1, "profile": "cpx", "share": 0.125, "scheme": "amd-compute-partition"},
	"mi300x eighth is cpx": {"shape": amd({"model": "mi300x"}), "fraction": 0.125, "profile": "cpx", "share": 0.125, "scheme": "amd-compute-partition"},
	"mi300x quarter is qpx": {"shape": amd({"model": "mi300x"}), "fraction": 0.25, "profile": "qpx", "share": 0.25, "scheme": "amd-compute-partition"},
	"mi300x 0.3 is dpx": {"shape": amd({"model": "mi300x"}), "fraction": 0.3, "profile": "dpx", "share": 0.5, "scheme": "amd-compute-partition"},
	"mi300x 0.6 is spx": {"shape": amd({"model": "mi300x"}), "fraction": 0.6, "profile": "spx", "share": 1, "scheme": "amd-compute-partition"},
	"mi325x half is dpx": {"shape": amd({"model": "mi325x"}), "fraction": 0.5, "profile": "dpx", "share": 0.5, "scheme": "amd-compute-partition"},
}

test_fraction_gets_smallest_covering_slice[name] if {
	some name, tc in slice_cases
	g := fractions.grant(tc.shape, share(tc.fraction))
	g.profile == tc.profile
	g.share == tc.share
	g.devices == tc.share
	g.scheme == tc.scheme
	g.units == 1
	g.honored == true
	g.requested == tc.fraction
	g.why == null
	g.note == null
}

test_partial_grant_fields if {
	fractions.grant(nvidia({"model": "h100"}), share(0.5)) == {
		"requested": 0.5,
		"honored": true,
		"share": 4 / 7,
		"units": 1,
		"devices": 4 / 7,
		"scheme": "mig",
		"geometry": "mig-7c8m",
		"profile": "4g.40gb",
		"why": null,
		"note": null,
		"nodes": 1,
		"cpu_milli": 0,
		"memory_mib": 0,
		"shares": null,
		"topology": null,
	}
}

test_amd_partition_names_its_geometry if {
	fractions.grant(amd({"model": "mi300x"}), share(0.25)).geometry == "amd-compute-partition-8"
}

# --- fractions not honored: a whole device, and a note saying why ----------------------------------

unhonored_cases := {
	"t4 has no MIG": {
		"shape": nvidia({"model": "t4"}),
		"why": "nvidia model 't4' has no isolated partitioning",
	},
	"v100 has no MIG": {
		"shape": nvidia({"model": "v100"}),
		"why": "nvidia model 'v100' has no isolated partitioning",
	},
	"mi250x has no partitions": {
		"shape": amd({"model": "mi250x"}),
		"why": "amd model 'mi250x' has no isolated partitioning",
	},
	"amd without a model": {
		"shape": amd({}),
		"why": "amd has no isolated partitioning",
	},
	"amd with the model key absent": {
		"shape": object.remove(amd({}), ["model"]),
		"why": "amd has no isolated partitioning",
	},
	"intel-gaudi": {
		"shape": nvidia({"accelerator": "intel-gaudi"}),
		"why": "intel-gaudi has no isolated partitioning",
	},
	"supports_fractions off on h100": {
		"shape": nvidia({"model": "h100", "supports_fractions": false}),
		"why": "the pool does not enable partitioning (supports_fractions is off)",
	},
	"supports_fractions absent": {
		"shape": object.remove(nvidia({}), ["supports_fractions"]),
		"why": "the pool does not enable partitioning (supports_fractions is off)",
	},
	"supports_fractions null": {
		"shape": nvidia({"supports_fractions": null}),
		"why": "the pool does not enable partitioning (supports_fractions is off)",
	},
	"supports_fractions a string": {
		"shape": nvidia({"supports_fractions": "true"}),
		"why": "the pool does not enable partitioning (supports_fractions is off)",
	},
}

test_unhonored_fraction_gets_a_whole_device[name] if {
	some name, tc in unhonored_cases
	g := fractions.grant(tc.shape, share(0.5))
	g.honored == false
	g.requested == 0.5
	g.share == 1
	g.units == 1
	g.devices == 1
	g.scheme == null
	g.geometry == null
	g.profile == null
	g.why == tc.why
	g.note == sprintf("fraction 0.5 not honored (%s) — whole device allocated", [tc.why])
}

test_unhonored_note_text if {
	fractions.grant(amd({}), share(0.25)).note == "fraction 0.25 not honored (amd has no isolated partitioning) — whole device allocated"
}

test_unhonored_note_is_null_without_why if {
	fractions.unhonored_note({"fraction": 0.5}, null) == null
}

# --- fixed slices: the pool gives its slices as they are -------------------------------------------

fixed_cases := {
	"three tenths on 1g.10gb slices": {
		"shape": nvidia({"model": "h100", "fixed_profile": "1g.10gb"}),
		"w": {"fraction": 0.1, "count": 3},
		"profile": "1g.10gb", "share": 1 / 7, "units": 3, "devices": 3 / 7,
	},
	"whole devices asked of 3g.40gb slices": {
		"shape": nvidia({"model": "a100", "fixed_profile": "3g.40gb"}),
		"w": {"fraction": 1, "count": 2},
		"profile": "3g.40gb", "share": 3 / 7, "units": 2, "devices": 6 / 7,
	},
	"fixed slices whatever supports_fractions says": {
		"shape": nvidia({"model": "h100", "fixed_profile": "2g.20gb", "supports_fractions": false}),
		"w": {"fraction": 0.25, "count": 1},
		"profile": "2g.20gb", "share": 2 / 7, "units": 1, "devices": 2 / 7,
	},
	"vendor-level fixed 7g": {
		"shape": nvidia({"fixed_profile": "7g"}),
		"w": {"fraction": 0.5, "count": 1},
		"profile": "7g", "share": 1, "units": 1, "devices": 1,
	},
	"mi300x cpx partitions": {
		"shape": amd({"model": "mi300x", "fixed_profile": "cpx"}),
		"w": {"fraction": 0.125, "count": 4},
		"profile": "cpx", "share": 0.125, "units": 4, "devices": 0.5,
	},
}

test_fixed_slices_are_given_as_they_are[name] if {
	some name, tc in fixed_cases
	g := fractions.grant(tc.shape, tc.w)
	g.profile == tc.profile
	g.share == tc.share
	g.units == tc.units
	g.devices == tc.devices
	g.honored == true
	g.geometry == null
	g.why == null
	g.note == null
	g.requested == tc.w.fraction
}

# A profile the pool's scheme does not know: no fixed grant (the partition check denies the pool),
# and the grant falls back to what the pool would give without fixed slices.
unknown_fixed_cases := {
	"h100 profile on a vendor-level pool": {"shape": nvidia({"fixed_profile": "1g.10gb"}), "fraction": 0.1, "profile": "1g"},
	"vendor profile on an h100 pool": {"shape": nvidia({"model": "h100", "fixed_profile": "1g"}), "fraction": 1, "profile": null},
	"amd without partitioning": {"shape": amd({"fixed_profile": "cpx"}), "fraction": 1, "profile": null},
	"nonsense profile": {"shape": nvidia({"model": "h100", "fixed_profile": "9g.1tb"}), "fraction": 0.5, "profile": "4g.40gb"},
}

test_unknown_fixed_profile_has_no_fixed_grant[name] if {
	some name, tc in unknown_fixed_cases
	not fractions.fixed(tc.shape, share(tc.fraction))
	fractions.grant(tc.shape, share(tc.fraction)).profile == tc.profile
}

# --- schemes --------------------------------------------------------------------------------------

scheme_cases := {
	"gh200 by model": {"shape": nvidia({"model": "gh200"}), "scheme": "mig-gh200"},
	"a100-40gb by model": {"shape": nvidia({"model": "a100-40gb"}), "scheme": "mig-a100-40gb"},
	"mi325x by model": {"shape": amd({"model": "mi325x"}), "scheme": "amd-compute-partition"},
	"nvidia by vendor": {"shape": nvidia({}), "scheme": "mig"},
	"nvidia by vendor, model absent": {"shape": object.remove(nvidia({}), ["model"]), "scheme": "mig"},
}

test_scheme_name_by_model_then_vendor[name] if {
	some name, tc in scheme_cases
	fractions.scheme_name(tc.shape) == tc.scheme
}

no_scheme_cases := {
	"amd by vendor": amd({}),
	"v100 by model": nvidia({"model": "v100"}),
	"unknown model of a partitionable vendor": nvidia({"model": "x100"}),
	"tpu": nvidia({"accelerator": "tpu"}),
}

test_no_scheme[name] if {
	some name, shape in no_scheme_cases
	not fractions.scheme_name(shape)
}

# The partitioning table decides; an override can enable AMD partitioning by vendor.
test_partitioning_table_override_by_vendor if {
	table := {
		"by_vendor": {"amd": "halves"},
		"by_model": {},
		"schemes": {"halves": {"kind": "test-split", "of": 2, "geometry": "g", "slices": [{"units": 1, "profile": "half"}, {"units": 2, "profile": "full"}]}},
	}
	g := fractions.grant(amd({}), share(0.3)) with data.examlops.tables.partitioning as table
	g.honored == true
	g.scheme == "test-split"
	g.profile == "half"
	g.share == 0.5
	fractions.grant(nvidia({}), share(0.3)).why == "nvidia has no isolated partitioning" with data.examlops.tables.partitioning as table
}

# --- the reviewed tables are consistent, so no pool falls into a missing scheme --------------------

partitioning := data.examlops.tables.partitioning

test_every_named_scheme_exists[name] if {
	some name in array.concat([n | some n in partitioning.by_model], [n | some n in partitioning.by_vendor])
	partitioning.schemes[name]
}

test_every_partitioned_model_is_known[model] if {
	some model, _ in partitioning.by_model
	data.examlops.tables.models[model].accelerator
}

test_slices_smallest_first_and_end_whole[name] if {
	some name, scheme in partitioning.schemes
	slice_units := [s.units | some s in scheme.slices]
	slice_units == sort(slice_units)
	slice_units[count(slice_units) - 1] == scheme.of
}

test_every_slice_packs_in_its_geometry[name] if {
	some name, scheme in partitioning.schemes
	geometry := data.examlops.tables.geometry[scheme.geometry]
	geometry.kind == scheme.kind
	every s in scheme.slices {
		geometry.shares[format_int(s.units, 10)]
	}
}

test_about_reads if {
	fractions.about.custom.reads == {
		"shape": ["accelerator", "model", "supports_fractions", "fixed_profile", "sharing", "shares_per_device", "node_limits"],
		"workload": ["fraction", "count", "nodes", "cpu", "memory", "topology", "topology_mode"],
	}
}

# --- what a grant asks of each node ---------------------------------------------------------------

test_a_gang_asks_each_node_the_same_and_is_priced_for_all if {
	w := {"fraction": 1, "count": 4, "nodes": 2, "cpu": 1.5, "memory": 65536, "topology": "same-switch", "topology_mode": "required"}
	g := fractions.grant(nvidia({"model": "h100"}), w)
	[g.units, g.nodes, g.cpu_milli, g.memory_mib, g.topology, g.devices] == [4, 2, 1500, 65536, "same-switch", 8]
}

# A cpu pool's devices are its nodes' cores where the nodes say their CPU: the grant takes them of
# the node (so a GPU grant's CPU on the same node finds them taken); more CPU asked is asked.
test_a_cpu_pool_s_units_are_cores_of_its_nodes if {
	cpu_pool := {"accelerator": "cpu", "model": null, "supports_fractions": false, "fixed_profile": null, "node_limits": ["cpu", "memory"]}
	fractions.grant(cpu_pool, {"fraction": 1, "count": 30}).cpu_milli == 30000
	fractions.grant(cpu_pool, {"fraction": 1, "count": 2, "cpu": 4}).cpu_milli == 4000
	fractions.grant(object.union(cpu_pool, {"node_limits": []}), {"fraction": 1, "count": 30}).cpu_milli == 0
	fractions.grant(nvidia({"node_limits": ["cpu"]}), {"fraction": 1, "count": 2}).cpu_milli == 0
}

# CPU and memory asked of a pool whose nodes do not say them are not checked: the note says which.
test_what_the_pool_s_nodes_do_not_say_is_noted_as_not_checked if {
	w := {"fraction": 1, "count": 1, "cpu": 2, "memory": 1024}
	fractions.grant(nvidia({}), w).note == "CPU and memory not checked: the pool does not say its nodes' CPU and memory"
	fractions.grant(nvidia({"node_limits": ["cpu"]}), w).note == "memory not checked: the pool does not say its nodes' memory"
	fractions.grant(nvidia({"node_limits": ["cpu", "memory"]}), w).note == null
	fractions.grant(nvidia({}), {"fraction": 1, "count": 1}).note == null
	fractions.grant(nvidia({}), {"fraction": 1, "count": 1, "cpu": 0.5}).note == "CPU not checked: the pool does not say its nodes' CPU"
	t4 := nvidia({"model": "t4", "supports_fractions": true})
	fractions.grant(t4, {"fraction": 0.5, "count": 1, "memory": 1024}).note == concat("; ", [
		"fraction 0.5 not honored (nvidia model 't4' has no isolated partitioning) — whole device allocated",
		"memory not checked: the pool does not say its nodes' memory",
	])
}

test_one_node_is_always_together if {
	g := fractions.grant(nvidia({}), {"fraction": 1, "count": 1, "topology": "same-block", "topology_mode": "required"})
	g.topology == null
}

test_a_preferred_topology_is_not_required_of_capacity if {
	g := fractions.grant(nvidia({}), {"fraction": 1, "count": 1, "nodes": 2, "topology": "same-block", "topology_mode": "preferred"})
	g.topology == null
	g.devices == 2
}

# --- shared devices: the fewest shares of one device that cover the fraction ------------------------

t4_shared(sharing, n) := nvidia({"model": "t4", "supports_fractions": false, "sharing": sharing, "shares_per_device": n})

shared_cases := {
	"a quarter of 4 shares is one": {"shape": t4_shared("time-slice", 4), "fraction": 0.25, "shares": 1, "share": 0.25},
	"0.3 of 4 shares is two": {"shape": t4_shared("time-slice", 4), "fraction": 0.3, "shares": 2, "share": 0.5},
	"0.999 of 4 shares is four": {"shape": t4_shared("mps", 4), "fraction": 0.999, "shares": 4, "share": 1},
	"a tiny fraction is at least one share": {"shape": t4_shared("time-slice", 16), "fraction": 0.001, "shares": 1, "share": 1 / 16},
	"thousandths": {"shape": t4_shared("mps", 1000), "fraction": 0.125, "shares": 125, "share": 0.125},
}

test_a_fraction_on_a_shared_pool_is_shares_of_one_device[name] if {
	some name, tc in shared_cases
	g := fractions.grant(tc.shape, {"fraction": tc.fraction, "count": 1})
	[g.honored, g.shares, g.units, g.profile, g.scheme, g.nodes] == [true, tc.shares, 1, null, tc.shape.sharing, 1]
	abs(g.share - tc.share) < 0.000001
	abs(g.devices - tc.share) < 0.000001
	contains(g.note, "shared without isolation")
}

test_an_isolated_slice_wins_over_a_shared_device if {
	shape := object.union(t4_shared("time-slice", 4), {"model": "h100", "supports_fractions": true})
	g := fractions.grant(shape, {"fraction": 0.25, "count": 1})
	[g.profile, g.shares, g.scheme] == ["2g.20gb", null, "mig"]
}

test_a_whole_device_on_a_shared_pool_is_a_whole_device if {
	g := fractions.grant(t4_shared("time-slice", 4), {"fraction": 1, "count": 2})
	[g.shares, g.units, g.devices, g.scheme] == [null, 2, 2, null]
}

# --- larger shares that also cover the request (alternatives) -----------------------------------------

test_alternatives_are_the_larger_covering_shares_smallest_first if {
	alts := fractions.alternatives(amd({"model": "mi300x"}), share(0.25))
	[a.profile | some a in alts] == ["dpx", "spx"]
	[a.devices | some a in alts] == [0.5, 1]
	every a in alts {
		a.larger == true
		a.honored == true
		a.units == 1
		a.scheme == "amd-compute-partition"
		a.note == sprintf("no qpx had room: fraction 0.25 honored with a larger partition, %s, priced as granted", [a.profile])
	}
}

test_alternatives_on_mig_start_above_the_grant if {
	g := fractions.grant(nvidia({"model": "h100"}), share(0.25))
	g.profile == "2g.20gb"
	alts := fractions.alternatives(nvidia({"model": "h100"}), share(0.25))
	[a.profile | some a in alts] == ["3g.40gb", "4g.40gb", "7g.80gb"]
	every a in alts {
		a.share > g.share
	}
}

no_alternative_cases := {
	"whole devices": {"shape": amd({"model": "mi300x"}), "w": {"fraction": 1, "count": 2}},
	"the largest share already": {"shape": amd({"model": "mi300x"}), "w": share(0.9)},
	"partitioning off": {"shape": amd({"model": "mi300x", "supports_fractions": false}), "w": share(0.25)},
	"no partitioning for the model": {"shape": nvidia({"model": "t4"}), "w": share(0.25)},
	"fixed slices": {"shape": nvidia({"model": "h100", "fixed_profile": "1g.10gb"}), "w": share(0.1)},
}

test_no_alternatives_where_no_larger_share_is_cut[name] if {
	some name, tc in no_alternative_cases
	fractions.alternatives(tc.shape, tc.w) == []
}

test_alternatives_ask_each_node_what_the_grant_asks if {
	w := object.union(share(0.25), {"cpu": 2, "memory": 1024})
	alts := fractions.alternatives(amd({"model": "mi300x", "node_limits": ["cpu", "memory"]}), w)
	[[a.profile, a.nodes, a.cpu_milli, a.memory_mib, a.shares, a.topology] | some a in alts] == [
		["dpx", 1, 2000, 1024, null, null],
		["spx", 1, 2000, 1024, null, null],
	]
}

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

# Room that is only taken now is not_now; a pool that could never hold the grant is never.
test_every_code_is_not_now_but_too_small if {
	every code, c in capacity.about.custom.codes {
		c.kind == {true: "never", false: "not_now"}[code == "pool_too_small"]
	}
}

test_about if {
	a := capacity.about
	a.title == "Capacity"
	a.custom.order == 90
	a.custom.stage == "pool"
	a.custom.reads == {"shape": ["accelerator", "model", "fixed_profile"], "workload": []}
	object.keys(a.custom.codes) == {"capacity_exhausted", "slice_unavailable", "share_unavailable", "pool_too_small"}
}

# --- node by node ------------------------------------------------------------------------------------

room(whole, overrides) := object.union(
	{"whole": whole, "cpu": null, "memory": null, "shares": 0, "slices": {}, "block": null, "switch": null, "count": 1},
	overrides,
)

node_grant(n, overrides) := object.union(
	{
		"units": n, "profile": null, "geometry": null, "shares": null, "nodes": 1, "cpu_milli": 0, "memory_mib": 0,
		"topology": null,
	},
	overrides,
)

# Two 4-device nodes: three single devices spread over both leave no node with 4 free.
spread := {"whole": 5, "slices": {}, "nodes": [room(2, {}), room(3, {})]}

node_cases := {
	"four on one node of two with 2 and 3 free": {"grant": node_grant(4, {}), "capacity": spread, "fits": false},
	"three on the node with 3 free": {"grant": node_grant(3, {}), "capacity": spread, "fits": true},
	"a gang of 2 x 2": {"grant": node_grant(2, {"nodes": 2}), "capacity": spread, "fits": true},
	"a gang of 2 x 3": {"grant": node_grant(3, {"nodes": 2}), "capacity": spread, "fits": false},
	"counted rows": {"grant": node_grant(3, {"nodes": 2}), "capacity": {"nodes": [room(3, {"count": 2})]}, "fits": true},
	"cpu beside the devices": {
		"grant": node_grant(1, {"cpu_milli": 8000}),
		"capacity": {"nodes": [room(4, {"cpu": 4000}), room(1, {"cpu": 8000})]}, "fits": true,
	},
	"cpu on no node with devices": {
		"grant": node_grant(2, {"cpu_milli": 8000}),
		"capacity": {"nodes": [room(4, {"cpu": 4000}), room(1, {"cpu": 8000})]}, "fits": false,
	},
	"memory": {"grant": node_grant(1, {"memory_mib": 1024}), "capacity": {"nodes": [room(4, {"memory": 512})]}, "fits": false},
	"untracked cpu": {"grant": node_grant(1, {"cpu_milli": 99000}), "capacity": {"nodes": [room(1, {})]}, "fits": true},
	"a share on a shared device": {"grant": node_grant(1, {"shares": 2}), "capacity": {"nodes": [room(0, {"shares": 2})]}, "fits": true},
	"a share on a free device": {"grant": node_grant(1, {"shares": 3}), "capacity": {"nodes": [room(1, {"shares": 1})]}, "fits": true},
	"a share too large": {"grant": node_grant(1, {"shares": 3}), "capacity": {"nodes": [room(0, {"shares": 2})]}, "fits": false},
	"a slice on a node": {
		"grant": node_grant(1, {"profile": "3g.40gb", "geometry": "mig-7c8m"}),
		"capacity": {"nodes": [room(0, {"slices": {"3g.40gb": 1}})]}, "fits": true,
	},
	"no nodes up": {"grant": node_grant(1, {}), "capacity": {"whole": 0, "slices": {}, "nodes": []}, "fits": false},
	"together in block 1": {
		"grant": node_grant(4, {"nodes": 2, "topology": "same-block"}),
		"capacity": {"nodes": [room(4, {"block": 0}), room(4, {"block": 1, "count": 2})]}, "fits": true,
	},
	"not together": {
		"grant": node_grant(4, {"nodes": 2, "topology": "same-block"}),
		"capacity": {"nodes": [room(4, {"block": 0}), room(4, {"block": 1}), room(4, {})]}, "fits": false,
	},
	"a gang on a pool counted as one node": {"grant": node_grant(1, {"nodes": 2}), "capacity": {"whole": 8}, "fits": false},
}

test_node_by_node[name] if {
	some name, tc in node_cases
	fits(tc.grant, tc.capacity) == tc.fits
}

test_what_a_node_lacks_in_words[name] if {
	some name, [grant, code, message] in {
		"one node": [
			node_grant(4, {"cpu_milli": 16000, "memory_mib": 65536}), "capacity_exhausted",
			"needs 4 whole H100 device(s), 16 CPU cores and 64Gi memory free on one node, more than are free",
		],
		"a gang in one block": [
			node_grant(4, {"nodes": 2, "topology": "same-block"}), "capacity_exhausted",
			"needs 4 whole H100 device(s) free on each of 2 nodes in one block, more than are free",
		],
		"a share": [node_grant(1, {"shares": 2}), "share_unavailable", "needs 2 share(s) of one H100 device free on one node, more than are free"],
		"a slice beside cpu": [
			node_grant(1, {"profile": "3g.40gb", "geometry": "mig-7c8m", "cpu_milli": 500}), "slice_unavailable",
			"needs 1 3g.40gb slice(s) and 0.5 CPU cores free on one node, more than are free",
		],
	}
	r := capacity.shortfall(h100, grant)
	[r.code, r.kind, r.message] == [code, "not_now", message]
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

test_shortfall_of_a_grant_asking_cpu_of_a_node_stays_node_by_node if {
	mi300x := {"accelerator": "amd", "model": "mi300x", "fixed_profile": null}
	g := object.union(slice_grant("qpx", 1), {"cpu_milli": 2000})
	r := capacity.shortfall_of(mi300x, g, ["dpx", "spx"])
	r == capacity.shortfall(mi300x, g)
	not r.details.larger
	contains(r.message, "on one node")
}

# --- a pool counted as one node that could never hold the grant --------------------------------------

amd := {"accelerator": "amd", "model": null, "fixed_profile": null}

# capacity.devices: all the devices of a pool counted as one node, whatever is held.
too_small_cases := {
	"3 whole of a pool of 2": {"shape": amd, "grant": whole_grant(3), "capacity": {"whole": 2, "devices": 2}, "never": true},
	"3 whole of a pool of 3, 1 free": {"shape": amd, "grant": whole_grant(3), "capacity": {"whole": 1, "devices": 3}, "never": false},
	"3 whole of a pool of 8, none free": {"shape": amd, "grant": whole_grant(3), "capacity": {"whole": 0, "devices": 8}, "never": false},
	"one whole of a pool of 1": {"shape": amd, "grant": whole_grant(1), "capacity": {"whole": 0, "devices": 1}, "never": false},
	"8 fixed slices of a pool of 7": {
		"shape": fixed_h100, "grant": slice_grant("1g.10gb", 8),
		"capacity": {"slices": {"1g.10gb": 7}, "devices": 7}, "never": true,
	},
	"a MIG slice of a pool of 1": {
		"shape": h100, "grant": node_grant(1, {"profile": "3g.40gb", "geometry": "mig-7c8m"}),
		"capacity": {"whole": 0, "slices": {}, "devices": 1}, "never": false,
	},
	# A pool of nodes says no devices in all: its nodes are the nodes check's to judge.
	"a pool of nodes": {"shape": amd, "grant": node_grant(9, {}), "capacity": {"whole": 0, "nodes": [room(4, {})]}, "never": false},
	"a capacity from before": {"shape": amd, "grant": whole_grant(9), "capacity": {"whole": 2}, "never": false},
}

test_a_pool_counted_as_one_node_too_small_is_never[name] if {
	some name, tc in too_small_cases
	small := {r | some r in deny(tc.shape, tc.grant, tc.capacity); r.code == "pool_too_small"}
	count(small) == 1 == tc.never
	every r in small {
		r.kind == "never"
	}

	# A pool too small has no room either, and says so as ever.
	no_room_if_never(tc)
}

no_room_if_never(tc) if tc.never == false

no_room_if_never(tc) if {
	tc.never == true
	not capacity.fits(tc.grant, tc.capacity)
	count({r | some r in deny(tc.shape, tc.grant, tc.capacity); r.kind == "not_now"}) == 1
}

test_too_small_in_words if {
	s := capacity.smallness(amd, whole_grant(3))
	s.devices == 3
	s.reason == {
		"code": "pool_too_small",
		"kind": "never",
		"message": "needs 3 whole amd device(s) on one node, more than the pool has in all: it lists no nodes, so all its devices are one node",
		"details": {"units": 3, "profile": null, "devices_needed": 3},
	}
	fixed := capacity.smallness(fixed_h100, slice_grant("1g.10gb", 8))
	fixed.devices == 8
	fixed.reason.message == "needs 8 1g.10gb slice(s) on one node, more than the pool has in all: it lists no nodes, so all its devices are one node"
}

# One device does: every pool has one, so no grant of one device (a slice or a share of one) is
# ever too small for a pool.
test_no_smallness_where_one_device_does[name] if {
	some name, grant in {
		"one whole": whole_grant(1),
		"a slice": node_grant(1, {"profile": "3g.40gb", "geometry": "mig-7c8m"}),
		"a share": node_grant(1, {"shares": 3}),
	}
	capacity.smallness(h100, grant) == null
	capacity.too_small(capacity.smallness(h100, grant), {"devices": 1}) == []
}

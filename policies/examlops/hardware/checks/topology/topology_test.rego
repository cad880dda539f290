package examlops.hardware.checks.topology_test

import data.examlops.hardware.checks.topology

# Two blocks: block 0 holds three 4-device nodes, block 1 two; switches split them 2 / 3.
h100(rows) := {
	"accelerator": "nvidia", "model": "h100", "supports_fractions": false, "fixed_profile": null,
	"sharing": null, "shares_per_device": null, "node_sizes": rows,
}

labelled := h100([[4, null, null, 0, 0, 2], [4, null, null, 0, 1, 1], [4, null, null, 1, 1, 2]])

gang(n, topo, mode) := {"fraction": 1, "count": 4, "nodes": n, "topology": topo, "topology_mode": mode}

deny(shape, w) := d if {
	d := topology.deny with input as {"shape": shape, "workload": w}
}

codes(shape, w) := {r.code | some r in deny(shape, w)}

test_a_gang_that_fits_one_group_passes[name] if {
	some name, w in {
		"three in block 0": gang(3, "same-block", "required"),
		"three under switch 1": gang(3, "same-switch", "required"),
		"no topology": gang(5, null, null),
		"preferred is never a denial": gang(5, "same-block", "preferred"),
		"one node is always together": gang(1, "same-block", "required"),
	}
	deny(labelled, w) == set()
}

test_no_group_large_enough_is_never if {
	[r] := [r | some r in deny(labelled, gang(4, "same-block", "required"))]
	r.code == "topology_unsatisfiable"
	r.kind == "never"
	r.message == "no block of the pool has 4 nodes that could hold 4 whole H100 device(s); the most in one block is 3"
	r.details.most_together == 3
}

test_nodes_without_labels_of_that_level_cannot_be_together if {
	shape := h100([[4, null, null, null, 0, 4]])
	[r] := [r | some r in deny(shape, gang(2, "same-block", "required"))]
	r.code == "topology_unlabeled"
	r.message == "the gang requires its 2 nodes same-block, and the pool's nodes carry no block labels"
	deny(shape, gang(2, "same-switch", "required")) == set()
	deny(shape, gang(1, "same-block", "required")) == set()
}

test_only_nodes_that_could_hold_the_ask_count_in_a_group if {
	shape := h100([[4, null, null, 0, null, 1], [2, null, null, 0, null, 2], [4, null, null, 1, null, 1]])
	codes(shape, gang(2, "same-block", "required")) == {"topology_unsatisfiable"}
}

test_a_gang_too_large_for_the_pool_is_left_to_the_nodes_check if {
	deny(labelled, gang(9, "same-block", "required")) == set()
	deny(object.remove(labelled, ["node_sizes"]), gang(2, "same-block", "required")) == set()
}

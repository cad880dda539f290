package examlops.hardware.checks.nodes_test

import data.examlops.hardware.checks.nodes

# Four nodes of 4 H100 with 64 cores and 512Gi, one of 8 with 128 cores and 1Ti.
h100(rows) := {
	"accelerator": "nvidia", "model": "h100", "supports_fractions": false, "fixed_profile": null,
	"sharing": null, "shares_per_device": null, "node_sizes": rows,
}

mixed := h100([[4, 64000, 524288, null, null, 4], [8, 128000, 1048576, null, null, 1]])

ask(overrides) := object.union({"fraction": 1, "count": 1, "nodes": 1, "cpu": null, "memory": null}, overrides)

deny(shape, w) := d if {
	d := nodes.deny with input as {"shape": shape, "workload": w}
}

messages(shape, w) := {r.message | some r in deny(shape, w)}

test_asks_a_node_can_hold_pass[name] if {
	some name, w in {
		"one device": ask({}),
		"eight on the big node": ask({"count": 8}),
		"four on each of five": ask({"count": 4, "nodes": 5}),
		"all the cpu of the big node": ask({"count": 2, "cpu": 128}),
		"memory of a small node on four": ask({"count": 1, "memory": 524288, "nodes": 5}),
	}
	deny(mixed, w) == set()
}

test_too_many_devices_for_any_node_names_the_largest if {
	messages(mixed, ask({"count": 16})) == {"no node of the pool has 16 H100 device(s); the largest has 8"}
}

test_too_much_cpu_or_memory_names_the_largest if {
	messages(mixed, ask({"cpu": 256})) == {"no node of the pool has 256 CPU cores; the largest has 128"}
	messages(mixed, ask({"memory": 2097152})) == {"no node of the pool has 2Ti memory; the largest has 1Ti"}
}

test_each_dimension_fits_somewhere_but_not_together if {
	# 8 devices only on the big node; 1Ti memory and 8 devices fit there, yet 256Gi beside 8 devices
	# and 100 cores on a small node do not: the ask as a whole fits no node.
	shape := h100([[8, 64000, 524288, null, null, 1], [4, 128000, 1048576, null, null, 1]])
	messages(shape, ask({"count": 8, "cpu": 100})) == {"no node of the pool has 8 whole H100 device(s) and 100 CPU cores together"}
}

test_a_gang_larger_than_the_nodes_that_could_hold_it_is_never if {
	[r] := [r | some r in deny(mixed, ask({"count": 8, "nodes": 2}))]
	r.code == "no_node_fits"
	r.kind == "never"
	r.message == "only 1 node(s) of the pool could ever hold 8 whole H100 device(s); the gang needs 2"
	r.details.nodes_able == 1
	r.details.nodes_needed == 2
}

test_a_pool_without_node_information_is_one_node if {
	shape := object.remove(mixed, ["node_sizes"])
	deny(shape, ask({"count": 64})) == set()
	messages(shape, ask({"count": 1, "nodes": 2})) == {"the pool has no node information: it is one node, and the gang needs 2 nodes"}
}

test_untracked_cpu_and_memory_never_limit if {
	shape := h100([[4, null, null, null, null, 2]])
	deny(shape, ask({"count": 4, "cpu": 1000, "memory": 99999999, "nodes": 2})) == set()
}

test_a_share_needs_one_device if {
	shape := object.union(h100([[1, 8000, null, null, null, 1]]), {"model": "t4", "sharing": "time-slice", "shares_per_device": 4})
	deny(shape, ask({"fraction": 0.25, "cpu": 8})) == set()
	messages(shape, ask({"fraction": 0.25, "cpu": 16})) == {"no node of the pool has 16 CPU cores; the largest has 8"}
}

# A Slurm partition allocates whole CPUs: half a core is refused at placement (never), a whole
# number of cores is not, and a pool of another scheduler takes the half.
test_a_fraction_of_a_cpu_is_never_placed_where_only_whole_cpus_are_allocated if {
	slurm := {"accelerator": "nvidia", "whole_cpus": true}
	[r] := [r | some r in nodes.deny with input as {"shape": slurm, "workload": {"fraction": 1, "count": 1, "cpu": 0.5}}]
	r.code == "cpu_not_whole"
	r.kind == "never"
	r.message == "the pool's scheduler (Slurm) allocates whole CPUs, and the workload asks 0.5 CPU cores per node: ask for whole cores (e.g. 1)"
	count(nodes.deny) == 0 with input as {"shape": slurm, "workload": {"fraction": 1, "count": 1, "cpu": 2}}
	count(nodes.deny) == 0 with input as {"shape": {"accelerator": "nvidia"}, "workload": {"fraction": 1, "count": 1, "cpu": 0.5}}
}
